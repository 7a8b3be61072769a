"""POST /admin/reload: load the index's newest version and swap it in (serving.engine.EngineHolder).

Off unless the service has an admin key (then 404, as for a route that does not exist). The
load runs on a worker thread beside the requests being answered; they keep the version they
started with, and later ones get the new one.
"""

from __future__ import annotations

import asyncio
import hmac
import time

from fastapi import APIRouter, Depends, Header, HTTPException, Request
from pydantic import BaseModel, Field

from serving.deps import get_holder
from serving.engine import EngineHolder
from serving.routers.query import Problem
from serving.versions import IndexChanging

__all__ = ["router", "Reloaded"]

router = APIRouter(tags=["admin"])


class Reloaded(BaseModel):
    index_version: str | None = Field(description="The version served from now on.")
    previous_version: str | None
    changed: bool = Field(description="False when the warehouse still held the version being served.")
    table_versions: dict[str, int]
    seconds: float


def _check_admin(request: Request, key: str | None) -> None:
    admin = request.app.state.settings.admin_key
    if admin is None:
        raise HTTPException(404, detail="Not Found")
    if key is None or not hmac.compare_digest(key.encode(), admin.get_secret_value().encode()):
        raise HTTPException(401, detail="missing or wrong admin key: send `X-Admin-Key: <key>`")


@router.post("/admin/reload", response_model=Reloaded, summary="Serve the index's newest version",
             responses={401: {"model": Problem}, 404: {"model": Problem, "description": "No admin key configured"},
                        409: {"model": Problem, "description": "A run is writing the index, or it is not loaded"}})
async def reload(
    request: Request,
    x_admin_key: str | None = Header(None, description="The service's admin key."),
    holder: EngineHolder = Depends(get_holder),
) -> Reloaded:
    _check_admin(request, x_admin_key)
    before = holder.current
    begin = time.monotonic()
    try:
        now, changed = await asyncio.to_thread(holder.reload)
    except IndexChanging as exc:
        raise HTTPException(409, detail=str(exc), headers={"Retry-After": "30"}) from None
    return Reloaded(index_version=now.version, previous_version=getattr(before, "version", None), changed=changed,
                    table_versions=now.versions, seconds=round(time.monotonic() - begin, 3))
