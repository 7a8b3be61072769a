"""LLM accounting from a task's Parquet output reads the bookkeeping columns only."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusgraph.config import LLMSection
from corpusgraph.runner.passes.llm import output_usage
from tests.support.task_outputs import usage_from_outputs

pytestmark = pytest.mark.unit


def test_usage_sums_paid_rows_and_never_reads_the_answers(tmp_path):
    answer = "a" * 5000  # the raw answers: what the driver must not read to count usage
    rows = [  # cached, failed, tokens in, tokens out
        (False, False, 100, 40), (False, True, 30, 0), (True, False, 999, 999), (False, False, None, None),
    ]
    pq.write_table(pa.table({
        "unit_id": ["u1", "u2", "u3", "u4"], "raw": [answer] * 4,
        "llm_cached": [r[0] for r in rows], "llm_failed": [r[1] for r in rows], "llm_seconds": [1.0] * 4,
        "llm_tokens_in": pa.array([r[2] for r in rows], pa.int64()),
        "llm_tokens_out": pa.array([r[3] for r in rows], pa.int64()),
    }), tmp_path / "part-0.parquet")
    usage, nbytes = output_usage(tmp_path, LLMSection(usd_per_1k_in=2.0, usd_per_1k_out=10.0))
    # Three paid calls (the cached one costs nothing), one of them failed; a row without usage counts 0.
    assert (usage.calls, usage.cache_hits, usage.errors) == (3, 1, 1)
    assert (usage.tokens_in, usage.tokens_out) == (130, 40)
    assert usage.usd == pytest.approx(130 / 1000 * 2.0 + 40 / 1000 * 10.0)
    assert 0 < nbytes < 4 * 5000  # the answers were not read
    same, rows_back = usage_from_outputs(tmp_path, LLMSection(usd_per_1k_in=2.0, usd_per_1k_out=10.0))
    assert same == usage and rows_back.column_names == ["unit_id", "raw"]
