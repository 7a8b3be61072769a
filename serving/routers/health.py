"""Liveness, readiness and metrics, for load balancers, Kubernetes probes and Prometheus.

/healthz says the process answers; /readyz says whether it can answer questions yet; /metrics
is the Prometheus exposition. None needs an API key: probes and scrapers carry none, and none
shows anything from the corpus (row counts and request figures only).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from serving.deps import get_holder
from serving.engine import EngineHolder

__all__ = ["router"]

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["loading", "ready", "failed"]
    tables: dict[str, int] = Field(default_factory=dict, description="Rows loaded, by Delta table name.")
    report_levels: list[int] = Field(default_factory=list, description="Community levels that have reports.")
    load_seconds: float | None = None
    index_version: str | None = Field(None, description="The index version answering now (X-Index-Version).")
    table_versions: dict[str, int] = Field(default_factory=dict, description="Delta version of each table loaded.")
    error: str | None = Field(None, description="Why loading failed; the log has the traceback.")
    basic: str | None = Field(None, description="Basic search's ranking (query.basic: dense or hybrid, with "
                              "'+rerank' and the reranker's backend where one is configured); local search keeps "
                              "its first places.")


def _basic(engine) -> str | None:
    section = getattr(engine, "section", None)
    if section is None or not hasattr(section, "basic"):
        return None
    if section.basic == "hybrid" and section.rerank.backend != "none":
        return f"hybrid+rerank ({section.rerank.backend})"
    return section.basic


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="The index is loaded and questions can be answered",
    responses={503: {"model": Readiness, "description": "Still loading, or loading failed"}},
)
async def readyz(holder: EngineHolder = Depends(get_holder)):
    loaded = holder.current
    store = getattr(holder.engine, "store", None)
    body = Readiness(
        index_version=getattr(loaded, "version", None),
        table_versions=getattr(loaded, "versions", None) or {},
        status=holder.status,
        tables=holder.table_counts(),
        report_levels=store.report_levels() if store is not None else [],
        load_seconds=holder.load_seconds,
        error=holder.error,
        basic=_basic(holder.engine),
    )
    if holder.engine is None:
        # Retry-After only while loading: a failed load does not fix itself.
        headers = {"Retry-After": "5"} if holder.status == "loading" else None
        return JSONResponse(body.model_dump(), status_code=503, headers=headers)
    return body


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text exposition format"}},
)
async def metrics(request: Request) -> Response:
    """Requests by route and status with latency histograms, answers' tokens, dollars and LLM
    calls by method, and the index load time."""
    return request.app.state.metrics.exposition()
