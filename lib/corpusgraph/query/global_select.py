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
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatModel, ChatRequest, ChatResult
from corpusgraph.query.answer import fill_prompt, fit_budget
from corpusgraph.query.global_map import Chunk, map_requests, parse_rating, rate_schema, report_text
from corpusgraph.query.store import IndexStore

__all__ = ["Selection", "children_with_reports", "report_tree", "select_communities"]


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


def select_communities(
    store: IndexStore,
    chat: ChatModel,
    question: str,
    section: QuerySection,
    rate_prompt: str,
    map_prompt: str | None = None,
) -> Selection:
    """Dynamic community selection (module doc); one batch per round. Without `map_prompt` (or
    with dynamic_early_map off) nothing is mapped here."""
    children, roots = report_tree(store)

    def below(cid: str) -> list[str]:
        deepest = section.global_.dynamic_max_level
        return [k for k in children.get(cid, ()) if store.reports.value(k, "level") <= deepest]

    frontier = list(roots)
    early = map_prompt is not None and section.global_.dynamic_early_map
    out = Selection(selected=[], facts={})
    scores: dict[str, int] = {}
    rated = failed = rounds = pruned = descended = 0
    while frontier:
        rounds += 1
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
        frontier = sorted(set(next_frontier))
    # A relevant child replaces its parent; a parent none of whose children was relevant stays.
    replaced = {store.communities.value(c, "parent_id") for c in scores}
    selected = [c for c in scores if c not in replaced]
    selected.sort(key=lambda c: (-scores[c], -store.reports.value(c, "rating"), c))
    out.selected = selected
    out.facts = {"rated": rated, "rating_failed": failed, "rounds": rounds, "selected": len(selected),
                 "pruned": pruned, "descended": descended, "mapped_early": len(out.early_ids),
                 "early_pruned": len(out.early_ids - set(selected))}
    return out
