"""One step per stage (ingest's is runner/steps/ingest.py): read inputs from Delta, call the pure transforms, write the outputs.

A step gets a StageContext (its declared tables, Spark, hand-off folders, the chat endpoint) and,
as keyword arguments, the config sections its registry entry names (runner/registry.py); it never sees
the root config. Steps own every action (count, write, collect) and every Spark/Ray hand-off;
the transforms in stages/ own none. LLM steps hand only the rows that have no result yet to Ray,
so re-runs, crashed runs and updates pay only for missing work.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from corpusgraph.config import (ChunkSection, CommunitiesSection, ExtractSection, LLMSection, RaySection, ReportsSection,
                                ResolveSection)
from corpusgraph.llm.base import Usage
from corpusgraph.prompts import load_prompt
from corpusgraph.runner import progress
from corpusgraph.runner.handoff import llm_pass, save, saved_rows, to_model
from corpusgraph.runner.run import StageContext, StageResult
from corpusgraph.runner.steps import resolve as resolve_run
from corpusgraph.stages import chunk as chunk_stage
from corpusgraph.stages import communities as comm_stage
from corpusgraph.stages import reports as report_stage
from corpusgraph.stages.extract import llm as extract_stage
from corpusgraph.stages.extract import fast as extract_fast_stage
from corpusgraph.tables import spark_schema, spark_struct

__all__ = ["chunk", "extract", "resolve", "communities", "reports", "graph_arrays", "membership_frame"]


def chunk(st: StageContext, *, chunk: ChunkSection) -> StageResult:
    documents = st.tables.read("documents")
    units = chunk_stage.chunk_documents(documents, chunk)
    with progress.spark_records(st.spark, "chunk", "documents", documents.where("NOT deleted").count(),
                                source="Scan parquet"):
        written = st.tables.overwrite("text_units", units)
    return StageResult(rows={"text_units": written})


def _extract_round(st: StageContext, packs, task, part: str, *, llm: LLMSection, ray: RaySection):
    """One extraction round over packs of units on Ray; each pack's rows are exploded back into
    one extractions row per unit and merged. Returns (usage, units sent, calls)."""
    packs = save(st, packs, part)
    counts = packs.agg(F.count("*").alias("packs"), F.sum(F.size("units")).alias("units")).first()
    n_packs, n_units = int(counts["packs"] or 0), int(counts["units"] or 0)
    if n_packs == 0:
        return Usage(), 0, 0
    label = "extract" if part == "round0" else f"extract, gleaning {part}"
    st.log(f"  {label}: {n_units} units to the model in {n_packs} calls")
    out, usage = to_model(st, task, part, n_packs, llm=llm, ray=ray, label=f"{label} ({n_units} units)")
    st.tables.merge("extractions", out.select(F.explode("rows").alias("r")).select("r.*"))
    return usage, n_units, n_packs


def _extract_fast(st: StageContext, sec: ExtractSection) -> StageResult:
    """The fast method: spaCy over the pending units in Spark Python workers, no LLM, no Ray."""
    phash, model = extract_fast_stage.fast_identity(sec)
    units = st.tables.read("text_units")
    pending = save(st, extract_stage.pending_units(units, st.tables.read("extractions"), phash, model), "fast-in")
    sent = saved_rows(pending)
    if sent:
        st.log(f"  extract: {sent} units through spaCy ({model})")
        # Every core gets a share; each Python worker loads the spaCy model once and keeps it.
        parts = max(1, min(sent, st.spark.sparkContext.defaultParallelism))
        out_path = st.spark_location(st.handoff("fast-out"))
        extract_fast_stage.extract_units(pending.repartition(parts), sec, st.run_id) \
            .write.mode("overwrite").parquet(out_path)
        st.tables.merge("extractions", st.spark.read.schema(spark_schema("extractions")).parquet(out_path))
    total = units.count()
    result = StageResult(rows={"units": total, "sent": sent})
    if sent == 0:
        result.notes.append(f"all {total} units already have a fast extraction with these settings")
    return result


def extract(st: StageContext, *, extract: ExtractSection, llm: LLMSection, ray: RaySection) -> StageResult:
    sec = extract
    if sec.method == "fast":
        return _extract_fast(st, sec)
    prompts, phash, model = extract_stage.extract_identity(sec, st.prompt_path, llm.model)
    units = st.tables.read("text_units")
    pending = extract_stage.pending_units(units, st.tables.read("extractions"), phash, model)
    # Round 0 extracts units with no row yet; rounds 1.. glean the rows that look incomplete.
    usage, sent, counts = Usage(), 0, {}
    for round_ in range(sec.glean_rounds + 1):
        if round_:  # gleaning: only rows whose result looks incomplete (decided again on a rerun)
            pending = extract_stage.glean_candidates(st.tables.read("extractions"), units, sec, phash, model, round_)
        packs = extract_stage.packs_from(pending, sec, round_, with_prior=round_ > 0, only_incomplete=round_ > 0)
        task = extract_stage.PackTask(sec, prompts, phash, model, st.run_id, llm.temperature, round_)
        u, n_units, n_packs = _extract_round(st, packs, task, f"round{round_}", llm=llm, ray=ray)
        usage.merge(u)
        if round_ == 0:
            sent, counts["calls"] = n_units, n_packs
        elif n_units == 0:  # round 0 may find nothing new to do while gleaning still has work
            break
        else:
            counts[f"gleaned_round{round_}"] = n_units
            counts["calls"] = counts.get("calls", 0) + n_packs
    mine = st.tables.read("extractions").where((F.col("prompt_hash") == phash) & (F.col("model") == model))
    status = {r["status"]: r["count"] for r in mine.join(units.select("unit_id"), "unit_id", "left_semi")
              .groupBy("status").count().collect()}
    total = units.count()
    result = StageResult(rows={"units": total, "sent": sent, **counts,
                               **{f"status_{k}": v for k, v in sorted(status.items())}}, usage=usage)
    if not counts.get("calls"):
        result.notes.append(f"all {total} units already have an extraction for this prompt and model: no LLM call")
    return result


def resolve(st: StageContext, *, resolve: ResolveSection, extract: ExtractSection, llm: LLMSection,
            ray: RaySection) -> StageResult:
    """Mentions -> entities (runner/steps/resolve.py), with this run's hand-off folder for its
    intermediate frames and Ray for its LLM rows."""
    sec = resolve
    # The extraction rows are keyed by the extract stage's model, which may not be resolve's own.
    _, phash, model = extract_stage.extract_identity(extract, st.prompt_path, llm.for_stage("extract").model)
    usage = Usage()

    def ask(task, df, part):
        done = llm_pass(st, task, df, part, llm=llm, ray=ray, label=f"resolve, {part}", noun=f"{part} rows")
        usage.merge(done.usage)
        return done.out, done.sent

    prompt = lambda name, needed: load_prompt(st.prompt_path(name)) if needed else None  # noqa: E731
    io = resolve_run.ResolveIO(st.tables, lambda df, part: save(st, df, part), ask, saved_rows)
    rows, notes = resolve_run.resolve_tables(
        io, sec, prompt_hash=phash, model=model, llm_model=llm.model, temperature=llm.temperature,
        adjudicate_prompt=prompt(sec.prompt_adjudicate, sec.method == "similarity" and sec.llm_adjudication),
        summarise_prompt=prompt(sec.prompt_summarise, sec.summarise_descriptions))
    paid = rows.get("adjudicated", 0) + rows.get("summarised", 0)
    return StageResult(rows=rows, usage=usage if paid else None, notes=notes)


def graph_arrays(entities, relationships):
    """The entity graph on the driver: (ordered ids, a, b, weight arrays, bytes collected). The only
    corpus-sized collect of the pipeline: the integer edge list and the id order."""
    nodes, edges = comm_stage.encode_graph(entities, relationships)
    id_col = nodes.orderBy("idx").select("entity_id").toArrow()
    e = edges.toArrow()
    a, b, w = e.column("a").to_numpy(), e.column("b").to_numpy(), e.column("weight").to_numpy()
    return id_col.column(0).to_pylist(), a, b, w, id_col.nbytes + e.nbytes


def membership_frame(spark, membership):
    """Membership rows (stages/communities.MEMBERSHIP_SCHEMA, an Arrow table) as a Spark frame."""
    schema = spark_struct(comm_stage.MEMBERSHIP_SCHEMA)
    return spark.createDataFrame(membership.to_pandas(), schema=schema) if membership.num_rows else \
        spark.createDataFrame([], schema)


def communities(st: StageContext, *, communities: CommunitiesSection) -> StageResult:
    ents, rels = st.tables.read("entities"), st.tables.read("relationships")
    ids, a, b, w, nbytes = graph_arrays(ents, rels)
    st.note_collected(nbytes)
    with progress.ticking(progress.bar("communities (Leiden)", "levels", communities.max_levels)) as leiden:
        membership = comm_stage.detect(ids, a, b, w, communities, on_level=leiden.set)
        leiden.set_total(leiden.done)  # max_levels is a bound: the hierarchy stops when nothing needs splitting
    st.tables.overwrite("communities", comm_stage.communities_from_membership(membership_frame(st.spark, membership),
                                                                              ents, rels))
    levels = comm_stage.level_summary(membership)  # what was written, from the rows on the driver
    result = StageResult(rows={"communities": sum(n for n, _ in levels.values()), "levels": len(levels)})
    for level in sorted(levels):
        q = levels[level][1]  # None where a level has no edges to score (entities without relationships)
        result.notes.append(f"level {level}: {levels[level][0]} communities, modularity "
                            + ("n/a" if q is None else f"{q:.3f}"))
    return result


def _report_pass(st: StageContext, pending, task, table: str, part: str, *, llm: LLMSection, ray: RaySection,
                 label: str, unit: str):
    """Pending report rows to the model and the answers merged into `table`; (usage, rows sent)."""
    done = llm_pass(st, task, pending, part, llm=llm, ray=ray, label=label, unit=unit)
    if done.sent:  # read with the table's schema: the bookkeeping columns stay behind
        st.tables.merge(table, done.out.select(*[F.col(f.name).cast(f.dataType) for f in spark_schema(table).fields]))
    return done.usage, done.sent


def reports(st: StageContext, *, reports: ReportsSection, llm: LLMSection, ray: RaySection) -> StageResult:
    from corpusgraph.llm.factory import fit_context

    # The context fits the reports model's window (llm.context_window or its profile's).
    fitted = fit_context(reports.max_input_tokens, llm, reports.max_tokens)
    if fitted < reports.max_input_tokens:
        st.log(f"  reports: context cut to {fitted} tokens to fit the model's window (reports.max_input_tokens "
               f"{reports.max_input_tokens})")
        reports = reports.model_copy(update={"max_input_tokens": fitted})
    sec, read = reports, st.tables.read
    prompt = load_prompt(st.prompt_path(sec.prompt))
    model = llm.model
    fingerprint = prompt.hash(report_stage.report_schema(sec), sec.max_tokens, model)
    comms = read("communities")
    levels = sorted((r["level"] for r in comms.select("level").distinct().collect()), reverse=True)
    usage, sent = Usage(), 0
    task = report_stage.ReportTask(sec, prompt, model, llm.temperature)
    for level in levels:  # deepest first: parents may use their children's reports
        inputs = report_stage.level_inputs(comms, read("entities"), read("relationships"),
                                           read("community_reports"), level, sec, fingerprint)
        done = read("community_reports").where(F.col("status") != "llm_error").select("community_id", "built_from")
        pending = inputs.join(done, ["community_id", "built_from"], "left_anti")
        u, n = _report_pass(st, pending, task, "community_reports", f"level{level}", llm=llm, ray=ray,
                            label=f"reports, level {level}", unit="communities")
        usage.merge(u)
        sent += n
    st.tables.delete_where_missing("community_reports", comms, "community_id")
    per_domain = 0
    if sec.per_domain:  # one report per domain of each community that mixes domains (stages/reports.py)
        dtask = report_stage.DomainReportTask(sec, prompt, model, llm.temperature)
        for level in levels:
            inputs = report_stage.domain_level_inputs(comms, read("entities"), read("relationships"),
                                                      read("text_units"), read("documents"), level, sec, fingerprint)
            done = read("community_domain_reports").where(F.col("status") != "llm_error").select(
                "community_id", "domain", "built_from")
            pending = inputs.join(done, ["community_id", "domain", "built_from"], "left_anti")
            u, n = _report_pass(st, pending, dtask, "community_domain_reports", f"domains-level{level}", llm=llm,
                                ray=ray, label=f"reports per domain, level {level}", unit="reports")
            usage.merge(u)
            per_domain += n
        st.tables.delete_where_missing("community_domain_reports", comms, "community_id")
    status = {r["status"]: r["count"] for r in read("community_reports").groupBy("status").count().collect()}
    result = StageResult(rows={"sent": sent, **({"sent_per_domain": per_domain} if sec.per_domain else {}),
                               **{f"status_{k}": v for k, v in sorted(status.items())}}, usage=usage)
    if sent + per_domain == 0:
        result.notes.append("every community's report is up to date with its input: no LLM call")
    return result
