"""Request dependencies: the service's settings (the config's serve section), the loaded engine,
the caller and what the caller may see.

Routes reach app state only through these, so a test can swap any of them with
`app.dependency_overrides[...]`. Every /v1 route takes `get_view`: the index as the caller's
access domains allow (corpusgraph.query.access), so no route can read the full store by mistake.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fastapi import Depends, Header, HTTPException, Request, Response, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from corpusgraph.config import ServeSection
from corpusgraph.query.engine import QueryEngine
from corpusgraph.query.store import IndexStore
from serving.engine import EngineHolder, Loaded
from serving.keys import ApiKeys, key_domains
from serving.limits import RateLimiter

__all__ = ["Caller", "get_settings", "get_holder", "get_loaded", "get_engine", "get_index_version", "require_api_key",
           "get_view"]

# auto_error=False: a missing header is not an error when the service has no keys, and when it
# has keys the 401 below names both ways to send one.
_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <key>`, when the service has keys.")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="`X-API-Key: <key>`, the same keys.")


@dataclass(frozen=True)
class Caller:
    """Who is asking: the key's name (for logs) and the domains it may read (None: all)."""

    name: str
    domains: frozenset[str] | None


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
    accepted: ApiKeys = request.app.state.keys
    if not accepted:
        caller = Caller("anonymous", None)  # no keys configured: local use only (see ApiKeys)
    else:
        offered = [k for k in (bearer.credentials if bearer else None, header_key) if k]
        keys = [k for k in (accepted.find(o) for o in offered) if k is not None]
        if not keys:
            why = "wrong API key" if offered else "missing API key"
            raise HTTPException(
                401,
                detail=f"{why}: send `Authorization: Bearer <key>` or `X-API-Key: <key>`",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if len({k.name for k in keys}) > 1:
            raise HTTPException(401, detail="two different API keys sent; send one",
                                 headers={"WWW-Authenticate": "Bearer"})
        caller = Caller(keys[0].name, key_domains(keys[0]))
    wait = request.app.state.limiter.take(caller.name)
    if wait > 0:
        raise HTTPException(429, detail="rate limit of this API key reached (the service's rate_limit_per_s); "
                            "retry after the Retry-After seconds", headers={"Retry-After": RateLimiter.retry_after(wait)})
    if narrow is None:
        return caller
    wanted = frozenset(d.strip() for d in narrow.split(",") if d.strip())
    if not wanted:
        raise HTTPException(422, detail="X-Access-Domains names no domain; leave the header out to use all the key's")
    refused = sorted(wanted - caller.domains) if caller.domains is not None else []
    if refused:
        raise HTTPException(403, detail=f"this API key may not read domain(s) {', '.join(refused)} (X-Access-Domains)")
    return Caller(caller.name, wanted)


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
