"""The estimator's pure parts: counting real requests, the stage arithmetic, prices, the chart;
and the update's pure community extension."""

from __future__ import annotations

import numpy as np
import pytest

from corpusgraph.config import (EmbeddingSection, EstimateSection, ExtractSection, LLMSection, ModelPrice,
                                ReportsSection, ResolveSection, load_config)
from corpusgraph.estimate.count import ExtractCounting, counter_spec, extract_counts, report_overhead, request_counter
from corpusgraph.estimate.model import CostSections, Rates, estimate_from_counts
from corpusgraph.estimate.view import svg_chart
from corpusgraph.graph.extend import OldPartition, extend_partition, modularity
from corpusgraph.llm.base import ChatRequest
from corpusgraph.prompts import Prompt, load_prompt
from corpusgraph.runner.dry_run import cost_sections
from tests.conftest import REPO

UNITS = [
    {"unit_id": "u1", "text": "Brightwater Haulage moved trailer R-77 from Valencia to Milan.", "n_tokens": 14},
    {"unit_id": "u2", "text": "Giulia Sarti is the dock lead at the Milan hub.", "n_tokens": 12},
]
COUNTS = {"requests": 100, "tokens_in": 60_000, "text_tokens": 33_000, "n_tokens": 30_000, "units": 100}


@pytest.fixture(scope="module")
def cfg():
    return load_config(REPO / "conf" / "local.yaml")


def _rates(**over) -> Rates:
    return Rates(**{"extract_out_per_call": 200, "report_out_per_call": 300, "entities_per_unit": 2.0,
                    "reports_per_entity": 0.25, "report_context_tokens": 800, "input_correction": 1.0,
                    "glean_fraction": 0.5, **over})


def _sections(glean_rounds: int = 0, method: str = "llm") -> CostSections:
    """Every figure the arithmetic below uses is stated here, not taken from a config file."""
    return CostSections(
        extract=ExtractSection(glean_rounds=glean_rounds, method=method),
        resolve=ResolveSection(method="similarity", llm_adjudication=True, max_adjudications=5000,
                               adjudicate_max_tokens=48, summarise_descriptions=True, summary_max_tokens=200),
        reports=ReportsSection(per_domain=False),
        embeddings=EmbeddingSection(batch_size=64, max_tokens=512),
        llm=LLMSection(backend="openai", api_base="http://h/v1", model="m", usd_per_1k_in=0.001, usd_per_1k_out=0.002),
        estimate=EstimateSection(
            adjudications_per_entity=0.1, summaries_per_entity=0.05, resolve_tokens_in=250, prices_as_of="2026-01",
            prices={"small": ModelPrice(usd_per_1m_in=0.15, usd_per_1m_out=0.6)},
            gpu_prefill_tokens_per_s=10_000, gpu_decode_tokens_per_s=1_500,
            endpoint_prefill_tokens_per_s=500, endpoint_decode_tokens_per_s=100))


def test_counts_follow_the_extract_prompt(cfg, tmp_path):
    cfg = cfg.model_copy(deep=True)
    cfg.extract.units_per_call = 6  # the default packing (local.yaml sends one unit per call)
    counting = ExtractCounting.of(cost_sections(cfg), cfg.prompt_path)
    counter = counting.counter()
    base = extract_counts(UNITS, counting.requests, counter)
    # Short units are packed into one call, as the extract stage packs them: 14 + 12 = 26 tokens.
    assert base["requests"] == 1 and base["units"] == 2 and base["n_tokens"] == 26
    single = cfg.model_copy(deep=True)
    single.extract.units_per_call = 1
    assert extract_counts(UNITS, ExtractCounting.of(cost_sections(single), single.prompt_path).requests, counter)["requests"] == 2
    # The bundled model's tokenizer counts the system prompt, the text and its chat template.
    assert base["tokens_in"] > 2 * counter.text(open(cfg.prompt_path(cfg.extract.prompt)).read()[:200])
    # A longer prompt file is counted as such: the estimate follows prompt edits.
    longer = tmp_path / "extract.txt"
    longer.write_text(open(cfg.prompt_path(cfg.extract.prompt)).read() + "\nBe thorough. " * 50)
    edited = cfg.model_copy(deep=True)
    edited.extract.prompt = str(longer)
    grown = extract_counts(UNITS, ExtractCounting.of(cost_sections(edited), edited.prompt_path).requests, counter)
    assert grown["tokens_in"] > base["tokens_in"] + 2 * 50


def test_tiktoken_counter_for_other_backends(cfg):
    kind, enc, overhead = counter_spec(cfg.estimate, "openai")
    assert (kind, enc, overhead) == ("tiktoken", "o200k_base", 4)
    counter = request_counter(kind, enc, overhead)
    # o200k_base: "hello world" is 2 tokens ("hello", " world"); each message adds 4, the reply 3.
    req = ChatRequest(id="r", messages=({"role": "system", "content": "hello world"},
                                        {"role": "user", "content": "hello world"}), max_tokens=8)
    assert counter.text("hello world") == 2
    assert counter(req) == (2 + 4) + (2 + 4) + 3 == 15


def test_stage_arithmetic_prices_and_time():
    est = estimate_from_counts(COUNTS, _rates(), _sections(), documents=40, overhead=150, tokenizer="t")
    assert (est.documents, est.units, est.tokenizer, est.prices_as_of) == (40, 100, "t", "2026-01")
    ex, res, rep, emb = (est.stage(s) for s in ("extract", "resolve", "reports", "embed"))
    # extract: the counted 100 calls and 60,000 prompt tokens; 100 units x 200 answer tokens.
    assert (ex.calls, ex.tokens_in, ex.tokens_out, ex.basis) == (100, 60_000, 20_000, "counted prompts")
    # 100 units x 2 = 200 entities. resolve: min(200 x 0.1, 5000) = 20 adjudications and
    # 200 x 0.05 = 10 summaries, 30 calls of 250 tokens in; out 20 x 48 x 0.5 + 10 x 200 x 0.7 = 480 + 1,400.
    assert (res.calls, res.tokens_in, res.tokens_out, res.basis) == (30, 7_500, 1_880, "rates per entity")
    # reports: 200 x 0.25 = 50 reports of 150 template tokens + 800 context tokens x 1.1 (the
    # counter's 33,000 text tokens per 30,000 cl100k ones) = 1,030 in; 50 x 300 out.
    assert (rep.calls, rep.tokens_in, rep.tokens_out) == (50, 51_500, 15_000)
    # embed: 100 units + 200 entities + 50 reports = 350 texts in ceil(350 / 64) = 6 batches;
    # min(30,000, 100 x 512) unit tokens + 200 x 30 + 50 x 150 = 43,500; not an LLM stage.
    assert (emb.calls, emb.tokens_in, emb.tokens_out, emb.llm) == (6, 43_500, 0, False)
    # LLM totals: in 60,000 + 7,500 + 51,500 = 119,000; out 20,000 + 1,880 + 15,000 = 36,880.
    assert (est.llm_calls, est.llm_tokens_in, est.llm_tokens_out, est.llm_tokens) == (180, 119_000, 36_880, 155_880)
    # small: 0.119 M x $0.15 + 0.03688 M x $0.60 = 0.01785 + 0.022128; the configured model at
    # $1 / $2 per million (llm.usd_per_1k_* x 1000): 0.119 + 0.07376.
    assert est.usd == pytest.approx({"small": 0.039978, "configured (m)": 0.19276})
    # GPU: 119,000 / 10,000 + 36,880 / 1,500 = 11.9 + 24.5867 s = 36.4867 s; wall on one
    # endpoint: 119,000 / 500 + 36,880 / 100 = 238 + 368.8 s.
    assert est.gpu_hours == pytest.approx(36.486667 / 3600)
    assert est.wall_s == pytest.approx(606.8)
    assert est.batch is None and est.sampling is None
    svg = svg_chart(est)
    assert svg.startswith("<svg") and "small" in svg and "extract" in svg


def test_input_correction_gleaning_and_measured_resolve_rates():
    # A calibrated input correction of 1.5 scales every counted prompt: 60,000 x 1.5 and 51,500 x 1.5.
    est = estimate_from_counts(COUNTS, _rates(input_correction=1.5), _sections(), documents=40, overhead=150,
                               tokenizer="t")
    assert (est.stage("extract").tokens_in, est.stage("reports").tokens_in) == (90_000, 77_250)
    # One gleaning round goes to 100 x 0.5 = 50 packs and re-sends their prompts (600 tokens a
    # call) plus the continue prompt (60) and half an answer (0.5 x 200): 50 x 760 = 38,000 more
    # tokens in; 50 x 200 x 0.5 = 5,000 more out.
    gleaned = estimate_from_counts(COUNTS, _rates(), _sections(glean_rounds=1), documents=40, overhead=150,
                                   tokenizer="t").stage("extract")
    assert (gleaned.calls, gleaned.tokens_in, gleaned.tokens_out) == (150, 98_000, 25_000)
    assert gleaned.basis == "counted prompts, 1 gleaning round(s)"
    # Rates measured from extraction rows already hold the gleaning tokens: only the calls are added.
    measured = estimate_from_counts(COUNTS, _rates(gleaning_included=True), _sections(glean_rounds=1), documents=40,
                                    overhead=150, tokenizer="t").stage("extract")
    assert (measured.calls, measured.tokens_in, measured.tokens_out) == (150, 60_000, 20_000)
    # Resolve rates measured on a sample: 200 entities x 0.2 = 40 calls of 300 in and 40 out.
    res = estimate_from_counts(COUNTS, _rates(resolve_calls_per_entity=0.2, resolve_in_per_call=300,
                                              resolve_out_per_call=40), _sections(), documents=40, overhead=150,
                               tokenizer="t").stage("resolve")
    assert (res.calls, res.tokens_in, res.tokens_out) == (40, 12_000, 1_600)


def test_fast_extraction_and_report_overhead(cfg):
    # A one-message report prompt of 2 o200k tokens: 2 + 4 per message + 3 to prime the reply.
    counter = request_counter("tiktoken", "o200k_base", 4)
    assert report_overhead(ReportsSection(), Prompt("hello world", "p"), LLMSection(), counter) == 9
    # The real template, rendered for real, is far more than the constant parts.
    real = load_prompt(cfg.prompt_path(cfg.reports.prompt))
    assert report_overhead(cfg.reports, real, cfg.llm, counter) > 50
    # The fast method sends no request: no call, no token, whatever the rates.
    counts = {"requests": 0, "tokens_in": 0, "text_tokens": 10, "n_tokens": 10, "units": 5}
    rates = Rates.configured(EstimateSection(), ExtractSection(method="fast"), ReportsSection())
    est = estimate_from_counts(counts, rates, _sections(glean_rounds=1, method="fast"), documents=5, overhead=100,
                               tokenizer="t")
    ex = est.stage("extract")
    assert (ex.calls, ex.tokens_in, ex.tokens_out, ex.basis) == (0, 0, 0, "fast method: no LLM")


def test_configured_rates_are_the_fills_of_the_budgets():
    # extract_fill 0.6 x max_tokens 400, reports_fill 0.7 x 500, report_context_fill 0.5 x 1,500.
    rates = Rates.configured(EstimateSection(extract_fill=0.6, reports_fill=0.7, report_context_fill=0.5,
                                             entities_per_unit=3.0, reports_per_entity=0.3, glean_fraction=0.5),
                             ExtractSection(max_tokens=400), ReportsSection(max_tokens=500, max_input_tokens=1500))
    assert (rates.extract_out_per_call, rates.report_out_per_call, rates.report_context_tokens) == \
        pytest.approx((240.0, 350.0, 750.0))
    assert (rates.entities_per_unit, rates.reports_per_entity, rates.glean_fraction) == (3.0, 0.3, 0.5)


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
