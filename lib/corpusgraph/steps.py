"""One step per stage: read inputs from Delta, call the pure transforms, write the outputs.

Steps own every action (count, write, collect) and every Spark/Ray hand-off; the transforms in
stages/ own none. LLM steps hand only the rows that have no result yet to Ray, so re-runs, crashed
runs and updates pay only for missing work.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from .embed_step import embed
from . import progress
from .pipeline import RunContext, StageResult
from .progress import Work
from .prompts import load_prompt
from .ray_runner import output_usage, run_llm_task
from .stages import chunk as chunk_stage
from .stages import communities as comm_stage
from .stages import extract as extract_stage
from .stages import extract_fast as extract_fast_stage
from .stages import ingest as ingest_stage
from .stages import reports as report_stage
from .stages import resolve as resolve_stage
from .tables import spark_schema

__all__ = ["NoDocumentsError", "ingest", "chunk", "extract", "resolve", "communities", "reports", "embed", "extract_identity"]


class NoDocumentsError(ValueError):
    """Ingest found no document in its inputs: the run stops here, loudly, instead of building
    (or estimating) an empty index."""


def _read_inputs(ctx: RunContext):
    """The parsed records (PARSED_SCHEMA rows) of every input file.

    Parquet files go through Spark's Parquet reader (row groups in parallel), after their
    footers are checked on the driver; everything else is read by the binaryFile source, one
    file per row. Returns (parsed frame, files listed, files the binaryFile source reads).
    """
    from .stages import ingest_parquet as ingest_pq

    sec, spark = ctx.cfg.ingest, ctx.spark
    reader = spark.read.format("binaryFile").option("recursiveFileLookup", "true")
    files = reader.load(sec.inputs)
    listed = files.inputFiles()
    parquet = [p for p in listed if ingest_stage.suffix_of(p) == ".parquet"]
    parts = []
    if parquet:
        # Listed again without the Parquet files, so their bytes are never read as one value.
        others = [p for p in listed if ingest_stage.suffix_of(p) != ".parquet"]
        files = spark.read.format("binaryFile").load(others) if others else None
        listed_others = others
        good, refused = ingest_pq.probe_footers(parquet)
        if refused:
            ddl = ", ".join(f"{f.name} string" for f in ingest_stage.PARSED_SCHEMA)
            parts.append(spark.createDataFrame(
                [tuple(r.get(f.name) for f in ingest_stage.PARSED_SCHEMA) for r in refused], ddl))
        if good:
            rows = spark.read.option("mergeSchema", "true").parquet(*good).select(
                "*", F.col("_metadata.file_path").alias(ingest_pq.PATH_COL),
                F.col("_metadata.row_index").alias(ingest_pq.ROW_COL))
            parts.append(ingest_pq.parse_parquet_rows(rows, sec))
    else:
        listed_others = listed
    if files is not None:
        files = ingest_stage.with_empty_files(files, listed_others)
        parts.append(ingest_stage.parse_files(files, sec))
    parsed = parts[0]
    for part in parts[1:]:
        parsed = parsed.unionByName(part)
    return parsed, len(listed), len(listed_others)


def ingest(ctx: RunContext) -> StageResult:
    sec = ctx.cfg.ingest
    if not sec.inputs:
        raise ValueError("ingest.inputs is empty: name the files or folders to index in the config")
    parsed, n_files, n_binary = _read_inputs(ctx)
    parsed = parsed.cache()
    docs = ingest_stage.documents_from(parsed).cache()
    quarantine = ingest_stage.quarantine_from(parsed)
    # The pass that reads and parses every file (it fills the caches), in files read.
    with progress.spark_records(ctx.spark, "ingest", "files", n_binary, source="Scan binaryFile"):
        stats = docs.agg(F.count("*").alias("docs"), F.sum(F.col("copies") - 1).alias("dups")).first()
    n_docs = int(stats["docs"] or 0)
    if n_docs:
        ctx.wh.merge("documents", docs, update=False, soft_delete="deleted")
    n_quarantine = quarantine.count()
    if n_quarantine:
        ctx.wh.merge("quarantine", quarantine)
    by_reason = {r["reason"]: r["count"] for r in quarantine.groupBy("reason").count().collect()}
    parsed.unpersist()
    docs.unpersist()
    reasons = ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items()))
    if n_docs == 0:
        raise NoDocumentsError(
            f"ingest found no documents in {sec.inputs}: {n_files} files listed, {n_quarantine} inputs "
            f"quarantined ({reasons or 'none'}; see the quarantine table under {ctx.cfg.storage.warehouse}). "
            f"Check ingest.inputs, ingest.max_bytes ({sec.max_bytes}) and ingest.text_field ({sec.text_field!r}).")
    result = StageResult(rows={"documents": n_docs, "duplicates_collapsed": int(stats["dups"] or 0),
                               "quarantined": n_quarantine})
    if by_reason:
        result.notes.append("quarantined by reason: " + reasons)
    return result


def chunk(ctx: RunContext) -> StageResult:
    documents = ctx.wh.read("documents")
    units = chunk_stage.chunk_documents(documents, ctx.cfg.chunk)
    with progress.spark_records(ctx.spark, "chunk", "documents", documents.where("NOT deleted").count(),
                                source="Scan parquet"):
        ctx.wh.overwrite("text_units", units)
    return StageResult(rows={"text_units": ctx.wh.read("text_units").count()})


def extract_identity(ctx: RunContext):
    """(prompt, prompt_hash, model): what an extraction row is keyed on besides its unit."""
    return extract_stage.extract_identity(ctx.cfg.extract, ctx.cfg.prompt_path, ctx.cfg.llm.model)


def _llm_pass(ctx: RunContext, stage: str, pending, task, schema_name: str, part: str = "in",
              label: str | None = None, unit: str = "LLM calls"):
    """Hand pending rows to Ray, run the task, merge the results; returns (usage, rows sent).
    label and unit: the progress bar's (one row is one call)."""
    from .llm.base import Usage

    in_path, out_path = ctx.handoff(stage, part), ctx.handoff(stage, part + "-out")
    pending.write.mode("overwrite").parquet(in_path)
    n = ctx.spark.read.parquet(in_path).count()
    if n == 0:
        return Usage(), 0
    ctx.log(f"  {stage}: {n} rows to the model")
    run_llm_task(task, in_path, out_path, llm=ctx.cfg.llm, ray_section=ctx.cfg.ray,
                 cache_dir=str(ctx.cache_dir), base_url=ctx.llm_base_url(), work=Work(label or stage, unit, n))
    usage, nbytes = output_usage(out_path, ctx.cfg.llm)
    ctx.note_collected(nbytes)
    ctx.wh.merge(schema_name, ctx.spark.read.schema(spark_schema(schema_name)).parquet(out_path))
    return usage, n


def _extract_round(ctx: RunContext, packs, task, part: str):
    """One extraction round over packs of units on Ray; each pack's rows are exploded back into
    one extractions row per unit and merged. Returns (usage, units sent, calls)."""
    from .llm.base import Usage

    in_path, out_path = ctx.handoff("extract", part), ctx.handoff("extract", part + "-out")
    packs.write.mode("overwrite").parquet(in_path)
    counts = ctx.spark.read.parquet(in_path).agg(F.count("*").alias("packs"), F.sum(F.size("units")).alias("units")).first()
    n_packs, n_units = int(counts["packs"] or 0), int(counts["units"] or 0)
    if n_packs == 0:
        return Usage(), 0, 0
    label = "extract" if part == "round0" else f"extract, gleaning {part}"
    ctx.log(f"  {label}: {n_units} units to the model in {n_packs} calls")
    run_llm_task(task, in_path, out_path, llm=ctx.cfg.llm, ray_section=ctx.cfg.ray,
                 cache_dir=str(ctx.cache_dir), base_url=ctx.llm_base_url(),
                 work=Work(f"{label} ({n_units} units)", "LLM calls", n_packs))
    usage, nbytes = output_usage(out_path, ctx.cfg.llm)
    ctx.note_collected(nbytes)
    rows = ctx.spark.read.parquet(out_path).select(F.explode("rows").alias("r")).select("r.*")
    ctx.wh.merge("extractions", rows)
    return usage, n_units, n_packs


def _extract_fast(ctx: RunContext) -> StageResult:
    """The fast method: spaCy over the pending units in Spark Python workers, no LLM, no Ray."""
    sec = ctx.cfg.extract
    phash, model = extract_fast_stage.fast_identity(sec)
    units = ctx.wh.read("text_units")
    pending = extract_stage.pending_units(units, ctx.wh.read("extractions"), phash, model)
    in_path, out_path = ctx.handoff("extract", "fast-in"), ctx.handoff("extract", "fast-out")
    pending.write.mode("overwrite").parquet(in_path)
    pending = ctx.spark.read.parquet(in_path)
    sent = pending.count()
    if sent:
        ctx.log(f"  extract: {sent} units through spaCy ({model})")
        # Every core gets a share; each Python worker loads the spaCy model once and keeps it.
        parts = max(1, min(sent, ctx.spark.sparkContext.defaultParallelism))
        extract_fast_stage.extract_units(pending.repartition(parts), sec, ctx.run_id) \
            .write.mode("overwrite").parquet(out_path)
        ctx.wh.merge("extractions", ctx.spark.read.schema(spark_schema("extractions")).parquet(out_path))
    total = units.count()
    result = StageResult(rows={"units": total, "sent": sent})
    if sent == 0:
        result.notes.append(f"all {total} units already have a fast extraction with these settings")
    return result


def extract(ctx: RunContext) -> StageResult:
    if ctx.cfg.extract.method == "fast":
        return _extract_fast(ctx)
    from .llm.base import Usage

    prompts, phash, model = extract_identity(ctx)
    sec = ctx.cfg.extract
    units = ctx.wh.read("text_units")
    pending = extract_stage.pending_units(units, ctx.wh.read("extractions"), phash, model)
    # Round 0 extracts units with no row yet; rounds 1.. glean the rows that look incomplete.
    usage, sent, counts = Usage(), 0, {}
    for round_ in range(sec.glean_rounds + 1):
        if round_:  # gleaning: only rows whose result looks incomplete (decided again on a rerun)
            pending = extract_stage.glean_candidates(ctx.wh.read("extractions"), units, sec, phash, model, round_)
        packs = extract_stage.packs_from(pending, sec, round_, with_prior=round_ > 0)
        task = extract_stage.PackTask(sec, prompts, phash, model, ctx.run_id, ctx.cfg.llm.temperature, round_)
        u, n_units, n_packs = _extract_round(ctx, packs, task, f"round{round_}")
        usage.merge(u)
        if round_ == 0:
            sent, counts["calls"] = n_units, n_packs
        elif n_units == 0:  # round 0 may find nothing new to do while gleaning still has work
            break
        else:
            counts[f"gleaned_round{round_}"] = n_units
            counts["calls"] = counts.get("calls", 0) + n_packs
    mine = ctx.wh.read("extractions").where((F.col("prompt_hash") == phash) & (F.col("model") == model))
    status = {r["status"]: r["count"] for r in mine.join(units.select("unit_id"), "unit_id", "left_semi")
              .groupBy("status").count().collect()}
    total = units.count()
    result = StageResult(rows={"units": total, "sent": sent, **counts,
                               **{f"status_{k}": v for k, v in sorted(status.items())}}, usage=usage)
    if not counts.get("calls"):
        result.notes.append(f"all {total} units already have an extraction for this prompt and model: no LLM call")
    return result


def resolve(ctx: RunContext) -> StageResult:
    """Mentions -> entities. method exact: one entity per normalised name. method similarity:
    blocking and pair scoring in Spark, the ambiguous band to the LLM on Ray, guarded connected
    components (label propagation, one action per round), long merged descriptions summarised
    on Ray. Intermediate frames are written to the run's hand-off folder and read back, which
    cuts their lineage and makes each one computed once.

    Incremental by construction: nodes and candidate pairs are recomputed (cheap Spark), but a
    pair whose two node signatures and score fingerprint match its row in `resolve_pairs` keeps
    its stored score, and a band pair keeps its stored verdict; only pairs touching a new or
    changed node are scored, and only band pairs without a valid verdict go to the LLM. The
    components then run over every merge edge, so the outcome is the one a from-scratch resolve
    gets. The table is rewritten with this run's pairs (pairs whose endpoint is gone drop out).

    Description vectors from the `embeddings` table are not used in the score: they are written
    by the embed stage after resolve, keyed by entity (not node), so a first build never has
    them and every later run would: resolution would depend on the warehouse's history instead
    of its corpus (and an update could not equal a rebuild). The weights were fit without them.
    """
    from .llm.base import Usage
    from .stages import resolve_blocking as RB
    from .stages import resolve_llm as RL
    from .stages import resolve_merge as RM
    from .stages import resolve_score as RS

    _, phash, model = extract_identity(ctx)
    sec = ctx.cfg.resolve
    spark = ctx.spark
    usage, rows, notes = Usage(), {}, []

    def saved(df, part):
        path = ctx.handoff("resolve", part)
        df.write.mode("overwrite").parquet(path)
        return spark.read.parquet(path)

    def llm(task, df, part):
        """Rows to the model on Ray; (output frame, rows sent). Nothing is sent for no rows."""
        inputs = saved(df, part)
        n = inputs.count()
        if n == 0:
            return None, 0
        out_path = ctx.handoff("resolve", part + "-out")
        ctx.log(f"  resolve: {n} {part} rows to the model")
        run_llm_task(task, ctx.handoff("resolve", part), out_path, llm=ctx.cfg.llm, ray_section=ctx.cfg.ray,
                     cache_dir=str(ctx.cache_dir), base_url=ctx.llm_base_url(),
                     work=Work(f"resolve, {part}", "LLM calls", n))
        u, nbytes = output_usage(out_path, ctx.cfg.llm)
        ctx.note_collected(nbytes)
        usage.merge(u)
        return spark.read.parquet(out_path), n

    live = saved(resolve_stage.live_extractions(ctx.wh.read("extractions"), ctx.wh.read("text_units"), phash, model),
                 "live")
    ments = saved(resolve_stage.mentions(live, sec), "mentions")
    mapping = None
    pairs_table = None
    if sec.method == "similarity":
        nodes = saved(RB.nodes(ments, live, sec), "nodes")
        pairs = RB.candidate_pairs(RB.block_keys(nodes, sec), sec)
        current = saved(RS.with_signatures(pairs, RS.node_signatures(nodes)), "pairs")
        score_fp = RS.score_fingerprint(sec)
        stored = ctx.wh.read("resolve_pairs")
        reused, todo = RS.split_pairs(current, stored, score_fp)
        reused = saved(reused, "reused")
        fresh = saved(RS.score_pairs(RS.pair_features(todo, nodes), sec), "scored-now")
        cols = ["a", "b", "score", "type_clash"]
        scored = saved(fresh.select(*cols).unionByName(reused.select(*cols)), "scored")
        n_reused, n_fresh = reused.count(), fresh.count()
        rows.update(nodes=nodes.count(), pairs=n_reused + n_fresh, pairs_reused=n_reused, pairs_scored=n_fresh,
                    pairs_dropped=stored.select("a", "b").join(current, ["a", "b"], "left_anti").count())
        notes.append(f"pairs: {n_fresh} scored now (a new or changed endpoint), {n_reused} reused from "
                     f"resolve_pairs, {rows['pairs_dropped']} stored ones dropped (endpoint gone or no longer a candidate)")
        verdicts, verdict_fp = None, None
        if sec.llm_adjudication:
            prompt = load_prompt(ctx.cfg.prompt_path(sec.prompt_adjudicate))
            verdict_fp = RL.verdict_fingerprint(prompt, sec, ctx.cfg.llm.model, ctx.cfg.llm.temperature)
            task = RL.AdjudicateTask(sec, prompt, ctx.cfg.llm.temperature)
            band = saved(RS.band(scored, sec), "band")
            known = saved(RL.stored_verdicts(band, reused, verdict_fp), "verdicts-reused")
            ask = band.join(known.select("a", "b"), ["a", "b"], "left_anti")
            out, rows["adjudicated"] = llm(task, RL.adjudication_inputs(ask, nodes), "adjudicate")
            rows["adjudications_reused"] = known.count()
            verdicts = known if out is None else known.unionByName(out.select("a", "b", "same", "status", "error"))
        decided = saved(RS.decide(scored, sec, verdicts), "decided")
        pairs_table = RS.stored_pairs(decided, current, score_fp, verdict_fp)
        edges = decided.where("merge").select("a", "b", "score", "method")

        def components(edge_df, part):
            labels = saved(RM.cc_start(nodes), f"{part}-0")
            for i in range(1, sec.max_cc_iterations + 1):
                new = saved(RM.cc_step(labels, edge_df), f"{part}-{i}")
                if RM.changed(labels, new).limit(1).count() == 0:
                    return new, i
                labels = new
            notes.append(f"connected components stopped after {sec.max_cc_iterations} rounds, not converged")
            return labels, sec.max_cc_iterations

        labels, rows["cc_rounds"] = components(edges, "cc")
        kept, cut = RM.guard_edges(edges, labels, sec)
        cut = saved(cut, "cut")
        if cut.count():
            labels, _ = components(saved(kept, "kept"), "cc-guard")
            labels, star_cut = RM.star_cut(labels, kept, sec)
            labels = saved(labels, "labels")
            cut = saved(cut.unionByName(star_cut), "cut-all")
        rows["guard_cut_edges"] = cut.count()
        mapping = saved(RM.decisions(nodes, labels, decided, cut), "mapping")
        by_method = {r["method"]: r["count"] for r in mapping.groupBy("method").count().collect()}
        rows.update({f"names_{k}": v for k, v in sorted(by_method.items())})
    resolved = resolve_stage.remap(ments, mapping)
    ctx.wh.overwrite("relationships", resolve_stage.relationships(live, sec, mapping))
    rels = ctx.wh.read("relationships")
    summaries = None
    if sec.summarise_descriptions:
        prompt = load_prompt(ctx.cfg.prompt_path(sec.prompt_summarise))
        out, rows["summarised"] = llm(RL.SummariseTask(sec, prompt, ctx.cfg.llm.temperature),
                                      resolve_stage.long_descriptions(resolved, sec), "summarise")
        summaries = out.where(F.col("status") == "ok") if out is not None else None
    ctx.wh.overwrite("entities", resolve_stage.entities(resolved, rels, sec, summaries))
    aliases = ctx.wh.conform("entity_aliases", resolve_stage.entity_aliases(ments, mapping))
    # overwriteSchema: a warehouse made before entity_aliases had its decision columns takes them.
    aliases.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(ctx.wh.path("entity_aliases"))
    ctx.wh.overwrite("claims", resolve_stage.claims(live, sec, mapping))
    if pairs_table is not None:  # every read of the stored pairs is behind; now this run's pairs replace them
        ctx.wh.overwrite("resolve_pairs", pairs_table)
    rows.update(entities=ctx.wh.read("entities").count(), relationships=rels.count(),
                aliases=ctx.wh.read("entity_aliases").count())
    paid = rows.get("adjudicated", 0) + rows.get("summarised", 0)
    return StageResult(rows=rows, usage=usage if paid else None, notes=notes)


def communities(ctx: RunContext) -> StageResult:
    ents, rels = ctx.wh.read("entities"), ctx.wh.read("relationships")
    nodes, edges = comm_stage.encode_graph(ents, rels)
    # The only corpus-sized collect of the pipeline: the integer edge list and the id order.
    id_col = nodes.orderBy("idx").select("entity_id").toArrow()
    e = edges.toArrow()
    ctx.note_collected(id_col.nbytes + e.nbytes)
    ids = id_col.column(0).to_pylist()
    with progress.ticking(progress.bar("communities (Leiden)", "levels", ctx.cfg.communities.max_levels)) as leiden:
        membership = comm_stage.detect(ids, e.column("a").to_numpy(), e.column("b").to_numpy(),
                                       e.column("weight").to_numpy(), ctx.cfg.communities, on_level=leiden.set)
        leiden.set_total(leiden.done)  # max_levels is a bound: the hierarchy stops when nothing needs splitting
    schema = "community_id string, level int, parent_id string, entity_id string, graph_version string, modularity double"
    mdf = ctx.spark.createDataFrame(membership.to_pandas(), schema=schema) if membership.num_rows else \
        ctx.spark.createDataFrame([], schema)
    ctx.wh.overwrite("communities", comm_stage.communities_from_membership(mdf, ents, rels))
    levels = {r["level"]: (r["n"], r["q"]) for r in ctx.wh.read("communities").groupBy("level").agg(
        F.count("*").alias("n"), F.first("modularity").alias("q")).collect()}
    result = StageResult(rows={"communities": sum(n for n, _ in levels.values()), "levels": len(levels)})
    for level in sorted(levels):
        q = levels[level][1]  # None where a level has no edges to score (entities without relationships)
        result.notes.append(f"level {level}: {levels[level][0]} communities, modularity "
                            + ("n/a" if q is None else f"{q:.3f}"))
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
        u, n = _llm_pass(ctx, "reports", pending, task, "community_reports", part=f"level{level}",
                         label=f"reports, level {level}", unit="communities")
        usage.merge(u)
        sent += n
    ctx.wh.delete_where_missing("community_reports", comms, "community_id")
    per_domain = 0
    if sec.per_domain:  # one report per domain of each community that mixes domains (stages/reports.py)
        dtask = report_stage.DomainReportTask(sec, prompt, model, ctx.cfg.llm.temperature)
        for level in levels:
            inputs = report_stage.domain_level_inputs(comms, ctx.wh.read("entities"), ctx.wh.read("relationships"),
                                                      ctx.wh.read("text_units"), ctx.wh.read("documents"), level, sec,
                                                      fingerprint)
            done = ctx.wh.read("community_domain_reports").where(F.col("status") != "llm_error").select(
                "community_id", "domain", "built_from")
            pending = inputs.join(done, ["community_id", "domain", "built_from"], "left_anti")
            u, n = _llm_pass(ctx, "reports", pending, dtask, "community_domain_reports", part=f"domains-level{level}",
                             label=f"reports per domain, level {level}", unit="reports")
            usage.merge(u)
            per_domain += n
        ctx.wh.delete_where_missing("community_domain_reports", comms, "community_id")
    status = {r["status"]: r["count"] for r in ctx.wh.read("community_reports").groupBy("status").count().collect()}
    result = StageResult(rows={"sent": sent, **({"sent_per_domain": per_domain} if sec.per_domain else {}),
                               **{f"status_{k}": v for k, v in sorted(status.items())}}, usage=usage)
    if sent + per_domain == 0:
        result.notes.append("every community's report is up to date with its input: no LLM call")
    return result
