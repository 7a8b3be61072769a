"""Basic search's ranking: dense and BM25 fused, then an optional reranker.

Hybrid retrieval is the baseline users deploy for vector RAG: the text-unit vectors find passages
that say the question's meaning in other words, BM25 (query/lexical.py, over each unit's document
title and text) finds those that share its rare words, and a fusion adds the two rankings
(`query.fusion`):

- relative_score (the default): each ranking's scores min-max normalised over its own hits (its
  best 1, its last 0) and summed with equal weights; a passage missing from one ranking gets 0
  from it. This is the convex combination that Bruch, Gai and Ingber ("An Analysis of Fusion
  Functions for Hybrid Retrieval", ACM TOIS 2023) found ahead of reciprocal rank fusion in and
  out of domain, and Weaviate's relativeScoreFusion. Unlike rank fusion it keeps how far apart
  the scores are: a passage that one ranking puts far ahead of the rest (BM25 on a rare code or
  name, which dense search on chat and web text misses) stays ahead.
- rrf: reciprocal rank fusion, sum(1 / (k + rank)) over the rankings a passage is in, k = 60 (the
  constant of Cormack, Clarke and Buettcher, SIGIR 2009, chosen there on TREC runs).

Neither has a weight or constant tuned here; docs/results/retrieval.md compares the two. A reranker
(llm/rerank.py: a cross-encoder behind TEI, vLLM or a Cohere-style endpoint, or the chat model
listwise) then reorders the first candidates.

`basic_ranking` is what basic search shows and what local search guarantees its top places
against (query/retrieval.py), so the two are compared on the same footing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from corpusgraph.config import QuerySection

if TYPE_CHECKING:
    from corpusgraph.llm.rerank import Reranker
    from corpusgraph.query.loaded import LoadedIndex
    from corpusgraph.query.question import Question

__all__ = ["RRF_K", "BasicRanking", "rrf", "relative_score", "basic_ranking", "dense_hits", "lexical_hits"]

log = logging.getLogger(__name__)

RRF_K = 60
# Passages taken from each ranking into the fusion: the reranker's candidates and local search's
# protected places come from the first few dozen. A passage past this depth in both rankings would
# score under 2 / (60 + 100) by rank fusion, and relative_score's lowest point (0) is each
# ranking's score at this depth.
DEPTH = 100
# A vector index may still hold units of documents deleted since it was built: a few more hits
# than needed keep the ranking filled after those are dropped.
_OVERFETCH = 5


@dataclass
class BasicRanking:
    """Unit ids best first with their scores (the fused score, the reranker's where it ran),
    and how the ranking was made: `method` (dense, hybrid, hybrid+rerank), and for a reranker
    that failed, why the hybrid order was kept."""

    unit_ids: list[str]
    scores: list[float]
    method: str
    rerank_error: str | None = None
    dense_scores: dict[str, float] = field(default_factory=dict)  # cosine with the question, where searched
    fusion: str | None = None  # query.fusion, where the ranking is hybrid

    def guard_coverage(self) -> dict:
        """What local and drift search's coverage says of the ranking their first places are
        guaranteed against: its method, its fusion, and a reranker's failure."""
        return {"basic_ranking": self.method, **({"basic_fusion": self.fusion} if self.fusion else {}),
                **({"rerank_error": self.rerank_error} if self.rerank_error else {})}


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Items of the rankings (each best first) by sum(1 / (k + rank)), rank counted from 1; ties
    keep the order in which the items were first met, ranking by ranking."""
    score: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            score[item] = score.get(item, 0.0) + 1.0 / (k + rank)
    return _best_first(score)


def relative_score(runs: Sequence[Sequence[tuple[str, float]]]) -> list[tuple[str, float]]:
    """Items of the scored runs ((item, score) best first) by the sum of their min-max normalised
    scores: in each run the best score counts 1 and the lowest 0 (every item 1 where a run's scores
    are all equal); an item missing from a run gets 0 from it. Ties keep the order in which the
    items were first met, run by run."""
    score: dict[str, float] = {}
    for run in runs:
        if not run:
            continue
        values = [s for _, s in run]
        low, high = min(values), max(values)
        for item, s in run:
            part = (s - low) / (high - low) if high > low else 1.0
            score[item] = score.get(item, 0.0) + part
    return _best_first(score)


def _best_first(score: dict[str, float]) -> list[tuple[str, float]]:
    """(item, score) by score, highest first; ties keep the dict's order (first met: the sort is stable)."""
    return sorted(score.items(), key=lambda kv: -kv[1])


def dense_hits(store, question_vector: np.ndarray, depth: int) -> list[tuple[str, float]]:
    """The `depth` units nearest the question that the store shows, (id, cosine) best first."""
    query = np.asarray(question_vector, dtype=np.float32).reshape(1, -1)
    hits = store.vectors("text_unit").search(query, depth + _OVERFETCH)[0]
    return [(u, float(s)) for u, s in hits if u in store.units][:depth]


def lexical_hits(retriever, text: str, depth: int) -> list[tuple[str, float]]:
    """The `depth` units with the best BM25 score for `text` (those that match at all), best
    first, ties by unit rank."""
    bm = retriever.bm25.scores(text)
    if not bm.size:
        return []
    k = min(depth, bm.size)
    top = np.argpartition(-bm, k - 1)[:k] if k < bm.size else np.arange(bm.size)
    top = top[bm[top] > 0]
    top = top[np.lexsort((top, -bm[top]))]
    return [(retriever.unit_ids[i], float(bm[i])) for i in top.tolist()]


def basic_ranking(index: LoadedIndex, question: Question, section: QuerySection, limit: int,
                  reranker: Reranker | None = None) -> BasicRanking:
    """Basic search's ranking of the units for `question`, at most `limit` (section.basic says
    dense or hybrid, section.fusion how hybrid fuses; `reranker`, when given with hybrid, reorders
    its first candidates)."""
    store = index.store
    depth = max(limit, DEPTH)
    dense = dense_hits(store, question.vector, depth)
    cosine = dict(dense)
    if section.basic == "dense":
        return BasicRanking([u for u, _ in dense[:limit]], [s for _, s in dense[:limit]], "dense", dense_scores=cosine)
    lexical = lexical_hits(index.retriever(), question.text, depth)
    if section.fusion == "rrf":
        fused = rrf([[u for u, _ in dense], [u for u, _ in lexical]])
    else:
        fused = relative_score([dense, lexical])
    method, error = "hybrid", None
    if reranker is not None and fused:
        n = min(section.rerank.candidates, len(fused))
        head = [u for u, _ in fused[:n]]
        try:
            scores = reranker.rerank(question.text, [_passage(store, u, section.rerank.max_chars) for u in head])
        except Exception as exc:  # the hybrid order stands; the answer's coverage says why
            log.warning("reranker failed, hybrid order kept: %s", exc)
            error = f"{type(exc).__name__}: {exc}"
        else:
            order = sorted(range(n), key=lambda i: (-scores[i], i))
            fused = [(head[i], float(scores[i])) for i in order] + fused[n:]
            method = "hybrid+rerank"
    fused = fused[:limit]
    return BasicRanking([u for u, _ in fused], [s for _, s in fused], method, error, cosine, section.fusion)


def _passage(store, unit_id: str, max_chars: int) -> str:
    """A unit as a reranker reads it: its document's title, then its text, cut to max_chars."""
    unit = store.units[unit_id]
    title = (store.docs.get(unit["doc_id"]) or {}).get("title") or ""
    text = f"{title}\n{unit['text'] or ''}" if title else (unit["text"] or "")
    return text[:max_chars]
