"""Retrieval only: the context a method would answer from, as data, and no answer.

For an app that writes its own answers with its own model: the ranked units (with their text,
document and place in it), and for local search the entities, relationships, claims and
community reports around the question, each tagged as the answer prompt tags them ([U1], [E1],
[R1], [C1], [P1]); for global search the reports of the level, nearest the question first. The
same builders the answering methods use make them (basic.py, local.py, global_search.py), so a
context here is the context an answer there would be written from, budget and all.

No model call for basic and local. Global ranks reports with none; `map=True` runs global
search's rating and map calls and returns their points instead (the reduce is the caller's).
DRIFT writes its own follow-up questions with the model, so it has no context of this kind.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from corpusgraph.config import QuerySection
from corpusgraph.query.answer import pack_blocks
from corpusgraph.query.basic import basic_coverage, build_basic_context
from corpusgraph.query.coverage import community_units, global_coverage
from corpusgraph.query.events import citation_row
from corpusgraph.query.global_map import report_block
from corpusgraph.query.global_search import MAX_CITED_UNITS, choose_level, global_coverage_of, global_points
from corpusgraph.query.hybrid import basic_ranking
from corpusgraph.query.loaded import LoadedIndex
from corpusgraph.query.local import build_local_context, local_coverage
from corpusgraph.query.question import Question
from corpusgraph.query.store import IndexMissingError, IndexStore
from corpusgraph.tokens import count_tokens

__all__ = ["RetrievedContext", "basic_context", "local_context", "global_context", "NO_DRIFT_CONTEXT"]

NO_DRIFT_CONTEXT = ("DRIFT needs the model to write its follow-up questions, so it has no retrieval-only "
                    "context; ask for local or global")


@dataclass
class RetrievedContext:
    question: str
    method: str
    units: list[dict[str, Any]] = field(default_factory=list)
    entities: list[dict[str, Any]] = field(default_factory=list)
    relationships: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)  # global with map=True only
    coverage: dict[str, Any] = field(default_factory=dict)
    context_tokens: int = 0
    text: str | None = None  # the context as the answer prompt would hold it (include_text)
    route_reason: str | None = None
    standalone_question: str | None = None
    llm_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unit(store: IndexStore, unit_id: str, tag: str | None, rank: int, similarity: float | None) -> dict[str, Any]:
    row = citation_row(store, unit_id, tag) or {}
    unit = store.units[unit_id]
    row.update({"text": unit["text"], "ordinal": unit.get("ordinal"), "char_start": unit.get("char_start"),
                "char_end": unit.get("char_end"), "rank": rank,
                "similarity": None if similarity is None else round(float(similarity), 6)})
    return row


def _similarities(store: IndexStore, unit_ids: list[str], vector: np.ndarray) -> list[float]:
    """Cosine of each unit's vector with the question's (the same vectors dense search reads)."""
    if not unit_ids:
        return []
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    return [float(x) for x in store.vectors("text_unit").vectors(unit_ids) @ query]


def basic_context(index: LoadedIndex, question: Question, section: QuerySection, reranker=None) -> RetrievedContext:
    """Basic search's context: its units, in its order, with their similarity to the question."""
    store = index.store
    ranking = basic_ranking(index, question, section, section.top_k_units, reranker)
    ctx = build_basic_context(store, question.vector, section, ranking)
    units = [_unit(store, u, f"U{i}", i, s) for i, (u, s) in enumerate(zip(ctx.unit_ids, ctx.similarities), 1)]
    return RetrievedContext(question=question.text, method="basic", units=units, context_tokens=ctx.tokens,
                            coverage=basic_coverage(store, ctx, section), text=ctx.text)


def local_context(index: LoadedIndex, question: Question, section: QuerySection, reranker=None) -> RetrievedContext:
    """Local search's context: entities, relationships, claims, reports and units, as tagged."""
    store = index.store
    basic = basic_ranking(index, question, section, max(section.retrieval.keep_dense, 1), reranker)
    ctx = build_local_context(index, question, section, basic.unit_ids)
    seeds, named = set(ctx.seed_ids), set(question.named)
    entities = []
    for i, eid in enumerate(ctx.entity_ids, 1):
        ent = store.entities[eid]
        entities.append({"tag": f"E{i}", "entity_id": eid, "title": ent.get("title"), "type": ent.get("type"),
                         "description": ent.get("description"), "seed": eid in seeds,
                         "found_by": ("name" if eid in named else "vector") if eid in seeds else "neighbour"})
    rels = []
    for i, rid in enumerate(ctx.rel_ids, 1):
        rel = store.relationships[rid]
        rels.append({"tag": f"R{i}", "rel_id": rid, "source_id": rel["source_id"], "target_id": rel["target_id"],
                     "source": _title(store, rel["source_id"]), "target": _title(store, rel["target_id"]),
                     "description": rel.get("description"), "weight": rel.get("weight"),
                     "unit_ids": [u for u in rel.get("unit_ids") or () if u in store.units]})
    claims = []
    for i, cid in enumerate(ctx.claim_ids, 1):
        c = store.claims[cid]
        claims.append({"tag": f"C{i}", "claim_id": cid, **{k: c.get(k) for k in (
            "subject_id", "object_id", "type", "status", "description", "unit_id")}})
    reports = [_report(store, cid, f"P{i}") for i, cid in enumerate(ctx.community_ids, 1)]
    sims = _similarities(store, ctx.unit_ids, question.vector)
    units = [_unit(store, u, f"U{i}", i, s) for i, (u, s) in enumerate(zip(ctx.unit_ids, sims), 1)]
    coverage = {**local_coverage(store, question, ctx, section), **basic.guard_coverage()}
    return RetrievedContext(question=question.text, method="local", units=units, entities=entities,
                            relationships=rels, claims=claims, reports=reports, context_tokens=ctx.tokens,
                            coverage=coverage, text=ctx.text, details={"section_tokens": ctx.section_tokens})


def _title(store: IndexStore, entity_id: str | None) -> str | None:
    if not entity_id or entity_id not in store.entities:
        return None
    return store.entities.value(entity_id, "title") or entity_id


def _report(store: IndexStore, cid: str, tag: str | None) -> dict[str, Any]:
    rep = store.reports[cid]
    return {"tag": tag, "community_id": cid, "level": rep.get("level"), "title": rep.get("title"),
            "summary": rep.get("summary"), "rating": rep.get("rating"),
            "findings": [f for f in rep.get("findings") or () if f]}


def rank_reports(store: IndexStore, level: int, vector: np.ndarray | None) -> list[str]:
    """The level's reports nearest the question (report vectors) first, then the rest by rating.
    A restricted view's per-domain reports have no vectors and come in the second group."""
    ids = list(store.reports_by_level.get(level, ()))
    at_level = set(ids)
    near: list[str] = []
    if vector is not None and ids:
        try:
            index = store.vectors("community_report")
        except IndexMissingError:
            index = None
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        if index is not None and index.dim == query.shape[1]:
            hits = index.search(query, min(len(index), max(4 * len(ids), 50)))[0]
            near = [c for c, _ in hits if c in at_level]
    rest = sorted(at_level - set(near), key=lambda c: (-(store.reports[c]["rating"] or 0.0), c))
    return near + rest


def global_context(store: IndexStore, question: str, section: QuerySection, level: int | None,
                   vector: Callable[[], np.ndarray], chat=None, map_prompt: str | None = None,
                   rate_prompt: str | None = None) -> RetrievedContext:
    """Global search's reports, ranked and packed under the budget (no model call); with `chat`
    and the map prompt, its map's points instead (rating and map calls, no reduce)."""
    out = RetrievedContext(question=question, method="global")
    if not store.report_levels():
        out.coverage = {"method": "global", **global_coverage(store, [], map_calls=0, map_failed=0, points={},
                                                              selection=None)}
        out.details["error"] = "no community reports in the index; run `corpusgraph index` first"
        return out
    if chat is not None and map_prompt is not None:
        read, community_ids, details, tokens = global_points(store, chat, question, section, map_prompt, level,
                                                             rate_prompt, vector)
        points = sorted(read.points, key=lambda p: -p.score)
        out.points = [{"tag": f"P{i}", "description": p.description, "score": p.score,
                       "community_ids": list(p.community_ids)} for i, p in enumerate(points, 1)]
        details.update({"map_failed": read.failed, "points_returned": read.returned,
                        "points_zero_score": read.zero_score, "points_unselected": read.unselected,
                        "points_in_reduce": len(points)})
        out.reports = [_report(store, c, None) for c in community_ids if c in store.reports]
        out.coverage = global_coverage_of(store, community_ids, details, section)
        out.context_tokens, out.details = tokens, details
        out.units = _report_units(store, [c for p in points for c in p.community_ids])
        return out
    used_level = choose_level(store, section.global_.level if level is None else level)
    ranked = rank_reports(store, used_level, vector())
    blocks = [report_block(store, i, c) for i, c in enumerate(ranked, 1)]
    taken, _ = pack_blocks(blocks, section.max_context_tokens, sep="\n\n")
    chosen = ranked[: len(taken)]
    out.text = "\n\n".join(taken)
    out.context_tokens = count_tokens(out.text)
    out.reports = [_report(store, c, f"P{i}") for i, c in enumerate(chosen, 1)]
    out.units = _report_units(store, chosen)
    out.details = {"level": used_level, "reports_at_level": len(ranked)}
    out.coverage = {"method": "global", **global_coverage(store, chosen, map_calls=0, map_failed=0, points={},
                                                          selection=None)}
    return out


def _report_units(store: IndexStore, community_ids: list[str]) -> list[dict[str, Any]]:
    """Units under the reports, taken report by report in their order, at most MAX_CITED_UNITS."""
    seen: dict[str, None] = {}
    for cid in community_ids:
        for u in sorted(community_units(store, cid)):
            seen.setdefault(u, None)
            if len(seen) >= MAX_CITED_UNITS:
                break
        if len(seen) >= MAX_CITED_UNITS:
            break
    return [_unit(store, u, None, i, None) for i, u in enumerate(seen, 1)]
