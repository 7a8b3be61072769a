"""Streamed answers and cancelled calls: what a chat client needs beyond `complete`.

- `StreamingChatModel`: a ChatModel that can also hand over an answer's text as the model writes
  it (`stream(request, on_delta)`, blocking, returns the whole result at the end).
- `CancelToken` and `cancellable(token)`: like `deadline()` (base.py), a context every chat call
  made inside it obeys; once the token is cancelled (the service's client went away), a request
  not yet sent is not sent, and one on the wire is abandoned, its connection closed, which makes
  a streaming server (llama.cpp, vLLM) stop generating.
- `StreamedResult`: a ChatResult that says whether its token counts were reported by the server
  or estimated (llama-cpp-python's server sends no usage on a stream).
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator, Protocol, Sequence, TypeVar, runtime_checkable

from corpusgraph.llm.base import ChatRequest, ChatResult

__all__ = ["CancelToken", "Cancelled", "cancellable", "current_cancel", "race_cancel", "StreamedResult",
           "StreamingChatModel", "CANCELLED"]

_T = TypeVar("_T")
CANCELLED = "cancelled: the caller went away (llm.streaming.CancelToken)"
_CANCEL: ContextVar["CancelToken | None"] = ContextVar("corpusgraph_llm_cancel", default=None)


class Cancelled(Exception):
    """Raised out of `race_cancel` when the token fired first."""


class CancelToken:
    """Set once, from any thread; event loops waiting on it (race_cancel) wake at once."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            # The waiter belongs to another thread's loop; a loop already closed has nobody waiting.
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:
                pass

    def _waiter(self) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._lock:
            if self._event.is_set():
                fut.set_result(None)
            else:
                self._waiters.append((loop, fut))
        return fut

    def _forget(self, fut: asyncio.Future) -> None:
        with self._lock:
            self._waiters = [(lp, f) for lp, f in self._waiters if f is not fut]


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


@contextmanager
def cancellable(token: CancelToken | None) -> Iterator[None]:
    """Chat calls inside the block stop when `token` is cancelled (None: never)."""
    handle = _CANCEL.set(token)
    try:
        yield
    finally:
        _CANCEL.reset(handle)


def current_cancel() -> CancelToken | None:
    return _CANCEL.get()


async def race_cancel(awaitable: Awaitable[_T], token: CancelToken | None) -> _T:
    """`awaitable`'s result, or Cancelled once `token` fires first (the awaitable is then cancelled
    and awaited, so what it holds, a lease or a connection, is given back before this returns)."""
    if token is None:
        return await awaitable
    if token.cancelled:
        if asyncio.iscoroutine(awaitable):
            awaitable.close()  # never started: nothing to give back
        raise Cancelled(CANCELLED)
    work = asyncio.ensure_future(awaitable)
    waiter = token._waiter()
    try:
        await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        token._forget(waiter)
    if work.done():
        return work.result()
    work.cancel()
    await asyncio.gather(work, return_exceptions=True)
    raise Cancelled(CANCELLED)


@dataclass
class StreamedResult(ChatResult):
    """A streamed answer. usage_estimated: the server reported no usage, so tokens_in and
    tokens_out were counted here (corpusgraph.tokens) and are estimates; ttft_s: seconds from
    the request to the first piece of text (None when none came)."""

    usage_estimated: bool = False
    ttft_s: float | None = None


@runtime_checkable
class StreamingChatModel(Protocol):
    model: str

    def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]: ...

    def stream(self, request: ChatRequest, on_delta: Callable[[str], None]) -> ChatResult:
        """Blocking: `on_delta(text)` for each piece of the answer as it comes, in order, then the
        whole result (its text is the pieces joined). A cached answer comes as one piece. A failure
        after some pieces returns those pieces' text with `error` set."""
        ...
