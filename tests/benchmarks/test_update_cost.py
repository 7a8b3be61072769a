"""What an incremental update costs against a full rebuild, in LLM tokens from `llm_calls`.

A 100-document corpus (MuSiQue paragraphs from ../shared/data, one text unit each) is indexed
in full, then one document (1%) is added and `update` runs, then one document is deleted and
`update` runs again. The model is the deterministic scripted server (tests/benchmarks/
scripted_server.py): answers follow the text, so new documents bring new entities and
deletions remove them, and every call is fast enough for 100 documents on 2 cores. Tokens
are those the server reported, summed from the `llm_calls` rows of each run.
Target: adding 1% of the documents costs at most 3% of a full rebuild's tokens.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.pipeline import run_index
from corpusgraph.runner.pipeline import run_update
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO, SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.spark, pytest.mark.ray]

RESULTS = Path(__file__).parent / "results" / "update_cost.json"
MUSIQUE = SHARED_DATA / "musique100" / "docs.jsonl"
N_DOCS = 100


def _tokens(spark, cfg, run_id: str) -> int:
    from pyspark.sql import functions as F

    from corpusgraph.tables import table_path

    calls = spark.read.format("delta").load(table_path(cfg.storage.warehouse, "llm_calls"))
    row = calls.where(F.col("run_id") == run_id).agg(F.sum(F.col("tokens_in") + F.col("tokens_out")).alias("t")).first()
    return int(row["t"] or 0)


def _tokens_by_stage(spark, cfg, run_id: str) -> dict:
    """{stage: {calls, tokens}} of one run, from its llm_calls rows: where an update's tokens went."""
    from pyspark.sql import functions as F

    from corpusgraph.tables import table_path

    calls = spark.read.format("delta").load(table_path(cfg.storage.warehouse, "llm_calls"))
    rows = calls.where(F.col("run_id") == run_id).collect()
    return {r["stage"]: {"calls": int(r["calls"]), "cache_hits": int(r["cache_hits"]),
                         "tokens": int(r["tokens_in"] + r["tokens_out"])} for r in sorted(rows, key=lambda r: r["stage"])}


def test_adding_one_percent_costs_at_most_three_percent(spark, tmp_path, scripted_url):
    if not MUSIQUE.is_file():
        pytest.skip(f"{MUSIQUE} is absent: this benchmark needs ../shared/data")
    lines = MUSIQUE.read_text().splitlines()[: N_DOCS + 1]
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i, line in enumerate(lines[:N_DOCS]):
        (inputs / f"p{i:03d}.jsonl").write_text(line + "\n")
    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
        "storage.cache_dir": str(tmp_path / "cache"), "ingest.inputs": f"[{inputs}]",
        "llm.backend": "openai", "llm.api_base": scripted_url, "llm.model": "scripted", "llm.concurrency": "16",
    })
    full = RunContext(cfg, spark)
    run_index(full)
    full_tokens = _tokens(spark, cfg, full.run_id)

    (inputs / f"p{N_DOCS:03d}.jsonl").write_text(lines[N_DOCS] + "\n")
    add = RunContext(cfg, spark, kind="update")
    run_update(add)
    (inputs / "p000.jsonl").unlink()
    delete = RunContext(cfg, spark, kind="update")
    run_update(delete)

    add_tokens, del_tokens = _tokens(spark, cfg, add.run_id), _tokens(spark, cfg, delete.run_id)
    detail = {name: {"tokens": _tokens(spark, cfg, ctx.run_id), **ctx.results["cost"].rows,
                     "by_stage": _tokens_by_stage(spark, cfg, ctx.run_id),
                     "resolve": ctx.results["resolve"].rows,
                     "communities": ctx.results["communities"].rows}
              for name, ctx in (("add_1pct", add), ("delete_1pct", delete))}
    detail["full_rebuild"] = {"tokens": full_tokens, "by_stage": _tokens_by_stage(spark, cfg, full.run_id),
                              "resolve": full.results["resolve"].rows, "communities": full.results["communities"].rows}
    RESULTS.write_text(json.dumps({
        "token_fraction_add_1pct": round(add_tokens / full_tokens, 5),
        "token_fraction_delete_1pct": round(del_tokens / full_tokens, 5),
        "full_rebuild_tokens": full_tokens,
        "target_add_fraction": 0.03,
        "corpus": f"musique100, {N_DOCS} paragraphs (one text unit each), then +1 and -1",
        "model": "tests/support/scripted_server.py (deterministic, answers derived from the text)",
        "full_rebuild_calls": sum(r.usage.calls for r in full.results.values() if r.usage),
        "detail": detail,
        "machine": f"{platform.platform()}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }, indent=2) + "\n")
    assert add.results["extract"].rows["sent"] == 1 and delete.results["extract"].rows["sent"] == 0
    assert add_tokens <= 0.03 * full_tokens, (add_tokens, full_tokens)
