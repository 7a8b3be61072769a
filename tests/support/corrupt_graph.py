"""Corrupted graphs of a built index, for the proof that local ranking falls back to basic search.

Each corruption keeps the text (units, documents, vectors, BM25) and spoils what the graph adds, the
way real corpora spoil it; the store is rebuilt in memory from the index's own tables, seeded, so a
run is repeatable. The retrieval benchmark (tests/benchmarks/test_retrieval.py) ranks the dev
questions on each and reports local against basic search in retrieval.json.

- `random_links`: every entity keeps its name and how many passages it is in, but the passages are
  drawn at random, and every relationship joins two random entities: extraction that is noise.
- `hub_boilerplate`: HUBS entities (a site name, its menu entries) are put into HUB_SHARE of the
  passages, each with relationships to the entities of a sample of those passages: what a web
  crawl's headers, footers and menus make of a graph. Their names are words of the corpus's most
  common passage words, so a question may name them.
- `empty_titles`: every document's title becomes the same phrase that names nothing ("Home"), as
  pages titled by their site or CMS are: the title step, the title links of the walk and the
  title bridge lose their evidence, and BM25 its title words.
"""

from __future__ import annotations

import random
from collections import Counter

from corpusgraph.query.columns import Rows
from corpusgraph.query.lexical import tokenize
from corpusgraph.query.rows import FILL, KEYS
from corpusgraph.query.store import IndexStore, StoreTables

__all__ = ["CORRUPTIONS", "corrupt", "HUBS", "HUB_SHARE", "EMPTY_TITLE"]

CORRUPTIONS = ("random_links", "hub_boilerplate", "empty_titles")
HUBS = 3
HUB_SHARE = 0.8
EMPTY_TITLE = "Home"


def _rows(store: IndexStore, attr: str, name: str, rows: list[dict]) -> Rows:
    return Rows.from_rows(rows, KEYS[name], getattr(store, attr).table.schema, FILL.get(name))


def corrupt(store: IndexStore, kind: str, seed: int = 0) -> tuple[IndexStore, dict]:
    """A store like `store` with its graph corrupted as `kind` says, and what was done (counts)."""
    rng = random.Random(seed)
    units = list(store.units.ids)
    ents = [dict(e) for e in store.entities.values()]
    rels = [dict(r) for r in store.relationships.values()]
    docs = store.docs
    facts: dict = {"kind": kind, "seed": seed}
    if kind == "random_links":
        for e in ents:
            e["unit_ids"] = rng.sample(units, min(len(e.get("unit_ids") or ()), len(units)))
        ids = [e["entity_id"] for e in ents]
        for r in rels:
            r["source_id"], r["target_id"] = rng.sample(ids, 2)
        facts.update(entities_relinked=len(ents), relationships_rewired=len(rels))
    elif kind == "hub_boilerplate":
        words = Counter(w for u in store.units.values() for w in set(tokenize(u["text"] or "")))
        names = [w for w, _ in words.most_common(HUBS)]
        by_unit: dict[str, list[str]] = {}
        for e in ents:
            for u in e.get("unit_ids") or ():
                by_unit.setdefault(u, []).append(e["entity_id"])
        for h, name in enumerate(names):
            chosen = rng.sample(units, int(HUB_SHARE * len(units)))
            hub_id = f"hub_{h}"
            ents.append({"entity_id": hub_id, "title": name.title(), "type": "ORGANIZATION",
                         "description": f"{name.title()} (site boilerplate)", "aliases": [], "unit_ids": chosen,
                         "frequency": len(chosen), "degree": 0})
            for u in rng.sample(chosen, min(200, len(chosen))):
                for other in by_unit.get(u, [])[:3]:
                    rels.append({"rel_id": f"{hub_id}_{other}_{u}", "source_id": hub_id, "target_id": other,
                                 "description": "boilerplate", "weight": 1.0, "unit_ids": [u]})
        facts.update(hubs=names, hub_share=HUB_SHARE, hub_relationships=len(rels) - len(store.relationships))
    elif kind != "empty_titles":
        raise ValueError(f"unknown corruption {kind!r}")
    doc_rows = [dict(d) for d in docs.values()]
    if kind == "empty_titles":
        for d in doc_rows:
            d["title"] = EMPTY_TITLE
        facts.update(titles_replaced=len(doc_rows), title=EMPTY_TITLE)
    tables = StoreTables(
        docs=_rows(store, "docs", "documents", doc_rows), units=store.units, unit_domain=store.unit_domain,
        entities=_rows(store, "entities", "entities", ents),
        relationships=_rows(store, "relationships", "relationships", rels),
        claims=store.claims, communities=store.communities, reports=store.reports,
        vectors=store.vectors)
    return IndexStore(store.warehouse, store.index_dir, load_vectors=False, s3=store.s3, tables=tables), facts
