"""What the service refuses before any route runs, and what its error bodies may say.

- `BodyLimit`, an ASGI middleware: a body over `max_body_bytes` gets 413 before anything parses
  it, whether its Content-Length says so or it streams in without one (its bytes are counted and
  reading stops at the limit); a body that does not arrive within `body_timeout_s` gets 408.
- `RateLimiter`: one token bucket per API key; an empty bucket is a 429 with Retry-After.
- Error handlers: a 422 names the fields and what is wrong with them but never repeats what was
  sent (FastAPI's default copies the whole input into `detail[].input`), and an unexpected error
  is a 500 with a request id, its traceback in the log only.

Every error body is `{"detail": ...}`, the shape FastAPI's own errors have.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
import uuid
from typing import Any, Awaitable, Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

__all__ = ["BodyLimit", "RateLimiter", "validation_error", "internal_error"]

log = logging.getLogger(__name__)

_MAX_ERRORS = 20  # a body with a thousand bad fields gets the first twenty
_MAX_LOC_CHARS = 64  # an unknown field's name is the caller's text: cut long ones short

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


async def _send_problem(send: Send, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           (b"connection", b"close")]  # the unread rest of the body must not be taken for a next request
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Reads the whole body (at most max_bytes of it) before the app sees the request.

    Buffering is what makes the limit hold for chunked bodies too: the app is only called with
    a body already known to fit, so no parser ever sees a byte past the limit.
    """

    def __init__(self, app, max_bytes: int, timeout_s: float):
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                return await _send_problem(send, 400, "Content-Length is not a number")
            if size > self.max_bytes:
                return await self._too_large(send)
        elif b"transfer-encoding" not in headers:
            return await self.app(scope, receive, send)  # no body at all (a GET)
        body = await self._read(receive)
        if isinstance(body, int):
            if body == 413:
                return await self._too_large(send)
            return await _send_problem(send, 408, f"the request body did not arrive within {self.timeout_s:g} s "
                                       "(the service's body_timeout_s)")
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()  # what follows the body: a disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes | int:
        """The body, or 413 (over the limit) or 408 (too slow) as an int."""
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.0))
            except asyncio.TimeoutError:
                return 408
            if message["type"] != "http.request":  # the client went away; the app sees an empty body
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return 413
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _too_large(self, send: Send) -> None:
        await _send_problem(send, 413, f"request body over {self.max_bytes} bytes (the service's max_body_bytes)")


class RateLimiter:
    """Token buckets by caller: `rate` tokens a second, at most `burst` saved up; 0 rate: no limit.

    Buckets are kept per key name, so their number is bounded by the configured keys.
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, when counted)
        self._lock = threading.Lock()  # dependencies run on worker threads

    def take(self, who: str) -> float:
        """0.0 if `who` may go ahead now (a token is spent), else the seconds until a token is there."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            now = self.clock()
            tokens, then = self._buckets.get(who, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            if tokens >= 1.0:
                self._buckets[who] = (tokens - 1.0, now)
                return 0.0
            self._buckets[who] = (tokens, now)
            return (1.0 - tokens) / self.rate

    @staticmethod
    def retry_after(wait_s: float) -> str:
        """Retry-After takes whole seconds; round up so that a client waiting that long gets in."""
        return str(max(1, math.ceil(wait_s)))


def _short(part: Any) -> Any:
    if isinstance(part, str) and len(part) > _MAX_LOC_CHARS:
        return part[:_MAX_LOC_CHARS] + "..."
    return part


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming each bad field and what is wrong with it; the input and context are left out."""
    errors = [
        {"loc": [_short(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))[:200], "type": e.get("type")}
        for e in exc.errors()[:_MAX_ERRORS]
    ]
    return JSONResponse({"detail": errors}, status_code=422)


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """500 with an id to find the traceback by in the log; the exception's text may quote index
    content or name files, so none of it goes to the caller."""
    request_id = uuid.uuid4().hex[:16]
    log.error("unhandled error %s on %s %s", request_id, request.method, request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal error; the service log has the details", "request_id": request_id},
                        status_code=500, headers={"X-Request-ID": request_id})
