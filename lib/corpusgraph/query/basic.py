"""Basic search: the text units nearest the question, one LLM call (DESIGN.md section 6).

For single-fact lookups. Units are tagged [U1], [U2], ... in the context so the model can cite
them; the answer's citations are the units in the context, those the model cited first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatModel
from corpusgraph.query.answer import (
    Answer,
    ask_once,
    cited_tags,
    citations_for,
    fill_prompt,
    fit_budget,
    unique_ordered,
    pack_blocks,
)
from corpusgraph.query.coverage import context_coverage
from corpusgraph.query.store import IndexStore
from corpusgraph.tokens import count_tokens

__all__ = ["BasicContext", "build_basic_context", "basic_coverage", "basic_search", "NO_CONTEXT_ANSWER"]

NO_CONTEXT_ANSWER = "I could not find anything in the index that answers this question."
_OVERFETCH = 5


@dataclass
class BasicContext:
    text: str
    unit_ids: list[str] = field(default_factory=list)  # in tag order: unit_ids[0] is [U1]
    tokens: int = 0
    similarities: list[float] = field(default_factory=list)  # cosine with the question, per unit kept


def unit_block(store: IndexStore, tag: str, unit_id: str) -> str:
    unit = store.units[unit_id]
    doc = store.docs.get(unit["doc_id"]) or {}
    title = doc.get("title") or unit["doc_id"]
    return f"[{tag}] (from {title})\n{unit['text'].strip()}"


def build_basic_context(store: IndexStore, question_vector: np.ndarray, section: QuerySection) -> BasicContext:
    """Nearest units first, packed under `section.max_context_tokens`."""
    query = np.asarray(question_vector, dtype=np.float32).reshape(1, -1)
    # The vector index may still hold units of documents deleted since it was built; asking for
    # a few more than needed keeps top_k_units filled after those are dropped.
    hits = store.vectors("text_unit").search(query, section.top_k_units + _OVERFETCH)[0]
    kept = [(uid, score) for uid, score in hits if uid in store.units][: section.top_k_units]
    unit_ids = [uid for uid, _ in kept]
    blocks = [unit_block(store, f"U{i}", uid) for i, uid in enumerate(unit_ids, 1)]
    taken, _ = pack_blocks(blocks, section.max_context_tokens)
    text = fit_budget("\n\n".join(taken), section.max_context_tokens)
    return BasicContext(text=text, unit_ids=unit_ids[: len(taken)], tokens=count_tokens(text),
                        similarities=[float(score) for _, score in kept[: len(taken)]])


def basic_coverage(store: IndexStore, ctx: BasicContext, section: QuerySection) -> dict:
    """k asked for, the units and documents kept, and how close the last one kept was."""
    last = round(ctx.similarities[-1], 4) if ctx.similarities else None
    return {"method": "basic", "k": section.top_k_units, "last_similarity": last,
            **context_coverage(store, ctx.unit_ids, ctx.tokens, section.max_context_tokens)}


def basic_search(
    store: IndexStore,
    chat: ChatModel,
    question: str,
    question_vector: np.ndarray,
    section: QuerySection,
    prompt: str,
) -> Answer:
    ctx = build_basic_context(store, question_vector, section)
    coverage = basic_coverage(store, ctx, section)
    if not ctx.unit_ids:
        return Answer(question=question, answer=NO_CONTEXT_ANSWER, method="basic", coverage=coverage)
    result = ask_once(chat, "basic", fill_prompt(prompt, context=ctx.text, question=question), section.max_tokens)
    cited = [ctx.unit_ids[n - 1] for n in cited_tags(result.text, "U") if 0 < n <= len(ctx.unit_ids)]
    return Answer(
        question=question,
        answer=(result.text or "").strip(),
        method="basic",
        citations=citations_for(unique_ordered(cited, ctx.unit_ids), store.units, store.docs),
        context_tokens=ctx.tokens,
        error=result.error,
        coverage=coverage,
    )
