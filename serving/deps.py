"""Request dependencies: the service's settings (the config's serve section), the loaded engine,
the caller and what the caller may see.

Routes reach app state only through these, so a test can swap any of them with
`app.dependency_overrides[...]`. Every /v1 route takes `get_view`: the index as the caller's
access domains allow (corpusgraph.query.access), so no route can read the full store by mistake.
"""

from __future__ import annotations

import asyncio

from fastapi import Depends, Header, HTTPException, Request, Response, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from corpusgraph.config import ServeSection
from corpusgraph.query.engine import QueryEngine
from corpusgraph.query.store import IndexStore
from serving.auth import AuthError, Caller, authenticate
from serving.engine import EngineHolder, Loaded

__all__ = ["Caller", "get_settings", "get_holder", "get_loaded", "get_engine", "get_index_version", "require_api_key",
           "get_view"]

# auto_error=False: a missing header is not an error when the service has no keys, and when it
# has keys the 401 below names both ways to send one.
_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <key>`, when the service has keys.")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="`X-API-Key: <key>`, the same keys.")


def get_settings(request: Request) -> ServeSection:
    return request.app.state.settings


def get_holder(request: Request) -> EngineHolder:
    return request.app.state.engine


def get_loaded(request: Request, response: Response) -> Loaded:
    """The engine and index version this request answers from, taken once (FastAPI caches a
    dependency per request), so a reload during the request does not change what it reads.
    The response names the version in `X-Index-Version`."""
    holder: EngineHolder = request.app.state.engine
    loaded = holder.current
    if loaded is None:
        # 503 with Retry-After: the standard "not yet" a client or proxy knows how to wait on.
        raise HTTPException(503, detail=holder.not_ready_message(), headers={"Retry-After": "5"})
    if loaded.version is not None:
        response.headers["X-Index-Version"] = loaded.version
    return loaded


def get_engine(loaded: Loaded = Depends(get_loaded)) -> QueryEngine:
    return loaded.engine


def get_index_version(loaded: Loaded = Depends(get_loaded)) -> str | None:
    return loaded.version


def require_api_key(
    request: Request,
    bearer: HTTPAuthorizationCredentials | None = Security(_bearer),
    header_key: str | None = Security(_api_key),
    narrow: str | None = Header(
        None, alias="X-Access-Domains",
        description="Comma-separated domains to narrow this request to; each must be one the key may read (else 403).",
    ),
) -> Caller:
    try:
        return authenticate(request.app.state.keys, request.app.state.limiter,
                            [bearer.credentials if bearer else None, header_key], narrow)
    except AuthError as exc:
        raise HTTPException(exc.status, detail=exc.detail, headers=exc.headers or None) from None


async def get_view(
    request: Request,
    caller: Caller = Depends(require_api_key),
    engine: QueryEngine = Depends(get_engine),
) -> IndexStore:
    """The index as this caller may see it; built once per domain set and kept (LoadedIndex.view).

    The views of configured keys are built at start-up; one for a new X-Access-Domains set is a
    pass over every table, so it runs on a thread under the request timeout (504 past it).
    """
    timeout = request.app.state.settings.request_timeout_s
    try:
        view = await asyncio.wait_for(asyncio.to_thread(engine.index.view, caller.domains), timeout)
        return view.store
    except asyncio.TimeoutError:
        raise HTTPException(504, detail=f"the index view for these domains took over {timeout:g} s "
                            "(the service's request_timeout_s) to build; retry shortly") from None
