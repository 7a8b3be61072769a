"""DRIFT search: community reports prime the answer, local search follows it up, one reduce.

For questions between global and local: "how did the guild's treaty change the harbour?" needs
the broad picture of a few communities and the details of a few entities. Three steps
(Microsoft's DRIFT, simplified):

1. Primer. The `drift_primer_reports` community reports nearest the question (FAISS over the
   report embeddings; without that index, the communities of the nearest entities) go into
   one call that returns a partial answer and up to `drift_breadth` follow-up questions.
2. Follow-ups, `drift_depth` rounds. Each follow-up question gets its own local-search context
   (query/local.py); all of a round's calls go in one batch, so they run concurrently. Each
   answer may propose further follow-ups for the next round (the best `drift_breadth`, new
   ones only).
3. Reduce. The primer's and the follow-ups' answers become the points of the global reduce
   prompt, which writes the final answer.

Calls: 1 + breadth x depth + 1; latency: depth + 2 rounds. Citations: units the follow-up
answers cited, then the units of their contexts, then the primer communities' units. A step
whose answer fails or does not parse costs that step only and is counted in `details`.
"""

from __future__ import annotations

from collections import Counter
import numpy as np

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatModel, ChatRequest, Embedder
from corpusgraph.query.answer import (Answer, ask_once, cited_tags, citations_for, fill_prompt, fit_budget, pack_blocks,
                                      unique_ordered)
from corpusgraph.query.coverage import context_coverage, seed_facts
from corpusgraph.query.events import emit_context
from corpusgraph.query.global_search import report_block
from corpusgraph.query.loaded import LoadedIndex
from corpusgraph.query.local import HOPS, build_local_context, select_seeds
from corpusgraph.query.question import Question, parse_question
from corpusgraph.query.store import IndexMissingError, IndexStore
from corpusgraph.tokens import count_tokens

__all__ = ["drift_schema", "parse_step", "primer_reports", "drift_coverage", "drift_search", "MAX_CITED_UNITS"]

MAX_CITED_UNITS = 10


def drift_schema(max_follow_ups: int) -> dict:
    """JSON schema of a primer or follow-up answer: a partial answer and follow-up questions."""
    return {
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "follow_ups": {"type": "array", "items": {"type": "string"}, "maxItems": max_follow_ups},
        },
        "required": ["answer", "follow_ups"],
    }


def parse_step(text: str | None, max_follow_ups: int) -> tuple[str, list[str]] | None:
    """(answer, follow-up questions) of one step, or None when it is not such a JSON object.
    Blank and repeated follow-ups are dropped; a missing list means none."""
    from corpusgraph.llm.parse import parse_json_answer

    obj, _ = parse_json_answer(text)
    if not isinstance(obj, dict) or not isinstance(obj.get("answer"), str):
        return None
    raw = obj.get("follow_ups")
    items = raw if isinstance(raw, list) else []
    follow = unique_ordered([], [q.strip() for q in items if isinstance(q, str) and q.strip()])
    return obj["answer"].strip(), follow[:max_follow_ups]


def primer_reports(store: IndexStore, question: Question, k: int) -> tuple[list[str], str]:
    """(community ids, how they were found): the k reports nearest the question."""
    query = np.asarray(question.vector, dtype=np.float32).reshape(1, -1)
    try:
        index = store.vectors("community_report")
    except IndexMissingError:
        index = None
    if index is not None and index.dim == query.shape[1]:
        # Over-fetch: the index may hold reports this store does not (failed, or another domain's).
        hits = index.search(query, k * 4)[0]
        ids = [cid for cid, _ in hits if cid in store.reports][:k]
        # A restricted view's per-domain reports (access.py) have no vectors: the entities' own
        # communities share the primer with the nearest reports, so they can reach it.
        if ids and getattr(store, "partial_communities", None):
            near = _by_entities(store, question, k)
            ids = unique_ordered(ids[: (k + 1) // 2], near + ids, limit=k)
        if ids:
            return ids, "report_vectors"
    # No report vectors: the communities of the question's entities, by how many it touches.
    return _by_entities(store, question, k), "entity_communities"


def _by_entities(store: IndexStore, question: Question, k: int) -> list[str]:
    seeds = select_seeds(store, question, max(k, 5))
    count: Counter[str] = Counter(c for e in seeds for c in store.entity_communities.get(e, ()) if c in store.reports)
    ranked = sorted(count, key=lambda c: (-count[c], -store.reports[c]["rating"], c))
    return ranked[:k]


def drift_coverage(store: IndexStore, primer_ids: list[str], primer_tokens: int, contexts: list,
                   section: QuerySection) -> dict:
    """Primer reports, then what the follow-up contexts held: their seeds (found by name or vector
    within each follow-up question), units and documents, and the share of the budget the primer
    and follow-up contexts used together (each has the whole budget)."""
    seeds: dict[str, dict] = {}
    units: list[str] = []
    for q, ctx in contexts:
        for seed in seed_facts(store, ctx.seed_ids, q.named):
            seeds.setdefault(seed["entity_id"], seed)
        units.extend(ctx.unit_ids)
    tokens = primer_tokens + sum(ctx.tokens for _, ctx in contexts)
    spent = context_coverage(store, units, tokens, section.max_context_tokens * (1 + len(contexts)))
    return {"method": "drift", "primer_reports": len(primer_ids), "follow_ups": len(contexts),
            "seeds": list(seeds.values()), "hops": HOPS, **spent}


def _step_request(request_id: str, prompt: str, context: str, question: str, section: QuerySection) -> ChatRequest:
    text = fill_prompt(prompt, context=context, question=question, max_follow_ups=section.drift.breadth)
    return ChatRequest(id=request_id, messages=({"role": "user", "content": text},), max_tokens=section.max_tokens,
                       json_schema=drift_schema(section.drift.breadth))


def drift_search(
    index: LoadedIndex,
    chat: ChatModel,
    embedder: Embedder,
    parsed_question: Question,
    section: QuerySection,
    drift_prompt: str,
    reduce_prompt: str,
) -> Answer:
    store = index.store
    question = parsed_question.text
    budget = section.max_context_tokens
    primer_ids, source = primer_reports(store, parsed_question, section.drift.primer_reports)
    details: dict = {"primer_reports": len(primer_ids), "primer_source": source, "follow_ups": [],
                     "rounds": 0, "failed_steps": 0}
    contexts: list[tuple[Question, object]] = []  # (question, LocalContext) of every follow-up
    if not primer_ids:
        return Answer(question=question, answer="", method="drift", details=details,
                      coverage=drift_coverage(store, primer_ids, 0, contexts, section),
                      error="no community reports in the index; run `corpusgraph index` first")
    blocks, _ = pack_blocks([report_block(store, i, c) for i, c in enumerate(primer_ids, 1)], budget, sep="\n\n")
    primer_context = "\n\n".join(blocks)
    context_tokens = count_tokens(primer_context)

    findings: list[str] = []  # partial answers, primer first
    cited: list[str] = []  # units the follow-up answers cited
    shown: list[str] = []  # units the follow-up contexts held
    asked: set[str] = set()  # follow-ups already answered, casefolded
    primer = chat.complete([_step_request("drift-primer", drift_prompt, primer_context, question, section)])
    step = parse_step(primer[0].text, section.drift.breadth) if primer and not primer[0].error else None
    if step is None:
        details["failed_steps"] += 1
        follow_ups = [question]  # no primer: the question itself is the one follow-up
    else:
        findings.append(step[0])
        follow_ups = step[1] or [question]

    for depth in range(section.drift.depth):
        fresh: dict[str, str] = {}  # new questions only, each once (casefolded), in order
        for q in follow_ups:
            if q.casefold() not in asked:
                fresh.setdefault(q.casefold(), q)
        follow_ups = list(fresh.values())[: section.drift.breadth]
        if not follow_ups:
            break
        details["rounds"] += 1
        details["follow_ups"].extend(follow_ups)
        asked.update(q.casefold() for q in follow_ups)
        titles = index.retriever().titles
        parsed = [parse_question(store, q, v, titles=titles) for q, v in zip(follow_ups, embedder.embed(follow_ups))]
        built = [build_local_context(index, q, section) for q in parsed]
        requests = [
            _step_request(f"drift-{depth}-{i}", drift_prompt, ctx.text, q.text, section)
            for i, (q, ctx) in enumerate(zip(parsed, built))
            if ctx.text.strip()
        ]
        kept = [(q, ctx) for q, ctx in zip(parsed, built) if ctx.text.strip()]
        contexts.extend(kept)
        results = chat.complete(requests) if requests else []  # one batch: concurrent
        next_round: list[str] = []
        for (q, ctx), result in zip(kept, results):
            context_tokens += ctx.tokens
            shown.extend(ctx.unit_ids)
            parsed = None if result.error else parse_step(result.text, section.drift.breadth)
            if parsed is None:
                details["failed_steps"] += 1
                continue
            answer, more = parsed
            findings.append(f"{q.text} {answer}")
            cited.extend(ctx.unit_ids[n - 1] for n in cited_tags(answer, "U") if 0 < n <= len(ctx.unit_ids))
            next_round.extend(more)
        details["failed_steps"] += max(len(requests) - len(results), 0)
        follow_ups = next_round

    primer_units = [u for c in primer_ids if c in store.communities for u in store.communities[c]["unit_ids"]]
    unit_ids = [u for u in unique_ordered(cited, shown + primer_units) if u in store.units][:MAX_CITED_UNITS]
    coverage = drift_coverage(store, primer_ids, count_tokens(primer_context), contexts, section)
    if not findings:
        return Answer(question=question, answer="", method="drift", context_tokens=context_tokens, details=details,
                      coverage=coverage,
                      citations=citations_for(unit_ids, store.units, store.docs),
                      error="every DRIFT step failed; no partial answer to reduce")
    points, _ = pack_blocks([f"[P{i}] {f}" for i, f in enumerate(findings, 1)], budget)
    reduce_context = fit_budget("\n".join(points), budget)
    context_tokens += count_tokens(reduce_context)
    emit_context(store, unit_ids, False, context_tokens, coverage)  # the rounds are done: before the reduce
    result = ask_once(chat, "drift-reduce", fill_prompt(reduce_prompt, points=reduce_context, question=question),
                      section.max_tokens)
    return Answer(
        question=question,
        answer=(result.text or "").strip(),
        method="drift",
        citations=citations_for(unit_ids, store.units, store.docs),
        context_tokens=context_tokens,
        error=result.error,
        details=details,
        coverage=coverage,
    )

