"""One step per stage: read inputs from Delta, call the pure transforms, write the outputs.

Steps own every action (count, write, collect) and every Spark/Ray hand-off; the transforms in
stages/ own none. LLM steps hand only the rows that have no result yet to Ray, so re-runs, crashed
runs and updates pay only for missing work.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from .pipeline import RunContext, StageResult
from .prompts import load_prompt
from .ray_runner import run_embed_task, run_llm_task, usage_from_outputs
from .stages import chunk as chunk_stage
from .stages import communities as comm_stage
from .stages import embed as embed_stage
from .stages import extract as extract_stage
from .stages import ingest as ingest_stage
from .stages import reports as report_stage
from .stages import resolve as resolve_stage
from .tables import spark_schema

__all__ = ["ingest", "chunk", "extract", "resolve", "communities", "reports", "embed", "extract_identity"]


def ingest(ctx: RunContext) -> StageResult:
    sec = ctx.cfg.ingest
    if not sec.inputs:
        raise ValueError("ingest.inputs is empty: name the files or folders to index in the config")
    files = (
        ctx.spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(sec.inputs)
    )
    files = ingest_stage.with_empty_files(files, files.inputFiles())
    parsed = ingest_stage.parse_files(files, sec).cache()
    docs = ingest_stage.documents_from(parsed).cache()
    quarantine = ingest_stage.quarantine_from(parsed)
    ctx.wh.merge("documents", docs, update=False, soft_delete="deleted")
    n_quarantine = quarantine.count()
    if n_quarantine:
        ctx.wh.merge("quarantine", quarantine)
    stats = docs.agg(F.count("*").alias("docs"), F.sum(F.col("copies") - 1).alias("dups")).first()
    by_reason = {r["reason"]: r["count"] for r in quarantine.groupBy("reason").count().collect()}
    parsed.unpersist()
    docs.unpersist()
    result = StageResult(rows={"documents": int(stats["docs"] or 0), "duplicates_collapsed": int(stats["dups"] or 0),
                               "quarantined": n_quarantine})
    if by_reason:
        result.notes.append("quarantined by reason: " + ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items())))
    return result


def chunk(ctx: RunContext) -> StageResult:
    units = chunk_stage.chunk_documents(ctx.wh.read("documents"), ctx.cfg.chunk)
    ctx.wh.overwrite("text_units", units)
    return StageResult(rows={"text_units": ctx.wh.read("text_units").count()})


def extract_identity(ctx: RunContext):
    """(prompt, prompt_hash, model): what an extraction row is keyed on besides its unit."""
    sec = ctx.cfg.extract
    prompt = load_prompt(ctx.cfg.prompt_path(sec.prompt))
    return prompt, prompt.hash(extract_stage.extraction_schema(sec), sec.max_tokens), ctx.cfg.llm.model


def _llm_pass(ctx: RunContext, stage: str, pending, task, schema_name: str, part: str = "in"):
    """Hand pending rows to Ray, run the task, merge the results; returns (usage, rows sent)."""
    from .llm.base import Usage

    in_path, out_path = ctx.handoff(stage, part), ctx.handoff(stage, part + "-out")
    pending.write.mode("overwrite").parquet(in_path)
    n = ctx.spark.read.parquet(in_path).count()
    if n == 0:
        return Usage(), 0
    ctx.log(f"  {stage}: {n} rows to the model")
    run_llm_task(task, in_path, out_path, llm=ctx.cfg.llm, ray_section=ctx.cfg.ray,
                 cache_dir=str(ctx.cache_dir), base_url=ctx.llm_base_url())
    usage, _ = usage_from_outputs(out_path, ctx.cfg.llm)
    ctx.wh.merge(schema_name, ctx.spark.read.schema(spark_schema(schema_name)).parquet(out_path))
    return usage, n


def extract(ctx: RunContext) -> StageResult:
    prompt, phash, model = extract_identity(ctx)
    units = ctx.wh.read("text_units")
    pending = extract_stage.pending_units(units, ctx.wh.read("extractions"), phash, model)
    task = extract_stage.ExtractTask(ctx.cfg.extract, prompt, phash, model, ctx.run_id, ctx.cfg.llm.temperature)
    usage, sent = _llm_pass(ctx, "extract", pending, task, "extractions")
    mine = ctx.wh.read("extractions").where((F.col("prompt_hash") == phash) & (F.col("model") == model))
    status = {r["status"]: r["count"] for r in mine.join(units.select("unit_id"), "unit_id", "left_semi")
              .groupBy("status").count().collect()}
    total = units.count()
    result = StageResult(rows={"units": total, "sent": sent, **{f"status_{k}": v for k, v in sorted(status.items())}},
                         usage=usage)
    if sent == 0:
        result.notes.append(f"all {total} units already have an extraction for this prompt and model: no LLM call")
    return result


def resolve(ctx: RunContext) -> StageResult:
    _, phash, model = extract_identity(ctx)
    sec = ctx.cfg.resolve
    live = resolve_stage.live_extractions(ctx.wh.read("extractions"), ctx.wh.read("text_units"), phash, model).cache()
    ments = resolve_stage.mentions(live, sec)
    ctx.wh.overwrite("relationships", resolve_stage.relationships(live, sec))
    rels = ctx.wh.read("relationships")
    ctx.wh.overwrite("entities", resolve_stage.entities(ments, rels, sec))
    ctx.wh.overwrite("entity_aliases", resolve_stage.entity_aliases(ments))
    ctx.wh.overwrite("claims", resolve_stage.claims(live, sec))
    live.unpersist()
    return StageResult(rows={"entities": ctx.wh.read("entities").count(), "relationships": rels.count(),
                             "aliases": ctx.wh.read("entity_aliases").count()})


def communities(ctx: RunContext) -> StageResult:
    ents, rels = ctx.wh.read("entities"), ctx.wh.read("relationships")
    nodes, edges = comm_stage.encode_graph(ents, rels)
    # The only corpus-sized collect of the pipeline: the integer edge list and the id order.
    ids = nodes.orderBy("idx").select("entity_id").toArrow().column(0).to_pylist()
    e = edges.toArrow()
    membership = comm_stage.detect(
        ids, e.column("a").to_numpy(), e.column("b").to_numpy(), e.column("weight").to_numpy(), ctx.cfg.communities
    )
    schema = "community_id string, level int, parent_id string, entity_id string, graph_version string, modularity double"
    mdf = ctx.spark.createDataFrame(membership.to_pandas(), schema=schema) if membership.num_rows else \
        ctx.spark.createDataFrame([], schema)
    ctx.wh.overwrite("communities", comm_stage.communities_from_membership(mdf, ents, rels))
    levels = {r["level"]: (r["n"], r["q"]) for r in ctx.wh.read("communities").groupBy("level").agg(
        F.count("*").alias("n"), F.first("modularity").alias("q")).collect()}
    result = StageResult(rows={"communities": sum(n for n, _ in levels.values()), "levels": len(levels)})
    for level in sorted(levels):
        result.notes.append(f"level {level}: {levels[level][0]} communities, modularity {levels[level][1]:.3f}")
    return result


def reports(ctx: RunContext) -> StageResult:
    from .llm.base import Usage

    sec = ctx.cfg.reports
    prompt = load_prompt(ctx.cfg.prompt_path(sec.prompt))
    model = ctx.cfg.llm.model
    fingerprint = prompt.hash(report_stage.report_schema(sec), sec.max_tokens, model)
    comms = ctx.wh.read("communities")
    levels = sorted((r["level"] for r in comms.select("level").distinct().collect()), reverse=True)
    usage, sent = Usage(), 0
    task = report_stage.ReportTask(sec, prompt, model, ctx.cfg.llm.temperature)
    for level in levels:  # deepest first: parents may use their children's reports
        inputs = report_stage.level_inputs(comms, ctx.wh.read("entities"), ctx.wh.read("relationships"),
                                           ctx.wh.read("community_reports"), level, sec, fingerprint)
        done = ctx.wh.read("community_reports").where(F.col("status") != "llm_error").select("community_id", "built_from")
        pending = inputs.join(done, ["community_id", "built_from"], "left_anti")
        u, n = _llm_pass(ctx, "reports", pending, task, "community_reports", part=f"level{level}")
        usage.merge(u)
        sent += n
    ctx.wh.delete_where_missing("community_reports", comms, "community_id")
    status = {r["status"]: r["count"] for r in ctx.wh.read("community_reports").groupBy("status").count().collect()}
    result = StageResult(rows={"sent": sent, **{f"status_{k}": v for k, v in sorted(status.items())}}, usage=usage)
    if sent == 0:
        result.notes.append("every community's report is up to date with its input: no LLM call")
    return result


def embed(ctx: RunContext) -> StageResult:
    from .query.vectors import write_index

    sec = ctx.cfg.embeddings
    items = embed_stage.embedding_items(ctx.wh.read("text_units"), ctx.wh.read("entities"),
                                        ctx.wh.read("community_reports"))
    pending = embed_stage.pending_items(items, ctx.wh.read("embeddings"), sec.model)
    in_path, out_path = ctx.handoff("embed", "in"), ctx.handoff("embed", "out")
    pending.write.mode("overwrite").parquet(in_path)
    n = ctx.spark.read.parquet(in_path).count()
    if n:
        run_embed_task(in_path, out_path, ray_section=ctx.cfg.ray, batch_size=sec.batch_size, max_tokens=sec.max_tokens)
        ctx.wh.merge("embeddings", ctx.spark.read.schema(spark_schema("embeddings")).parquet(out_path))
    # Drop vectors of things that no longer exist, then rebuild the FAISS files from the table.
    emb_path = ctx.wh.path("embeddings")
    from delta.tables import DeltaTable

    (DeltaTable.forPath(ctx.spark, emb_path).alias("t")
     .merge(items.select("kind", "id").alias("s"), "t.kind = s.kind AND t.id = s.id")
     .whenNotMatchedBySourceDelete().execute())
    counts = {}
    for kind in embed_stage.KINDS:
        tbl = ctx.wh.read("embeddings").where((F.col("kind") == kind) & (F.col("model") == sec.model)) \
            .orderBy("id").select("id", "vector").toArrow()
        import numpy as np

        vecs = np.asarray(tbl.column("vector").to_pylist(), dtype=np.float32).reshape(tbl.num_rows, -1) \
            if tbl.num_rows else np.zeros((0, 384), dtype=np.float32)
        write_index(ctx.cfg.storage.index_dir, kind, tbl.column("id").to_pylist(), vecs, sec.model)
        counts[kind] = tbl.num_rows
    return StageResult(rows={"embedded_now": n, **{f"{k}_vectors": v for k, v in counts.items()}})
