"""What a question's answer does as it goes, told to a caller that shows it as it comes.

The query methods stay plain functions returning an `Answer`; a caller that wants to follow one
(the service's stream) enters `observing(sink)` around `QueryEngine.ask`, and the methods tell
the sink, through the helpers here, when:

- `start`: the method is chosen (after a conversation's rewrite and the auto router);
- `context`: the context the answer will be written from is ready, with its citations (basic and
  local: before the model is called; global and DRIFT: before the reduce call);
- `progress`: a batch of model calls (ratings, map, DRIFT primer and follow-ups) has a result;
- `token`: a piece of the final answer's text has come from the model.

Without a sink every helper returns at once, so the methods pay nothing for being observable.
The sink is a contextvar, like llm.base.deadline, so it reaches the model client's threads.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Sequence

__all__ = ["Sink", "observing", "observed", "emit", "emit_context", "emit_token", "stage_of", "citation_row"]

# (kind, data): kind is start, context, progress or token; data plain JSON values.
Sink = Callable[[str, dict[str, Any]], None]

_SINK: ContextVar[Sink | None] = ContextVar("corpusgraph_query_events", default=None)


@contextmanager
def observing(sink: Sink | None) -> Iterator[None]:
    """Events of the questions answered inside the block go to `sink` (None: nowhere)."""
    handle = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(handle)


def observed() -> bool:
    """Whether a sink is listening (the final answer is then streamed from the model)."""
    return _SINK.get() is not None


def emit(kind: str, data: dict[str, Any]) -> None:
    sink = _SINK.get()
    if sink is not None:
        sink(kind, data)


def emit_token(text: str) -> None:
    if text:
        emit("token", {"text": text})


def citation_row(store: Any, unit_id: str, tag: str | None = None) -> dict[str, Any] | None:
    """A unit as a citation (answer.Citation's fields, with the tag the context gave it, [U3] in
    basic and local search, and, where the unit row has them, its page and section); None for a
    unit the store lacks."""
    unit = store.units.get(unit_id)
    if unit is None:
        return None
    doc = store.docs.get(unit["doc_id"]) or {}
    row = {"tag": tag, "unit_id": unit_id, "doc_id": unit["doc_id"], "title": doc.get("title") or "",
           "source_uri": doc.get("source_uri") or ""}
    for extra in ("page_start", "page_end", "section"):
        if unit.get(extra) is not None:
            row[extra] = unit.get(extra)
    return row


def emit_context(store: Any, unit_ids: Sequence[str], tagged: bool, context_tokens: int,
                 coverage: dict[str, Any] | None = None) -> None:
    """The context is ready: its units as citations (tagged U1.. when the prompt tags them)."""
    if _SINK.get() is None:
        return
    # The tag is the unit's place in the context, counted before any unit the store lacks is left out.
    rows = [citation_row(store, u, f"U{i}" if tagged else None) for i, u in enumerate(unit_ids, 1)]
    data: dict[str, Any] = {"citations": [r for r in rows if r is not None], "context_tokens": context_tokens}
    if coverage is not None:
        data["coverage"] = coverage
    emit("context", data)


def stage_of(request_id: str) -> str:
    """The step a model request belongs to, from the id its method gave it (rate-<community>,
    map-<i>, drift-primer, drift-<round>-<i>, ...): never the id itself, which may name a row."""
    head, _, rest = request_id.partition("-")
    if head == "drift":
        return "primer" if rest == "primer" else "follow_up"
    return head
