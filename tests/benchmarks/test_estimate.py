"""Estimate vs actual: `corpusgraph estimate --calibrate N` against a real build with the embedded model.

For each corpus the dry run (ingest, chunk, count, calibrate on a few sampled units, with its
own response cache) predicts the LLM tokens of a build; then the build runs for real (ingest to
reports, a fresh cache, so every call is paid and lands in `llm_calls`) and the two are compared.
Target: token totals within 20%. The uncalibrated estimate (config rates only) is recorded too.

Corpora: the bundled freight sample and MuSiQue paragraphs from ../shared/data. On a shared
2-core machine the real model takes 10-25 s per call, so the default sizes are subsets
(CG_EST_FREIGHT_DOCS, CG_EST_MUSIQUE_DOCS; set 44 for the whole freight sample).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path

import pytest

from corpusgraph.config import load_config
from tests.conftest import REPO, SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.llm, pytest.mark.spark, pytest.mark.ray]

RESULTS = Path(__file__).parent / "results" / "estimate.json"
FREIGHT = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"
MUSIQUE = SHARED_DATA / "musique100" / "docs.jsonl"
CALIBRATE = int(os.environ.get("CG_EST_CALIBRATE", "3"))
LLM_STAGES = ("extract", "resolve", "reports")


def _freight(folder: Path) -> Path:
    n = int(os.environ.get("CG_EST_FREIGHT_DOCS", "6"))
    folder.mkdir(parents=True)
    for src in sorted(p for p in FREIGHT.iterdir() if p.suffix in (".md", ".txt"))[:n]:
        (folder / src.name).write_text(src.read_text())
    return folder


def _musique(folder: Path) -> Path:
    if not MUSIQUE.is_file():
        pytest.skip(f"{MUSIQUE} is absent: the MuSiQue comparison needs ../shared/data")
    n = int(os.environ.get("CG_EST_MUSIQUE_DOCS", "8"))
    folder.mkdir(parents=True)
    lines = MUSIQUE.read_text().splitlines()[:n]
    (folder / "musique.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _cfg(root: Path, inputs: Path, cache: str):
    return load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
        "storage.cache_dir": str(root / cache), "ingest.inputs": f"[{inputs}]",
    })


def _compare(spark, root: Path, name: str, inputs: Path) -> dict:
    from corpusgraph.estimate.count import ExtractCounting, count_units
    from corpusgraph.estimate.count import report_overhead
    from corpusgraph.estimate.model import Rates, estimate_from_counts
    from corpusgraph.prompts import load_prompt
    from corpusgraph.runner.dry_run import cost_sections, run_estimate
    from corpusgraph.runner.pipeline import run_index
    from corpusgraph.runner.run import RunContext

    est_cfg = _cfg(root, inputs, "estimate-cache")  # its own cache: the calibration calls are not reused
    est, _ = run_estimate(est_cfg, spark, calibrate_n=CALIBRATE)
    cfg = _cfg(root, inputs, "cache")
    ctx = RunContext(cfg, spark)
    run_index(ctx, ["ingest", "chunk", "extract", "resolve", "communities", "reports"])
    used = [ctx.results[s].usage for s in LLM_STAGES if s in ctx.results and ctx.results[s].usage is not None]
    actual = sum(u.tokens_in + u.tokens_out for u in used)
    counting = ExtractCounting.of(cost_sections(cfg), cfg.prompt_path)
    counts = count_units(ctx.wh.read("text_units"), counting)
    overhead = report_overhead(cfg.reports, load_prompt(cfg.prompt_path(cfg.reports.prompt)), cfg.llm, counting.counter())
    plain = estimate_from_counts(counts, Rates.configured(cfg.estimate, cfg.extract, cfg.reports), cost_sections(cfg),
                                 documents=est.documents, overhead=overhead, tokenizer=est.tokenizer)
    stages = {s: {"estimated_calls": est.stage(s).calls, "actual_calls": ctx.results[s].usage.calls,
                  "estimated_tokens_in": est.stage(s).tokens_in, "actual_tokens_in": ctx.results[s].usage.tokens_in,
                  "estimated_tokens_out": est.stage(s).tokens_out, "actual_tokens_out": ctx.results[s].usage.tokens_out}
              for s in LLM_STAGES if s in ctx.results and ctx.results[s].usage is not None}
    return {
        "name": name, "documents": est.documents, "units": est.units,
        "estimated_tokens": est.llm_tokens, "actual_tokens": actual,
        "token_error": round((est.llm_tokens - actual) / actual, 4),
        "actual_cache_hits": sum(u.cache_hits for u in used),  # 0: a fresh cache, every call paid
        "calibrated_on_units": CALIBRATE, "rates": est.rates.source,
        "uncalibrated_estimated_tokens": plain.llm_tokens,
        "uncalibrated_token_error": round((plain.llm_tokens - actual) / actual, 4),
        "stages": stages,
    }


def test_estimate_within_20_percent_of_actual(spark, tmp_path):
    rows = [_compare(spark, tmp_path / "freight", "freight sample (first "
                     f"{os.environ.get('CG_EST_FREIGHT_DOCS', '6')} docs)", _freight(tmp_path / "freight-in"))]
    if MUSIQUE.is_file() and os.environ.get("CG_EST_MUSIQUE_DOCS", "8") != "0":  # 0: freight only
        rows.append(_compare(spark, tmp_path / "musique", f"musique100 (first "
                             f"{os.environ.get('CG_EST_MUSIQUE_DOCS', '8')} paragraphs)", _musique(tmp_path / "musique-in")))
    load = os.getloadavg()[0]
    RESULTS.write_text(json.dumps({
        "corpora": rows, "target_token_error": 0.2,
        "machine": f"{platform.platform()}; {os.cpu_count()} cores; load average {load:.1f}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "model": "smollm2 (embedded llama.cpp server)",
    }, indent=2) + "\n")
    for r in rows:
        assert abs(r["token_error"]) <= 0.2, r
