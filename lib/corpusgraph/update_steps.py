"""Update's own steps: incremental chunk and communities, and the cost summary (update.py says
what each step of an update redoes and why that is enough).

They are registry entries recorded under the names "chunk", "communities" and "cost", like the
stages they stand in for, so the `runs` and `llm_calls` rows of an update read as before.
"""

from __future__ import annotations

import numpy as np

from .config import ChunkSection, CommunitiesSection, UpdateSection
from .graph.extend import extend_partition, modularity, old_partition
from .handoff import save
from .llm.base import Usage
from .run import StageContext, StageResult
from .steps import graph_arrays, membership_frame

__all__ = ["chunk", "communities", "cost"]


def chunk(st: StageContext, *, chunk: ChunkSection) -> StageResult:
    """Only live documents without units are chunked; units of dead documents are removed."""
    from pyspark.sql import functions as F

    from .stages import chunk as chunk_stage

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
    """The stored partition extended to new nodes (graph/extend.py), kept unless its modularity
    drifted past update.redetect_drift, else detected again; written by MERGE either way."""
    from .graph.leiden import normalise_edges
    from .stages import communities as comm_stage

    ents, rels = st.tables.read("entities"), st.tables.read("relationships")
    ids, a, b, w, _ = graph_arrays(ents, rels)
    old_rows = st.tables.read("communities").select("community_id", "level", "parent_id", "entity_ids",
                                                    "graph_version", "modularity").toArrow().to_pylist()
    old = old_partition(ids, old_rows)
    edges, weights = normalise_edges(len(ids), np.stack([a, b], axis=1).astype(np.int64) if len(a) else
                                     np.zeros((0, 2), np.int64), w)
    rows = {"entities": len(ids), "new_nodes": int((old.labels[0] < 0).sum()) if old.labels else len(ids)}
    q_rec = old.recorded.get(0, float("nan"))
    redetect, q_ext, drift = True, float("nan"), float("nan")
    if old.labels and len(ids) and np.isfinite(q_rec) and q_rec > 0:
        labels, parents = extend_partition(len(ids), edges, weights, old)
        q_ext = modularity(len(ids), edges, weights, labels[0])
        drift = (q_rec - q_ext) / q_rec if np.isfinite(q_ext) else float("inf")
        redetect = not drift <= update.redetect_drift
    if redetect:
        membership = comm_stage.detect(ids, a, b, w, communities)
    else:
        membership = comm_stage.kept_membership(ids, labels, parents, old.versions, old.recorded)
    fresh = save(st, comm_stage.communities_from_membership(membership_frame(st.spark, membership), ents, rels), "out")
    before = {r["community_id"] for r in old_rows}
    after = {r["community_id"] for r in fresh.select("community_id").collect()}
    st.tables.merge("communities", fresh, delete_missing=True)
    result = StageResult(rows={**rows, "redetected": int(redetect), "communities": len(after),
                               "communities_new": len(after - before), "communities_gone": len(before - after),
                               "modularity_recorded": round(q_rec, 4), "modularity_extended": round(q_ext, 4),
                               "drift": round(drift, 4)})
    result.notes.append(
        ("re-detected in full" if redetect else "kept the partition and placed new nodes")
        + f": recorded modularity {q_rec:.3f}, extended {q_ext:.3f}, drift {drift:.3f} "
        f"(threshold {update.redetect_drift})")
    return result


def cost(st: StageContext, *, update: UpdateSection) -> StageResult:
    """What this update redid and paid, next to what a full rebuild would cost.

    The rebuild is priced by the run's `price_rebuild` service (update.run_update provides it:
    the estimate module runs pipelines itself, so the registry's modules do not import it)."""
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
        est = st.service("price_rebuild")(st.tables)
        rows.update(full_rebuild_calls=est.llm_calls, full_rebuild_tokens=est.llm_tokens,
                    token_fraction=round(rows["tokens"] / est.llm_tokens, 4) if est.llm_tokens else 0.0)
        result.notes.append(f"this update: {rows['tokens']:,} tokens in {spent.calls} calls; a full rebuild: "
                            f"about {est.llm_tokens:,} tokens in {est.llm_calls} calls ({est.rates.source})")
    return result
