"""A question answered as server-sent events (POST /v1/query with `"stream": true`).

The engine's `ask` runs on the app's worker threads as for a plain request; its events
(query/events.py) cross to the event loop through a queue and go out as they come:

    event: start     the method chosen (and why), the question as asked and as rewritten
    event: context   the context's citations, before the model is called (basic, local), or
                     before the reduce call (global, DRIFT)
    event: progress  global and DRIFT: a rating, map, primer or follow-up batch's results so far
    event: token     a piece of the answer's text as the model writes it
    event: done      the whole answer, exactly as the JSON route returns it
    event: error     a failure after the response began: status (400, 503, 504, 500) and detail,
                     worded as the JSON route's error would be

Each event has an `id` (1, 2, ...) and one line of JSON data (WHATWG HTML, "Server-sent events").
A comment line goes out after `stream_keepalive_s` of silence, so proxies with idle timeouts keep
the connection while global search maps. The response says `Cache-Control: no-cache` and
`X-Accel-Buffering: no` (nginx would otherwise buffer the stream); a compressing middleware in
front of it would buffer it too.

When the client goes away, Starlette cancels the generator: its `finally` cancels the question's
CancelToken, so no model call starts after that and the one streaming is closed (which stops a
streaming server's generation), and a question still queued for a worker is dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
import uuid
from concurrent.futures import Executor
from typing import Any, AsyncIterator, Callable

from starlette.responses import StreamingResponse

from corpusgraph.llm.base import deadline
from corpusgraph.llm.streaming import CancelToken, cancellable
from corpusgraph.query.answer import Answer
from corpusgraph.query.events import Sink
from corpusgraph.query.store import IndexMissingError
from serving.metrics import ServiceMetrics

__all__ = ["sse_event", "stream_answer", "SSE_HEADERS"]

log = logging.getLogger(__name__)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_END = "_end"


def sse_event(kind: str, data: dict[str, Any], event_id: int) -> bytes:
    """One event: its id, its kind, its data as one line of JSON, and the blank line that ends it."""
    return f"id: {event_id}\nevent: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def stream_answer(executor: Executor, work: Callable[[Sink], Answer], *, timeout_s: float, keepalive_s: float,
                  metrics: ServiceMetrics, finish: Callable[[Answer], dict[str, Any]],
                  start_extra: dict[str, Any] | None = None, timeout_detail: str = "") -> StreamingResponse:
    """The response streaming `work(sink)`'s events, then `finish(answer)` as the done event."""
    return StreamingResponse(_events(executor, work, timeout_s, keepalive_s, metrics, finish, start_extra or {},
                                     timeout_detail),
                             media_type="text/event-stream", headers=SSE_HEADERS)


async def _events(executor: Executor, work: Callable[[Sink], Answer], timeout_s: float, keepalive_s: float,
                  metrics: ServiceMetrics, finish: Callable[[Answer], dict[str, Any]], start_extra: dict[str, Any],
                  timeout_detail: str) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    token = CancelToken()
    begin = time.perf_counter()
    until = time.monotonic() + timeout_s

    def sink(kind: str, data: dict[str, Any]) -> None:  # on a worker thread
        loop.call_soon_threadsafe(queue.put_nowait, (kind, data))

    def run() -> Answer:
        with deadline(until), cancellable(token):
            return work(sink)

    # The context crosses to the worker thread (run_in_executor does not copy it): the trace's
    # current span goes with the question.
    future = loop.run_in_executor(executor, contextvars.copy_context().run, run)
    future.add_done_callback(lambda _f: queue.put_nowait((_END, None)))
    method, outcome, seen = "unknown", "disconnected", 0
    firsts: dict[str, bool] = {}
    try:
        while True:
            left = until - time.monotonic()
            if left <= 0:
                outcome = "timeout"
                yield sse_event("error", {"status": 504, "detail": timeout_detail}, seen + 1)
                return
            try:
                kind, data = await asyncio.wait_for(queue.get(), min(keepalive_s, left))
            except asyncio.TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if kind == _END:
                error = _failure(future)
                if error is not None:
                    outcome = "error"
                    yield sse_event("error", error, seen + 1)
                    return
                answer = future.result()
                metrics.observe_answer(answer, time.perf_counter() - begin)
                outcome = "error" if answer.error else "completed"
                yield sse_event("done", finish(answer), seen + 1)
                return
            if kind == "start":
                method = data.get("method") or method
                data = {**data, **start_extra}
            _observe_first(metrics, firsts, kind, method, time.perf_counter() - begin)
            seen += 1
            yield sse_event(kind, data, seen)
    finally:
        token.cancel()  # finished, timed out or the client left: no model call after this
        future.cancel()  # still queued for a worker: dropped
        metrics.streams.labels(method, outcome).inc()


def _observe_first(metrics: ServiceMetrics, firsts: dict[str, bool], kind: str, method: str, seconds: float) -> None:
    for name, histogram, wanted in (("event", metrics.first_event, None), ("context", metrics.first_context, "context"),
                                    ("token", metrics.first_token, "token")):
        if name not in firsts and wanted in (None, kind):
            firsts[name] = True
            histogram.labels(method).observe(seconds)


def _failure(future: asyncio.Future) -> dict[str, Any] | None:
    """The error event for a question that raised, worded as the JSON route words it; None if it
    returned an answer."""
    exc = future.exception()
    if exc is None:
        return None
    if isinstance(exc, IndexMissingError):
        return {"status": 503, "detail": str(exc)}
    if isinstance(exc, ValueError):  # the engine's own checks, e.g. a level it cannot use
        return {"status": 400, "detail": str(exc)}
    request_id = uuid.uuid4().hex[:16]
    log.error("unhandled error %s in a streamed answer", request_id, exc_info=exc)
    return {"status": 500, "detail": "internal error; the service log has the details", "request_id": request_id}
