// The page: find entities, draw an entity's neighbourhood, read a community's report, ask a
// question and read the answer as it streams, with its citations opening the source text.
// Everything from the index is put on the page as text (textContent), never as markup.

import {ApiError, get, hasKey, idle, setKey, streamQuery} from "./api.js";
import {available, draw, drawn} from "./graph.js";

const $ = (id) => document.getElementById(id);

function el(tag, text, props) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  Object.assign(node, props || {});
  return node;
}

function link(text, hash) {
  return el("a", text, {href: "#" + hash});
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

function status(text, problem) {
  const s = $("status");
  s.textContent = text || "";
  s.classList.toggle("problem", Boolean(problem));
}

function failed(where, err) {
  const why = err instanceof ApiError ? `${err.message} (HTTP ${err.status})` : String(err);
  status(`${where}: ${why}`, true);
}

// -- search and listings ------------------------------------------------------------------------

async function search(text) {
  const hits = clear($("hits"));
  $("hits-none").hidden = true;
  if (!text.trim()) return;
  try {
    const body = await get("/v1/entities", {q: text, limit: 20});
    for (const e of body.entities) {
      const li = el("li");
      li.appendChild(link(e.title || e.entity_id, "entity/" + encodeURIComponent(e.entity_id)));
      li.appendChild(el("span", ` ${e.type || ""} · ${e.degree} links`, {className: "meta"}));
      hits.appendChild(li);
    }
    $("hits-none").hidden = body.entities.length > 0;
    status("");
  } catch (err) { failed("search", err); }
}

async function communities(level) {
  const list = clear($("communities"));
  try {
    const body = await get("/v1/communities", {level, limit: 50});
    const select = $("level");
    if (!select.options.length) {
      for (const lvl of body.levels) select.appendChild(el("option", `level ${lvl}`, {value: String(lvl)}));
      if (level === undefined && body.levels.length) return communities(body.levels[0]);
    }
    for (const c of body.communities) {
      const li = el("li");
      li.appendChild(link(c.title || c.community_id, "community/" + encodeURIComponent(c.community_id)));
      li.appendChild(el("span", ` ${c.size} members`, {className: "meta"}));
      list.appendChild(li);
    }
  } catch (err) { failed("communities", err); }
}

// -- views: entity, community, unit ------------------------------------------------------------------

function section(title, items, render) {
  const box = el("section");
  box.appendChild(el("h3", title));
  if (!items.length) { box.appendChild(el("p", "none", {className: "none"})); return box; }
  const ul = el("ul");
  for (const item of items) { const li = el("li"); render(li, item); ul.appendChild(li); }
  box.appendChild(ul);
  return box;
}

async function showEntity(id) {
  const detail = clear($("detail"));
  try {
    const body = await get("/v1/entities/" + encodeURIComponent(id), {limit: 50});
    const e = body.entity;
    detail.appendChild(el("h2", e.title || e.entity_id, {id: "detail-title"}));
    detail.appendChild(el("p", `${e.type || "entity"} · ${e.degree} relationships`, {className: "meta"}));
    detail.appendChild(el("p", e.description || ""));
    const titles = Object.fromEntries(body.neighbours.map((n) => [n.entity_id, n.title]));
    detail.appendChild(section("Relationships", body.relationships, (li, r) => {
      const other = r.source_id === e.entity_id ? r.target_id : r.source_id;
      li.appendChild(link(titles[other] || other, "entity/" + encodeURIComponent(other)));
      li.appendChild(el("span", `: ${r.description || ""}`));
    }));
    detail.appendChild(section("Claims", body.claims, (li, c) => li.appendChild(
      el("span", `${[c.type, c.status].filter(Boolean).join(", ")}: ${c.description || ""}`))));
    detail.appendChild(section("Communities", body.communities, (li, c) => {
      li.appendChild(link(c.title || c.community_id, "community/" + encodeURIComponent(c.community_id)));
      li.appendChild(el("span", ` level ${c.level}`, {className: "meta"}));
    }));
    detail.appendChild(section("Source text", body.units, (li, u) => {
      li.appendChild(link(u.text.slice(0, 120) + (u.text.length > 120 ? "…" : ""), "unit/" + encodeURIComponent(u.unit_id)));
    }));
    const drew = draw($("graph"), body, (other) => { window.location.hash = "entity/" + encodeURIComponent(other); });
    $("graph-missing").hidden = drew;
    status("");
  } catch (err) {
    detail.appendChild(el("p", err instanceof ApiError && err.status === 404 ? err.message : "", {className: "none"}));
    failed("entity", err);
  }
}

async function showCommunity(id) {
  const detail = clear($("detail"));
  try {
    const c = await get("/v1/communities/" + encodeURIComponent(id));
    detail.appendChild(el("h2", c.title || c.community_id, {id: "detail-title"}));
    detail.appendChild(el("p", `level ${c.level} · ${c.size} members` + (c.rating !== null ? ` · rated ${c.rating}` : ""),
                          {className: "meta"}));
    if (c.report) {
      detail.appendChild(el("p", c.report.summary || ""));
      detail.appendChild(section("Findings", c.report.findings, (li, f) => {
        li.appendChild(el("strong", f.summary || ""));
        li.appendChild(el("span", f.explanation ? ` ${f.explanation}` : ""));
      }));
    } else {
      detail.appendChild(el("p", "This community has no report.", {className: "none"}));
    }
    detail.appendChild(section("Members", c.entities, (li, m) => li.appendChild(
      link(m.title || m.entity_id, "entity/" + encodeURIComponent(m.entity_id)))));
    detail.appendChild(section("Sub-communities", c.children, (li, k) => li.appendChild(
      link(k, "community/" + encodeURIComponent(k)))));
    status("");
  } catch (err) {
    detail.appendChild(el("p", err instanceof ApiError && err.status === 404 ? err.message : "", {className: "none"}));
    failed("community", err);
  }
}

async function showUnit(id) {
  const box = clear($("unit"));
  box.hidden = false;
  try {
    const body = await get("/v1/units/" + encodeURIComponent(id));
    const doc = body.document || {};
    box.appendChild(el("h3", doc.title || body.unit.doc_id, {id: "unit-title"}));
    box.appendChild(el("p", doc.source_uri || "", {className: "meta"}));
    box.appendChild(el("p", body.unit.text, {id: "unit-text"}));
    status("");
  } catch (err) {
    box.appendChild(el("p", err instanceof ApiError ? err.message : String(err), {className: "none"}));
    failed("source text", err);
  }
}

// -- asking ----------------------------------------------------------------------------------------

let tags = {};  // [U3] -> the unit it stands for, from the context event

function renderAnswer(text) {
  const box = clear($("answer"));
  let last = 0;
  for (const m of text.matchAll(/\[([A-Z]\d+)\]/g)) {
    box.appendChild(document.createTextNode(text.slice(last, m.index)));
    const unit = tags[m[1]];
    box.appendChild(unit ? link(m[0], "unit/" + encodeURIComponent(unit)) : document.createTextNode(m[0]));
    last = m.index + m[0].length;
  }
  box.appendChild(document.createTextNode(text.slice(last)));
}

function renderCitations(citations) {
  const list = clear($("citations"));
  for (const c of citations) {
    const li = el("li");
    li.appendChild(link(c.title || c.doc_id, "unit/" + encodeURIComponent(c.unit_id)));
    li.appendChild(el("span", ` ${c.source_uri || ""}` + (c.tag ? ` [${c.tag}]` : ""), {className: "meta"}));
    list.appendChild(li);
  }
}

async function ask(question, method) {
  tags = {};
  let text = "";
  clear($("answer")); clear($("citations")); $("coverage").textContent = "";
  const note = $("ask-status");
  note.textContent = "asking…";
  note.classList.remove("problem");
  try {
    await streamQuery({question, method}, (kind, data) => {
      if (kind === "start") {
        note.textContent = `method ${data.method}` + (data.route_reason ? ` (${data.route_reason})` : "");
      } else if (kind === "context") {
        for (const c of data.citations) if (c.tag) tags[c.tag] = c.unit_id;
        renderCitations(data.citations);
      } else if (kind === "progress") {
        note.textContent = `${data.stage}: ${data.done} of ${data.total}`;
      } else if (kind === "token") {
        text += data.text;
        renderAnswer(text);
      } else if (kind === "done") {
        renderAnswer(data.answer || text);
        renderCitations(data.citations.map((c) => Object.assign({}, c, {tag: Object.keys(tags).find((t) => tags[t] === c.unit_id)})));
        note.textContent = `method ${data.method}` + (data.error ? ` · the model failed: ${data.error}` : "");
        note.classList.toggle("problem", Boolean(data.error));
        $("coverage").textContent = `model calls: ${data.llm_calls} · tokens: ${data.tokens_in} in, ${data.tokens_out} out`
          + ` · $${data.usd.toFixed(4)}`;
      } else if (kind === "error") {
        note.textContent = `error ${data.status}: ${data.detail}`;
        note.classList.add("problem");
      }
    });
  } catch (err) {
    note.textContent = err instanceof ApiError ? `${err.message} (HTTP ${err.status})` : String(err);
    note.classList.add("problem");
  }
}

// -- wiring --------------------------------------------------------------------------------------

let routeWaiters = [];

function route() {
  const [kind, ...rest] = window.location.hash.slice(1).split("/");
  const id = decodeURIComponent(rest.join("/"));
  let shown = Promise.resolve();
  if (kind === "entity" && id) shown = showEntity(id);
  else if (kind === "community" && id) shown = showCommunity(id);
  else if (kind === "unit" && id) shown = showUnit(id);
  return shown.finally(() => { const w = routeWaiters; routeWaiters = []; w.forEach((r) => r(kind)); });
}

function start() {
  $("graph-missing").hidden = available();
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    setKey($("key").value.trim());
    $("key").value = "";
    clear($("level"));
    communities();
    route();
  });
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); search($("search").value); });
  $("level").addEventListener("change", () => communities(Number($("level").value)));
  $("ask-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const q = $("question").value.trim();
    if (q) ask(q, $("method").value);
  });
  window.addEventListener("hashchange", route);
  // Nothing is asked before the user has said which key to use (none, for a service without keys),
  // unless this tab already holds one.
  if (hasKey()) { communities(); route(); } else status("Enter your API key and press Use (leave it empty if the service has none).");
}

// For the browser test: wait until the page has no request in flight, or until the next view (a
// link followed) is shown; what the graph holds.
window.corpusgraphUI = {idle, drawn, nextRoute: () => new Promise((resolve) => routeWaiters.push(resolve))};

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
