"""How much of the index stands behind an answer: counted from the index, never by the model.

Every `Answer` carries a `coverage` dict (plain JSON values) built here from what a method put
in front of the model. Shares are of the store the answer was computed on, so a restricted
caller's figures are within its view; the one fact about the rest is a count of the
communities the view hides (nothing about what they hold).

- global: reports mapped, per level against the reports of that level, and against every report
  of the index; the share of text units and of documents under the mapped communities; map
  answers that failed or did not parse; points returned, scored 0, from pruned reports, kept in
  the reduce and dropped for its budget; for dynamic selection the branches rated, pruned and
  descended, the threshold, and the reports the rating budget left unrated (and in what order it
  rated: nearest the question by report vectors, or by the reports' own rating).
- local and drift: the seed entities and how each was found ("name": named in the question,
  "vector": nearest entity vector), the hops followed from them, the units and documents in the
  context and the share of the context budget used.
- basic: k, the units kept and the cosine similarity of the last one kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:  # annotations only: answer.py imports this module, and stays light
    from corpusgraph.query.store import IndexStore

__all__ = [
    "community_units",
    "global_coverage",
    "context_coverage",
    "seed_facts",
    "view_facts",
    "mappable_document_share",
    "describe",
]

# Shares are rounded so a response does not print 17 digits; 4 places tell 1 unit in 10,000.
_PLACES = 4


def _share(part: int, whole: int) -> float:
    return round(part / whole, _PLACES) if whole else 0.0


def community_units(store: IndexStore, community_id: str) -> set[str]:
    """Units of the store under a community: its `unit_ids`, else its member entities' units."""
    com = store.communities.get(community_id)
    if com is None:
        return set()
    unit_ids = com["unit_ids"] or [u for e in com["entity_ids"] if e in store.entities
                                   for u in store.entities[e]["unit_ids"]]
    return {u for u in unit_ids if u in store.units}


def _documents(store: IndexStore, unit_ids: Iterable[str]) -> set[str]:
    docs = (store.units.value(u, "doc_id") for u in unit_ids)
    return {d for d in docs if d is not None and d in store.docs}


def view_facts(store: IndexStore) -> dict[str, Any]:
    """Whether the answer was computed on a restricted view, and how many communities it hides."""
    base = getattr(store, "base", None)
    if store.domains is None or base is None:
        return {"restricted": False, "communities_hidden": 0}
    visible = set(store.communities) | set(getattr(store, "partial_communities", ()) or ())
    return {"restricted": True, "communities_hidden": sum(1 for c in base.communities if c not in visible)}


def mappable_document_share(store: IndexStore) -> float:
    """Share of the store's documents that lie under at least one report it can map (any level):
    what a global answer could reach at best, for a restricted caller within its view."""
    units: set[str] = set()
    for cid in store.reports:
        units |= community_units(store, cid)
    return _share(len(_documents(store, units)), len(store.docs))


def global_coverage(
    store: IndexStore,
    mapped: Sequence[str],
    *,
    map_calls: int,
    map_failed: int,
    points: dict[str, int],
    selection: dict[str, Any] | None,
) -> dict[str, Any]:
    """Coverage of a global answer that mapped the reports of `mapped` (community ids)."""
    from collections import Counter

    reports = store.reports
    mapped = list(dict.fromkeys(mapped))
    # Levels read by column, totals from the store's per-level lists: a global answer at a
    # million entities otherwise built every report's row.
    mapped_by_level = Counter(reports.value(c, "level") for c in mapped if c in reports)
    by_level = [{"level": lvl, "mapped": n, "reports": len(store.reports_by_level.get(lvl, ()))}
                for lvl, n in sorted(mapped_by_level.items())]
    units: set[str] = set()
    for cid in mapped:
        units |= community_units(store, cid)
    docs = _documents(store, units)
    return {
        "reports_mapped": len(mapped),
        "reports_in_index": len(reports),
        "by_level": by_level,
        "units_under": len(units),
        "units_in_index": len(store.units),
        "unit_share": _share(len(units), len(store.units)),
        "documents_under": len(docs),
        "documents_in_index": len(store.docs),
        "document_share": _share(len(docs), len(store.docs)),
        "map_calls": map_calls,
        "map_failed": map_failed,
        "points": dict(points),
        "selection": selection,
    }


def seed_facts(store: IndexStore, seeds: Sequence[str], named: Iterable[str]) -> list[dict[str, str]]:
    """Each seed entity with its title and how it was found."""
    named = set(named)
    return [
        {"entity_id": e, "title": store.entities.value(e, "title") or e,
         "found_by": "name" if e in named else "vector"}
        for e in seeds
    ]


def context_coverage(store: IndexStore, unit_ids: Iterable[str], tokens: int, budget: int) -> dict[str, Any]:
    """Units and documents in a context, and the share of its token budget it used."""
    units = {u for u in unit_ids if u in store.units}
    return {
        "units": len(units),
        "documents": len(_documents(store, units)),
        "context_tokens": tokens,
        "budget_tokens": budget,
        "budget_used": _share(tokens, budget),
    }


def _pct(share: float | None) -> str:
    return f"{100 * (share or 0.0):.0f}%"


def describe(coverage: dict[str, Any]) -> list[str]:
    """Lines for the shell (format_answer): what the answer read, in a sentence or two."""
    if not coverage:
        return []
    method = coverage.get("method")
    lines = []
    if method == "global":
        levels = ", ".join(f"{b['mapped']} of {b['reports']} at level {b['level']}" for b in coverage.get("by_level") or [])
        lines.append(
            f"Coverage: {coverage.get('reports_mapped', 0)} reports mapped ({levels or 'none'}; "
            f"{coverage.get('reports_in_index', 0)} in the index); under them {_pct(coverage.get('document_share'))} "
            f"of documents, {_pct(coverage.get('unit_share'))} of text units"
        )
        pts = coverage.get("points") or {}
        lines.append(
            f"  map answers failed: {coverage.get('map_failed', 0)} of {coverage.get('map_calls', 0)}; points kept "
            f"{pts.get('kept', 0)}, dropped {pts.get('dropped', 0)} (scored 0: {pts.get('zero_score', 0)}, "
            f"from pruned reports: {pts.get('unselected', 0)})"
        )
        sel = coverage.get("selection")
        if sel:
            lines.append(
                f"  dynamic selection: {sel.get('rated', 0)} rated, {sel.get('pruned', 0)} pruned, "
                f"{sel.get('descended', 0)} descended, threshold {sel.get('threshold')}"
                + (f" (fell back to a level: {sel['fallback']})" if sel.get("fallback") else "")
            )
            if sel.get("unrated"):
                lines.append(
                    f"  rating budget of {sel.get('max_rated')} reached: {sel['unrated']} reports left unrated and "
                    f"unread (rated nearest the question first, by {sel.get('rating_order') or 'report rating'})"
                )
    elif method in ("local", "drift"):
        seeds = ", ".join(f"{s['title']} ({s['found_by']})" for s in coverage.get("seeds") or []) or "none"
        lines.append(
            f"Coverage: seeds {seeds}; {coverage.get('hops', 0)} hop(s); {coverage.get('units', 0)} units from "
            f"{coverage.get('documents', 0)} documents; {_pct(coverage.get('budget_used'))} of the context budget"
        )
        if coverage.get("basic_ranking"):
            lines.append(f"  first places guaranteed against basic search's {coverage['basic_ranking']} ranking"
                         + (f" ({coverage['basic_fusion']} fusion)" if coverage.get("basic_fusion") else "")
                         + (f" (reranker failed: {coverage['rerank_error']})" if coverage.get("rerank_error") else ""))
        if method == "drift":
            lines.append(f"  primer reports: {coverage.get('primer_reports', 0)}; follow-ups: {coverage.get('follow_ups', 0)}")
    elif method == "basic":
        sim = coverage.get("last_similarity")
        lines.append(
            f"Coverage: k {coverage.get('k')}, {coverage.get('units', 0)} units from {coverage.get('documents', 0)} "
            f"documents, ranked {coverage.get('ranking', 'dense')}"
            + (f" ({coverage['fusion']} fusion)" if coverage.get("fusion") else "")
            + "; last unit kept at similarity "
            f"{'n/a' if sim is None else f'{sim:.3f}'}; {_pct(coverage.get('budget_used'))} of the context budget"
        )
        if coverage.get("rerank_error"):
            lines.append(f"  the reranker failed, hybrid order kept: {coverage['rerank_error']}")
    view = coverage.get("view") or {}
    if view.get("restricted"):
        lines.append(f"  within this key's view; communities hidden from it: {view.get('communities_hidden', 0)}")
    return lines
