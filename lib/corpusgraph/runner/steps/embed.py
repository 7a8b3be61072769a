"""The embed step: pending items -> vectors on Ray -> `embeddings` -> one FAISS index per kind.

Only items whose (kind, id, model, text hash) has no vector are sent (stages/embed.py). An item
the endpoint gave no vector stays pending, is counted and named in the stage's notes, and makes
the run "partial" through its usage errors. The FAISS files are rebuilt from the table: each
kind's vectors are written by Spark to the run's hand-off folder; a Ray task (`build_index`, one
kind at a time) reads them back with pyarrow, batch by batch, into one preallocated float32 matrix
(no Python list per vector), and ann.py chooses, builds and measures the index (exact or
approximate by size). With a local index_dir or hand-off folder the task runs on the driver's
node, which has both; with both on an object store it may run on any node, and writes the files
to a temporary folder there and uploads them to index_dir (storage.s3 says how to reach S3).
The driver gets only each index's metadata: the vectors are corpus-sized (4 bytes per dimension
per item, gigabytes at millions of items), and a cluster's driver is the machine with the least
memory to spare. Their dimensions are checked in Spark first, so kinds of
one model that disagree stop the step before anything is written.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import nullcontext
from pathlib import Path

import numpy as np
from pyspark.sql import functions as F

from corpusgraph.config import EmbeddingSection, RaySection, S3Section, StorageSection
from corpusgraph.runner.handoff import save, saved_rows
from corpusgraph.runner.passes.embed import run_embed_task
from corpusgraph.runner.progress import Work
from corpusgraph.runner.run import StageContext, StageResult
from corpusgraph.stages import embed as embed_stage
from corpusgraph.storage.locations import arrow_filesystem, is_local, local_path
from corpusgraph.tables import spark_schema

__all__ = ["embed", "read_vectors"]


def _mixed_dimensions(model: str, dims) -> ValueError:
    return ValueError(f"embeddings rows of {model} have vectors of {sorted(dims)} dimensions: the endpoint behind "
                      "the model name changed; delete its rows from the embeddings table (or use a new "
                      "embeddings.model name) and embed again")


def read_vectors(path: str, s3: S3Section | None = None) -> tuple[list[str], np.ndarray, int]:
    """(ids, (n, dim) float32 matrix, bytes read) from Parquet files of (id, vector), in file order;
    path is a folder or a URI (s3: how to reach one on S3).

    Every vector must have one and the same length: rows of one model with two dimensions mean
    the endpoint behind the model name changed, and an index over them would be meaningless.
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    if is_local(path):
        found = pads.dataset(path, format="parquet")
    else:
        filesystem, inside = arrow_filesystem(path, s3)
        found = pads.dataset(inside, format="parquet", filesystem=filesystem)
    dataset = pads.dataset(sorted(found.files), format="parquet", filesystem=found.filesystem)
    n = dataset.count_rows()
    ids: list[str] = []
    matrix: np.ndarray | None = None
    at, nbytes = 0, 0
    for batch in dataset.to_batches(columns=["id", "vector"], batch_size=65_536):
        if not batch.num_rows:
            continue
        col = batch.column("vector")
        nbytes += batch.nbytes
        if col.null_count:
            raise ValueError(f"{path}: {col.null_count} embeddings rows have no vector")
        lengths = pc.list_value_length(col)
        lo, hi = pc.min_max(lengths).values()
        if matrix is None:
            matrix = np.empty((n, hi.as_py() or 1), dtype=np.float32)
        dim = matrix.shape[1]
        if lo.as_py() != dim or hi.as_py() != dim:
            raise _mixed_dimensions("one model", {lo.as_py(), hi.as_py(), dim})
        flat = col.flatten().to_numpy(zero_copy_only=False)
        matrix[at : at + batch.num_rows] = flat.reshape(batch.num_rows, dim)
        ids.extend(batch.column("id").to_pylist())
        at += batch.num_rows
    if matrix is None:
        matrix = np.zeros((0, 0), dtype=np.float32)
    return ids, matrix, nbytes


def _embed_pending(st: StageContext, pending, sec: EmbeddingSection, ray: RaySection, *,
                   had_vectors: bool) -> tuple[int, StageResult]:
    """Send the pending items to Ray and merge what came back; (items sent, partial result).
    had_vectors: the table already held vectors of this model (a rerun of what failed before)."""
    from corpusgraph.llm.base import Usage

    n = saved_rows(save(st, pending, "in"))
    result = StageResult()
    if not n:
        return 0, result
    st.log(f"  embed: {n} items to {sec.model} ({sec.backend})")
    out_path = st.handoff("out")
    run_embed_task(st.handoff("in"), out_path, ray_section=ray, embedding=sec, cache_dir=st.node_cache_dir,
                   work=Work("embed", "vectors", n), s3=st.s3)
    out = st.spark.read.parquet(st.spark_location(out_path))
    cols = [f.name for f in spark_schema("embeddings").fields]
    st.tables.merge("embeddings", out.where(F.col("error").isNull()).select(*cols))
    as_int = lambda c: F.sum(F.col(c).cast("long"))  # noqa: E731
    stats = out.agg(as_int("emb_calls").alias("requests"), as_int("emb_failed_request").alias("failed_requests"),
                    F.sum("emb_tokens").alias("tokens"), as_int("emb_cached").alias("cached"),
                    F.sum(F.col("error").isNotNull().cast("long")).alias("failed"),
                    F.first("error", ignorenulls=True).alias("first_error")).first()
    failed = int(stats["failed"] or 0)
    result.rows["embed_failed"] = failed
    if failed:
        result.notes.append(f"{failed} of {n} items got no vector and stay pending for the next run; "
                            f"first error: {stats['first_error']}")
    if sec.backend == "openai":
        tokens = int(stats["tokens"] or 0)
        result.usage = Usage(calls=int(stats["requests"] or 0), tokens_in=tokens,
                             cache_hits=int(stats["cached"] or 0), errors=int(stats["failed_requests"] or 0),
                             usd=tokens / 1000 * sec.usd_per_1k_tokens)
    # Not one vector, and none from before: an index without them would answer nothing. (A rerun
    # whose few leftover items fail again keeps the index it has, and says so in its notes.)
    if failed == n and not had_vectors:
        from corpusgraph.llm.fixes import fix_for
        from corpusgraph.runner.failures import StageFailed

        fix = fix_for(None, None, None, stats["first_error"])
        raise StageFailed("embed", f"all {n} items got no vector from {sec.model}: {stats['first_error']}"
                          + (f" -- fix: {fix.replace('llm.', 'embeddings.')}" if fix else ""), result.usage)
    return n, result


def embed(st: StageContext, *, embeddings: EmbeddingSection, ray: RaySection, storage: StorageSection) -> StageResult:
    from corpusgraph.runner.passes.base import init_ray
    from corpusgraph.storage.ann import IndexParams

    sec, read = embeddings, st.tables.read
    # How the embedder reads a long unit is part of its vector, so of its hash (stages/embed.py).
    recipe = f"windows{sec.max_tokens}" if sec.backend == "bundled" and sec.windows else ""
    items = embed_stage.embedding_items(read("text_units"), read("entities"), read("community_reports"),
                                        read("documents"), unit_recipe=recipe)
    stored = read("embeddings").where(F.col("model") == sec.model)
    pending = embed_stage.pending_items(items, read("embeddings"), sec.model)
    n, result = _embed_pending(st, pending, sec, ray, had_vectors=bool(stored.limit(1).count()))
    # Drop vectors of things that no longer exist, then rebuild the FAISS files from the table.
    st.tables.delete_where_missing("embeddings", items, ["kind", "id"])
    params = IndexParams.from_section(sec)
    mine = read("embeddings").where(F.col("model") == sec.model)
    stats = mine.groupBy("kind").agg(F.min(F.size("vector")).alias("lo"), F.max(F.size("vector")).alias("hi")).collect()
    sizes = {r["lo"] for r in stats} | {r["hi"] for r in stats}
    if len(sizes) > 1:
        raise _mixed_dimensions(repr(sec.model), sizes)
    # An empty kind still gets files (the service loads every kind); its dim is the others'.
    dim = sizes.pop() if sizes else (384 if sec.backend == "bundled" else 1)
    index_dir, s3 = local_path(storage.index_dir), storage.s3  # a folder made absolute, or a URI
    init_ray(ray)
    for kind in embed_stage.KINDS:
        path = st.handoff(f"vectors-{kind}")
        (mine.where(F.col("kind") == kind).orderBy("id").select("id", "vector").write.mode("overwrite")
         .parquet(st.spark_location(path)))
        built = _remote_build(path, index_dir, kind, sec.model, params, dim, s3)
        info = built["index"]
        result.rows[f"{kind}_vectors"] = built["count"]
        result.notes.append(f"{kind}: {built['count']} vectors of {built['dim']} dimensions, {info['type']} index"
                            + (f" {info['params']}, recall@10 {info['recall_at_10']:.3f} on "
                               f"{info['recall_queries']} stored vectors" if info.get("recall_measured") else ""))
        st.log(f"  {kind}: index built off the driver from {built['read_mb']:.1f} MB of vectors")
    result.rows = {"embedded_now": n, **result.rows}
    return result


def build_index(path: str, index_dir: str, kind: str, model: str, params, dim: int,
                s3: S3Section | None = None) -> dict:
    """One kind's FAISS files from its hand-off vectors (run in a Ray task, not on the driver);
    returns what the driver reports: count, dim, MB read and the index's metadata.

    index_dir is a folder, written in place, or a URI: the files are written to a temporary local
    folder and uploaded (vectors first, then the meta naming them), so no folder need be shared."""
    from corpusgraph.storage.vectors import publish_index, write_index

    ids, vecs, nbytes = read_vectors(path, s3)
    if not vecs.shape[0]:
        vecs = np.zeros((0, dim), dtype=np.float32)
    local = is_local(index_dir)
    with nullcontext(index_dir) if local else tempfile.TemporaryDirectory(prefix="corpusgraph-faiss-") as folder:
        write_index(folder, kind, ids, vecs, model, params)
        info = json.loads((Path(folder) / f"{kind}.meta.json").read_text(encoding="utf-8"))["index"]
        if not local:
            publish_index(folder, index_dir, kind, s3)
    return {"count": len(ids), "dim": int(vecs.shape[1]), "read_mb": nbytes / 2**20, "index": info}


def _remote_build(path: str, index_dir: str, kind: str, model: str, params, dim: int,
                  s3: S3Section | None = None) -> dict:
    """build_index in a Ray worker process: out of the driver's memory. On the driver's own node
    when the hand-off folder or index_dir is local (that node has them, and the service after it
    reads that index_dir); anywhere when both are on an object store."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    options = {}
    if is_local(path) or is_local(index_dir):
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            node_id=ray.get_runtime_context().get_node_id(), soft=False)
    # No CPU claimed: a driver's node may give Ray none (a head started with num_cpus=0), and a
    # pinned task must still run there.
    task = ray.remote(num_cpus=0, max_retries=1, **options)(build_index)
    return ray.get(task.remote(path, index_dir, kind, model, params, dim, s3))
