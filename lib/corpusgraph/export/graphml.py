"""GraphML for igraph, Gephi, NetworkX and yEd: entities as nodes, relationships as undirected
edges, each entity's communities as node attributes, one per level (`community_L0` the coarsest,
as in the communities table), written as a stream of XML lines, one batch of rows at a time.

Node attributes: label and title (the entity's name; Gephi shows `label`), type, description,
aliases (joined with "; "), frequency, degree (the view's, as the service reports it), domains
(the access domains of the entity's text, comma-joined), community_L<n> (the community id at
level n; absent where the entity has none at that level). Edge attributes: rel_id, description,
weight (Gephi's edge weight), domains.
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from corpusgraph.export.source import View

__all__ = ["write_graphml", "GRAPHML_NAME"]

GRAPHML_NAME = "graph.graphml"
# Characters XML 1.0 does not allow at all (libxml2, behind igraph, refuses the document).
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

_NODE_KEYS = [("label", "string"), ("title", "string"), ("type", "string"), ("description", "string"),
              ("aliases", "string"), ("frequency", "int"), ("degree", "int"), ("domains", "string")]
_EDGE_KEYS = [("rel_id", "string"), ("description", "string"), ("weight", "double"), ("domains", "string")]


def _text(value) -> str:
    return escape(_NOT_XML.sub("", str(value)))


def _attr(value) -> str:
    return quoteattr(_NOT_XML.sub("", str(value)))


def _data(key: str, value) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        value = repr(value)
    return f'<data key="{key}">{_text(value)}</data>'


def community_key(level: int) -> str:
    return f"community_L{level}"


def write_graphml(view: View, out_dir: Path) -> dict:
    """Write <out_dir>/graph.graphml; returns the counts written."""
    path = out_dir / GRAPHML_NAME
    nodes = edges = 0
    levels = view.levels
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n'
                '<graphml xmlns="http://graphml.graphdrawing.org/xmlns" '
                'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
                'xsi:schemaLocation="http://graphml.graphdrawing.org/xmlns '
                'http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd">\n')
        for name, kind in _NODE_KEYS + [(community_key(lv), "string") for lv in levels]:
            f.write(f'<key id="{name}" for="node" attr.name="{name}" attr.type="{kind}"/>\n')
        for name, kind in _EDGE_KEYS:
            f.write(f'<key id="e_{name}" for="edge" attr.name="{name}" attr.type="{kind}"/>\n')
        f.write('<graph id="corpusgraph" edgedefault="undirected">\n')

        cols = ["entity_id", "title", "type", "description", "aliases", "frequency", "degree", "unit_ids"]
        lines: list[str] = []
        for e in view.entity_rows(cols):
            by_level = view.community_of(e["entity_id"])
            parts = [f"<node id={_attr(e['entity_id'])}>", _data("label", e["title"]), _data("title", e["title"]),
                     _data("type", e["type"]), _data("description", e["description"]),
                     _data("aliases", "; ".join(e["aliases"] or ())), _data("frequency", e["frequency"]),
                     _data("degree", e["degree"]), _data("domains", ",".join(view.domains_of(e["unit_ids"])))]
            # One community per level in a hierarchical Leiden partition; a view that sees one
            # community through two domains' reports lists both, ";"-joined.
            parts += [_data(community_key(lv), ";".join(sorted(by_level[lv]))) for lv in levels if lv in by_level]
            parts.append("</node>\n")
            lines.append("".join(parts))
            nodes += 1
            if len(lines) >= 1024:
                f.write("".join(lines))
                lines.clear()
        f.write("".join(lines))
        lines.clear()

        for r in view.relationship_rows(["rel_id", "source_id", "target_id", "description", "weight", "unit_ids"]):
            lines.append(
                f"<edge id={_attr(r['rel_id'])} source={_attr(r['source_id'])} target={_attr(r['target_id'])}>"
                + _data("e_rel_id", r["rel_id"]) + _data("e_description", r["description"])
                + _data("e_weight", r["weight"]) + _data("e_domains", ",".join(view.domains_of(r["unit_ids"])))
                + "</edge>\n")
            edges += 1
            if len(lines) >= 1024:
                f.write("".join(lines))
                lines.clear()
        f.write("".join(lines))
        f.write("</graph>\n</graphml>\n")
    return {"file": str(path), "nodes": nodes, "edges": edges, "levels": levels}
