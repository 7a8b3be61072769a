"""An LLM pass's accounting is summed where its rows are: Spark in the pipeline
(handoff.spark_usage_sums), pyarrow in tools and tests (passes.llm.output_usage). Both must give
the same Usage from the same output rows; the Spark path returns only the seven integers."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusgraph.config import LLMSection
from corpusgraph.runner.handoff import spark_usage_sums
from corpusgraph.runner.passes.llm import USAGE_SUMS, output_usage, usage_from_sums

pytestmark = pytest.mark.spark

# cached, failed, batch, tokens in, tokens out, attempt
ROWS = [
    (False, False, False, 100, 40, "run-b"),   # paid by this attempt
    (False, True, False, 30, 0, "run-b"),      # paid, failed
    (True, False, False, 999, 999, "run-b"),   # a cache hit
    (False, False, None, None, None, "run-b"),  # paid, no usage reported: counts 0 tokens
    (False, False, True, 1000, 500, "run-b"),  # paid through the batch API
    (False, False, False, 70, 7, "run-a"),     # paid by an earlier attempt: a cache hit of run-b
    (None, None, None, 5, 5, None),            # no bookkeeping at all: paid, by no attempt
]


@pytest.fixture
def outputs(tmp_path):
    path = tmp_path / "out"
    path.mkdir()
    cols = list(zip(*ROWS))
    pq.write_table(pa.table({
        "raw": ["x" * 2000] * len(ROWS),
        "llm_cached": pa.array(cols[0], pa.bool_()), "llm_failed": pa.array(cols[1], pa.bool_()),
        "llm_batch": pa.array(cols[2], pa.bool_()), "llm_seconds": [0.5] * len(ROWS),
        "llm_tokens_in": pa.array(cols[3], pa.int64()), "llm_tokens_out": pa.array(cols[4], pa.int64()),
        "_unit": [f"u{i}" for i in range(len(ROWS))], "_attempt": pa.array(cols[5], pa.string()),
        "_written": [1.0] * len(ROWS),
    }), path / "part-0.parquet")
    return path


@pytest.mark.parametrize("attempt", [None, "run-b"])
def test_spark_and_pyarrow_sums_give_the_same_usage(spark, outputs, attempt):
    llm = LLMSection(usd_per_1k_in=2.0, usd_per_1k_out=10.0)
    sums = spark_usage_sums(spark.read.parquet(str(outputs)), attempt)
    assert tuple(sums) == USAGE_SUMS and all(isinstance(v, int) for v in sums.values())
    usage, _ = output_usage(outputs, llm, attempt=attempt)
    assert usage_from_sums(sums, llm) == usage
    if attempt is None:  # every row not cached is paid; the bookkeeping-less row too
        assert (usage.calls, usage.cache_hits, usage.errors) == (6, 1, 1)
        assert (usage.tokens_in, usage.tokens_out) == (1205, 552)
    else:  # run-a's row and the row of no attempt are cache hits of run-b
        assert (usage.calls, usage.cache_hits, usage.errors) == (4, 3, 1)
        assert (usage.tokens_in, usage.tokens_out) == (1130, 540)
    assert sums["batch_tokens_in"] == 1000 and sums["batch_tokens_out"] == 500
    # The batch answer is priced at the batch price factor, the rest at the synchronous price.
    sync_in, sync_out = usage.tokens_in - 1000, usage.tokens_out - 500
    assert usage.usd == pytest.approx(llm.usd(sync_in, sync_out) + llm.usd(1000, 500, batch=True))
    assert llm.usd(1000, 500, batch=True) < llm.usd(1000, 500)


def test_saved_rows_reads_the_footers_of_what_save_wrote(spark, tmp_path):
    """A hand-off's rows come from its Parquet footers (no Spark job) and equal Spark's count, for
    several files, for none of rows, and in a folder whose name needs percent-encoding; a frame
    that is not files on disk is counted by Spark."""
    from corpusgraph.runner.handoff import saved_rows

    status = spark.sparkContext.statusTracker()
    for name, n, parts in (("many", 1000, 4), ("none", 0, 1), ("sub dir #1", 7, 2)):
        path = str(tmp_path / name)
        spark.range(n).repartition(parts).write.mode("overwrite").parquet(path)
        saved = spark.read.parquet(path)
        jobs = len(status.getJobIdsForGroup())
        assert saved_rows(saved) == n
        assert len(status.getJobIdsForGroup()) == jobs  # no Spark job for it
        assert saved.count() == n
    assert saved_rows(spark.range(5)) == 5
