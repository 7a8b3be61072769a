"""Progress of the Spark-only stages in their own units, through the real steps: chunk's bar counts
documents as its pass reads them (SQL metrics of the scan, updated at task ends and from executor
heartbeats while a task runs), ingest's counts the files its binaryFile source read; both end at
the rows."""

from __future__ import annotations

import io
import re
import time

import pytest

from corpusgraph.runner import progress
from tests.spark.test_stages import _write_inputs

pytestmark = pytest.mark.spark

# Twelve tasks of 1,250 documents on two cores: six waves. On an idle machine the whole pass took
# about 4 s, so the bar (read every 0.5 s here, as it prints) sees the count between task ends; with
# reads every 2 s and six tasks it once saw only the end.
DOCS = 15_000
TASKS = 12


@pytest.fixture
def log(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(progress, "_settings", progress._Settings(stream=out, interactive=False, interval_s=0.5))
    return out


def _ctx(spark, tmp_path, inputs, tables):
    """A run context whose warehouse has only `tables` (Warehouse.ensure_all)."""
    from corpusgraph.config import load_config
    from corpusgraph.runner.run import RunContext
    from tests.conftest import REPO

    cfg = load_config(REPO / "conf" / "local.yaml", {"storage.warehouse": str(tmp_path / "wh"),
                                                     "storage.cache_dir": str(tmp_path / "cache")})
    cfg.ingest.inputs = [str(p) for p in inputs]
    ctx = RunContext(cfg, spark)
    ctx.wh.ensure_all(tables)
    return ctx


def _lines(text: str, stage: str, unit: str) -> list[tuple[int, int, str]]:
    pattern = rf"^\[corpusgraph\] {stage}: ([\d,]+)/([\d,]+) {unit} \(\d+%\), (.+)$"
    return [(int(a.replace(",", "")), int(b.replace(",", "")), rest) for a, b, rest in re.findall(pattern, text, re.M)]


@pytest.mark.timeout(300)
def test_chunk_shows_documents_read_mid_task_with_rate_and_eta_and_ends_at_the_documents(spark, tmp_path, log):
    from pyspark.sql import functions as F

    from corpusgraph.runner.steps import index as steps
    from corpusgraph.tables import spark_schema

    from types import SimpleNamespace

    from corpusgraph.config import ChunkSection
    from corpusgraph.storage.warehouse import Warehouse

    # Only what chunk gets: its tables (the documents table, written below) and its section.
    ctx = SimpleNamespace(spark=spark, wh=Warehouse(spark, str(tmp_path / "wh")))
    text = F.concat(F.lit("Castor Haulage moved crate "), F.col("id").cast("string"),
                    F.lit(" from the Lisbon hub to Porto; the night shift signed for it. " * 6))
    cols = {"doc_id": F.format_string("d%07d", "id"), "text": text, "deleted": F.lit(False)}
    docs = spark.range(DOCS).select([cols.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name)
                                     for f in spark_schema("documents")])
    ctx.wh.overwrite("documents", docs.repartition(TASKS))
    # One task per file (Spark would pack these small files into two), so the count also moves
    # at task ends, whether or not a heartbeat lands inside a task.
    spark.conf.set("spark.sql.files.openCostInBytes", str(128 << 20))
    try:
        t0 = time.monotonic()
        steps.chunk(SimpleNamespace(spark=spark, tables=ctx.wh), chunk=ChunkSection())
        seconds = time.monotonic() - t0
    finally:
        spark.conf.unset("spark.sql.files.openCostInBytes")
    lines = _lines(log.getvalue(), "chunk", "documents")
    assert lines, log.getvalue()
    assert lines[-1][:2] == (DOCS, DOCS) and "done in" in lines[-1][2], lines[-1]
    assert re.match(r"[\d.,]+ documents/(s|min), done in \S+$", lines[-1][2])
    assert [d for d, _, _ in lines] == sorted(d for d, _, _ in lines)  # never backwards
    # Seen part-way with a rate and an ETA, not only at the end.
    mid = [(d, rest) for d, total, rest in lines if 0 < d < DOCS]
    assert any(re.match(r"[\d.,]+ documents/(s|min), ETA \d", rest) for _, rest in mid), (seconds, sorted(set(lines)))
    # Spark's own task bar stays quiet while the stage's bar is open.
    assert "Spark tasks" not in log.getvalue()


@pytest.mark.timeout(300)
def test_ingest_counts_the_files_read_and_ends_at_the_files_listed(spark, tmp_path, log):
    from corpusgraph.runner.pipeline import run_stage

    _write_inputs(tmp_path / "in")
    for i in range(40):
        (tmp_path / "in" / f"n{i:03d}.txt").write_text(f"Note {i}: the Porto hub logged crate {i} late.")
    ctx = _ctx(spark, tmp_path, [tmp_path / "in"], tables=("documents", "quarantine"))
    run_stage(ctx, "ingest")
    lines = _lines(log.getvalue(), "ingest", "files")
    files = 8 + 40
    assert lines and lines[-1][:2] == (files, files) and "done in" in lines[-1][2], log.getvalue()
