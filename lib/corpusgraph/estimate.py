"""Cost estimation: LLM calls, tokens, dollars, GPU-hours and wall time of a build, before any spend.

The runner. A dry run ingests and chunks into a scratch warehouse (the real one is not written,
except for one `runs` row), counts what each LLM stage would send (estimate_count.py, or a sample
of it on a large corpus: estimate_sample.py) and prices it with the cost model
(estimate_model.py). What cannot be known before the model answers (answer lengths, entities per
unit, communities per entity, report context size) comes from `Rates`: the config's, a
calibration on N sampled units with the real model, or an existing warehouse's measured values
(what `update` uses to price a full rebuild). The command line prints the estimate and draws its
chart (estimate_view.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from .config import Config
from .estimate_count import ExtractCounting, count_units, counter_spec, extract_counts, report_overhead, request_counter
from .estimate_model import CostSections, Estimate, Rates, StageEstimate, estimate_from_counts

__all__ = ["Rates", "StageEstimate", "Estimate", "CostSections", "ExtractCounting", "counter_spec", "request_counter",
           "extract_counts", "count_units", "report_overhead", "estimate_from_counts", "calibrate", "run_estimate",
           "warehouse_rates", "estimate_warehouse"]


def _overhead(cfg: Config, counting: ExtractCounting) -> int:
    from .prompts import load_prompt

    return report_overhead(cfg.reports, load_prompt(cfg.prompt_path(cfg.reports.prompt)), cfg.llm, counting.counter())


def _priced(counts: dict, rates: Rates, cfg: Config, counting: ExtractCounting, *, documents: int,
            tokenizer: str) -> Estimate:
    return estimate_from_counts(counts, rates, CostSections.of(cfg), documents=documents,
                                overhead=_overhead(cfg, counting), tokenizer=tokenizer)


# -- measured rates: from a calibration sample, or from an existing warehouse --------------------

def warehouse_rates(wh, cfg: Config, *, source: str) -> tuple[Rates, dict]:
    """Rates measured from what a warehouse holds: answer lengths, entities per unit, reported
    communities per entity, report context size, and how far the counted prompt tokens were from
    the ones the server reported. Returns (rates, counts of the units measured)."""
    from pyspark.sql import functions as F

    from .stages.extract import extract_identity

    fallback = Rates.configured(cfg.estimate, cfg.extract, cfg.reports)
    _, phash, model = extract_identity(cfg.extract, cfg.prompt_path, cfg.llm.model)
    counting = ExtractCounting.of(cfg)
    units = wh.read("text_units")
    ex = wh.read("extractions").where((F.col("prompt_hash") == phash) & (F.col("model") == model)
                                      & (F.col("status") != "llm_error")).join(units.select("unit_id"), "unit_id", "left_semi")
    ex_row = ex.agg(F.count("*").alias("n"), F.sum("tokens_in").alias("tin"), F.avg("tokens_out").alias("tout"),
                    F.avg((F.col("gleanings") > 0).cast("double")).alias("glean")).first()
    counts = count_units(units.join(ex.select("unit_id"), "unit_id", "left_semi"), counting)
    n_units, n_ents = counts["units"], wh.read("entities").count()
    corr = (ex_row["tin"] / counts["tokens_in"]) if counts["tokens_in"] and ex_row["tin"] else 1.0
    rates = Rates(
        extract_out_per_call=float(ex_row["tout"]) if ex_row["n"] and counts["requests"] else fallback.extract_out_per_call,
        report_out_per_call=fallback.report_out_per_call,
        entities_per_unit=n_ents / n_units if n_units else fallback.entities_per_unit,
        reports_per_entity=fallback.reports_per_entity,
        report_context_tokens=fallback.report_context_tokens,
        input_correction=corr, source=source,
        glean_fraction=float(ex_row["glean"]) if ex_row["n"] and ex_row["glean"] is not None else fallback.glean_fraction,
        # the rows' tokens_in / tokens_out add up over their gleaning rounds (stages/extract.py)
        gleaning_included=bool(ex_row["n"] and counts["requests"]),
    )
    reps = wh.read("community_reports").where(F.col("status") != "llm_error")
    rep = reps.agg(F.count("*").alias("n"), F.avg("tokens_in").alias("tin"), F.avg("tokens_out").alias("tout")).first()
    if rep["n"] and cfg.reports.per_domain:
        per_domain = wh.read("community_domain_reports").where(F.col("status") != "llm_error").count()
        rates.domain_reports_per_report = per_domain / rep["n"]
    if rep["n"] and n_ents:
        text_ratio = counts["text_tokens"] / counts["n_tokens"] if counts["n_tokens"] else 1.0
        rates.reports_per_entity = rep["n"] / n_ents
        rates.report_out_per_call = float(rep["tout"] or 0.0)
        rates.report_context_tokens = max(0.0, (float(rep["tin"] or 0.0) / corr - _overhead(cfg, counting)) / text_ratio)
    else:
        # No report to measure (e.g. a calibration sample whose communities are all too small):
        # the context is not a fixed share of the budget but what a report would be built from,
        # its entities' and relationships' lines (measured here, per entity) times the entities
        # per reported community the rates imply, capped by the budget.
        per_entity = _context_tokens_per_entity(wh)
        if per_entity is not None and rates.reports_per_entity > 0:
            rates.report_context_tokens = min(float(cfg.reports.max_input_tokens), per_entity / rates.reports_per_entity)
            rates.source += " (no report in it: report count and answer length from config, context from its entities)"
        else:
            rates.source += " (no report in it: report rates from config)"
    return rates, counts


def _context_tokens_per_entity(wh, limit: int = 2000) -> float | None:
    """Mean cl100k tokens per entity of the lines a report context holds (stages/reports.build_context):
    each entity's line plus its share of the relationship lines among them; on at most `limit` entities."""
    from pyspark.sql import functions as F

    from .tokens import count_tokens

    ents = wh.read("entities").orderBy("entity_id").select("entity_id", "title", "type", "description").limit(limit).collect()
    if not ents:
        return None
    title = {e["entity_id"]: e["title"] for e in ents}
    ids = list(title)
    rels = wh.read("relationships").where(F.col("source_id").isin(ids) & F.col("target_id").isin(ids)).select(
        "source_id", "target_id", "description", "weight").collect()
    total = sum(count_tokens(f"- {e['title']} ({e['type']}): {e['description'] or ''}") + 1 for e in ents)
    total += sum(count_tokens(f"- {title[r['source_id']]} -> {title[r['target_id']]} [weight {r['weight'] or 0:g}]: "
                              f"{r['description'] or ''}") + 1 for r in rels)
    return total / len(ents)


def _scratch_cfg(cfg: Config, folder: Path) -> Config:
    c = cfg.model_copy(deep=True)
    c.storage.warehouse, c.storage.index_dir = str(folder / "warehouse"), str(folder / "index")
    return c  # cache_dir is kept: answers paid for while calibrating are reused by the real build


def calibrate(cfg: Config, spark, text_units, n: int, folder: Path) -> Rates:
    """Run the real extract, resolve, communities and reports stages on n sampled units (in a
    scratch warehouse, through the normal path and the shared response cache) and measure."""
    from pyspark.sql import functions as F

    from .pipeline import RunContext, run_pipeline

    ccfg = _scratch_cfg(cfg, folder)
    ctx = RunContext(ccfg, spark, kind="estimate")
    ctx.wh.ensure_all()
    order = F.sha2(F.concat_ws("|", F.col("unit_id"), F.lit(str(cfg.estimate.calibrate_seed))), 256)
    ctx.wh.overwrite("text_units", text_units.orderBy(order).limit(n))
    ctx.log(f"calibrating on {n} sampled units with the real model ({cfg.llm.model})")
    results = run_pipeline(ctx, "calibrate")
    rates, _ = warehouse_rates(ctx.wh, cfg, source=f"calibrated on {n} units")
    # Resolve's LLM calls (adjudications, description summaries) leave no per-call rows in the
    # warehouse; the sample run's own accounting measures them. A sample that made none leaves the
    # config's per-entity rates in place: no call on a few units is no rate for the corpus.
    used, n_ents = results["resolve"].usage, ctx.wh.read("entities").count()
    if used is not None and used.calls and n_ents:
        rates.resolve_calls_per_entity = used.calls / n_ents
        rates.resolve_in_per_call, rates.resolve_out_per_call = used.tokens_in / used.calls, used.tokens_out / used.calls
    return rates


def estimate_warehouse(wh, cfg: Config) -> Estimate:
    """What a full rebuild of the warehouse's live corpus would cost, at the rates it measured."""
    from pyspark.sql import functions as F

    rates, _ = warehouse_rates(wh, cfg, source="measured on the warehouse")
    counting = ExtractCounting.of(cfg)
    counts = count_units(wh.read("text_units"), counting)
    docs = wh.read("documents").where(~F.col("deleted")).count()
    return _priced(counts, rates, cfg, counting, documents=docs, tokenizer=" ".join(map(str, counting.spec[:2])))


def run_estimate(cfg: Config, spark, *, calibrate_n: int = 0, out_dir: str | Path | None = None,
                 sample_units: int | None = None) -> tuple[Estimate, Path]:
    """The dry run: ingest + chunk into a scratch warehouse, count, (calibrate), price, record.

    sample_units: see estimate_sample.count_prompt_tokens (None: every unit up to 200k, a
    sample with a stated bound above). Returns the estimate and the folder holding
    estimate.json, where the command line draws the chart."""
    from datetime import datetime, timezone

    from .delta_io import Warehouse
    from .estimate_sample import count_prompt_tokens
    from .pipeline import RunContext, run_pipeline

    base = Path(cfg.estimate.scratch_dir or Path(cfg.storage.cache_dir) / "estimate").resolve()
    ctx = RunContext(cfg, spark, kind="estimate")  # only for its run id; writes nothing
    work = base / ctx.run_id
    started = datetime.now(timezone.utc)
    sctx = RunContext(_scratch_cfg(cfg, work / "corpus"), spark, kind="estimate")
    sctx.run_id = ctx.run_id
    results = run_pipeline(sctx, "estimate")
    units = sctx.wh.read("text_units")
    counting = ExtractCounting.of(cfg)
    counts, sampling = count_prompt_tokens(units, counting, cfg.estimate.calibrate_seed, sample_units)
    rates = calibrate(cfg, spark, units, calibrate_n, work / "calibration") if calibrate_n > 0 else \
        Rates.configured(cfg.estimate, cfg.extract, cfg.reports)
    est = _priced(counts, rates, cfg, counting, documents=results["ingest"].rows["documents"],
                  tokenizer=f"{counting.spec[0]} {Path(counting.spec[1]).name}")
    est.sampling = sampling
    out = Path(out_dir).resolve() if out_dir else work
    out.mkdir(parents=True, exist_ok=True)
    (out / "estimate.json").write_text(json.dumps(est.to_dict(), indent=2, sort_keys=True))
    # One row in the real warehouse's `runs` table; nothing else there is touched.
    Warehouse(spark, cfg.storage.warehouse).upsert_records("runs", [dict(
        run_id=ctx.run_id, kind="estimate", config_hash=cfg.fingerprint(), started=started,
        finished=datetime.now(timezone.utc), status="ok", stage_counts=json.dumps(est.to_dict(), sort_keys=True))])
    return est, out
