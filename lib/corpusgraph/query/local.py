"""Local search: entities named or implied by the question, their neighbourhood, one LLM call.

Context building (`build_local_context`) is a pure function of the loaded index, the question and
its vector, separate from the LLM call, so it can be tested and benchmarked on its own.

Seeds are the entities whose names appear in the question, then the nearest entity vectors.
The context has five sections, filled in this order, each with a share of max_context_tokens:

    entities 15%, relationships 20%, claims 10%, community reports 15%, text units 40%

A section that needs less than its share passes the rest on to the next one, so the source
text units (filled last, and the only thing cited) get at least 40% and usually more. Units come
last in the filling order but are what the answer leans on: they hold the evidence, the rest
says where to look. Which units, and in what order, is query/retrieval.py's ranking:
personalised PageRank over entities and passages, restarted at the question's entities and
its best dense+BM25 passages, with basic search's first places (query/hybrid.py) kept unless the
graph beats them by the margin (query/adaptive.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatModel
from corpusgraph.query.answer import Answer, answer_over_context, cited_tags, fit_budget, pack_blocks, unique_ordered
from corpusgraph.query.basic import NO_CONTEXT_ANSWER, unit_block
from corpusgraph.query.coverage import context_coverage, seed_facts
from corpusgraph.query.events import emit_context
from corpusgraph.query.hybrid import basic_ranking
from corpusgraph.query.loaded import LoadedIndex
from corpusgraph.query.question import Question
from corpusgraph.query.retrieval import rank_units
from corpusgraph.query.store import IndexStore
from corpusgraph.tokens import count_tokens

__all__ = [
    "LocalContext",
    "SHARES",
    "select_seeds",
    "expand_neighbours",
    "build_local_context",
    "cited_unit_ids",
    "local_coverage",
    "local_search",
]

SHARES: tuple[tuple[str, float], ...] = (
    ("entities", 0.15),
    ("relationships", 0.20),
    ("claims", 0.10),
    ("reports", 0.15),
    ("units", 0.40),
)
_HEADERS = {
    "entities": "-- Entities --",
    "relationships": "-- Relationships --",
    "claims": "-- Claims --",
    "reports": "-- Community reports --",
    "units": "-- Source texts --",
}
# Neighbours kept per question, as a multiple of top_k_entities: a hub seed can have thousands
# of edges, and the entity share of the budget holds a dozen or so lines anyway.
_NEIGHBOURS_PER_SEED_SLOT = 2
# Units behind the relationships in the context are cited too, but capped so one heavily
# attested relationship does not bury the units the context actually showed.
_MAX_RELATIONSHIP_UNITS = 10
# Units ranked for the context, as a multiple of top_k_units; the budget decides how many fit.
_UNITS_RANKED = 2


@dataclass
class LocalContext:
    text: str
    tokens: int
    seed_ids: list[str]
    # What made it into the context, in tag order: entity_ids[0] is [E1], unit_ids[0] is [U1].
    entity_ids: list[str] = field(default_factory=list)
    rel_ids: list[str] = field(default_factory=list)
    claim_ids: list[str] = field(default_factory=list)
    community_ids: list[str] = field(default_factory=list)
    unit_ids: list[str] = field(default_factory=list)
    section_tokens: dict[str, int] = field(default_factory=dict)


def select_seeds(store: IndexStore, question: Question, k: int) -> list[str]:
    """Entities named in the question first (exact evidence), then nearest by vector; k at most."""
    query = np.asarray(question.vector, dtype=np.float32).reshape(1, -1)
    hits = store.vectors("entity").search(query, k)[0]
    nearest = [eid for eid, _ in hits if eid in store.entities]
    return unique_ordered(list(question.named), nearest, limit=k)


def _top(keys: list[np.ndarray], limit: int) -> np.ndarray:
    """Indexes of the `limit` smallest rows by the numeric `keys` (first key first), and every
    row tied with the last of them, so a final sort with a tie-break sees all candidates."""
    order = np.lexsort(keys[::-1])
    if len(order) <= limit:
        return order
    last = tuple(k[order[limit - 1]] for k in keys)
    tied = np.ones(len(order), dtype=bool)
    for k, v in zip(keys, last):
        tied &= k[order] == v
    return np.concatenate([order[:limit], order[limit:][tied[limit:]]])


def expand_neighbours(store: IndexStore, seeds: list[str], limit: int) -> list[str]:
    """One-hop neighbours of the seeds, by summed edge weight to the seeds, then by degree."""
    ents = store.entities
    weights = store.relationships.numpy("weight", 1.0)
    seed_pos = store.positions(seeds)
    others, shares = [], []
    for seed in seeds:
        rels, other = store.edges(seed)
        if not len(rels):
            continue
        keep = (other >= 0) & ~np.isin(other, seed_pos)
        others.append(other[keep]), shares.append(weights[rels][keep])
    if not others:
        return []
    found, inverse = np.unique(np.concatenate(others), return_inverse=True)
    # Summed in the order the edges were met, so a neighbour tied to two seeds outranks one tied
    # to a single seed.
    weight = np.bincount(inverse, weights=np.concatenate(shares), minlength=len(found))
    degree = store.degrees[found]
    near = _top([-weight, -degree], limit)
    ranked = sorted(near.tolist(), key=lambda i: (-weight[i], -degree[i], ents.ids[found[i]]))
    return [ents.ids[found[i]] for i in ranked[:limit]]


def _rank_relationships(store: IndexStore, seeds: list[str], selected: list[str]) -> list[str]:
    """Edges with both ends selected: seed-seed, then seed-neighbour, then the rest; by weight."""
    rels = store.relationships
    src, dst = store.rel_ends
    seed_pos, chosen = store.positions(seeds), store.positions(selected)
    found = []
    for eid in selected:
        edges, other = store.edges(eid)
        if len(edges):
            found.append(edges[np.isin(other, chosen)])
    if not found:
        return []
    edges = np.unique(np.concatenate(found))
    on_seeds = np.isin(src[edges], seed_pos).astype(np.int64) + np.isin(dst[edges], seed_pos)
    weight = rels.numpy("weight", 1.0)[edges]
    order = sorted(range(len(edges)), key=lambda i: (-on_seeds[i], -weight[i], rels.ids[edges[i]]))
    return [rels.ids[edges[i]] for i in order]


def _rank_communities(store: IndexStore, selected: list[str]) -> list[str]:
    """Communities with a report holding selected entities: lowest level first, then by how many."""
    count: Counter[str] = Counter(cid for eid in selected for cid in store.entity_communities.get(eid, ()))
    reports = store.reports
    with_report = [cid for cid in count if cid in reports]

    def key(cid: str):
        return (reports.value(cid, "level"), -count[cid], -reports.value(cid, "rating"), cid)

    return sorted(with_report, key=key)


def _title(store: IndexStore, entity_id: str | None) -> str:
    if not entity_id:
        return "?"
    return store.entities.value(entity_id, "title") or entity_id


def _entity_line(store: IndexStore, i: int, eid: str) -> str:
    ents = store.entities
    if eid not in ents:
        raise KeyError(eid)
    title, kind, text = (ents.value(eid, c) for c in ("title", "type", "description"))
    return f"[E{i}] {title or eid} ({kind or 'entity'}): {(text or '').strip()}"


def _rel_line(store: IndexStore, i: int, rel_id: str) -> str:
    rels = store.relationships
    if rel_id not in rels:
        raise KeyError(rel_id)
    source, target, text = (rels.value(rel_id, c) for c in ("source_id", "target_id", "description"))
    return f"[R{i}] {_title(store, source)} -- {_title(store, target)}: {(text or '').strip()}"


def _claim_line(store: IndexStore, i: int, claim_id: str) -> str:
    c = store.claims[claim_id]
    about = _title(store, c["subject_id"]) + (f" -> {_title(store, c['object_id'])}" if c["object_id"] else "")
    kind = ", ".join(x for x in (c["type"], c["status"]) if x)
    return f"[C{i}] {about}" + (f" ({kind})" if kind else "") + f": {(c['description'] or '').strip()}"


def _report_block(store: IndexStore, i: int, cid: str) -> str:
    rep = store.reports[cid]
    lines = [f"[P{i}] {rep['title'] or cid}: {(rep['summary'] or '').strip()}"]
    lines += [f"- {f['summary']}" for f in rep["findings"] if f and f.get("summary")]
    return "\n".join(lines)


def build_local_context(index: LoadedIndex, question: Question, section: QuerySection,
                        protected: list[str] | None = None) -> LocalContext:
    """Rank the neighbourhood of the question's entities into one tagged, budgeted context.
    `protected`: basic search's ranking, whose first places the unit ranking keeps unless the
    graph beats them (None: basic search's ranking without a reranker, made here)."""
    store = index.store
    if protected is None and section.retrieval.keep_dense > 0:
        protected = basic_ranking(index, question, section, section.retrieval.keep_dense).unit_ids
    seeds = select_seeds(store, question, section.top_k_entities)
    neighbours = expand_neighbours(store, seeds, _NEIGHBOURS_PER_SEED_SLOT * section.top_k_entities)
    selected = seeds + neighbours

    budget = section.max_context_tokens
    carry = 0  # tokens a previous section did not use
    parts: list[str] = []
    chosen: dict[str, list[str]] = {}
    used_by: dict[str, int] = {}
    for name, share in SHARES:
        # Units are ranked by the relationships that made it in, so candidates are built in turn.
        if name == "entities":
            ids = selected
            blocks = [_entity_line(store, i, e) for i, e in enumerate(ids, 1)]
        elif name == "relationships":
            # Among all selected entities, not only those that fit: an edge line names both ends,
            # so it reads on its own even when a tight budget left the entity lines out.
            ids = _rank_relationships(store, seeds, selected)
            blocks = [_rel_line(store, i, r) for i, r in enumerate(ids, 1)]
        elif name == "claims":
            ids = unique_ordered([], [c for e in selected for c in store.entity_claims.get(e, ())])
            blocks = [_claim_line(store, i, c) for i, c in enumerate(ids, 1)]
        elif name == "reports":
            ids = _rank_communities(store, selected)
            blocks = [_report_block(store, i, c) for i, c in enumerate(ids, 1)]
        else:
            # Personalised PageRank over entities and passages (query/retrieval.py), not only
            # the seeds' own units: multi-hop evidence shares an entity with a seed passage.
            ids = rank_units(index.retriever(), question, section.retrieval, _UNITS_RANKED * section.top_k_units,
                             protected)
            blocks = [unit_block(store, f"U{i}", u) for i, u in enumerate(ids, 1)]
        # The last section takes whatever is left, so rounding never strands tokens.
        room = budget - sum(used_by.values()) if name == "units" else int(budget * share) + carry
        header = _HEADERS[name]
        overhead = count_tokens("\n\n" + header + "\n")  # the header and the gap before it
        taken, used = pack_blocks(blocks, room - overhead) if blocks else ([], 0)
        if taken:
            used += overhead
            parts.append(header + "\n" + "\n".join(taken))
        chosen[name] = ids[: len(taken)]
        used_by[name] = used
        carry = max(room - used, 0)

    # One count of the joined text (it is the bulk of the context-building time after retrieval);
    # a cut, rarely needed since every block was counted in, only then costs a second one.
    text = "\n\n".join(parts)
    tokens = count_tokens(text)
    if tokens > budget:
        text = fit_budget(text, budget)
        tokens = count_tokens(text)
    return LocalContext(
        text=text,
        tokens=tokens,
        seed_ids=seeds,
        entity_ids=chosen["entities"],
        rel_ids=chosen["relationships"],
        claim_ids=chosen["claims"],
        community_ids=chosen["reports"],
        unit_ids=chosen["units"],
        section_tokens=used_by,
    )


def cited_unit_ids(store: IndexStore, ctx: LocalContext, answer_text: str | None) -> list[str]:
    """Units the model cited ([U#], then the units of cited [R#]), then the context's units,
    then the units behind the context's relationships (capped)."""
    n_units, n_rels = len(ctx.unit_ids), len(ctx.rel_ids)
    cited_units = [ctx.unit_ids[n - 1] for n in cited_tags(answer_text, "U") if 0 < n <= n_units]
    cited_rels = [ctx.rel_ids[n - 1] for n in cited_tags(answer_text, "R") if 0 < n <= n_rels]

    def rel_units(rel_ids: list[str]) -> list[str]:
        return [u for r in rel_ids for u in store.relationships[r]["unit_ids"]]

    first = unique_ordered(cited_units, rel_units(cited_rels))
    extra = [u for u in unique_ordered([], rel_units(ctx.rel_ids)) if u not in ctx.unit_ids and u not in first]
    return [u for u in unique_ordered(first, ctx.unit_ids + extra[:_MAX_RELATIONSHIP_UNITS]) if u in store.units]


# Neighbourhood expansion follows one hop from the seeds (expand_neighbours); the unit ranking's
# walk reaches further, but only through what these hops put in the context is anything shown.
HOPS = 1


def local_coverage(store: IndexStore, question: Question, ctx: LocalContext, section: QuerySection) -> dict:
    """Seeds and how each was found, hops, units and documents in the context, budget used."""
    return {"method": "local", "seeds": seed_facts(store, ctx.seed_ids, question.named), "hops": HOPS,
            **context_coverage(store, ctx.unit_ids, ctx.tokens, section.max_context_tokens)}


def local_search(index: LoadedIndex, chat: ChatModel, question: Question, section: QuerySection,
                 prompt: str, reranker=None) -> Answer:
    store = index.store
    basic = basic_ranking(index, question, section, max(section.retrieval.keep_dense, 1), reranker)
    ctx = build_local_context(index, question, section, basic.unit_ids)
    details = {
        "seeds": len(ctx.seed_ids),
        "entities": len(ctx.entity_ids),
        "relationships": len(ctx.rel_ids),
        "claims": len(ctx.claim_ids),
        "reports": len(ctx.community_ids),
        "units": len(ctx.unit_ids),
    }
    coverage = {**local_coverage(store, question, ctx, section), **basic.guard_coverage()}
    emit_context(store, ctx.unit_ids, True, ctx.tokens, coverage)  # before the model call
    if not ctx.text.strip():
        return Answer(question=question.text, answer=NO_CONTEXT_ANSWER, method="local", details=details, coverage=coverage)
    return answer_over_context(chat, "local", question.text, ctx.text, prompt, section.max_tokens, store,
                               lambda text: cited_unit_ids(store, ctx, text), context_tokens=ctx.tokens,
                               details=details, coverage=coverage)
