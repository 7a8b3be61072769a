"""Request dependencies: the settings, the loaded engine, and the API-key check.

Routes reach app state only through these, so a test can swap any of them with
`app.dependency_overrides[...]`.
"""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from corpusgraph.query.engine import QueryEngine
from serving.engine import EngineHolder
from serving.settings import ServiceSettings

__all__ = ["get_settings", "get_holder", "get_engine", "require_api_key"]

# auto_error=False: a missing header is not an error when the service has no keys, and when it
# has keys the 401 below names both ways to send one.
_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <key>`, when the service has keys.")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="`X-API-Key: <key>`, the same keys.")


def get_settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


def get_holder(request: Request) -> EngineHolder:
    return request.app.state.engine


def get_engine(request: Request) -> QueryEngine:
    holder: EngineHolder = request.app.state.engine
    if holder.engine is None:
        # 503 with Retry-After: the standard "not yet" a client or proxy knows how to wait on.
        raise HTTPException(503, detail=holder.not_ready_message(), headers={"Retry-After": "5"})
    return holder.engine


def require_api_key(
    request: Request,
    bearer: HTTPAuthorizationCredentials | None = Security(_bearer),
    header_key: str | None = Security(_api_key),
) -> None:
    keys = request.app.state.settings.key_values()
    if not keys:
        return  # no keys configured: local use only (see ServiceSettings.api_keys)
    offered = [k for k in (bearer.credentials if bearer else None, header_key) if k]
    # compare_digest on every pair: the time taken does not tell a caller how much of a key matched.
    if any(hmac.compare_digest(o.encode(), k.encode()) for o in offered for k in keys):
        return
    why = "wrong API key" if offered else "missing API key"
    raise HTTPException(
        401,
        detail=f"{why}: send `Authorization: Bearer <key>` or `X-API-Key: <key>`",
        headers={"WWW-Authenticate": "Bearer"},
    )
