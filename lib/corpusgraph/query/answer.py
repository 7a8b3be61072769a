"""What every query method returns, and the small helpers they share.

An `Answer` carries the method used, the citations down to text units and documents, and the
token cost of every LLM call behind it. The helpers are pure (prompt filling, packing text under
a token budget, ordering citations by the tags a model cited) except `ask_once`, the one-request
call that basic, local and the global reduce share, and `answer_over_context`, basic and local
search's last step.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from corpusgraph.llm.base import ChatModel, ChatRequest, ChatResult
from corpusgraph.prompts import render
from corpusgraph.query.coverage import describe
from corpusgraph.query.events import emit_token, observed
from corpusgraph.tokens import count_tokens, truncate_tokens

__all__ = [
    "Citation",
    "locator",
    "Answer",
    "format_answer",
    "fill_prompt",
    "pack_blocks",
    "fit_budget",
    "cited_tags",
    "unique_ordered",
    "citations_for",
    "ask_once",
    "answer_over_context",
    "MIN_PARTIAL_TOKENS",
]

# A block that does not fit is cut to the space left only when that space is worth a reader's
# time; a 10-token scrap of a paragraph tells a small model nothing and costs a tag.
MIN_PARTIAL_TOKENS = 32


@dataclass(frozen=True)
class Citation:
    unit_id: str
    doc_id: str
    source_uri: str
    title: str
    # Where in the file the unit came from (text_units): pages of a PDF, a heading, a slide or an
    # e-mail message; null where the document has none. locator says it in words ("page 3").
    page_start: int | None = None
    page_end: int | None = None
    section: str | None = None
    locator: str = ""


def locator(page_start: int | None, page_end: int | None, section: str | None) -> str:
    """"page 3", "pages 3-4", "section 'Exporting readings'", "slide 4", "message '...' of <date>",
    or a page and a section together; "" when the unit's document has neither."""
    parts = []
    if page_start is not None:
        end = page_end if page_end is not None else page_start
        parts.append(f"page {page_start}" if end == page_start else f"pages {page_start}-{end}")
    if section:
        parts.append(section if section.startswith(("slide ", "message ")) else f"section '{section}'")
    return ", ".join(parts)


@dataclass
class Answer:
    question: str
    answer: str
    method: str
    citations: list[Citation] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    context_tokens: int = 0
    llm_calls: int = 0
    route_reason: str | None = None
    # A follow-up question rewritten to stand on its own (query/conversation.py); the answer was
    # retrieved and written for it. None when the question came without history.
    standalone_question: str | None = None
    error: str | None = None
    # Method-specific facts worth showing a caller (global: level used, map calls, failed map
    # answers, points kept). Plain JSON values only, so to_dict() stays serialisable.
    details: dict[str, Any] = field(default_factory=dict)
    # How much of the index stands behind the answer, counted from the index (query/coverage.py).
    coverage: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_answer(answer: Answer) -> str:
    """Plain text for the shell: the answer, the method, numbered citations, then the cost."""
    lines = [answer.answer.strip() or "(no answer)"]
    if answer.error:
        lines.append(f"Error: {answer.error}")
    lines.append("")
    method = answer.method + (f" ({answer.route_reason})" if answer.route_reason else "")
    lines.append(f"Method: {method}")
    if answer.citations:
        lines.append("Citations:")
        for i, c in enumerate(answer.citations, 1):
            where = f"{c.title or 'untitled'}, {c.source_uri or 'unknown source'}" + (f", {c.locator}" if c.locator else "")
            lines.append(f"[{i}] doc {c.doc_id} ({where}) unit {c.unit_id}")
    lines.extend(describe(answer.coverage))
    lines.append(
        f"Tokens: {answer.tokens_in} in, {answer.tokens_out} out, context {answer.context_tokens}; "
        f"LLM calls: {answer.llm_calls}; cost: ${answer.usd:.4f}"
    )
    return "\n".join(lines)


def fill_prompt(template: str, **values: object) -> str:
    """Fill a query prompt; the one placeholder rule of corpusgraph.prompts (a missing value is
    an error, braces in the data are safe)."""
    return render(template, **values)


def fit_budget(text: str, budget: int) -> str:
    """Cut text to at most `budget` tokens (a last guard after joining counted blocks)."""
    return text if count_tokens(text) <= budget else truncate_tokens(text, max(budget, 0))


def pack_blocks(blocks: Iterable[str], budget: int, sep: str = "\n") -> tuple[list[str], int]:
    """Take blocks in order while they fit `budget` tokens; cut the first one that does not.

    Returns the blocks taken and the tokens they use (each counted with its separator). Blocks are
    ranked by the caller, so packing stops at the first misfit instead of hunting for smaller
    blocks further down: a lower-ranked block never displaces a better one.
    """
    taken: list[str] = []
    used = 0
    for block in blocks:
        cost = count_tokens(block + sep)
        if used + cost <= budget:
            taken.append(block)
            used += cost
            continue
        room = budget - used - count_tokens(sep)
        if room >= MIN_PARTIAL_TOKENS:
            cut = truncate_tokens(block, room)
            taken.append(cut)
            used += count_tokens(cut + sep)
        break
    return taken, used


_TAG = re.compile(r"\b([A-Z])(\d+)\b")


def cited_tags(text: str | None, letter: str) -> list[int]:
    """The numbers of tags like [U3] (or a bare U3) with this letter, in order of first mention."""
    seen: dict[int, None] = {}
    for m in _TAG.finditer(text or ""):
        if m.group(1) == letter:
            seen.setdefault(int(m.group(2)), None)
    return list(seen)


def unique_ordered(preferred: Sequence[str], rest: Sequence[str], limit: int | None = None) -> list[str]:
    """Ids with `preferred` first, then `rest`, each once; cut at `limit`."""
    out: dict[str, None] = {}
    for item in list(preferred) + list(rest):
        out.setdefault(item, None)
    ids = list(out)
    return ids if limit is None else ids[:limit]


def citations_for(unit_ids: Sequence[str], units: Mapping[str, Mapping], docs: Mapping[str, Mapping]) -> list[Citation]:
    """Citations for known units; a unit whose document row is missing keeps its doc id."""
    cites = []
    for unit_id in unit_ids:
        unit = units.get(unit_id)
        if unit is None:
            continue
        doc = docs.get(unit["doc_id"]) or {}
        pages = unit.get("page_start"), unit.get("page_end"), unit.get("section")
        cites.append(Citation(unit_id, unit["doc_id"], doc.get("source_uri") or "", doc.get("title") or "", *pages,
                              locator=locator(*pages)))
    return cites


def ask_once(chat: ChatModel, request_id: str, prompt: str, max_tokens: int) -> ChatResult:
    """One user-message request; the result, error included, as the model layer returned it.

    Every final answer of every method is this call; with a caller following the answer
    (query/events.py) its text is streamed to it as the model writes it."""
    request = ChatRequest(id=request_id, messages=({"role": "user", "content": prompt},), max_tokens=max_tokens)
    stream = getattr(chat, "stream", None)
    if stream is not None and observed():
        return stream(request, emit_token)
    results = chat.complete([request])
    if len(results) != 1:  # the protocol promises one result per request; say so if broken
        return ChatResult(id=request_id, text=None, error=f"model returned {len(results)} results for 1 request")
    return results[0]


def answer_over_context(chat: ChatModel, method: str, question: str, context: str, prompt: str, max_tokens: int,
                        store: Any, cite: Callable[[str | None], Sequence[str]], **fields: Any) -> Answer:
    """One call over a context, the answer citing the units `cite` finds behind the model's text
    (its tags first, then the context's other units, as the method orders them)."""
    result = ask_once(chat, method, fill_prompt(prompt, context=context, question=question), max_tokens)
    return Answer(question=question, answer=(result.text or "").strip(), method=method,
                  citations=citations_for(cite(result.text), store.units, store.docs), error=result.error,
                  **fields)
