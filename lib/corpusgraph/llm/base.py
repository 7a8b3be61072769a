"""The small LLM protocol every stage and query uses.

Batch in, batch out: `ChatModel.complete` returns one `ChatResult` per `ChatRequest`, in
order; a failed request is a result with `error` set, never an exception that loses the batch.

`deadline(at)` bounds every chat call made inside it (in this thread, and in the event loops it
starts) by a time.monotonic() instant: past it a request is not sent or retried but becomes an
error result at once. The query service sets it per question, so a question it has stopped
waiting for (a 504) stops spending model calls and its worker thread, instead of retrying a
failing model in the background while new questions queue behind it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["ChatRequest", "ChatResult", "ChatModel", "Embedder", "Usage", "deadline", "seconds_left"]

_DEADLINE: ContextVar[float | None] = ContextVar("corpusgraph_llm_deadline", default=None)


@contextmanager
def deadline(at: float | None) -> Iterator[None]:
    """Chat calls inside the block give up at time.monotonic() == `at` (None: no limit)."""
    token = _DEADLINE.set(at)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def seconds_left() -> float | None:
    """Seconds to the innermost deadline (negative once past), or None without one."""
    at = _DEADLINE.get()
    return None if at is None else at - time.monotonic()


@dataclass(frozen=True)
class ChatRequest:
    id: str  # the caller's key for this request (a unit id, a community id, ...)
    messages: tuple[dict[str, str], ...]  # OpenAI chat messages: {"role": ..., "content": ...}
    max_tokens: int
    temperature: float = 0.0
    json_schema: dict[str, Any] | None = None  # when set, the answer is constrained to this schema


@dataclass
class ChatResult:
    id: str
    text: str | None  # None when error is set
    tokens_in: int = 0
    tokens_out: int = 0
    cached: bool = False  # answered from the response cache: no call was paid for
    error: str | None = None
    seconds: float = 0.0
    finish_reason: str | None = None  # "stop", "length", ... as the server said
    # A refused request: the HTTP status and the provider's error code and parameter, where given
    # (the run's failure summary groups by them; doctor maps them to the setting that fixes it).
    status: int | None = None
    error_code: str | None = None
    error_param: str | None = None
    # Sent a second time with llm.reasoning_retry_tokens: the first answer's limit went on hidden
    # reasoning (RequestShaper.widens); tokens_in/out count both calls.
    widened: bool = False


@runtime_checkable
class ChatModel(Protocol):
    model: str

    def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]: ...


@runtime_checkable
class Embedder(Protocol):
    model: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # float32, shape (len(texts), dim), L2-normalised
        ...


@dataclass
class Usage:
    """Accounting for one stage of one run (a row of `llm_calls`)."""

    calls: int = 0  # requests sent to a server (cache hits excluded)
    tokens_in: int = 0
    tokens_out: int = 0
    cache_hits: int = 0
    errors: int = 0
    usd: float = 0.0
    seconds: float = 0.0

    def merge(self, other: "Usage") -> None:
        self.calls += other.calls
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.cache_hits += other.cache_hits
        self.errors += other.errors
        self.usd += other.usd
        self.seconds += other.seconds
