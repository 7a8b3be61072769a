"""The estimator's pure parts: counting real requests, the stage arithmetic, prices, the chart;
and the update's pure community extension."""

from __future__ import annotations

import numpy as np
import pytest

from corpusgraph.config import load_config
from corpusgraph.estimate import (CostSections, ExtractCounting, Rates, counter_spec, estimate_from_counts,
                                  extract_counts, report_overhead, request_counter)
from corpusgraph.prompts import load_prompt
from corpusgraph.estimate_view import svg_chart
from corpusgraph.update import OldPartition, extend_partition, modularity
from tests.conftest import REPO

UNITS = [
    {"unit_id": "u1", "text": "Brightwater Haulage moved trailer R-77 from Valencia to Milan.", "n_tokens": 14},
    {"unit_id": "u2", "text": "Giulia Sarti is the dock lead at the Milan hub.", "n_tokens": 12},
]


@pytest.fixture(scope="module")
def cfg():
    return load_config(REPO / "conf" / "local.yaml")


def test_counts_follow_the_extract_prompt(cfg, tmp_path):
    cfg = cfg.model_copy(deep=True)
    cfg.extract.units_per_call = 6  # base.yaml's packing (local.yaml sends one unit per call)
    counter = request_counter(*counter_spec(cfg.estimate, cfg.llm.backend))
    base = extract_counts(UNITS, ExtractCounting.of(cfg).requests, counter)
    # Short units are packed into one call, as the extract stage packs them.
    assert base["requests"] == 1 and base["units"] == 2 and base["n_tokens"] == 26
    single = cfg.model_copy(deep=True)
    single.extract.units_per_call = 1
    assert extract_counts(UNITS, ExtractCounting.of(single).requests, counter)["requests"] == 2
    # The bundled model's tokenizer counts the system prompt, the text and its chat template.
    assert base["tokens_in"] > 2 * counter.text(open(cfg.prompt_path(cfg.extract.prompt)).read()[:200])
    # A longer prompt file is counted as such: the estimate follows prompt edits.
    longer = tmp_path / "extract.txt"
    longer.write_text(open(cfg.prompt_path(cfg.extract.prompt)).read() + "\nBe thorough. " * 50)
    edited = cfg.model_copy(deep=True)
    edited.extract.prompt = str(longer)
    grown = extract_counts(UNITS, ExtractCounting.of(edited).requests, counter)
    assert grown["tokens_in"] > base["tokens_in"] + 2 * 50


def test_tiktoken_counter_for_other_backends(cfg):
    other = cfg.model_copy(deep=True)
    other.llm.backend = "openai"
    kind, enc, overhead = counter_spec(other.estimate, other.llm.backend)
    assert (kind, enc) == ("tiktoken", "o200k_base")
    counter = request_counter(kind, enc, overhead)
    req = ExtractCounting.of(other).requests(UNITS)[0]
    assert counter(req) == sum(counter.text(m["content"]) + overhead for m in req.messages) + 3


def test_stage_arithmetic_prices_and_time(cfg):
    cfg = cfg.model_copy(deep=True)
    cfg.extract.glean_rounds = 0
    counts = {"requests": 100, "tokens_in": 60_000, "text_tokens": 33_000, "n_tokens": 30_000, "units": 100}
    rates = Rates(extract_out_per_call=200, report_out_per_call=300, entities_per_unit=2.0, reports_per_entity=0.25,
                  report_context_tokens=800, input_correction=1.0)
    est = estimate_from_counts(counts, rates, CostSections.of(cfg), documents=40, overhead=150, tokenizer="t")
    ex, rep = est.stage("extract"), est.stage("reports")
    assert (ex.calls, ex.tokens_in, ex.tokens_out) == (100, 60_000, 20_000)
    # 200 entities x 0.25 = 50 reports of (150 + 800 x 1.1 tokenizer ratio) in and 300 out.
    assert (rep.calls, rep.tokens_in, rep.tokens_out) == (50, 50 * (150 + 880), 15_000)
    assert est.llm_tokens == sum(s.tokens_in + s.tokens_out for s in est.stages if s.llm)
    price = cfg.estimate.prices["gpt-4o-mini"]
    assert est.usd["gpt-4o-mini"] == pytest.approx(est.llm_tokens_in / 1e6 * price.usd_per_1m_in
                                                   + est.llm_tokens_out / 1e6 * price.usd_per_1m_out)
    e = cfg.estimate
    assert est.wall_s == pytest.approx(est.llm_tokens_in / e.endpoint_prefill_tokens_per_s
                                       + est.llm_tokens_out / e.endpoint_decode_tokens_per_s)
    # A calibrated input correction scales every counted prompt.
    rates.input_correction = 1.5
    assert estimate_from_counts(counts, rates, CostSections.of(cfg), documents=40, overhead=150, tokenizer="t") \
        .stage("extract").tokens_in == 90_000
    # One gleaning round goes to glean_fraction of the calls and re-sends their prompts.
    rates.input_correction, rates.glean_fraction = 1.0, 0.5
    cfg.extract.glean_rounds = 1
    gleaned = estimate_from_counts(counts, rates, CostSections.of(cfg), documents=40, overhead=150, tokenizer="t").stage("extract")
    assert gleaned.calls == 150 and gleaned.tokens_in > 60_000 + 50 * 600
    svg = svg_chart(est)
    assert svg.startswith("<svg") and "gpt-4o-mini" in svg and "extract" in svg


def test_fast_extraction_and_report_overhead(cfg):
    counter = request_counter(*counter_spec(cfg.estimate, cfg.llm.backend))
    prompt = load_prompt(cfg.prompt_path(cfg.reports.prompt))
    assert report_overhead(cfg.reports, prompt, cfg.llm, counter) > 50  # the rendered report prompt, not a constant
    fast = cfg.model_copy(deep=True)
    if "method" not in type(fast.extract).model_fields:
        pytest.skip("this tree has no extract.method")
    fast.extract.method = "fast"
    counts = {"requests": 0, "tokens_in": 0, "text_tokens": 10, "n_tokens": 10, "units": 5}
    est = estimate_from_counts(counts, Rates.configured(fast.estimate, fast.extract, fast.reports),
                               CostSections.of(fast), documents=5, overhead=100, tokenizer="t")
    assert est.stage("extract").calls == 0 and "fast" in est.stage("extract").basis


def _two_cliques():
    # nodes 0-3 and 4-7 are two 4-cliques joined by edge 3-4; 8 and 9 are new, 10-11 a new pair.
    e = [(a, b) for g in ((0, 1, 2, 3), (4, 5, 6, 7)) for i, a in enumerate(g) for b in g[i + 1:]]
    e += [(3, 4), (8, 0), (8, 1), (9, 6), (10, 11)]
    return np.array(e, dtype=np.int64), np.ones(len(e))


def test_extend_partition_places_new_nodes_by_neighbour_majority():
    edges, w = _two_cliques()
    lab0 = np.array([0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1, -1])
    lab1 = np.array([0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1])  # each clique split in two halves
    old = OldPartition(labels=[lab0, lab1], parents=[np.array([-1, -1]), np.array([0, 0, 1, 1])],
                       recorded={0: 0.4, 1: 0.2}, versions={0: "v", 1: "v"})
    labels, parents = extend_partition(12, edges, w, old)
    assert labels[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 2, 2]  # 10-11: a new community
    assert labels[1][8] == 0 and labels[1][9] == 3  # within their parent, next to their neighbours
    assert labels[1][10] == -1 and labels[1][11] == -1  # a new community has no children
    assert len(parents[0]) == 3
    q = modularity(12, edges, w, labels[0])
    assert 0.3 < q < 0.6
    assert q > modularity(12, edges, w, np.zeros(12, dtype=np.int64))
