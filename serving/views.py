"""The graph as responses: an entity and its neighbourhood, a community and its report, a listing,
a text unit, an entity search. Plain functions of the caller's view of the index, shared by the
HTTP routes (routers/graph.py, routers/search.py) and the MCP tools (mcp_server.py), so the two
surfaces answer alike, 404s included.

What the view does not hold does not exist here: `NotFound` for it says word for word what it
says for an id that was never in the index.
"""

from __future__ import annotations

import weakref
from typing import Any

from pydantic import BaseModel

from corpusgraph.query.entity_search import search_entities
from corpusgraph.query.store import IndexStore
from serving.models import (ClaimOut, CommunityDetail, CommunityPage, CommunityRef, DocumentOut, EntityDetail,
                            EntityHit, EntityHits, EntityOut, NeighbourOut, RelationshipOut, ReportOut, UnitDetail,
                            UnitOut)

__all__ = ["NotFound", "entity_detail", "community_detail", "community_page", "unit_detail", "entity_hits",
           "NO_ENTITY", "NO_COMMUNITY", "NO_UNIT"]

NO_ENTITY = "no such entity in this index"
NO_COMMUNITY = "no such community in this index"
NO_UNIT = "no such text unit in this index"


class NotFound(LookupError):
    """An id the caller's view does not hold (its message is the 404's detail)."""


def _pick(row: dict, model: type[BaseModel], **extra: Any) -> dict:
    return {**{name: row.get(name) for name in model.model_fields if name in row}, **extra}


def community_ref(store: IndexStore, cid: str) -> CommunityRef:
    com = store.communities[cid]
    report = store.reports.get(cid) or {}
    return CommunityRef(
        community_id=cid, level=com["level"], parent_id=com.get("parent_id"),
        size=com.get("size") if com.get("size") is not None else len(com.get("entity_ids") or ()),
        title=report.get("title"), rating=report.get("rating"),
    )


# Listing order per store (each caller's view is a store of its own) and level: sorting every
# community on every page would cost a large index a sort per request.
_ORDER: weakref.WeakKeyDictionary[IndexStore, dict[int | None, list[str]]] = weakref.WeakKeyDictionary()


def _listing_order(store: IndexStore, level: int | None) -> list[str]:
    """Community ids by level, then report rating (highest first, unreported last), then id."""
    cached = _ORDER.setdefault(store, {})
    if level not in cached:
        ids = [c for lvl, cids in store.communities_by_level.items() if level in (None, lvl) for c in cids]

        def key(cid: str):
            rating = (store.reports.get(cid) or {}).get("rating")
            return (store.communities[cid]["level"], -(rating if rating is not None else -1.0), cid)

        cached[level] = sorted(ids, key=key)
    return cached[level]


def entity_detail(store: IndexStore, entity_id: str, limit: int, version: str | None) -> EntityDetail:
    """The entity, its relationships and the entities at their other ends, its claims, the
    communities it belongs to, and the text units and documents it was extracted from."""
    ent = store.entities.get(entity_id)
    if ent is None:
        raise NotFound(NO_ENTITY)
    rel_ids = sorted(store.adjacency.get(entity_id, ()),
                     key=lambda r: (-float(store.relationships[r].get("weight") or 0.0), r))
    unit_ids = [u for u in ent.get("unit_ids") or () if u in store.units]
    claim_ids = store.entity_claims.get(entity_id, [])
    truncated = max(len(rel_ids), len(unit_ids), len(claim_ids)) > limit
    claim_ids = claim_ids[:limit]
    rel_ids, unit_ids = rel_ids[:limit], unit_ids[:limit]
    via: dict[str, list[str]] = {}
    for rel_id in rel_ids:
        via.setdefault(store.other_end(rel_id, entity_id), []).append(rel_id)
    neighbours = [
        NeighbourOut(entity_id=e, title=store.entities[e].get("title"), type=store.entities[e].get("type"), rel_ids=r)
        for e, r in via.items()
    ]
    doc_ids = list(dict.fromkeys(store.units[u]["doc_id"] for u in unit_ids))
    communities = sorted(store.entity_communities.get(entity_id, ()), key=lambda c: (store.communities[c]["level"], c))
    return EntityDetail(
        entity=EntityOut(**_pick(ent, EntityOut, degree=store.degree(entity_id))),
        relationships=[RelationshipOut(**_pick(store.relationships[r], RelationshipOut)) for r in rel_ids],
        neighbours=neighbours,
        claims=[ClaimOut(**_pick(store.claims[c], ClaimOut)) for c in claim_ids],
        communities=[community_ref(store, c) for c in communities],
        units=[UnitOut(**_pick(store.units[u], UnitOut)) for u in unit_ids],
        documents=[DocumentOut(**_pick(store.docs[d], DocumentOut)) for d in doc_ids if d in store.docs],
        truncated=truncated,
        index_version=version,
    )


def community_page(store: IndexStore, level: int | None, limit: int, offset: int, version: str | None) -> CommunityPage:
    ordered = _listing_order(store, level)
    return CommunityPage(levels=sorted(store.communities_by_level), total=len(ordered),
                         communities=[community_ref(store, c) for c in ordered[offset: offset + limit]],
                         index_version=version)


def community_detail(store: IndexStore, community_id: str, max_members: int, version: str | None) -> CommunityDetail:
    com = store.communities.get(community_id)
    if com is None:
        raise NotFound(NO_COMMUNITY)
    members = set(com.get("entity_ids") or ())
    entities = []
    for eid in list(com.get("entity_ids") or ())[:max_members]:
        inner = [r for r in store.adjacency.get(eid, ()) if store.other_end(r, eid) in members]
        entities.append(NeighbourOut(entity_id=eid, title=store.entities[eid].get("title"),
                                     type=store.entities[eid].get("type"), rel_ids=inner))
    children = sorted(c for c in store.communities_by_level.get(com["level"] + 1, ())
                      if store.communities[c].get("parent_id") == community_id)
    report = store.reports.get(community_id)
    return CommunityDetail(
        **community_ref(store, community_id).model_dump(),
        entities=entities,
        children=children,
        report=None if report is None else ReportOut(
            **_pick(report, ReportOut, findings=[f for f in report.get("findings") or () if f])),
        index_version=version,
    )


def unit_detail(store: IndexStore, unit_id: str, version: str | None) -> UnitDetail:
    unit = store.units.get(unit_id)
    if unit is None:
        raise NotFound(NO_UNIT)
    doc = store.docs.get(unit["doc_id"])
    return UnitDetail(unit=UnitOut(**_pick(unit, UnitOut)),
                      document=None if doc is None else DocumentOut(**_pick(doc, DocumentOut)), index_version=version)


def entity_hits(store: IndexStore, q: str, limit: int, version: str | None) -> EntityHits:
    hits = []
    for m in search_entities(store, q, limit):
        ent = store.entities[m.entity_id]
        hits.append(EntityHit(**_pick(ent, EntityHit, degree=store.degree(m.entity_id), matched=m.matched, how=m.how)))
    return EntityHits(q=q, entities=hits, index_version=version)
