"""GET /v1/entities/{id}, /v1/entities?q=, /v1/communities and /v1/units/{id}: the graph itself,
as the caller's domains allow.

Every lookup goes through the caller's view of the index (deps.get_view) and the view functions
of serving/views.py, which the MCP tools share, so an entity, edge, claim, unit or community built
from a document the key may not read does not exist here: the 404 for it is word for word the 404
for an id that was never in the index.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Path, Query

from corpusgraph.config import ServeSection
from corpusgraph.query.store import IndexStore
from serving import views
from serving.deps import get_index_version, get_view
from serving.models import CommunityDetail, CommunityPage, EntityDetail, EntityHits, UnitDetail
from serving.routers.query import Problem  # one error schema in the OpenAPI document

__all__ = ["build_router"]


def _found(call, *args):
    try:
        return call(*args)
    except views.NotFound as exc:
        raise HTTPException(404, detail=str(exc)) from None


def build_router(settings: ServeSection) -> APIRouter:
    router = APIRouter(tags=["graph"], responses={
        401: {"model": Problem, "description": "Missing or wrong API key (only when keys are set)"},
        403: {"model": Problem, "description": "X-Access-Domains names a domain the key may not read"},
        503: {"model": Problem, "description": "The index is still loading, or failed to load"},
    })
    page = settings.max_page_size

    @router.get("/v1/entities", response_model=EntityHits, summary="Find entities by name")
    def search(
        q: str = Query(..., min_length=1, max_length=200, description="A name, or its first letters or words."),
        limit: int = Query(min(10, page), ge=1, le=page),
        store: IndexStore = Depends(get_view),
        version: str | None = Depends(get_index_version),
    ) -> EntityHits:
        """Entities whose title or alias is the text, starts with it, or has words starting with
        each of its words; best connected first within each of those."""
        return views.entity_hits(store, q, limit, version)

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
        return _found(views.entity_detail, store, entity_id, limit, version)

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
        return views.community_page(store, level, limit, offset, version)

    @router.get("/v1/communities/{community_id}", response_model=CommunityDetail, summary="A community and its report",
                responses={404: {"model": Problem, "description": "No such community visible to this key"}})
    def community(
        community_id: str = Path(..., min_length=1, max_length=256),
        store: IndexStore = Depends(get_view),
        version: str | None = Depends(get_index_version),
    ) -> CommunityDetail:
        return _found(views.community_detail, store, community_id, page, version)

    @router.get("/v1/units/{unit_id}", response_model=UnitDetail, summary="A text unit and its document",
                responses={404: {"model": Problem, "description": "No such text unit visible to this key"}})
    def unit(
        unit_id: str = Path(..., min_length=1, max_length=256),
        store: IndexStore = Depends(get_view),
        version: str | None = Depends(get_index_version),
    ) -> UnitDetail:
        """The text a citation points at, with its document's title and source."""
        return _found(views.unit_detail, store, unit_id, version)

    return router
