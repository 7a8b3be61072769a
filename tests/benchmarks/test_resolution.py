"""Entity resolution, measured: merge quality on a labelled set, and blocking cost at scale.

Quality: the labelled set of resolution_set.py (seed 2; the score weights in the config were fit
on seed 1) goes through the real resolve step (steps.resolve on Delta tables, local Spark) twice,
with method "exact" and with method "similarity"; pairwise precision and recall over mentions.
LLM adjudication is off here: the bundled 135M model is not a judge worth measuring, so the
ambiguous band does not merge and the figures are the Spark resolver's alone.

Scale: generated sets of 10k, 100k and 1M mentions through the same step; pairs scored as a
fraction of n^2 (n = mentions) and seconds, on local[2] with the driver memory of
conf/local.yaml. CORPUSGRAPH_BENCH_RESOLUTION_SIZES (comma-separated) can shorten the list.

Writes tests/benchmarks/results/resolution.json.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import time

import pytest

from tests.benchmarks.resolution_set import extraction_rows, generate, pairwise, summary
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.spark]

RESULTS = REPO / "tests" / "benchmarks" / "results" / "resolution.json"
QUALITY_ENTITIES = 1500
SIZES = [int(s) for s in os.environ.get("CORPUSGRAPH_BENCH_RESOLUTION_SIZES", "10000,100000,1000000").split(",")]
AVG_MENTIONS_PER_UNIT = None  # measured from the generated rows


def resolve_context(spark, tmp_path, **overrides):
    """A RunContext on a fresh warehouse with `overrides` on conf/local.yaml."""
    from corpusgraph.config import load_config
    from corpusgraph.pipeline import RunContext

    base = {"storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
            "storage.cache_dir": str(tmp_path / "cache"), "resolve.llm_adjudication": "false",
            "resolve.summarise_descriptions": "false"}
    cfg = load_config(REPO / "conf" / "local.yaml", {**base, **overrides})
    ctx = RunContext(cfg, spark)
    ctx.wh.ensure_all()
    return ctx


def load_extractions(ctx, rows, tmp_path):
    """Generated units -> the extractions and text_units tables, via Parquet (fast at 1M)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from corpusgraph import steps
    from corpusgraph.tables import table

    _, phash, model = steps.extract_identity(ctx)
    ex = extraction_rows(rows, phash, model)
    path = tmp_path / "ex.parquet"
    pq.write_table(pa.Table.from_pylist(ex, schema=table("extractions").schema), path)
    units = pa.table({"unit_id": [r["unit_id"] for r in rows], "text": [""] * len(rows)})
    pq.write_table(units, tmp_path / "units.parquet")
    ctx.wh.overwrite("extractions", ctx.spark.read.parquet(str(path)))
    tu = ctx.spark.read.parquet(str(tmp_path / "units.parquet"))
    from pyspark.sql import functions as F

    tu = tu.select("unit_id", F.lit("d").alias("doc_id"), F.lit(0).alias("ordinal"), "text",
                   F.lit(0).alias("n_tokens"), F.lit(0).alias("char_start"), F.lit(0).alias("char_end"))
    ctx.wh.overwrite("text_units", tu)


def predicted(ctx, gold):
    """Each gold mention -> the entity id the run gave its name (through entity_aliases)."""
    al = {r["mention"]: r["entity_id"] for r in ctx.wh.read("entity_aliases").select("mention", "entity_id").collect()}
    return {m: al[m[1].strip().lower()] for m in gold}


def run_quality(spark, tmp_path, method, seed=2, **overrides):
    from corpusgraph import steps

    rows, gold = generate(QUALITY_ENTITIES, seed=seed)
    ctx = resolve_context(spark, tmp_path / method, **{"resolve.method": method, **overrides})
    load_extractions(ctx, rows, tmp_path)
    t0 = time.perf_counter()
    res = steps.resolve(ctx)
    secs = time.perf_counter() - t0
    p, r = pairwise(predicted(ctx, gold), gold)
    return p, r, secs, res, gold


def run_scale(spark, tmp_path, n_mentions):
    """Generate about n_mentions mentions, resolve them, return (mentions, pairs scored, s)."""
    from corpusgraph import steps

    per_entity = 4.6  # measured mean mentions per entity of generate() (main + co-occurring)
    rows, gold = generate(int(n_mentions / per_entity), seed=7)
    ctx = resolve_context(spark, tmp_path / f"n{n_mentions}")
    load_extractions(ctx, rows, tmp_path)
    del rows
    t0 = time.perf_counter()
    res = steps.resolve(ctx)
    secs = time.perf_counter() - t0
    return len(gold), res.rows["pairs_scored"], secs, res


def test_resolution_quality_and_blocking_scale(spark, tmp_path):
    p_exact, r_exact, s_exact, _, gold = run_quality(spark, tmp_path, "exact")
    p, r, s_sim, res, _ = run_quality(spark, tmp_path, "similarity")
    print(f"exact: P={p_exact:.3f} R={r_exact:.3f} ({s_exact:.1f}s); similarity: P={p:.3f} R={r:.3f} "
          f"({s_sim:.1f}s) {res.rows}")
    out = {"precision": round(p, 4), "recall": round(r, 4), "exact_name_precision": round(p_exact, 4),
           "exact_name_recall": round(r_exact, 4), "quality_set": {**summary(gold), "seed": 2},
           "pairs_fraction": {}, "pairs_scored": {}, "seconds": {"quality_exact": round(s_exact, 1),
                                                                 "quality_similarity": round(s_sim, 1)},
           "mentions": {}}
    for n in SIZES:
        m, pairs, secs, res = run_scale(spark, tmp_path, n)
        print(f"{n}: {m} mentions, {res.rows.get('nodes')} names, {pairs} pairs, {secs:.1f}s")
        out["pairs_fraction"][str(n)] = pairs / m ** 2
        out["pairs_scored"][str(n)] = pairs
        out["mentions"][str(n)] = m
        out["seconds"][str(n)] = round(secs, 1)
    out["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, Spark local[2], {platform.system()}"
    out["date"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for key in ("pairs_fraction", "pairs_scored", "seconds", "mentions"):  # keep sizes this run skipped
        out[key] = {**previous.get(key, {}), **out[key]}
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    assert p >= 0.97 and r >= 0.90, (p, r)
    assert r > r_exact
    if "1000000" in out["pairs_fraction"]:
        assert out["pairs_fraction"]["1000000"] <= 0.01
