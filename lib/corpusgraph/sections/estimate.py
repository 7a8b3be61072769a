"""`corpusgraph estimate` and `corpusgraph update`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from corpusgraph.sections.base import Section

__all__ = ["ModelPrice", "EstimateSection", "UpdateSection"]


class ModelPrice(Section):
    usd_per_1m_in: float = Field(..., ge=0.0, description="US dollars per million input tokens.")
    usd_per_1m_out: float = Field(..., ge=0.0, description="US dollars per million output tokens.")
    batch_factor: float | None = Field(None, ge=0.0, description="This model's batch price as a fraction of the "
                                       "above, where it differs from llm.batch.price_factor (used when llm.backend "
                                       "is openai_batch).")


class EstimateSection(Section):
    """`corpusgraph estimate`: what a build would cost before any LLM spend (estimate/rates.py).

    Input tokens are counted from the real requests the stages would send: every request up to
    200k text units, a seeded sample of the extraction packs above that (with its 95% error bound
    printed; units, corpus tokens and calls stay exact). What cannot
    be counted before the model answers (answer lengths, entity yield, community count) comes
    from the rates below, or from `--calibrate N`, which measures them on N sampled units.
    """

    scratch_dir: str | None = Field(None, description="Where the dry run ingests and chunks; null: <cache_dir>/estimate. "
                                    "The warehouse gets one `runs` row (kind estimate) and nothing else.")
    tokenizer: Literal["auto", "gguf", "tiktoken"] = Field(
        "auto", description="auto: the bundled model's own tokenizer and chat template for the embedded backend, "
        "tiktoken otherwise. gguf: always the bundled GGUF's tokenizer. tiktoken: tiktoken_encoding.")
    tiktoken_encoding: str = Field("o200k_base", description="Encoding used for non-embedded models (o200k_base: "
                                   "the GPT-4o/4.1 family; cl100k_base: GPT-4/3.5 and many open models' proxies).")
    message_overhead_tokens: int = Field(4, ge=0, description="tiktoken only: tokens a chat template adds per message.")
    extract_fill: float = Field(0.6, gt=0, le=1, description="Extraction answer length as a fraction of extract.max_tokens.")
    reports_fill: float = Field(0.7, gt=0, le=1, description="Report answer length as a fraction of reports.max_tokens.")
    entities_per_unit: float = Field(3.0, ge=0, description="Distinct resolved entities per text unit.")
    glean_fraction: float = Field(0.5, ge=0, le=1, description="Share of extract calls that get a gleaning "
                                  "round (compounded per further round).")
    reports_per_entity: float = Field(0.3, ge=0, description="Reported communities (all levels) per entity.")
    report_context_fill: float = Field(0.5, gt=0, le=1, description="Report context as a fraction of reports.max_input_tokens.")
    adjudications_per_entity: float = Field(0.1, ge=0, description="Resolve LLM adjudications per entity (when on).")
    summaries_per_entity: float = Field(0.05, ge=0, description="Description summaries per entity (when on).")
    resolve_tokens_in: int = Field(250, ge=0, description="Input tokens of one adjudication or summary call.")
    calibrate_seed: int = Field(0, description="Seed of the unit sample that --calibrate runs the real model on.")
    prices_as_of: str = Field("", description="When the prices table was looked up; printed with every estimate.")
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="Named models and their list prices; user-editable (conf/base.yaml).")
    gpu_prefill_tokens_per_s: float = Field(
        10_000.0, gt=0, description="Input tokens per second one GPU processes (batched), for GPU-hours.")
    gpu_decode_tokens_per_s: float = Field(
        1_500.0, gt=0, description="Output tokens per second one GPU generates (batched), for GPU-hours.")
    endpoint_prefill_tokens_per_s: float = Field(
        310.0, gt=0, description="Input tokens/s of one configured endpoint, for wall time (the default is "
        "the bundled model's on a small CPU).")
    endpoint_decode_tokens_per_s: float = Field(
        105.0, gt=0, description="Output tokens/s of one configured endpoint, for wall time.")


class UpdateSection(Section):
    """`corpusgraph update`: incremental refresh after documents are added, changed or deleted."""

    redetect_drift: float = Field(
        0.1, ge=0.0, description="Re-detect communities in full when the old partition, extended to new nodes, "
        "loses more than this fraction of the modularity recorded at detection on the new graph.")
    estimate_full_rebuild: bool = Field(
        True, description="Record an estimate of a full rebuild's cost next to the update's own cost.")
