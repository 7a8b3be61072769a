"""Basic search: the text units that best match the question, one LLM call.

For single-fact lookups. Which units, in what order, is query/hybrid.py's ranking: dense search
alone, or dense and BM25 fused (the default, `query.basic`), reranked where a reranker is
configured; the coverage says which ran. Units are tagged [U1], [U2], ... in the context so the model can cite
them; the answer's citations are the units in the context, those the model cited first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatModel
from corpusgraph.query.answer import Answer, answer_over_context, cited_tags, fit_budget, pack_blocks, unique_ordered
from corpusgraph.query.coverage import context_coverage
from corpusgraph.query.events import emit_context
from corpusgraph.query.hybrid import BasicRanking, basic_ranking
from corpusgraph.query.loaded import LoadedIndex
from corpusgraph.query.question import Question
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
    ranking: str = "dense"  # how the units were ranked: dense, hybrid, hybrid+rerank
    rerank_error: str | None = None  # a configured reranker that failed (the hybrid order was kept)
    fusion: str | None = None  # how a hybrid ranking fused dense and BM25 (query.fusion)


def unit_block(store: IndexStore, tag: str, unit_id: str) -> str:
    unit = store.units[unit_id]
    doc = store.docs.get(unit["doc_id"]) or {}
    title = doc.get("title") or unit["doc_id"]
    return f"[{tag}] (from {title})\n{unit['text'].strip()}"


def build_basic_context(store: IndexStore, question_vector: np.ndarray, section: QuerySection,
                        ranking: BasicRanking | None = None) -> BasicContext:
    """The ranking's first top_k_units units (without one: the nearest units), packed under
    `section.max_context_tokens`."""
    query = np.asarray(question_vector, dtype=np.float32).reshape(1, -1)
    if ranking is None:
        # The vector index may still hold units of documents deleted since it was built; asking for
        # a few more than needed keeps top_k_units filled after those are dropped.
        hits = store.vectors("text_unit").search(query, section.top_k_units + _OVERFETCH)[0]
        kept = [(uid, score) for uid, score in hits if uid in store.units][: section.top_k_units]
    else:
        ids = [u for u in ranking.unit_ids if u in store.units][: section.top_k_units]
        cos = store.vectors("text_unit").vectors(ids) @ query[0] if ids else []
        kept = list(zip(ids, (float(c) for c in cos)))
    unit_ids = [uid for uid, _ in kept]
    blocks = [unit_block(store, f"U{i}", uid) for i, uid in enumerate(unit_ids, 1)]
    taken, _ = pack_blocks(blocks, section.max_context_tokens)
    text = fit_budget("\n\n".join(taken), section.max_context_tokens)
    return BasicContext(text=text, unit_ids=unit_ids[: len(taken)], tokens=count_tokens(text),
                        similarities=[float(score) for _, score in kept[: len(taken)]],
                        ranking=ranking.method if ranking is not None else "dense",
                        rerank_error=ranking.rerank_error if ranking is not None else None,
                        fusion=ranking.fusion if ranking is not None else None)


def basic_coverage(store: IndexStore, ctx: BasicContext, section: QuerySection) -> dict:
    """k asked for, how the units were ranked, the units and documents kept, and how close the last
    one kept was."""
    last = round(ctx.similarities[-1], 4) if ctx.similarities else None
    return {"method": "basic", "k": section.top_k_units, "ranking": ctx.ranking, "last_similarity": last,
            **({"fusion": ctx.fusion} if ctx.fusion else {}),
            **({"rerank_error": ctx.rerank_error} if ctx.rerank_error else {}),
            **context_coverage(store, ctx.unit_ids, ctx.tokens, section.max_context_tokens)}


def basic_search(index: LoadedIndex, chat: ChatModel, question: Question, section: QuerySection,
                 prompt: str, reranker=None) -> Answer:
    store = index.store
    ranking = basic_ranking(index, question, section, section.top_k_units, reranker)
    ctx = build_basic_context(store, question.vector, section, ranking)
    coverage = basic_coverage(store, ctx, section)
    emit_context(store, ctx.unit_ids, True, ctx.tokens, coverage)  # before the model call
    if not ctx.unit_ids:
        return Answer(question=question.text, answer=NO_CONTEXT_ANSWER, method="basic", coverage=coverage)

    def cite(text: str | None) -> list[str]:
        tagged = [ctx.unit_ids[n - 1] for n in cited_tags(text, "U") if 0 < n <= len(ctx.unit_ids)]
        return unique_ordered(tagged, ctx.unit_ids)

    return answer_over_context(chat, "basic", question.text, ctx.text, prompt, section.max_tokens, store, cite,
                               context_tokens=ctx.tokens, coverage=coverage)
