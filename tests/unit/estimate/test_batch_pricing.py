"""llm.backend openai_batch prices: the run's accounting and the estimate use llm.batch.price_factor."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusgraph.config import ConfigError, LLMSection, load_config
from corpusgraph.estimate.model import Rates, estimate_from_counts
from corpusgraph.estimate.view import format_estimate
from corpusgraph.runner.dry_run import cost_sections
from corpusgraph.runner.passes.llm import output_usage
from tests.conftest import REPO

pytestmark = pytest.mark.unit

COUNTS = {"requests": 100, "tokens_in": 60_000, "text_tokens": 33_000, "n_tokens": 30_000, "units": 100}
RATES = dict(extract_out_per_call=200, report_out_per_call=300, entities_per_unit=2.0, reports_per_entity=0.25,
             report_context_tokens=800)


def _cfg(**over):
    return load_config(REPO / "conf" / "local.yaml", {"extract.glean_rounds": "0", **over})


def test_batch_backend_needs_an_endpoint_and_keeps_queries_synchronous(tmp_path):
    with pytest.raises(ConfigError, match="openai_batch"):
        _cfg(**{"llm.backend": "openai_batch"})
    llm = _cfg(**{"llm.backend": "openai_batch", "llm.api_base": "http://h/v1"}).llm
    assert llm.batched("extract") and llm.batched("reports") and not llm.batched("query")
    assert not LLMSection(backend="openai", api_base="http://h/v1").batched("extract")
    from corpusgraph.llm.factory import open_chat_model
    from corpusgraph.llm.openai_batch import OpenAIBatchChatModel
    from corpusgraph.llm.openai_http import OpenAIChatModel

    assert isinstance(open_chat_model(llm, tmp_path), OpenAIChatModel)  # what queries get
    batch = open_chat_model(llm, tmp_path, batch=True)
    assert isinstance(batch, OpenAIBatchChatModel) and batch.records.folder == tmp_path / "batches"


def test_accounting_prices_batch_rows_at_the_factor(tmp_path):
    # Two paid rows through the batch API, one synchronous, one cached.
    pq.write_table(pa.table({
        "llm_cached": [False, False, False, True], "llm_failed": [False] * 4, "llm_seconds": [0.0] * 4,
        "llm_tokens_in": pa.array([1000, 1000, 1000, 1000], pa.int64()),
        "llm_tokens_out": pa.array([100, 100, 100, 100], pa.int64()),
        "llm_batch": [True, True, False, True]}), tmp_path / "part-0.parquet")
    llm = LLMSection(backend="openai_batch", api_base="http://h/v1", usd_per_1k_in=2.0, usd_per_1k_out=10.0)
    usage, _ = output_usage(tmp_path, llm)
    full = 1.0 * 2.0 + 0.1 * 10.0  # one call's price
    assert usage.calls == 3 and usage.usd == pytest.approx(full + 2 * 0.5 * full)


def test_estimate_prices_batched_stages_at_the_factor():
    sync = estimate_from_counts(COUNTS, Rates(**RATES), cost_sections(_cfg()), documents=40, overhead=150,
                                tokenizer="t")
    cfg = _cfg(**{"llm.backend": "openai_batch", "llm.api_base": "http://h/v1", "llm.usd_per_1k_in": "0.001",
                  "llm.usd_per_1k_out": "0.002", "llm.batch.stages": "[extract, reports]",
                  "estimate.prices.gpt-4o.batch_factor": "0.25"})
    est = estimate_from_counts(COUNTS, Rates(**RATES), cost_sections(cfg), documents=40, overhead=150,
                               tokenizer="t")
    assert est.llm_tokens == sync.llm_tokens  # the same calls; only the price differs
    batched = [s for s in est.stages if s.stage in ("extract", "reports")]
    bin_, bout = sum(s.tokens_in for s in batched), sum(s.tokens_out for s in batched)
    rest_in, rest_out = est.llm_tokens_in - bin_, est.llm_tokens_out - bout
    assert est.batch == {"price_factor": 0.5, "stages": ["extract", "reports"], "tokens_in": bin_, "tokens_out": bout}
    for name, p in cfg.estimate.prices.items():
        f = 0.25 if name == "gpt-4o" else 0.5
        want = (rest_in * p.usd_per_1m_in + rest_out * p.usd_per_1m_out
                + f * (bin_ * p.usd_per_1m_in + bout * p.usd_per_1m_out)) / 1e6
        assert est.usd[f"{name}, batch x{f:g}"] == pytest.approx(want)
        assert est.usd[f"{name}, batch x{f:g}"] < sync.usd[name]
    conf = est.usd["configured (smollm2), batch x0.5"]
    assert conf == pytest.approx((rest_in + 0.5 * bin_) / 1000 * 0.001 + (rest_out + 0.5 * bout) / 1000 * 0.002)
    text = format_estimate(est, cfg.estimate)
    assert "gpt-4o-mini, batch x0.5" in text and "gpt-4o, batch x0.25" in text
