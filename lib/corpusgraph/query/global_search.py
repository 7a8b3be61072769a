"""Global search: choose community reports, map over them for rated points, reduce.

Which reports: with an explicit level (or `global_dynamic` off) every report of that level;
the level is the cost dial, level 0 having the fewest, broadest reports. Without one, dynamic
community selection: rate every root report's relevance to the question (one short,
schema-constrained call each, all in one batch), keep the relevant ones, rate their children,
and let relevant children replace their parent, down to `dynamic_max_level`. A relevant report
whose children are all irrelevant stays itself; when no root is relevant, the whole
`global_level` is mapped instead (details["selection"] says "dynamic_fallback"). So the map sees detailed reports only in the
branches that matter, and irrelevant branches cost one rating call, not a map over their
subtree. A rating that fails or does not parse counts as relevant: losing a branch to a
malformed answer would be a silent recall loss.

Map: the chosen reports are packed into chunks that each fit the context budget, and every
chunk becomes one request in a single `complete` batch; the model client runs a batch's
requests concurrently (up to llm.concurrency), so the map costs about one call's latency when
the chunks fit the concurrency. Each map answer is JSON points with a 0-100 score; score-0
points mean "nothing relevant here" and are dropped. Reduce: one call writes the answer from
the best points that fit the budget.

A map answer that fails or does not parse costs its chunk, never the query: it is skipped and
counted in `Answer.details["map_failed"]`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatModel, ChatRequest
from corpusgraph.query.answer import Answer, ask_once, citations_for, fill_prompt, fit_budget, pack_blocks
from corpusgraph.query.coverage import global_coverage
from corpusgraph.query.store import IndexStore
from corpusgraph.tokens import count_tokens, truncate_tokens

__all__ = [
    "Point",
    "choose_level",
    "chunk_reports",
    "map_schema",
    "rate_schema",
    "select_communities",
    "parse_points",
    "global_search",
    "NO_POINTS_ANSWER",
    "MAX_POINTS",
    "MAX_CITED_UNITS",
]

NO_POINTS_ANSWER = "The community reports hold nothing relevant to this question."
MAX_POINTS = 5  # per map answer; small models repeat themselves without a maxItems
MAX_CITED_UNITS = 10  # a level-0 community covers thousands of units; cite the best supported
_DIGITS = re.compile(r"\d+")


@dataclass
class Point:
    description: str
    score: float
    community_ids: list[str]


def map_schema(max_points: int = MAX_POINTS) -> dict:
    """JSON schema for a map answer (constrains decoding where the backend supports it)."""
    point = {
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "score": {"type": "integer", "minimum": 0, "maximum": 100},
            "reports": {"type": "array", "items": {"type": "integer"}, "maxItems": 5},
        },
        "required": ["description", "score", "reports"],
    }
    return {
        "type": "object",
        "properties": {"points": {"type": "array", "items": point, "maxItems": max_points}},
        "required": ["points"],
    }


def rate_schema() -> dict:
    """JSON schema for a relevance rating: one integer 0-5."""
    return {
        "type": "object",
        "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 5}},
        "required": ["score"],
    }


def parse_rating(text: str | None) -> int | None:
    """The 0-5 score of a rating answer, or None when it is not a JSON object with a number."""
    from corpusgraph.llm.factory import parse_json_answer

    obj, _ = parse_json_answer(text)
    if not isinstance(obj, dict):
        return None
    try:
        return int(min(max(float(obj.get("score")), 0.0), 5.0))
    except (TypeError, ValueError):
        return None


def children_with_reports(store: IndexStore) -> dict[str, list[str]]:
    """Parent community id -> its children that have a report, sorted."""
    out: dict[str, list[str]] = {}
    for cid in store.reports:
        parent = (store.communities.get(cid) or {}).get("parent_id")
        if parent:
            out.setdefault(parent, []).append(cid)
    return {p: sorted(c) for p, c in out.items()}


def select_communities(
    store: IndexStore, chat: ChatModel, question: str, section: QuerySection, rate_prompt: str
) -> tuple[list[str], dict]:
    """Dynamic community selection (module doc): (chosen community ids, selection facts).

    One batch of rating calls per level visited; the ids come back best-rated first.
    """
    children = children_with_reports(store)
    # Roots: reports whose community has no reported parent (normally the whole top level).
    frontier = sorted(
        c for c in store.reports if (store.communities.get(c) or {}).get("parent_id") not in store.reports
    )
    scores: dict[str, int] = {}
    rated = failed = rounds = pruned = descended = 0
    while frontier:
        rounds += 1
        requests = [
            ChatRequest(
                id=f"rate-{cid}",
                messages=({"role": "user", "content": fill_prompt(
                    rate_prompt, report=fit_budget(report_text(store, cid), section.max_context_tokens), question=question
                )},),
                max_tokens=16,
                json_schema=rate_schema(),
            )
            for cid in frontier
        ]
        results = chat.complete(requests)  # one batch per level: rated concurrently
        rated += len(requests)
        next_frontier: list[str] = []
        for i, cid in enumerate(frontier):
            result = results[i] if i < len(results) else None
            score = None if result is None or result.error else parse_rating(result.text)
            if score is None:
                failed += 1
                score = section.dynamic_threshold  # unreadable: keep the branch (module doc)
            if score < section.dynamic_threshold:
                pruned += 1
                continue
            scores[cid] = score
            below = [k for k in children.get(cid, ()) if store.reports[k]["level"] <= section.dynamic_max_level]
            descended += bool(below)
            next_frontier += below
        frontier = sorted(set(next_frontier))
    # A relevant child replaces its parent; a parent none of whose children was relevant stays.
    replaced = {(store.communities.get(c) or {}).get("parent_id") for c in scores}
    selected = [c for c in scores if c not in replaced]
    selected.sort(key=lambda c: (-scores[c], -float(store.reports[c].get("rating") or 0.0), c))
    facts = {"rated": rated, "rating_failed": failed, "rounds": rounds, "selected": len(selected),
             "pruned": pruned, "descended": descended}
    return selected, facts


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


def report_text(store: IndexStore, community_id: str) -> str:
    """A report as the model reads it: title, summary, then one line per finding."""
    rep = store.reports[community_id]
    lines = [rep.get("title") or community_id, (rep.get("summary") or "").strip()]
    for finding in rep.get("findings") or []:
        if finding and finding.get("summary"):
            explanation = (finding.get("explanation") or "").strip()
            lines.append(f"- {finding['summary']}" + (f": {explanation}" if explanation else ""))
    return "\n".join(lines)


def report_block(store: IndexStore, number: int, community_id: str) -> str:
    return f"Report {number}: " + report_text(store, community_id)


def chunk_reports(store: IndexStore, community_ids: list[str], budget: int) -> list[list[tuple[int, str, str]]]:
    """Greedy chunks of (number, community id, block), each chunk's text within `budget` tokens.

    Numbers are global across chunks so a map answer's report ids are unambiguous; a report too
    long for a chunk on its own is cut to the budget rather than left out.
    """
    chunks: list[list[tuple[int, str, str]]] = []
    current: list[tuple[int, str, str]] = []
    used = 0
    for number, cid in enumerate(community_ids, 1):
        block = report_block(store, number, cid)
        cost = count_tokens(block + "\n\n")
        if cost > budget:
            block = truncate_tokens(block, budget - count_tokens("\n\n"))
            cost = count_tokens(block + "\n\n")
        if current and used + cost > budget:
            chunks.append(current)
            current, used = [], 0
        current.append((number, cid, block))
        used += cost
    if current:
        chunks.append(current)
    return chunks


def _report_ids(raw: object, chunk: dict[int, str]) -> list[str]:
    """Report numbers as the model wrote them (3, "3", "Report 3", "[3]") mapped to communities
    of this chunk; when none is usable the point is credited to the whole chunk."""
    items = raw if isinstance(raw, list) else [raw]
    numbers = [int(d) for item in items if isinstance(item, (int, str)) for d in _DIGITS.findall(str(item))]
    ids = list(dict.fromkeys(chunk[n] for n in numbers if n in chunk))
    return ids or list(chunk.values())


def parse_points(text: str | None, chunk: dict[int, str]) -> list[Point] | None:
    """Points of one map answer, or None when the answer is not a JSON object with a list of
    points. Single points without a description or a numeric score are dropped."""
    from corpusgraph.llm.factory import parse_json_answer

    obj, _ = parse_json_answer(text)
    if not isinstance(obj, dict) or not isinstance(obj.get("points"), list):
        return None
    points = []
    for item in obj["points"][:MAX_POINTS]:
        if not isinstance(item, dict):
            continue
        description = item.get("description")
        try:
            score = min(max(float(item.get("score")), 0.0), 100.0)
        except (TypeError, ValueError):
            continue
        if not isinstance(description, str) or not description.strip():
            continue
        points.append(Point(description.strip(), score, _report_ids(item.get("reports"), chunk)))
    return points


def _cited_units(store: IndexStore, points: list[Point]) -> list[str]:
    """Units of the communities behind the points, by how many points they back, then score."""
    backing: Counter[str] = Counter()
    weight: Counter[str] = Counter()
    order: dict[str, int] = {}
    for point in points:
        units: set[str] = set()
        for cid in point.community_ids:
            com = store.communities.get(cid) or {}
            unit_ids = com.get("unit_ids") or [
                u for e in com.get("entity_ids") or () for u in (store.entities.get(e) or {}).get("unit_ids") or ()
            ]
            units.update(u for u in unit_ids if u in store.units)
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
) -> Answer:
    """Answer from community reports. `level` given (or no `rate_prompt`, or global_dynamic off):
    every report of that level; otherwise dynamic selection from the roots down."""
    if not store.report_levels():
        return Answer(
            question=question,
            answer="",
            method="global",
            error="no community reports in the index; run `corpusgraph index` first",
            coverage={"method": "global", **global_coverage(store, [], map_calls=0, map_failed=0, points={},
                                                            selection=None)},
        )
    community_ids: list[str] = []
    details_head: dict = {}
    if level is None and rate_prompt is not None and section.global_dynamic:
        community_ids, selection = select_communities(store, chat, question, section, rate_prompt)
        levels = sorted({store.reports[c]["level"] for c in community_ids})
        details_head = {"selection": "dynamic", "level": levels, **selection}
    if not community_ids:
        # No dynamic selection, or one that found nothing relevant: a rater that rejects every
        # root is more often a weak model than a silent corpus, so the whole level is mapped
        # (its map answers still say "nothing relevant" with score-0 points when that is true).
        used_level = choose_level(store, section.global_level if level is None else level)
        community_ids = sorted(
            store.reports_by_level[used_level],
            key=lambda c: (-float(store.reports[c].get("rating") or 0.0), c),  # strongest reports first
        )
        details_head = {**details_head, "selection": "dynamic_fallback" if details_head else "level",
                        "level": used_level}
    answer = map_reduce(store, chat, question, community_ids, section, map_prompt, reduce_prompt, details_head)
    answer.coverage = _coverage(store, community_ids, answer.details, section)
    return answer


def _coverage(store: IndexStore, community_ids: list[str], details: dict, section: QuerySection) -> dict:
    selection = None
    if details.get("selection", "level") != "level":
        selection = {"threshold": section.dynamic_threshold, "max_level": section.dynamic_max_level,
                     **{k: details.get(k, 0) for k in ("rated", "rating_failed", "pruned", "descended", "rounds")},
                     "fallback": details["selection"] == "dynamic_fallback"}
    points = {k: details.get(f"points_{k}", 0) for k in ("returned", "zero_score", "unselected", "dropped")}
    points["kept"] = details.get("points_in_reduce", 0)
    return {"method": "global", **global_coverage(store, community_ids, map_calls=details.get("map_calls", 0),
                                                  map_failed=details.get("map_failed", 0), points=points,
                                                  selection=selection)}


def map_reduce(
    store: IndexStore,
    chat: ChatModel,
    question: str,
    community_ids: list[str],
    section: QuerySection,
    map_prompt: str,
    reduce_prompt: str,
    details_head: dict,
) -> Answer:
    """Map the given reports (in this order) to rated points in one batch, then reduce."""
    budget = section.max_context_tokens
    chunks = chunk_reports(store, community_ids, budget)
    requests, context_tokens = [], 0
    for i, chunk in enumerate(chunks):
        reports = "\n\n".join(block for _, _, block in chunk)
        context_tokens += count_tokens(reports)
        prompt = fill_prompt(map_prompt, reports=reports, question=question, max_points=MAX_POINTS)
        messages = ({"role": "user", "content": prompt},)
        requests.append(
            ChatRequest(id=f"map-{i}", messages=messages, max_tokens=section.max_tokens, json_schema=map_schema())
        )
    results = chat.complete(requests)  # one batch: the backend runs the map calls concurrently

    points: list[Point] = []
    failed, first_error, returned = 0, None, 0
    for chunk, result in zip(chunks, results):
        parsed = None if result.error else parse_points(result.text, {n: cid for n, cid, _ in chunk})
        if parsed is None:
            failed += 1
            first_error = first_error or result.error or "map answer was not JSON with a list of points"
            continue
        returned += len(parsed)
        points.extend(p for p in parsed if p.score > 0)
    failed += max(len(chunks) - len(results), 0)  # a backend that dropped results
    points.sort(key=lambda p: -p.score)  # stable: equal scores keep chunk order
    details = {
        **details_head,
        "reports": len(community_ids),
        "map_calls": len(chunks),
        "map_failed": failed,
        "points_kept": len(points),
        "points_in_reduce": 0,
        # For coverage: every point parsed, those scored 0 ("nothing relevant"), those in the
        # reduce and those with a score that its budget left out.
        "points_returned": returned,
        "points_zero_score": returned - len(points),
        "points_dropped": len(points),
    }
    if not points:
        failed_all = failed >= len(chunks)
        return Answer(
            question=question,
            answer="" if failed_all else NO_POINTS_ANSWER,
            method="global",
            context_tokens=context_tokens,
            error=f"all {failed} map answers failed: {first_error}" if failed_all else None,
            details=details,
        )

    blocks = [f"[P{i}] (importance {p.score:g}) {p.description}" for i, p in enumerate(points, 1)]
    taken, _ = pack_blocks(blocks, budget)
    used_points = points[: len(taken)]
    details["points_in_reduce"] = len(used_points)
    details["points_dropped"] = len(points) - len(used_points)
    reduce_context = fit_budget("\n".join(taken), budget)
    context_tokens += count_tokens(reduce_context)
    prompt = fill_prompt(reduce_prompt, points=reduce_context, question=question)
    result = ask_once(chat, "reduce", prompt, section.max_tokens)
    return Answer(
        question=question,
        answer=(result.text or "").strip(),
        method="global",
        citations=citations_for(_cited_units(store, used_points), store.units, store.docs),
        context_tokens=context_tokens,
        error=result.error,
        details=details,
    )
