"""What makes local ranking adapt to the corpus it runs on: seed support and the dense guarantee.

Three rules, all computed per question from the index itself, with no per-corpus setting:

- **Seed support.** An entity seed is evidence about which passages matter only as far as the
  passages it occurs in agree with the question's own passage scores. A seed's support is
  min(1, `scale` x the mean hybrid passage score (dense + BM25, in [0, 1], 0 outside the
  candidates) over every passage the entity occurs in). A hub (the one person in every chat
  log, the company in every ticket) occurs in hundreds of passages of which a handful are
  candidates: its support is near 0. A named film whose one paragraph is the question's best
  passage has support near 1. The restart mass put on entities is `(1 - passage_weight)` times
  the seeds' mean support (weighted as the seeds are), and the passages get the rest: where
  entities are specific (encyclopaedia pages) the walk keeps the weight it had; where they are
  hubs, it gives way to the passage scores instead of spreading mass through the hubs.
- **Link coverage.** A seed's links are evidence only as far as they cover the passages whose
  text names it. Extraction links a name where it recognised it, and on chat logs, tickets and
  web pages that is a small part of where the name is written: a speaker in forty conversations
  is linked to the one passage that spelled her name as the extractor expected. Her support
  may be high (that passage names her, as the question does), but it says nothing about why
  that passage, rather than the thirty-nine others, should rise, and the walk would pour the
  seed's whole mass into it. So in the restart mass a seed's support is scaled by min(1, linked
  passages / passages naming it), the latter counted in the text by the retriever
  (`GraphRetriever.mentions`: the name's words in BM25's postings, then the name itself, spaces
  and case aside). A seed linked wherever it is named keeps its mass whole. The guarantee's
  trust (below) stays the unscaled support: whether the seeds agree with the question is one
  thing, how completely the graph links them another.
  What the rule buys and costs on each dev set is the `without_seed_coverage` row of
  tests/benchmarks/results/retrieval.json.
- **The guarantee.** The `keep` first passages of basic search's ranking (query/hybrid.py: dense
  and BM25 fused, reranked where a reranker runs) keep their places in local search's ranking, in
  that order, unless the graph's choice for a place has at least `1 + margin` times the walk score
  of the passage it would push down. The graph's choices are the walk's and those of the steps
  after it (a document the question names, a passage bridged to from a top one), each with the
  score it was placed with, so every step obeys the same rule. The ranker passes
  `margin x (1 - trust)`, trust being the seeds' mean support: a walk from unsupported seeds
  needs the whole margin, one from well supported seeds little. Where the graph adds nothing,
  local ranking therefore is basic search's ranking at the top places. The first place is basic
  search's in any case (`keep_first`): it is the passage the question's own words match best,
  and what the graph knows is about what they do not say (the next hop). On the dev sets, graph
  choices that had taken the first place from the hybrid ranking were right 3, 3 and 14 times and
  wrong 4, 4 and 57 times (hotpotqa100, musique100, lihua): the rule was adopted after seeing that.
- **The margin**, unless configured, comes from the walk itself (`guarantee_margin`): a passage
  that gets restart mass r has a walk score between (1 - d) r (none of the mass it sends out comes
  back) and r (all of it does), d being the damping. So how its neighbourhood recycles its own
  restart mass alone can change a passage's score by the factor 1 / (1 - d) and no more; a graph
  choice must beat a protected passage by at least that factor before the graph, rather than the
  shape of the neighbourhood, is what put it ahead: margin = 1 / (1 - d) - 1 = d / (1 - d) (1 at
  HippoRAG's d = 0.5).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

__all__ = ["seed_support", "link_coverage", "entity_share", "keep_dense", "guarantee_margin"]


def guarantee_margin(w) -> float:
    """The guarantee's margin: `keep_dense_margin` where configured, else d / (1 - d) of the
    walk's damping d (the module docstring says why)."""
    if w.keep_dense_margin is not None:
        return float(w.keep_dense_margin)
    return w.damping / (1.0 - w.damping)


def seed_support(seed_passages: Mapping[int, np.ndarray], passage_score: np.ndarray,
                 scale: float = 1.0) -> dict[int, float]:
    """Seed -> min(1, `scale` x the mean of `passage_score` over the passages (indexes into it)
    the seed occurs in); 0 for a seed that occurs in none."""
    return {s: min(1.0, scale * float(passage_score[p].mean())) if len(p) else 0.0
            for s, p in seed_passages.items()}


def link_coverage(linked: float, mentioned: float) -> float:
    """How completely an entity's links cover the passages that name it: min(1, linked /
    mentioned); 1 where no passage is known to name it (nothing to compare with)."""
    if mentioned <= 0:
        return 1.0
    return min(1.0, float(linked) / float(mentioned))


def entity_share(seeds: Mapping[int, float], support: Mapping[int, float], passage_weight: float) -> float:
    """Share of the restart mass put on the entity seeds: `1 - passage_weight` times their mean
    support, each seed weighted by its seed weight. 0 without seeds."""
    total = sum(seeds.values())
    if total <= 0:
        return 0.0
    mean = sum(w * support.get(s, 0.0) for s, w in seeds.items()) / total
    return (1.0 - passage_weight) * min(max(mean, 0.0), 1.0)


def keep_dense(ranked: Sequence[tuple[str, float]], dense: Sequence[str], evidence: Mapping[str, float],
               keep: int, margin: float) -> list[tuple[str, float]]:
    """The graph ranking `ranked` ((id, score), best first) merged with the first `keep` of
    `dense` (ids, best first) so that each of those keeps its place unless the graph's candidate
    for the place has at least `1 + margin` times its evidence (`evidence`: id -> score, missing
    ids 0; a graph candidate's own evidence is its score in `ranked`). Every id of `ranked` is
    kept, each once; protected ids the graph ranking lacks come in with score 0."""
    if keep <= 0 or not dense:
        return list(ranked)
    protected = list(dict.fromkeys(dense))[:keep]
    score = dict(ranked)
    graph = [u for u, _ in ranked]
    out: list[str] = []
    taken: set[str] = set()
    gi = di = 0
    while gi < len(graph) or di < len(protected):
        while gi < len(graph) and graph[gi] in taken:
            gi += 1
        while di < len(protected) and protected[di] in taken:
            di += 1
        g = graph[gi] if gi < len(graph) else None
        d = protected[di] if di < len(protected) else None
        if d is None and g is None:
            break
        if d is None or (g is not None and (g == d or score[g] >= (1.0 + margin) * evidence.get(d, 0.0))):
            pick = g
        else:
            pick = d
        out.append(pick)
        taken.add(pick)
    return [(u, score.get(u, 0.0)) for u in out]
