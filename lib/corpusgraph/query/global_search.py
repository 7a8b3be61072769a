"""Global search: choose community reports, map over them for rated points, reduce.

Which reports: with an explicit level (or `global_dynamic` off) every report of that level;
the level is the cost dial, level 0 having the fewest, broadest reports. Without one, dynamic
community selection (query/global_select.py): rate the root reports, descend only into the
relevant ones' children, map the reports that remain; reports that cannot be descended into are
mapped in the same round as their rating. When no root is relevant, the whole `global_level` is
mapped instead (details["selection"] says "dynamic_fallback"): a rater that rejects every root
is more often a weak model than a silent corpus. So the map sees detailed reports only in the
branches that matter, and irrelevant branches cost one rating call, not a map over their
subtree.

Map (query/global_map.py): the chosen reports are packed into chunks that each fit the context
budget, and every chunk becomes one request in a single `complete` batch; the model client runs
a batch's requests concurrently (up to llm.concurrency), so the map costs about one call's
latency when the chunks fit the concurrency. Each map answer is JSON points with a 0-100 score;
score-0 points mean "nothing relevant here" and are dropped. Reduce: one call writes the answer
from the best points that fit the budget.

A map answer that fails or does not parse costs its chunk, never the query: it is skipped and
counted in `Answer.details["map_failed"]` and in the answer's coverage.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatModel
from corpusgraph.query.answer import Answer, ask_once, citations_for, fill_prompt, fit_budget, pack_blocks
from corpusgraph.query.coverage import community_units, global_coverage
from corpusgraph.query.events import emit_context
from corpusgraph.query.global_map import (
    MAX_POINTS,
    MapRead,
    Point,
    chunk_reports,
    map_requests,
    map_schema,
    parse_points,
    parse_rating,
    rate_schema,
    read_points,
    report_block,
    report_text,
)
from corpusgraph.query.global_select import children_with_reports, select_communities
from corpusgraph.query.store import IndexStore
from corpusgraph.tokens import count_tokens

__all__ = [
    "Point",
    "choose_level",
    "chunk_reports",
    "map_schema",
    "rate_schema",
    "select_communities",
    "parse_points",
    "parse_rating",
    "report_block",
    "report_text",
    "children_with_reports",
    "global_search",
    "global_points",
    "global_coverage_of",
    "NO_POINTS_ANSWER",
    "MAX_POINTS",
    "MAX_CITED_UNITS",
]

NO_POINTS_ANSWER = "The community reports hold nothing relevant to this question."
MAX_CITED_UNITS = 10  # a level-0 community covers thousands of units; cite the best supported


def choose_level(store: IndexStore, wanted: int) -> int | None:
    """`wanted` if it has reports, else the deepest existing level numbered below it, else the
    shallowest level there is; None when there are no reports at all."""
    levels = store.report_levels()
    if not levels:
        return None
    if wanted in levels:
        return wanted
    below = [lvl for lvl in levels if lvl < wanted]
    return max(below) if below else min(levels)


def _cited_units(store: IndexStore, points: list[Point]) -> list[str]:
    """Units of the communities behind the points, by how many points they back, then score."""
    backing: Counter[str] = Counter()
    weight: Counter[str] = Counter()
    order: dict[str, int] = {}
    for point in points:
        units = {u for cid in point.community_ids for u in community_units(store, cid)}
        for u in sorted(units):
            backing[u] += 1
            weight[u] += point.score
            order.setdefault(u, len(order))
    ranked = sorted(backing, key=lambda u: (-backing[u], -weight[u], order[u]))
    return ranked[:MAX_CITED_UNITS]


def global_search(
    store: IndexStore,
    chat: ChatModel,
    question: str,
    section: QuerySection,
    map_prompt: str,
    reduce_prompt: str,
    level: int | None = None,
    rate_prompt: str | None = None,
    question_vector: Callable[[], np.ndarray | None] | None = None,
) -> Answer:
    """Answer from community reports. `level` given (or no `rate_prompt`, or global_dynamic off):
    every report of that level; otherwise dynamic selection from the roots down (question_vector:
    the question's embedding, asked for only when the rating budget cannot rate a whole round)."""
    if not store.report_levels():
        return Answer(
            question=question,
            answer="",
            method="global",
            error="no community reports in the index; run `corpusgraph index` first",
            coverage={"method": "global", **global_coverage(store, [], map_calls=0, map_failed=0, points={},
                                                            selection=None)},
        )
    read, community_ids, details, tokens = global_points(store, chat, question, section, map_prompt, level,
                                                         rate_prompt, question_vector)
    answer = _reduce(store, chat, question, read, details, tokens, section, reduce_prompt)
    answer.coverage = _coverage(store, community_ids, answer.details, section)
    return answer


def global_points(
    store: IndexStore,
    chat: ChatModel,
    question: str,
    section: QuerySection,
    map_prompt: str,
    level: int | None = None,
    rate_prompt: str | None = None,
    question_vector: Callable[[], np.ndarray | None] | None = None,
) -> tuple[MapRead, list[str], dict, int]:
    """Global search up to its reduce: (the map's points, the communities mapped, details, the
    map's context tokens). The store must hold reports (global_search checks)."""
    community_ids: list[str] = []
    details: dict = {}
    read, map_calls, tokens = MapRead(points=[]), 0, 0
    early = None
    if level is None and rate_prompt is not None and section.global_.dynamic:
        early = select_communities(store, chat, question, section, rate_prompt, map_prompt, question_vector)
        community_ids = early.selected
        levels = sorted({store.reports[c]["level"] for c in community_ids})
        details = {"selection": "dynamic", "level": levels, **early.facts}
        map_calls, tokens = len(early.early_chunks), early.early_tokens
    if not community_ids:
        used_level = choose_level(store, section.global_.level if level is None else level)
        community_ids = sorted(
            store.reports_by_level[used_level],
            key=lambda c: (-store.reports[c]["rating"], c),  # strongest reports first
        )
        details = {**details, "selection": "dynamic_fallback" if details else "level", "level": used_level}
    if early is not None:
        if details["selection"] == "dynamic_fallback" and set(community_ids) == early.early_ids:
            read = read_points(early.early_chunks, early.early_results)  # the level was mapped already
        else:
            read = read_points(early.early_chunks, early.early_results, keep=set(community_ids))
    late = [c for c in community_ids if early is None or c not in early.early_ids]
    if late:
        chunks, requests, late_tokens = map_requests(store, late, section, map_prompt, question)
        read = read.merge(read_points(chunks, chat.complete(requests)))  # one batch: concurrent map calls
        map_calls, tokens = map_calls + len(chunks), tokens + late_tokens
    details.update({"reports": len(community_ids), "map_calls": map_calls})
    return read, community_ids, details, tokens


def _reduce(store: IndexStore, chat: ChatModel, question: str, read: MapRead, details: dict, context_tokens: int,
            section: QuerySection, reduce_prompt: str) -> Answer:
    """One call from the best points that fit the budget (none: say so without a call)."""
    points = sorted(read.points, key=lambda p: -p.score)  # stable: equal scores keep chunk order
    details.update({
        "map_failed": read.failed,
        "points_kept": len(points),
        "points_in_reduce": 0,
        # For coverage: every point parsed, those scored 0 ("nothing relevant"), those about
        # pruned reports only, and those with a score that the reduce budget left out.
        "points_returned": read.returned,
        "points_zero_score": read.zero_score,
        "points_unselected": read.unselected,
        "points_dropped": len(points),
    })
    if not points:
        failed_all = read.failed >= details["map_calls"]
        return Answer(
            question=question,
            answer="" if failed_all else NO_POINTS_ANSWER,
            method="global",
            context_tokens=context_tokens,
            error=f"all {read.failed} map answers failed: {read.first_error}" if failed_all else None,
            details=details,
        )
    budget = section.max_context_tokens
    blocks = [f"[P{i}] (importance {p.score:g}) {p.description}" for i, p in enumerate(points, 1)]
    taken, _ = pack_blocks(blocks, budget)
    used_points = points[: len(taken)]
    details["points_in_reduce"] = len(used_points)
    details["points_dropped"] = len(points) - len(used_points)
    reduce_context = fit_budget("\n".join(taken), budget)
    context_tokens += count_tokens(reduce_context)
    prompt = fill_prompt(reduce_prompt, points=reduce_context, question=question)
    cited = _cited_units(store, used_points)
    emit_context(store, cited, False, context_tokens)  # the points are chosen: before the reduce call
    result = ask_once(chat, "reduce", prompt, section.max_tokens)
    return Answer(
        question=question,
        answer=(result.text or "").strip(),
        method="global",
        citations=citations_for(cited, store.units, store.docs),
        context_tokens=context_tokens,
        error=result.error,
        details=details,
    )


def global_coverage_of(store: IndexStore, community_ids: list[str], details: dict, section: QuerySection) -> dict:
    """The coverage of a global answer (or context) that mapped `community_ids`, as `details` say."""
    return _coverage(store, community_ids, details, section)


def _coverage(store: IndexStore, community_ids: list[str], details: dict, section: QuerySection) -> dict:
    selection = None
    if details.get("selection", "level") != "level":
        keys = ("rated", "rating_failed", "pruned", "descended", "rounds", "mapped_early", "early_pruned",
                "unrated", "max_rated")
        dynamic = section.global_
        selection = {"threshold": dynamic.dynamic_threshold, "max_level": dynamic.dynamic_max_level,
                     **{k: details.get(k, 0) for k in keys}, "rating_order": details.get("rating_order"),
                     "fallback": details["selection"] == "dynamic_fallback"}
    points = {k: details.get(f"points_{k}", 0) for k in ("returned", "zero_score", "unselected", "dropped")}
    points["kept"] = details.get("points_in_reduce", 0)
    return {"method": "global", **global_coverage(store, community_ids, map_calls=details.get("map_calls", 0),
                                                  map_failed=details.get("map_failed", 0), points=points,
                                                  selection=selection)}
