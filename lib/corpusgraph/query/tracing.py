"""Where a question's model calls are reported for tracing, without the query side knowing how.

The service (serving/telemetry.py) enters `recording(recorder)` around a question when traces
are on; the meter (query/meter.py) then tells the recorder of every model call as its result
comes, with when it started and ended. Nothing here imports OpenTelemetry, and without a
recorder nothing is recorded or timed.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Protocol

from corpusgraph.llm.base import ChatRequest, ChatResult

__all__ = ["CallRecorder", "recording", "recorder"]


class CallRecorder(Protocol):
    def record_call(self, model: str, stage: str, request: ChatRequest, result: ChatResult, start_ns: int,
                    end_ns: int) -> None:
        """One model call (stage: rate, map, reduce, ... from query/events.stage_of), its result
        (tokens, cache hit, error) and its wall-clock span in epoch nanoseconds."""
        ...


_RECORDER: ContextVar[CallRecorder | None] = ContextVar("corpusgraph_query_recorder", default=None)


@contextmanager
def recording(rec: CallRecorder | None) -> Iterator[None]:
    handle = _RECORDER.set(rec)
    try:
        yield
    finally:
        _RECORDER.reset(handle)


def recorder() -> CallRecorder | None:
    return _RECORDER.get()
