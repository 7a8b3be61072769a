// An entity's neighbourhood drawn with Cytoscape.js (canvas; labels are drawn on the canvas, not
// put into the page as markup). Clicking a node opens that entity.

let cy = null;

export function available() {
  return typeof window.cytoscape === "function";
}

const STYLE = [
  {selector: "node", style: {"label": "data(label)", "background-color": "#5b7fa6", "color": "#1d2733",
                              "font-size": 11, "text-valign": "bottom", "text-margin-y": 4, "width": 18, "height": 18}},
  {selector: "node.centre", style: {"background-color": "#c2662d", "width": 28, "height": 28, "font-weight": "bold"}},
  {selector: "edge", style: {"width": "mapData(weight, 0, 10, 1, 6)", "line-color": "#a9b8c8", "curve-style": "bezier"}},
];

// detail: GET /v1/entities/{id}'s body. open(id): what a click on a node does.
export function draw(container, detail, open) {
  if (!available()) return false;
  const centre = detail.entity.entity_id;
  const nodes = [{data: {id: centre, label: detail.entity.title || centre}, classes: "centre"}];
  for (const n of detail.neighbours) nodes.push({data: {id: n.entity_id, label: n.title || n.entity_id}});
  const known = new Set(nodes.map((n) => n.data.id));
  const edges = detail.relationships
    .filter((r) => known.has(r.source_id) && known.has(r.target_id))
    .map((r) => ({data: {id: "rel:" + r.rel_id, source: r.source_id, target: r.target_id, weight: r.weight || 1}}));
  if (cy) cy.destroy();
  cy = window.cytoscape({container, elements: {nodes, edges}, style: STYLE,
                         layout: {name: "concentric", concentric: (n) => (n.id() === centre ? 2 : 1),
                                  levelWidth: () => 1, minNodeSpacing: 40, animate: false},
                         wheelSensitivity: 0.3});
  cy.on("tap", "node", (evt) => { if (evt.target.id() !== centre) open(evt.target.id()); });
  return true;
}

// What is drawn (the browser test reads it).
export function drawn() {
  if (!cy) return {nodes: [], edges: 0};
  return {nodes: cy.nodes().map((n) => n.data("label")), edges: cy.edges().length};
}
