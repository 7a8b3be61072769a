"""Dynamic community selection for global search, with the map of final reports folded in.

Rate every root report's relevance to the question (one short, schema-constrained call each),
keep the relevant ones, rate their children, and let relevant children replace their parent,
down to `dynamic_max_level`. A relevant report whose children are all irrelevant stays itself.
A rating that fails or does not parse counts as relevant: losing a branch to a malformed answer
would be a silent recall loss.

Rounds, not levels, are what a caller waits for. A report with no child to descend into (a leaf,
or one at `dynamic_max_level`) is rated only to decide whether it is mapped, so with
`dynamic_early_map` its map call goes in the same batch as its rating: once the rating comes
back, the map answer's points are kept only if the report was relevant (a point is credited to
the relevant reports it names, and dropped when it names none). Selecting over one level then
costs the map's round and no more (rate+map, reduce), and every deeper level one round; the
price is the map tokens of leaves rated irrelevant (counted in `early_pruned`). Which reports'
points reach the reduce is what rating then mapping would give; only their chunking differs.

Ratings are bounded per question (`dynamic_max_rated`). On a large index the roots alone can be
thousands (2,271 root reports on a 1.43M-entity index, ~7,900 ratings a question with the
descent), and a question then costs minutes of calls and holds a service's CPU. A round with more
reports than the budget leaves rates those nearest the question first (cosine of the question's
vector with each report's stored vector; the reports' own importance rating where there are no
vectors) and defers the rest to the next round, where they are ranked again with the children
of the reports found relevant; what is still unrated when the budget is spent is neither
descended into nor mapped. The first round the budget binds takes at most half of what is left
when it could still descend, so the relevant branches it finds can be rated below; later rounds
take all that is left (two rounds, not one per halving). The facts count the reports left
unrated, and coverage says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatModel, ChatRequest, ChatResult
from corpusgraph.query.answer import fill_prompt, fit_budget
from corpusgraph.query.global_map import Chunk, map_requests, parse_rating, rate_schema, report_text
from corpusgraph.query.store import IndexMissingError, IndexStore

__all__ = ["Selection", "children_with_reports", "report_tree", "select_communities", "nearest_first"]


@dataclass
class Selection:
    """The chosen reports (best rated first), the selection's facts, and the map calls already
    made for reports that could not be descended into (their chunks and answers, in order)."""

    selected: list[str]
    facts: dict
    early_chunks: list[Chunk] = field(default_factory=list)
    early_results: list[ChatResult] = field(default_factory=list)
    early_ids: set[str] = field(default_factory=set)
    early_tokens: int = 0


def children_with_reports(store: IndexStore) -> dict[str, list[str]]:
    """Parent community id -> its children that have a report, sorted."""
    out: dict[str, list[str]] = {}
    for cid in store.reports:
        parent = store.communities.value(cid, "parent_id")
        if parent:
            out.setdefault(parent, []).append(cid)
    return {p: sorted(c) for p, c in out.items()}


def report_tree(store: IndexStore) -> tuple[dict[str, list[str]], list[str]]:
    """(children_with_reports, the roots: reports whose community has no reported parent,
    normally the whole top level, sorted), built on a store's first global question and kept
    with it (a restricted view has its own): at 156k reports they took ~0.7 s of CPU a question."""
    tree = store.__dict__.get("_report_tree")
    if tree is None:
        roots = sorted(c for c in store.reports if store.communities.value(c, "parent_id") not in store.reports)
        tree = store.__dict__["_report_tree"] = (children_with_reports(store), roots)
    return tree


def _rate_request(store: IndexStore, cid: str, question: str, section: QuerySection, rate_prompt: str) -> ChatRequest:
    report = fit_budget(report_text(store, cid), section.max_context_tokens)
    return ChatRequest(id=f"rate-{cid}", messages=({"role": "user", "content": fill_prompt(
        rate_prompt, report=report, question=question)},), max_tokens=16, json_schema=rate_schema())


def nearest_first(store: IndexStore, ids: list[str], vector: np.ndarray | None) -> tuple[list[str], str]:
    """(ids ordered for rating under a budget, how): by the cosine of the question's vector with
    each report's stored vector, best first ("report_vectors"); ids without a vector (a
    restricted view's per-domain reports) and every id when there is no vector or no report
    index follow by the report's importance rating ("report_rating"), then id."""
    by_rating = sorted(ids, key=lambda c: (-(store.reports.value(c, "rating") or 0.0), c))
    if vector is None:
        return by_rating, "report_rating"
    try:
        index = store.vectors("community_report")
    except IndexMissingError:
        return by_rating, "report_rating"
    if index.dim != np.asarray(vector).reshape(-1).shape[0]:
        return by_rating, "report_rating"
    sims = dict(zip(by_rating, index.similarities(vector, by_rating)))
    near = sorted((c for c in by_rating if sims[c] is not None), key=lambda c: -sims[c])  # stable: ties by rating
    if not near:
        return by_rating, "report_rating"
    return near + [c for c in by_rating if sims[c] is None], "report_vectors"


def _allowance(left: int | None, frontier: list[str], deeper: bool) -> int:
    """Reports this round may rate: all of them within the budget; over it, what is left, or half
    of it (rounded up) when the round could still descend (the caller asks so once)."""
    if left is None or len(frontier) <= left:
        return len(frontier)
    return (left + 1) // 2 if deeper else left


def select_communities(
    store: IndexStore,
    chat: ChatModel,
    question: str,
    section: QuerySection,
    rate_prompt: str,
    map_prompt: str | None = None,
    question_vector: Callable[[], np.ndarray | None] | None = None,
) -> Selection:
    """Dynamic community selection (module doc); one batch per round. Without `map_prompt` (or
    with dynamic_early_map off) nothing is mapped here. question_vector: the question's
    embedding, asked for only when a round has more reports than the rating budget leaves."""
    children, roots = report_tree(store)

    def below(cid: str) -> list[str]:
        deepest = section.global_.dynamic_max_level
        return [k for k in children.get(cid, ()) if store.reports.value(k, "level") <= deepest]

    frontier = list(roots)
    early = map_prompt is not None and section.global_.dynamic_early_map
    out = Selection(selected=[], facts={})
    scores: dict[str, int] = {}
    rated = failed = rounds = pruned = descended = 0
    budget = section.global_.dynamic_max_rated or None
    vector: list = []  # the question's vector, embedded at most once
    order = None
    while frontier and (budget is None or rated < budget):
        rounds += 1
        left = None if budget is None else budget - rated
        binds = left is not None and len(frontier) > left
        # Halve only the first round that binds (and only then look for children below).
        take = _allowance(left, frontier, binds and order is None and any(below(c) for c in frontier))
        deferred: list[str] = []
        if take < len(frontier):
            if not vector:
                vector.append(question_vector() if question_vector is not None else None)
            ranked, order = nearest_first(store, frontier, vector[0])
            frontier, deferred = sorted(ranked[:take]), ranked[take:]
        rates = [_rate_request(store, cid, question, section, rate_prompt) for cid in frontier]
        # Leaves of this round, strongest reports first (the order the map packs them in).
        leaves = sorted((c for c in frontier if not below(c)),
                        key=lambda c: (-store.reports.value(c, "rating"), c)) if early else []
        chunks, maps, tokens = map_requests(store, leaves, section, map_prompt or "", question, f"map-r{rounds}")
        results = {r.id: r for r in chat.complete(rates + maps)}  # one batch: rated and mapped concurrently
        out.early_chunks += chunks
        out.early_results += [results.get(m.id) or ChatResult(id=m.id, text=None, error="no result") for m in maps]
        out.early_ids.update(leaves)
        out.early_tokens += tokens
        rated += len(rates)
        next_frontier: list[str] = []
        for cid in frontier:
            result = results.get(f"rate-{cid}")
            score = None if result is None or result.error else parse_rating(result.text)
            if score is None:
                failed += 1
                score = section.global_.dynamic_threshold  # unreadable: keep the branch (module doc)
            if score < section.global_.dynamic_threshold:
                pruned += 1
                continue
            scores[cid] = score
            descended += bool(below(cid))
            next_frontier += below(cid)
        frontier = sorted(set(next_frontier) | set(deferred))
    unrated = len(frontier)  # the budget was spent before their round
    # A relevant child replaces its parent; a parent none of whose children was relevant stays.
    replaced = {store.communities.value(c, "parent_id") for c in scores}
    selected = [c for c in scores if c not in replaced]
    selected.sort(key=lambda c: (-scores[c], -store.reports.value(c, "rating"), c))
    out.selected = selected
    out.facts = {"rated": rated, "rating_failed": failed, "rounds": rounds, "selected": len(selected),
                 "pruned": pruned, "descended": descended, "mapped_early": len(out.early_ids),
                 "early_pruned": len(out.early_ids - set(selected)), "unrated": unrated,
                 "max_rated": budget or 0, "rating_order": order}
    return out
