"""GET /v1/entities/{id} and /v1/communities: the graph itself, as the caller's domains allow.

Every lookup goes through the caller's view of the index (deps.get_view), so an entity, edge,
claim, unit or community built from a document the key may not read does not exist here: the
404 for it is word for word the 404 for an id that was never in the index.
"""

from __future__ import annotations

import weakref
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel

from corpusgraph.config import ServeSection
from corpusgraph.query.store import IndexStore
from serving.deps import get_index_version, get_view
from serving.models import (ClaimOut, CommunityDetail, CommunityPage, CommunityRef, DocumentOut, EntityDetail,
                            EntityOut, NeighbourOut, RelationshipOut, ReportOut, UnitOut)
from serving.routers.query import Problem  # one error schema in the OpenAPI document

__all__ = ["build_router"]


def _pick(row: dict, model: type[BaseModel], **extra: Any) -> dict:
    return {**{name: row.get(name) for name in model.model_fields if name in row}, **extra}


def _community_ref(store: IndexStore, cid: str) -> CommunityRef:
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


def build_router(settings: ServeSection) -> APIRouter:
    router = APIRouter(tags=["graph"], responses={
        401: {"model": Problem, "description": "Missing or wrong API key (only when keys are set)"},
        403: {"model": Problem, "description": "X-Access-Domains names a domain the key may not read"},
        503: {"model": Problem, "description": "The index is still loading, or failed to load"},
    })
    page = settings.max_page_size

    @router.get("/v1/entities/{entity_id}", response_model=EntityDetail, summary="An entity and its neighbourhood",
                responses={404: {"model": Problem, "description": "No such entity visible to this key"}})
    def entity(
        entity_id: str = Path(..., min_length=1, max_length=256),
        limit: int = Query(min(50, page), ge=1, le=page, description="Most relationships, claims and units returned."),
        store: IndexStore = Depends(get_view),
        version: str | None = Depends(get_index_version),
    ) -> EntityDetail:
        """The entity, its relationships and the entities at their other ends, its claims, the
        communities it belongs to, and the text units and documents it was extracted from."""
        ent = store.entities.get(entity_id)
        if ent is None:
            raise HTTPException(404, detail="no such entity in this index")
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
            NeighbourOut(entity_id=e, title=store.entities[e].get("title"), type=store.entities[e].get("type"),
                         rel_ids=r)
            for e, r in via.items()
        ]
        doc_ids = list(dict.fromkeys(store.units[u]["doc_id"] for u in unit_ids))
        communities = sorted(store.entity_communities.get(entity_id, ()),
                             key=lambda c: (store.communities[c]["level"], c))
        return EntityDetail(
            entity=EntityOut(**_pick(ent, EntityOut, degree=store.degree(entity_id))),
            relationships=[RelationshipOut(**_pick(store.relationships[r], RelationshipOut)) for r in rel_ids],
            neighbours=neighbours,
            claims=[ClaimOut(**_pick(store.claims[c], ClaimOut)) for c in claim_ids],
            communities=[_community_ref(store, c) for c in communities],
            units=[UnitOut(**_pick(store.units[u], UnitOut)) for u in unit_ids],
            documents=[DocumentOut(**_pick(store.docs[d], DocumentOut)) for d in doc_ids if d in store.docs],
            truncated=truncated,
            index_version=version,
        )

    @router.get("/v1/communities", response_model=CommunityPage, summary="Communities, with report titles and ratings")
    def communities(
        level: int | None = Query(None, ge=0, le=settings.max_level, description="Only this level; all when left out."),
        limit: int = Query(min(100, page), ge=1, le=page),
        offset: int = Query(0, ge=0, le=10_000_000),
        store: IndexStore = Depends(get_view),
        version: str | None = Depends(get_index_version),
    ) -> CommunityPage:
        """Communities this key can see: by level, then by report rating (highest first). A
        community mixing documents of domains the key may not read is left out whole, with its
        report (see corpusgraph.query.access)."""
        ordered = _listing_order(store, level)
        return CommunityPage(levels=sorted(store.communities_by_level), total=len(ordered),
                             communities=[_community_ref(store, c) for c in ordered[offset: offset + limit]],
                             index_version=version)

    @router.get("/v1/communities/{community_id}", response_model=CommunityDetail, summary="A community and its report",
                responses={404: {"model": Problem, "description": "No such community visible to this key"}})
    def community(
        community_id: str = Path(..., min_length=1, max_length=256),
        store: IndexStore = Depends(get_view),
        version: str | None = Depends(get_index_version),
    ) -> CommunityDetail:
        com = store.communities.get(community_id)
        if com is None:
            raise HTTPException(404, detail="no such community in this index")
        members = set(com.get("entity_ids") or ())
        entities = []
        for eid in list(com.get("entity_ids") or ())[:page]:
            inner = [r for r in store.adjacency.get(eid, ()) if store.other_end(r, eid) in members]
            entities.append(NeighbourOut(entity_id=eid, title=store.entities[eid].get("title"),
                                         type=store.entities[eid].get("type"), rel_ids=inner))
        children = sorted(c for c in store.communities_by_level.get(com["level"] + 1, ())
                          if store.communities[c].get("parent_id") == community_id)
        report = store.reports.get(community_id)
        return CommunityDetail(
            **_community_ref(store, community_id).model_dump(),
            entities=entities,
            children=children,
            report=None if report is None else ReportOut(
                **_pick(report, ReportOut, findings=[f for f in report.get("findings") or () if f])),
            index_version=version,
        )

    return router
