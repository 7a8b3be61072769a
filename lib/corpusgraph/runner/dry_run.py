"""The dry run: `corpusgraph estimate`, and the calibration it may run first.

A dry run ingests and chunks into a scratch warehouse (the real one is not written, except for
one `runs` row), counts what each LLM stage would send (estimate/count.py, or a sample of it on a
large corpus: estimate/sample.py) and prices it with the cost model (estimate/model.py) at the
rates of estimate/rates.py: the config's, or a calibration on N sampled units with the real model.
The command line prints the estimate and draws its chart (estimate/view.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from corpusgraph.config import Config
from corpusgraph.estimate.count import ExtractCounting
from corpusgraph.estimate.model import CostSections, Estimate, Rates
from corpusgraph.estimate.rates import priced, warehouse_rates

__all__ = ["calibrate", "run_estimate", "cost_sections"]


def cost_sections(cfg: Config) -> CostSections:
    """The sections of the root config that the cost model reads, by their names."""
    return CostSections(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(CostSections)})


def _scratch_cfg(cfg: Config, folder: Path) -> Config:
    c = cfg.model_copy(deep=True)
    c.storage.warehouse, c.storage.index_dir = str(folder / "warehouse"), str(folder / "index")
    return c  # cache_dir is kept: answers paid for while calibrating are reused by the real build


def calibrate(cfg: Config, spark, text_units, n: int, folder: Path) -> Rates:
    """Run the real extract, resolve, communities and reports stages on n sampled units (in a
    scratch warehouse, through the normal path and the shared response cache) and measure."""
    from pyspark.sql import functions as F

    from corpusgraph.runner.pipeline import run_pipeline
    from corpusgraph.runner.run import RunContext

    ccfg = _scratch_cfg(cfg, folder)
    ctx = RunContext(ccfg, spark, kind="estimate")
    ctx.wh.ensure_all()
    order = F.sha2(F.concat_ws("|", F.col("unit_id"), F.lit(str(cfg.estimate.calibrate_seed))), 256)
    ctx.wh.overwrite("text_units", text_units.orderBy(order).limit(n))
    ctx.log(f"calibrating on {n} sampled units with the real model ({cfg.llm.model})")
    results = run_pipeline(ctx, "calibrate")
    rates, _ = warehouse_rates(ctx.wh, cost_sections(cfg), cfg.prompt_path, source=f"calibrated on {n} units")
    # Resolve's LLM calls (adjudications, description summaries) leave no per-call rows in the
    # warehouse; the sample run's own accounting measures them. A sample that made none leaves the
    # config's per-entity rates in place: no call on a few units is no rate for the corpus.
    used, n_ents = results["resolve"].usage, ctx.wh.read("entities").count()
    if used is not None and used.calls and n_ents:
        rates.resolve_calls_per_entity = used.calls / n_ents
        rates.resolve_in_per_call, rates.resolve_out_per_call = used.tokens_in / used.calls, used.tokens_out / used.calls
    return rates


def run_estimate(cfg: Config, spark, *, calibrate_n: int = 0, out_dir: str | Path | None = None,
                 sample_units: int | None = None) -> tuple[Estimate, Path]:
    """The dry run: ingest + chunk into a scratch warehouse, count, (calibrate), price, record.

    sample_units: see estimate.sample.count_prompt_tokens (None: every unit up to 200k, a
    sample with a stated bound above). Returns the estimate and the folder holding
    estimate.json, where the command line draws the chart."""
    from datetime import datetime, timezone

    from corpusgraph.estimate.sample import count_prompt_tokens
    from corpusgraph.runner.pipeline import run_pipeline
    from corpusgraph.runner.run import RunContext, new_run_id
    from corpusgraph.storage.warehouse import Warehouse

    base = Path(cfg.estimate.scratch_dir or Path(cfg.storage.cache_dir) / "estimate").resolve()
    run_id = new_run_id("estimate")  # the scratch run's, and the id of the one row in the real warehouse
    work = base / run_id
    started = datetime.now(timezone.utc)
    sctx = RunContext(_scratch_cfg(cfg, work / "corpus"), spark, kind="estimate", run_id=run_id)
    results = run_pipeline(sctx, "estimate")
    units = sctx.wh.read("text_units")
    cost = cost_sections(cfg)
    counting = ExtractCounting.of(cost, cfg.prompt_path)
    counts, sampling = count_prompt_tokens(units, counting, cfg.estimate.calibrate_seed, sample_units)
    rates = calibrate(cfg, spark, units, calibrate_n, work / "calibration") if calibrate_n > 0 else \
        Rates.configured(cfg.estimate, cfg.extract, cfg.reports)
    est = priced(counts, rates, cost, cfg.prompt_path, counting, documents=results["ingest"].rows["documents"],
                 tokenizer=f"{counting.spec[0]} {Path(counting.spec[1]).name}")
    est.sampling = sampling
    out = Path(out_dir).resolve() if out_dir else work
    out.mkdir(parents=True, exist_ok=True)
    (out / "estimate.json").write_text(json.dumps(est.to_dict(), indent=2, sort_keys=True))
    # One row in the real warehouse's `runs` table; nothing else there is touched.
    Warehouse(spark, cfg.storage.warehouse).upsert_records("runs", [dict(
        run_id=run_id, kind="estimate", config_hash=cfg.fingerprint(), started=started,
        finished=datetime.now(timezone.utc), status="ok", stage_counts=json.dumps(est.to_dict(), sort_keys=True))])
    return est, out
