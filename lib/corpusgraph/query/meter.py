"""The per-question meter every model call of an answer goes through.

It keeps each result, so the engine adds up tokens and dollars in one place whatever the method
did, and it is where a question's calls meet its caller:

- with a CancelToken set (llm.streaming.cancellable: the service's client went away) a batch is
  raced against it, and calls not yet sent are never sent;
- with an event sink set (query/events.py) a batch tells `progress` as each result comes, and
  `stream` hands the final answer's text on piece by piece, from a model that streams, or in one
  piece from one that does not;
- with a call recorder set (query/tracing.py: traces are on) each call is reported as its result
  comes, with its start and end.

Without any of them, `complete` is the model's own call, unchanged.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Sequence

from corpusgraph.llm.base import ChatModel, ChatRequest, ChatResult
from corpusgraph.llm.streaming import CANCELLED, Cancelled, StreamingChatModel, current_cancel, race_cancel
from corpusgraph.query.events import emit, observed, stage_of
from corpusgraph.query.tracing import recorder

__all__ = ["MeteredChat"]

# A follow-up's rewrite comes before the `start` event (which says what it was rewritten to), so it
# is not told as progress.
_UNTOLD = {"rewrite"}


class MeteredChat:
    """Passes requests through and keeps every result."""

    def __init__(self, chat: ChatModel):
        self._chat = chat
        self.model = chat.model
        self.results: list[ChatResult] = []

    def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        requests = list(requests)
        token = current_cancel()
        followed = token is not None or observed() or recorder() is not None
        if token is not None and token.cancelled:
            results = _cancelled(requests)
        elif followed and hasattr(self._chat, "acomplete") and requests:
            results = self._raced(requests, token)
        else:
            results = self._chat.complete(requests)
            if observed() and requests:
                _progress(requests, results)
            for request, result in zip(requests, results):
                self._record(request, result)
        self.results.extend(results)
        return results

    def _record(self, request: ChatRequest, result: ChatResult, end_ns: int | None = None) -> None:
        rec = recorder()
        if rec is None:
            return
        end_ns = end_ns or time.time_ns()
        try:
            rec.record_call(self.model, stage_of(request.id), request, result,
                            end_ns - int(result.seconds * 1e9), end_ns)
        except Exception:  # a tracing failure must never cost an answer
            pass

    def _raced(self, requests: list[ChatRequest], token) -> list[ChatResult]:
        from corpusgraph.llm.http_common import run_blocking

        totals = Counter(stage_of(r.id) for r in requests)
        done: Counter[str] = Counter()

        async def each(i: int, result: ChatResult) -> None:
            self._record(requests[i], result)
            stage = stage_of(requests[i].id)
            done[stage] += 1
            if stage not in _UNTOLD:
                emit("progress", {"stage": stage, "done": done[stage], "total": totals[stage]})

        async def batch() -> list[ChatResult]:
            return await race_cancel(self._chat.acomplete(requests, each=each), token)

        try:
            return run_blocking(batch, "corpusgraph-query-batch")
        except Cancelled:
            return _cancelled(requests)

    def stream(self, request: ChatRequest, on_delta: Callable[[str], None]) -> ChatResult:
        """One request, its text handed to `on_delta` as it comes (in one piece from a model that
        cannot stream)."""
        token = current_cancel()
        if token is not None and token.cancelled:
            result = _cancelled([request])[0]
        elif isinstance(self._chat, StreamingChatModel):
            result = self._chat.stream(request, on_delta)
        else:
            result = self._chat.complete([request])[0]
            if result.text:
                on_delta(result.text)
        self._record(request, result)
        self.results.append(result)
        return result


def _cancelled(requests: Sequence[ChatRequest]) -> list[ChatResult]:
    return [ChatResult(id=r.id, text=None, error=CANCELLED) for r in requests]


def _progress(requests: Sequence[ChatRequest], results: Sequence[ChatResult]) -> None:
    """A batch answered whole: one progress event per stage, at its end."""
    totals = Counter(stage_of(r.id) for r in requests)
    for stage, total in totals.items():
        if stage not in _UNTOLD:
            emit("progress", {"stage": stage, "done": total, "total": total})
