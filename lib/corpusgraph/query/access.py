"""Access domains: the part of an index a caller may see, as a store of its own.

Every document carries an `access_domain` and an API key is bound to a set of domains. What the
index built from text is visible to a key only when *all* the text behind it lies in the key's
domains, because a merged description or a community report may quote any of its sources:

- documents and text units: the document's domain is allowed;
- entities: every unit in `unit_ids` is allowed (an entity with no units is hidden: fail closed);
- relationships: every unit allowed and both ends visible entities;
- claims: the unit allowed and every entity it names visible;
- communities and their reports: every member entity, every relationship and every unit visible;
  one whose parent is hidden shows no parent (it is a root of the view) unless that parent has a
  report of the child's domain (below). A community that mixes domains is hidden whole, report
  and all, since a report's text cannot be split by domain; with `reports.per_domain` it has,
  besides, one report per domain written only from that domain's units, entities and
  relationships (stages/reports.py), and a view shows each report of its domains as a community
  of its own (an opaque id; members: the view's entities among the community's; units: the
  domain's), so global, DRIFT and local search map over every community the view partly sees;
- vector search: the shared FAISS index, asked for more hits than wanted and filtered to the
  view, asking for more until k visible hits are found or the index is exhausted.

A view is an `IndexStore` like the whole index (same attributes, lookups and methods), so basic,
local, global and drift search run on it unchanged. `restrict(store, domains)` builds one;
query/loaded.py's LoadedIndex keeps one per domain set, so each set pays the pass once.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Collection, Container, Iterable, Mapping

import numpy as np

from corpusgraph.query.columns import Rows
from corpusgraph.query.rows import FILL, KEYS
from corpusgraph.query.store import IndexStore, StoreTables

__all__ = [
    "VisibleVectors", "restrict", "select_view", "domain_view_id", "entity_visible", "relationship_visible", "claim_visible",
    "community_visible", "one_domain", "parent_in_view", "partial_view_community",
]

log = logging.getLogger(__name__)

# First fetch is this many times k; each refill fetches this many times more.
_OVERFETCH = 4
# A view's tables: (attribute, table name).
_VIEW_TABLES = (("docs", "documents"), ("units", "text_units"), ("entities", "entities"),
                ("relationships", "relationships"), ("claims", "claims"), ("communities", "communities"),
                ("reports", "community_reports"))
# Vector kinds and the view's table that says which of their ids it shows.
_VECTOR_TABLES = {"text_unit": "units", "entity": "entities", "relationship": "relationships", "claim": "claims",
                  "community": "communities", "community_report": "reports", "document": "docs"}


class VisibleVectors:
    """A loaded VectorIndex that only ever answers with ids of one view."""

    def __init__(self, index, visible: Collection[str]):
        self._index = index
        self._visible = visible
        self._count = sum(1 for i in index.ids if i in visible)
        self.kind = index.kind
        self.model = index.model
        self.dim = index.dim

    @property
    def ids(self) -> list[str]:
        return [i for i in self._index.ids if i in self._visible]

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"VisibleVectors({self._index!r}, visible={self._count})"

    def vectors(self, ids) -> np.ndarray:
        """Stored vectors of visible ids only, as VectorIndex.vectors; KeyError for any other."""
        hidden = [i for i in ids if i not in self._visible]
        if hidden:
            raise KeyError(f"not visible: {hidden[:3]}")
        return self._index.vectors(ids)

    def search(self, query_vectors, k: int) -> list[list[tuple[str, float]]]:
        """Top-k visible (id, cosine) per query row, best first, as VectorIndex.search."""
        if k < 1:
            raise ValueError("k must be >= 1")
        total = len(self._index)
        fetch = min(k * _OVERFETCH, total) or 1
        while True:
            raw = self._index.search(query_vectors, fetch)
            rows = [[hit for hit in row if hit[0] in self._visible][:k] for row in raw]
            if fetch >= total or all(len(row) >= min(k, self._count) for row in rows):
                return rows
            fetch = min(fetch * _OVERFETCH, total)


def _all_in(ids: Iterable[str] | None, allowed: Collection[str]) -> bool:
    ids = list(ids or ())
    return bool(ids) and all(i in allowed for i in ids)


# The rules of the module docstring, one row at a time. `allowed_units`, `entities` and
# `relationships` need only answer `in` (a dict, a set, or anything with __contains__), so a
# caller that streams the tables (export.py) applies the same rules as a view built in memory.

def entity_visible(entity: Mapping, allowed_units: Container[str]) -> bool:
    return _all_in(entity.get("unit_ids"), allowed_units)


def relationship_visible(rel: Mapping, entities: Container[str], allowed_units: Container[str]) -> bool:
    return rel["source_id"] in entities and rel["target_id"] in entities and _all_in(rel.get("unit_ids"), allowed_units)


def claim_visible(claim: Mapping, entities: Container[str], allowed_units: Container[str]) -> bool:
    return claim.get("unit_id") in allowed_units and all(
        claim.get(end) in entities for end in ("subject_id", "object_id") if claim.get(end)
    )


def community_visible(com: Mapping, entities: Container[str], relationships: Container[str],
                      allowed_units: Container[str]) -> bool:
    return (
        _all_in(com.get("entity_ids"), entities)
        and all(r in relationships for r in com.get("rel_ids") or ())
        and all(u in allowed_units for u in com.get("unit_ids") or ())
    )


def one_domain(unit_ids: Iterable[str] | None, unit_domain: Mapping[str, str | None]) -> str | None:
    """The one access domain of these units, or None when they have none or several."""
    found = {unit_domain.get(u) for u in unit_ids or ()}
    return found.pop() if len(found) == 1 else None


def parent_in_view(com: Mapping, domain: str | None, communities: Container[str],
                   partial: Container[tuple[str, str]]) -> str | None:
    """The parent a view shows for a community it shows. A visible community under a hidden one
    becomes a root unless that parent has a report of the child's one domain in the view
    (`partial`: the (community id, domain) keys of those reports): its parent's id is not the
    view's to show, and a walk down from the roots (dynamic community selection) must still reach it."""
    parent = com.get("parent_id")
    if parent is None or parent in communities:
        return parent
    return domain_view_id(parent, domain) if domain is not None and (parent, domain) in partial else None


def partial_view_community(com: Mapping, domain: str, parent: str | None, entities: Container[str],
                           relationships: Container[str], unit_domain: Mapping[str, str | None]) -> dict:
    """The community a view makes of one domain's report of a community it sees only in part:
    an opaque id, the view's entities among the members, the domain's units."""
    members = [e for e in com.get("entity_ids") or () if e in entities]
    return {
        **com, "community_id": domain_view_id(com["community_id"], domain), "parent_id": parent,
        "entity_ids": members, "size": len(members),
        "rel_ids": [r for r in com.get("rel_ids") or () if r in relationships],
        "unit_ids": [u for u in com.get("unit_ids") or () if unit_domain.get(u) == domain],
    }


def restrict(store: IndexStore, domains: Iterable[str] | None) -> IndexStore:
    """The part of `store` built only from documents in `domains` (the rules above); None: all of
    it. A view of a view narrows from the whole index to the domains both allow. Rows are shared
    with the whole index, only the id maps are new; vector search goes to the whole index's
    vectors, filtered (VisibleVectors)."""
    if domains is None:
        return store
    base = store.base if store.base is not None else store
    key = frozenset(domains) if store.domains is None else store.domains & frozenset(domains)
    view = _Tables()
    select_view(view, base, key)
    # select_view leaves each table as a dict of the rows the view shows; kept as Rows typed like
    # the base's, so the view's lookups and column paths are the store's own.
    tables = {attr: Rows.from_rows(list(getattr(view, attr).values()), KEYS[name], getattr(base, attr).table.schema,
                                   FILL.get(name)) for attr, name in _VIEW_TABLES}

    def vectors(kind: str):
        visible = tables.get(_VECTOR_TABLES.get(kind, ""))
        if visible is None:  # a kind without an access rule: show none of it
            log.warning("vector kind %r has no access rule; a restricted view returns no hits", kind)
            visible = {}
        return VisibleVectors(base.vectors(kind), visible)

    return IndexStore(base.warehouse, base.index_dir, load_vectors=False, s3=base.s3, tables=StoreTables(
        **tables, unit_domain=view.unit_domain, domains=key, base=base,
        partial_communities=frozenset(view.partial_communities), vectors=vectors))


class _Tables:
    """What select_view fills: a view's tables as dicts, before they become Rows."""


def select_view(view, base: IndexStore, domains: frozenset[str]) -> None:
    """Fill the view's tables (attributes of `view`, each a dict id -> row) from base by the rules
    in the module docstring."""
    allowed_units = {u for u, d in base.unit_domain.items() if d in domains}
    view.unit_domain = {u: base.unit_domain[u] for u in allowed_units}
    view.docs = {k: d for k, d in base.docs.items() if d.get("access_domain") in domains}
    view.units = {k: u for k, u in base.units.items() if k in allowed_units}
    entities = {k: e for k, e in base.entities.items() if entity_visible(e, allowed_units)}
    view.relationships = {
        k: r for k, r in base.relationships.items() if relationship_visible(r, entities, allowed_units)
    }
    view.claims = {k: c for k, c in base.claims.items() if claim_visible(c, entities, allowed_units)}
    # Degree as the view sees it: the full graph's count would say how many hidden edges exist.
    degree: dict[str, int] = dict.fromkeys(entities, 0)
    for rel in view.relationships.values():
        degree[rel["source_id"]] += 1
        if rel["target_id"] != rel["source_id"]:
            degree[rel["target_id"]] += 1
    view.entities = {k: e if e.get("degree") == degree[k] else {**e, "degree": degree[k]} for k, e in entities.items()}
    communities = {
        k: c for k, c in base.communities.items()
        if community_visible(c, view.entities, view.relationships, allowed_units)
    }
    # Per-domain reports (reports.per_domain) of the communities the view sees only in part: each
    # becomes a community of the view under an id of its own (domain_view_id).
    partial = {
        (cid, d): rep for (cid, d), rep in base.domain_reports.items()
        if d in domains and cid in base.communities and cid not in communities
    }
    view.partial_communities = {cid for cid, _ in partial}

    view.communities = {}
    for k, c in communities.items():
        parent = parent_in_view(c, one_domain(c.get("unit_ids"), base.unit_domain), communities, partial)
        view.communities[k] = c if parent == c.get("parent_id") else {**c, "parent_id": parent}
    view.reports = {k: r for k, r in base.reports.items() if k in view.communities}
    for (cid, domain), rep in sorted(partial.items()):
        com = base.communities[cid]
        parent = parent_in_view(com, domain, communities, partial)
        vid = domain_view_id(cid, domain)
        view.communities[vid] = partial_view_community(com, domain, parent, view.entities, view.relationships,
                                                       base.unit_domain)
        view.reports[vid] = {**rep, "community_id": vid}


def domain_view_id(community_id: str, domain: str) -> str:
    """The id a restricted view gives one domain's report of a community it sees only in part: a
    hash, so the id says nothing about the community (nor its other domains) beyond the report."""
    return "cd_" + hashlib.sha256(f"{community_id}\x1f{domain}".encode()).hexdigest()[:16]
