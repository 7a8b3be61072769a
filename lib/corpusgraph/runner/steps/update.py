"""Incremental update: new, changed and deleted documents, without paying for a rebuild.

This module holds update's own steps (incremental chunk and communities, and the cost summary);
they are registry entries recorded under the names "chunk", "communities" and "cost", like the
stages they stand in for, so the `runs` and `llm_calls` rows of an update read as before.

What each step redoes, and why it is enough:

- ingest (steps.ingest.ingest): documents are keyed by content hash, so a new file is a new row, an
  edited file is a new row plus its old version soft-deleted, and a vanished file is
  soft-deleted.
- chunk (steps.update.chunk): only live documents without units are chunked; units of dead
  documents are removed, both by Delta MERGE. Unit ids are content hashes, so untouched
  documents keep theirs.
- extract (steps.index.extract): sends only units with no stored extraction, i.e. the new ones.
- resolve (steps.index.resolve, runner/steps/resolve.py): new mentions are resolved against the stored
  pair decisions, not re-resolved. Nodes (one per normalised name) and candidate pairs are
  recomputed from the stored extractions of live units (cheap Spark, no LLM). Each node has a
  signature, a hash of what a pair score and an adjudication request read from it (key, title,
  type, descriptions, neighbour names); a pair whose two signatures match its row in
  `resolve_pairs` (and whose scoring and prompt fingerprints still hold) keeps its stored score
  and LLM verdict. Only pairs touching a new or changed node, i.e. a name the added or deleted
  units mention, are scored, and only those of them in the ambiguous band go to the LLM; pairs
  whose endpoint vanished drop out. Connected components (with the chain guard) then run over
  all merge edges, and entities, aliases, relationships and claims are rebuilt from live
  mentions, so the tables equal a full rebuild's: a reused decision is the one the rebuild would
  compute, since everything it depends on is in the signatures and fingerprints. Entities,
  relationships and claims that only deleted units supported disappear because their extractions
  are no longer live. The stage's rows say what was redone: pairs_scored, pairs_reused,
  pairs_dropped, adjudicated, adjudications_reused.
- communities (steps.update.communities): the previous partition is extended to new nodes by
  weighted neighbour majority, level by level (graph/extend.py); its modularity on the new graph
  is compared with the modularity recorded when it was detected. Past `update.redetect_drift`
  (relative loss) the graph is re-detected in full; otherwise the partition is kept. Either way
  the table is written by MERGE, and community ids are hashes of their members, so an unchanged
  community keeps its id.
- reports (steps.index.reports): only communities whose (id, built_from) has no report are sent: those
  whose membership changed (new id), whose content changed (new built_from), and their ancestors
  (whose members or child reports changed with them).
- embed (steps.index.embed): only items whose text hash has no vector.

The run is pipeline `update` of the registry (runner/registry.py), recorded in `runs` (kind "update")
with what was redone, and next to it (the `cost` step) the estimated cost of a full rebuild of
the live corpus (estimate/rates.py, at the warehouse's own rates).
"""

from __future__ import annotations

from corpusgraph.config import (ChunkSection, CommunitiesSection, EmbeddingSection, EstimateSection, ExtractSection,
                                LLMSection, ReportsSection, ResolveSection, UpdateSection)
from corpusgraph.estimate.model import CostSections
from corpusgraph.estimate.rates import estimate_warehouse
from corpusgraph.llm.base import Usage
from corpusgraph.runner.handoff import save
from corpusgraph.runner.run import StageContext, StageResult
from corpusgraph.runner.steps.index import graph_arrays, membership_frame

__all__ = ["chunk", "communities", "cost"]


def chunk(st: StageContext, *, chunk: ChunkSection) -> StageResult:
    """Only live documents without units are chunked; units of dead documents are removed."""
    from pyspark.sql import functions as F

    from corpusgraph.stages import chunk as chunk_stage

    docs, units = st.tables.read("documents"), st.tables.read("text_units")
    live = docs.where(~F.col("deleted"))
    had_units = units.select("doc_id").distinct()
    # Materialise both sets before writing: they are defined against the table being changed.
    new_docs = save(st, live.join(had_units, "doc_id", "left_anti"), "new-docs")
    dead = save(st, units.join(live.select("doc_id"), "doc_id", "left_anti").select("unit_id", "doc_id"), "dead-units")
    gone_docs = dead.select("doc_id").distinct().join(docs.select("doc_id", "source_uri"), "doc_id")
    changed = new_docs.select("source_uri").distinct().join(gone_docs.select("source_uri"), "source_uri", "left_semi").count()
    n_new_docs, n_gone_docs, n_dead = new_docs.count(), gone_docs.count(), dead.count()
    if n_dead:
        st.tables.delete_matching("text_units", dead, "unit_id")
    n_added = 0
    if n_new_docs:
        added = save(st, chunk_stage.chunk_documents(new_docs, chunk), "added-units")
        n_added = added.count()
        st.tables.merge("text_units", added, update=False)
    return StageResult(rows={"docs_added": n_new_docs - changed, "docs_changed": changed,
                             "docs_deleted": n_gone_docs - changed, "units_added": n_added, "units_removed": n_dead,
                             "text_units": st.tables.read("text_units").count()})


def communities(st: StageContext, *, communities: CommunitiesSection, update: UpdateSection) -> StageResult:
    """The stored partition extended to new nodes, kept unless its modularity drifted past
    update.redetect_drift, else detected again (stages/communities.extend_or_detect); written by
    MERGE either way."""
    from corpusgraph.stages import communities as comm_stage

    ents, rels = st.tables.read("entities"), st.tables.read("relationships")
    ids, a, b, w, _ = graph_arrays(ents, rels)
    old_rows = st.tables.read("communities").select("community_id", "level", "parent_id", "entity_ids",
                                                    "graph_version", "modularity").toArrow().to_pylist()
    membership, d = comm_stage.extend_or_detect(ids, a, b, w, old_rows, communities, update.redetect_drift)
    fresh = save(st, comm_stage.communities_from_membership(membership_frame(st.spark, membership), ents, rels), "out")
    before = {r["community_id"] for r in old_rows}
    after = {r["community_id"] for r in fresh.select("community_id").collect()}
    st.tables.merge("communities", fresh, delete_missing=True)
    q_rec, q_ext, drift = d["modularity_recorded"], d["modularity_extended"], d["drift"]
    result = StageResult(rows={"entities": d["entities"], "new_nodes": d["new_nodes"], "redetected": d["redetected"],
                               "communities": len(after), "communities_new": len(after - before),
                               "communities_gone": len(before - after), "modularity_recorded": round(q_rec, 4),
                               "modularity_extended": round(q_ext, 4), "drift": round(drift, 4)})
    result.notes.append(
        ("re-detected in full" if d["redetected"] else "kept the partition and placed new nodes")
        + f": recorded modularity {q_rec:.3f}, extended {q_ext:.3f}, drift {drift:.3f} "
        f"(threshold {update.redetect_drift})")
    return result


def cost(st: StageContext, *, update: UpdateSection, extract: ExtractSection, resolve: ResolveSection,
         reports: ReportsSection, embeddings: EmbeddingSection, llm: LLMSection, estimate: EstimateSection
         ) -> StageResult:
    """What this update redid and paid, next to what a full rebuild would cost at the warehouse's
    own rates (estimate/rates.py; the cost model's sections are this step's own)."""
    spent = Usage()
    for r in st.earlier.values():
        if r.usage is not None:
            spent.merge(r.usage)
    rows = {
        "units_extracted": st.earlier["extract"].rows.get("sent", 0),
        "communities_reported": st.earlier["reports"].rows.get("sent", 0),
        "redetected": st.earlier["communities"].rows["redetected"],
        "llm_calls": spent.calls, "tokens": spent.tokens_in + spent.tokens_out,
    }
    result = StageResult(rows=rows)
    if update.estimate_full_rebuild:
        est = estimate_warehouse(st.tables, CostSections(extract, resolve, reports, embeddings, llm, estimate),
                                 st.prompt_path)
        rows.update(full_rebuild_calls=est.llm_calls, full_rebuild_tokens=est.llm_tokens,
                    token_fraction=round(rows["tokens"] / est.llm_tokens, 4) if est.llm_tokens else 0.0)
        result.notes.append(f"this update: {rows['tokens']:,} tokens in {spent.calls} calls; a full rebuild: "
                            f"about {est.llm_tokens:,} tokens in {est.llm_calls} calls ({est.rates.source})")
    return result
