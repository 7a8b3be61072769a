"""The cost model of a build: unit counts and rates in, calls, tokens, dollars, GPU-hours and wall
time per stage out.

Pure: nothing here reads a warehouse, starts Spark or opens a file. It reads only the config
sections it is handed (`CostSections`), so a test can price a build from a dict of counts. The
counts come from estimate/count.py (or estimate/sample.py on a large corpus), the measured rates
from estimate/rates.py's runner.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from corpusgraph.config import (EmbeddingSection, EstimateSection, ExtractSection, LLMSection, ReportsSection,
                                ResolveSection)

__all__ = ["Rates", "StageEstimate", "Estimate", "CostSections", "estimate_from_counts", "extract_cost",
           "resolve_cost", "reports_cost", "embed_cost", "price"]

# The gleaning continue prompt (conf/prompts/extract_continue.txt) without its found list.
_GLEAN_PROMPT_TOKENS = 60


@dataclass
class Rates:
    """What only the model's answers decide, per call or per unit."""

    extract_out_per_call: float  # answer tokens per unit (extract.max_tokens is per unit; a packed call
    #                              answers for each of its units), i.e. per call at units_per_call 1
    report_out_per_call: float
    entities_per_unit: float
    reports_per_entity: float
    report_context_tokens: float  # in cl100k tokens, the unit build_context budgets in
    input_correction: float = 1.0  # measured prompt tokens / counted ones (1.0 when not measured)
    glean_fraction: float = 0.5  # share of packs a gleaning round goes to (compounded per round)
    source: str = "config rates"
    # True when the extract rates were measured from extraction rows: a row's tokens add up over
    # its gleaning rounds, so input_correction and extract_out_per_call already hold the gleaning
    # tokens, and the estimate adds gleaning calls but not their tokens a second time.
    gleaning_included: bool = False
    # Measured on a calibration sample (None: the config's per-entity rates are used).
    resolve_calls_per_entity: float | None = None
    resolve_in_per_call: float = 0.0
    resolve_out_per_call: float = 0.0
    # reports.per_domain: per-domain reports per community report, measured on a calibration
    # sample (None: not measured; the estimate then adds none and says so).
    domain_reports_per_report: float | None = None

    @classmethod
    def configured(cls, estimate: EstimateSection, extract: ExtractSection, reports: ReportsSection) -> "Rates":
        """The config's rates: fills of the answer and context budgets, yields per unit and entity."""
        return cls(extract_out_per_call=estimate.extract_fill * extract.max_tokens,
                   report_out_per_call=estimate.reports_fill * reports.max_tokens,
                   entities_per_unit=estimate.entities_per_unit, reports_per_entity=estimate.reports_per_entity,
                   report_context_tokens=estimate.report_context_fill * reports.max_input_tokens,
                   glean_fraction=estimate.glean_fraction)


@dataclass
class StageEstimate:
    stage: str
    calls: int
    tokens_in: int
    tokens_out: int
    basis: str
    llm: bool = True  # False for the embedder: its tokens are not priced as chat tokens


@dataclass
class Estimate:
    documents: int
    units: int
    stages: list[StageEstimate]
    rates: Rates
    tokenizer: str
    usd: dict[str, float] = field(default_factory=dict)
    prices_as_of: str = ""
    gpu_hours: float = 0.0
    wall_s: float = 0.0
    # Set when prompt tokens were counted on a sample of the units (estimate/sample.py): its
    # size and the relative 95% bound of each scaled-up count; None when every unit was counted.
    sampling: dict | None = None
    # llm.backend openai_batch: the price factor, the stages it applies to and their tokens
    # (every `usd` entry is then priced so, and says so in its name); None for synchronous backends.
    batch: dict | None = None
    # Each LLM stage's model (llm.stages overrides llm) and its tokens at that model's configured
    # price: the "configured" entry of `usd` is their sum.
    stage_models: dict[str, str] = field(default_factory=dict)
    stage_usd: dict[str, float] = field(default_factory=dict)

    @property
    def llm_tokens_in(self) -> int:
        return sum(s.tokens_in for s in self.stages if s.llm)

    @property
    def llm_tokens_out(self) -> int:
        return sum(s.tokens_out for s in self.stages if s.llm)

    @property
    def llm_tokens(self) -> int:
        return self.llm_tokens_in + self.llm_tokens_out

    @property
    def llm_calls(self) -> int:
        return sum(s.calls for s in self.stages if s.llm)

    def stage(self, name: str) -> StageEstimate:
        return next(s for s in self.stages if s.stage == name)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(llm_calls=self.llm_calls, llm_tokens_in=self.llm_tokens_in, llm_tokens_out=self.llm_tokens_out,
                 llm_tokens=self.llm_tokens)
        return d


@dataclass(frozen=True)
class CostSections:
    """The config sections the cost model reads, and nothing else of the config. Each field is
    named as its config section is (a caller holding the root config cuts it by these names:
    runner/dry_run.cost_sections)."""

    extract: ExtractSection
    resolve: ResolveSection
    reports: ReportsSection
    embeddings: EmbeddingSection
    llm: LLMSection
    estimate: EstimateSection


# -- one stage at a time -------------------------------------------------------------------------

def extract_cost(counts: dict, rates: Rates, section: ExtractSection) -> StageEstimate:
    """The first pass as counted, plus the gleaning rounds the rates expect."""
    units, ex_calls = counts["units"], counts["requests"]
    gleanings = section.glean_rounds if ex_calls else 0
    ex_in = counts["tokens_in"] * rates.input_correction
    # Answer tokens are per unit: a packed call's answer covers each of its units.
    ex_out = (units if ex_calls else 0) * rates.extract_out_per_call
    first_calls = ex_calls
    per_call_in = counts["tokens_in"] * rates.input_correction / ex_calls if ex_calls else 0.0
    out_per_call = ex_out / ex_calls if ex_calls else 0.0
    for k in range(1, gleanings + 1):
        # A round goes only to packs whose answer looked incomplete (rates.glean_fraction of them,
        # fewer each round); it re-sends the prompt and texts plus the list of what was found.
        calls = first_calls * rates.glean_fraction ** k
        ex_calls += calls
        if not rates.gleaning_included:
            ex_in += calls * (per_call_in + _GLEAN_PROMPT_TOKENS + 0.5 * out_per_call)
            ex_out += calls * out_per_call * 0.5
    basis = "counted prompts" if section.method == "llm" else "fast method: no LLM"
    if gleanings:
        basis += f", {gleanings} gleaning round(s)" + (" (their tokens measured in the rates)"
                                                        if rates.gleaning_included else "")
    return StageEstimate("extract", round(ex_calls), round(ex_in), round(ex_out), basis)


def resolve_cost(entities: float, rates: Rates, section: ResolveSection, estimate: EstimateSection) -> StageEstimate:
    """Adjudications of the ambiguous band and description summaries: measured per entity on a
    calibration sample when there is one, else the config's per-entity rates."""
    adjudicates = section.method != "exact" and section.llm_adjudication
    if rates.resolve_calls_per_entity is not None and (adjudicates or section.summarise_descriptions):
        calls = entities * rates.resolve_calls_per_entity
        return StageEstimate("resolve", round(calls), round(calls * rates.resolve_in_per_call),
                             round(calls * rates.resolve_out_per_call), "calls per entity and tokens per call measured")
    adj = min(entities * estimate.adjudications_per_entity, section.max_adjudications) if adjudicates else 0.0
    summ = entities * estimate.summaries_per_entity if section.summarise_descriptions else 0.0
    res_out = adj * section.adjudicate_max_tokens * 0.5 + summ * section.summary_max_tokens * 0.7
    return StageEstimate("resolve", round(adj + summ), round((adj + summ) * estimate.resolve_tokens_in),
                         round(res_out), "rates per entity" if adj + summ else "no LLM call configured")


def reports_cost(reports: float, rates: Rates, *, overhead: int, text_ratio: float, per_domain: bool) -> StageEstimate:
    """`reports` community reports of `overhead` template tokens plus the rated context (in
    cl100k tokens, converted by `text_ratio` to the counter's), and the per-domain ones."""
    basis = "counted prompt template + rated context"
    calls = reports
    if per_domain:  # a per-domain report costs what a community report does
        ratio = rates.domain_reports_per_report
        calls = reports * (1.0 + (ratio or 0.0))
        basis += (f"; {ratio:.3f} per-domain reports per report (measured)" if ratio is not None
                  else "; per-domain reports not measured (no sample), none counted")
    tokens_in = calls * (overhead + rates.report_context_tokens * text_ratio) * rates.input_correction
    return StageEstimate("reports", round(calls), round(tokens_in), round(calls * rates.report_out_per_call), basis)


def embed_cost(n_tokens: int, units: int, entities: float, reports: float, section: EmbeddingSection) -> StageEstimate:
    """Vectors of every unit (cut at the embedder's limit), entity description and report."""
    items = units + entities + reports
    tokens = min(n_tokens, units * section.max_tokens) + entities * 30 + reports * 150
    basis = f"{section.model} batches; local, not priced" if section.backend == "bundled" else \
        f"{section.model} via /v1/embeddings, ${tokens / 1000 * section.usd_per_1k_tokens:,.2f} at embeddings.usd_per_1k_tokens"
    return StageEstimate("embed", math.ceil(items / section.batch_size), round(tokens), 0, basis, llm=False)


# -- prices and time -----------------------------------------------------------------------------

def _usd(tin: int, tout: int, per_m_in: float, per_m_out: float) -> float:
    return tin / 1e6 * per_m_in + tout / 1e6 * per_m_out


def _configured(est: Estimate, llm: LLMSection, factor: float | None = None) -> tuple[str, float]:
    """("configured (<model>)", dollars): each stage's tokens at its own model's configured price
    (llm.stages.<stage>.usd_per_1k_*, else llm's); factor: the batch price factor of batched stages."""
    total = 0.0
    for s in est.stages:
        if not s.llm:
            continue
        own = llm.for_stage(s.stage)
        usd = _usd(s.tokens_in, s.tokens_out, own.usd_per_1k_in * 1000, own.usd_per_1k_out * 1000)
        if factor is not None and s.stage in llm.batch.stages:
            usd *= factor
        est.stage_models[s.stage], est.stage_usd[s.stage] = own.model, usd
        total += usd
    models = set(est.stage_models.values()) or {llm.model}
    label = next(iter(models)) if len(models) == 1 else \
        "per stage: " + ", ".join(f"{k} {v}" for k, v in est.stage_models.items())
    return f"configured ({label})", total


def price(est: Estimate, llm: LLMSection, estimate: EstimateSection) -> None:
    """Dollars per priced model (estimate.prices, all tokens at that model; and the configured
    models, each stage at its own), GPU-hours and wall time of the estimate's LLM tokens, set on `est`."""
    tin, tout = est.llm_tokens_in, est.llm_tokens_out
    est.prices_as_of = estimate.prices_as_of
    est.usd = {name: _usd(tin, tout, p.usd_per_1m_in, p.usd_per_1m_out) for name, p in estimate.prices.items()}
    name, usd = _configured(est, llm)
    est.usd[name] = usd
    if llm.backend == "openai_batch":
        _price_batch(est, llm, estimate)
    est.gpu_hours = (tin / estimate.gpu_prefill_tokens_per_s + tout / estimate.gpu_decode_tokens_per_s) / 3600
    endpoints = max(1, len(llm.endpoint_urls()))
    est.wall_s = (tin / estimate.endpoint_prefill_tokens_per_s + tout / estimate.endpoint_decode_tokens_per_s) / endpoints


def _price_batch(est: Estimate, llm: LLMSection, estimate: EstimateSection) -> None:
    """llm.backend openai_batch: the batched stages' tokens at each price's batch factor
    (ModelPrice.batch_factor, else llm.batch.price_factor), the other stages' at the full price."""
    stages = [s for s in est.stages if s.llm and s.stage in llm.batch.stages]
    bin_, bout = sum(s.tokens_in for s in stages), sum(s.tokens_out for s in stages)
    sin, sout = est.llm_tokens_in - bin_, est.llm_tokens_out - bout
    factor = llm.batch.price_factor

    def priced(per_m_in: float, per_m_out: float, f: float) -> float:
        return _usd(sin, sout, per_m_in, per_m_out) + f * _usd(bin_, bout, per_m_in, per_m_out)

    est.usd = {f"{name}, batch x{(p.batch_factor if p.batch_factor is not None else factor):g}":
               priced(p.usd_per_1m_in, p.usd_per_1m_out, p.batch_factor if p.batch_factor is not None else factor)
               for name, p in estimate.prices.items()}
    name, usd = _configured(est, llm, factor)
    est.usd[f"{name}, batch x{factor:g}"] = usd
    est.batch = {"price_factor": factor, "stages": [s.stage for s in stages], "tokens_in": bin_, "tokens_out": bout}


def estimate_from_counts(counts: dict, rates: Rates, sections: CostSections, *, documents: int, overhead: int,
                         tokenizer: str) -> Estimate:
    """Unit counts (as estimate.count.count_units returns them) + rates -> the estimate.

    overhead: prompt tokens of a report request with an empty context; tokenizer: what counted."""
    units = counts["units"]
    # counter tokens per cl100k token of the same text: converts the report budget's units
    text_ratio = counts["text_tokens"] / counts["n_tokens"] if counts["n_tokens"] else 1.0
    entities = units * rates.entities_per_unit
    reports = entities * rates.reports_per_entity
    stages = [extract_cost(counts, rates, sections.extract),
              resolve_cost(entities, rates, sections.resolve, sections.estimate),
              reports_cost(reports, rates, overhead=overhead, text_ratio=text_ratio,
                           per_domain=sections.reports.per_domain),
              embed_cost(counts["n_tokens"], units, entities, reports, sections.embeddings)]
    est = Estimate(documents=documents, units=units, stages=stages, rates=rates, tokenizer=tokenizer)
    price(est, sections.llm, sections.estimate)
    return est
