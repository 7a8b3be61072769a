"""Cost estimation: LLM calls, tokens, dollars, GPU-hours and wall time of a build, before any spend.

A dry run ingests and chunks into a scratch warehouse (the real one is not written, except for
one `runs` row), then counts what each LLM stage would send. Input tokens are counted, not
guessed: the extract requests are built by the stage's own task (`ExtractTask.requests`) and the
report prompt by `ReportTask.requests`, so a prompt edit changes the estimate, and they are
tokenised by the target model's tokenizer (for the bundled model its GGUF vocabulary and chat
template, which matches the server's own prompt count exactly). What cannot be known before the
model answers (answer lengths, entities per unit, communities per entity, report context size)
comes from `Rates`: the config's, a calibration on N sampled units with the real model, or an
existing warehouse's measured values (what `update` uses to price a full rebuild).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pyarrow as pa

from .config import Config
from .llm.base import ChatRequest

__all__ = ["Rates", "StageEstimate", "Estimate", "counter_spec", "request_counter", "extract_counts",
           "count_units", "estimate_from_counts", "calibrate", "run_estimate", "warehouse_rates",
           "estimate_warehouse"]

# The gleaning continue prompt (conf/prompts/extract_continue.txt) without its found list.
_GLEAN_PROMPT_TOKENS = 60


# -- counting real requests with the target model's tokenizer -----------------------------------

class _TiktokenCounter:
    """Chat tokens as OpenAI counts them: each message's content plus a fixed per-message overhead,
    plus 3 that prime the reply (the documented rule for the GPT-4 and 4o families)."""

    def __init__(self, encoding: str, overhead: int):
        from .tokens import get_encoding

        self.enc, self.overhead = get_encoding(encoding), overhead

    def text(self, text: str) -> int:
        return len(self.enc.encode_ordinary(text))

    def __call__(self, req: ChatRequest) -> int:
        return sum(self.text(m["content"]) + self.overhead for m in req.messages) + 3


class _GGUFCounter:
    """The bundled model's own tokenizer over its own chat template: the exact prompt the server
    evaluates (measured equal to llama.cpp's reported prompt_tokens)."""

    def __init__(self, path: str):
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        meta = self.llm.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            raise ValueError(f"{path} has no chat template: use estimate.tokenizer=tiktoken")

        def token(key: str) -> str:
            tid = int(meta.get(key, -1))
            return self.llm.detokenize([tid], special=True).decode("utf-8", "replace") if tid >= 0 else ""

        self.format = Jinja2ChatFormatter(template, eos_token=token("tokenizer.ggml.eos_token_id"),
                                          bos_token=token("tokenizer.ggml.bos_token_id"))

    def text(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def __call__(self, req: ChatRequest) -> int:
        prompt = self.format(messages=[dict(m) for m in req.messages]).prompt
        return len(self.llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True))


def counter_spec(cfg: Config) -> tuple[str, str, int]:
    """(kind, argument, overhead): a picklable name of the counter, rebuilt in each Spark worker."""
    mode = cfg.estimate.tokenizer
    if mode == "auto":
        mode = "gguf" if cfg.llm.backend == "embedded" else "tiktoken"
    if mode == "gguf":
        from .llm.server import find_bundled_gguf

        return "gguf", str(find_bundled_gguf()), 0
    return "tiktoken", cfg.estimate.tiktoken_encoding, cfg.estimate.message_overhead_tokens


@functools.lru_cache(maxsize=4)
def request_counter(kind: str, arg: str, overhead: int = 0):
    """A callable req -> prompt tokens (with `.text(str) -> tokens`); one per process."""
    return _GGUFCounter(arg) if kind == "gguf" else _TiktokenCounter(arg, overhead)


# -- per-unit counts (pure; run inside Spark workers) -------------------------------------------

COUNT_SCHEMA = pa.schema([("requests", pa.int64()), ("tokens_in", pa.int64()), ("text_tokens", pa.int64()),
                          ("n_tokens", pa.int64()), ("units", pa.int64())])


def extract_counts(rows: Sequence[dict], requests: Callable[[Sequence[dict]], list[ChatRequest]], counter) -> dict:
    """Counts for a batch of text_units rows: the requests the extract task builds for them and
    their prompt tokens. `requests` is the task's own builder, so packing several units into one
    request, or any prompt change, is followed automatically."""
    reqs = requests(rows) if rows else []
    return {
        "requests": len(reqs),
        "tokens_in": sum(counter(r) for r in reqs),
        "text_tokens": sum(counter.text(r["text"] or "") for r in rows),
        "n_tokens": sum(int(r.get("n_tokens") or 0) for r in rows),
        "units": len(rows),
    }


def _extract_task(cfg: Config):
    """Something with `.requests(rows)`: the first-pass requests the extract stage sends for
    these units, packed as the stage packs them (stages/extract.pack_requests)."""
    from types import SimpleNamespace

    from .stages import extract as extract_stage
    from .steps import extract_identity

    prompts, _, _ = extract_identity(SimpleNamespace(cfg=cfg))
    if hasattr(extract_stage, "pack_requests"):
        return SimpleNamespace(requests=lambda rows: extract_stage.pack_requests(
            rows, prompts, cfg.extract, cfg.llm.temperature))
    return extract_stage.ExtractTask(cfg.extract, prompts, "estimate", cfg.llm.model, "estimate", cfg.llm.temperature)


def _count_batches(batches: Iterator[pa.RecordBatch], cfg: Config, spec: tuple[str, str, int]) -> Iterator[pa.RecordBatch]:
    counter = request_counter(*spec)
    task = _extract_task(cfg) if getattr(cfg.extract, "method", "llm") == "llm" else None
    for batch in batches:
        rows = batch.to_pylist()
        c = extract_counts(rows, task.requests if task else (lambda _rows: []), counter)
        yield pa.RecordBatch.from_pylist([c], schema=COUNT_SCHEMA)


def count_units(text_units, cfg: Config) -> dict:
    """Spark: extract counts summed over every unit (the tokenizer runs on the executors)."""
    from pyspark.sql import functions as F

    spec = counter_spec(cfg)
    ddl = ", ".join(f"{f.name} long" for f in COUNT_SCHEMA)
    parts = text_units.select("unit_id", "text", "n_tokens").mapInArrow(lambda it: _count_batches(it, cfg, spec), ddl)
    row = parts.agg(*[F.sum(f.name).alias(f.name) for f in COUNT_SCHEMA]).first()
    return {f.name: int(row[f.name] or 0) for f in COUNT_SCHEMA}


def report_overhead(cfg: Config) -> int:
    """Prompt tokens of a report request with an empty context: the template, rendered for real."""
    from .prompts import load_prompt
    from .stages.reports import ReportTask

    task = ReportTask(cfg.reports, load_prompt(cfg.prompt_path(cfg.reports.prompt)), cfg.llm.model, cfg.llm.temperature)
    req = task.requests([{"community_id": "estimate", "level": 0, "context": ""}])[0]
    return request_counter(*counter_spec(cfg))(req)


# -- rates and the estimate itself ---------------------------------------------------------------

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
    def from_config(cls, cfg: Config) -> "Rates":
        e = cfg.estimate
        return cls(extract_out_per_call=e.extract_fill * cfg.extract.max_tokens,
                   report_out_per_call=e.reports_fill * cfg.reports.max_tokens,
                   entities_per_unit=e.entities_per_unit, reports_per_entity=e.reports_per_entity,
                   report_context_tokens=e.report_context_fill * cfg.reports.max_input_tokens,
                   glean_fraction=e.glean_fraction)


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
    # Set when prompt tokens were counted on a sample of the units (estimate_sample.py): its
    # size and the relative 95% bound of each scaled-up count; None when every unit was counted.
    sampling: dict | None = None
    # llm.backend openai_batch: the price factor, the stages it applies to and their tokens
    # (every `usd` entry is then priced so, and says so in its name); None for synchronous backends.
    batch: dict | None = None

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


def _usd(tin: int, tout: int, per_m_in: float, per_m_out: float) -> float:
    return tin / 1e6 * per_m_in + tout / 1e6 * per_m_out


def estimate_from_counts(counts: dict, rates: Rates, cfg: Config, *, documents: int, overhead: int,
                         tokenizer: str) -> Estimate:
    """Pure: unit counts + rates -> per-stage calls and tokens, dollars, GPU-hours, wall time."""
    units = counts["units"]
    # counter tokens per cl100k token of the same text: converts the report budget's units
    text_ratio = counts["text_tokens"] / counts["n_tokens"] if counts["n_tokens"] else 1.0
    corr = rates.input_correction
    stages = []

    ex_calls = counts["requests"]
    gleanings = int(getattr(cfg.extract, "glean_rounds", 0) or 0) if ex_calls else 0
    ex_in = counts["tokens_in"] * corr
    # Answer tokens are per unit: a packed call's answer covers each of its units.
    ex_out = (units if ex_calls else 0) * rates.extract_out_per_call
    first_calls, per_call_in = ex_calls, (counts["tokens_in"] * corr / ex_calls if ex_calls else 0.0)
    out_per_call = ex_out / ex_calls if ex_calls else 0.0
    for k in range(1, gleanings + 1):
        # A round goes only to packs whose answer looked incomplete (rates.glean_fraction of them,
        # fewer each round); it re-sends the prompt and texts plus the list of what was found.
        calls = first_calls * rates.glean_fraction ** k
        ex_calls += calls
        if not rates.gleaning_included:
            ex_in += calls * (per_call_in + _GLEAN_PROMPT_TOKENS + 0.5 * out_per_call)
            ex_out += calls * out_per_call * 0.5
    basis = "counted prompts" if getattr(cfg.extract, "method", "llm") == "llm" else "fast method: no LLM"
    if gleanings:
        basis += f", {gleanings} gleaning round(s)" + (" (their tokens measured in the rates)"
                                                        if rates.gleaning_included else "")
    stages.append(StageEstimate("extract", round(ex_calls), round(ex_in), round(ex_out), basis))

    entities = units * rates.entities_per_unit
    r = cfg.resolve
    similarity = getattr(r, "method", "exact") != "exact"
    llm_resolve = (similarity and getattr(r, "llm_adjudication", False)) or getattr(r, "summarise_descriptions", False)
    if rates.resolve_calls_per_entity is not None and llm_resolve:
        calls = entities * rates.resolve_calls_per_entity
        stages.append(StageEstimate("resolve", round(calls), round(calls * rates.resolve_in_per_call),
                                    round(calls * rates.resolve_out_per_call), "calls per entity and tokens per call measured"))
    else:
        adj = min(entities * cfg.estimate.adjudications_per_entity, getattr(r, "max_adjudications", 0)) \
            if similarity and getattr(r, "llm_adjudication", False) else 0.0
        summ = entities * cfg.estimate.summaries_per_entity if getattr(r, "summarise_descriptions", False) else 0.0
        res_out = adj * getattr(r, "adjudicate_max_tokens", 0) * 0.5 + summ * getattr(r, "summary_max_tokens", 0) * 0.7
        stages.append(StageEstimate("resolve", round(adj + summ), round((adj + summ) * cfg.estimate.resolve_tokens_in),
                                    round(res_out), "rates per entity" if adj + summ else "no LLM call configured"))

    reports = entities * rates.reports_per_entity
    rep_basis = "counted prompt template + rated context"
    calls = reports
    if cfg.reports.per_domain:  # a per-domain report costs what a community report does
        ratio = rates.domain_reports_per_report
        calls = reports * (1.0 + (ratio or 0.0))
        rep_basis += (f"; {ratio:.3f} per-domain reports per report (measured)" if ratio is not None
                      else "; per-domain reports not measured (no sample), none counted")
    rep_in = calls * (overhead + rates.report_context_tokens * text_ratio) * corr
    stages.append(StageEstimate("reports", round(calls), round(rep_in), round(calls * rates.report_out_per_call),
                                rep_basis))

    items = units + entities + reports
    emb_tokens = min(counts["n_tokens"], units * cfg.embeddings.max_tokens) + entities * 30 + reports * 150
    emb = cfg.embeddings
    emb_basis = f"{emb.model} batches; local, not priced" if emb.backend == "bundled" else \
        f"{emb.model} via /v1/embeddings, ${emb_tokens / 1000 * emb.usd_per_1k_tokens:,.2f} at embeddings.usd_per_1k_tokens"
    stages.append(StageEstimate("embed", math.ceil(items / emb.batch_size), round(emb_tokens), 0, emb_basis, llm=False))

    est = Estimate(documents=documents, units=units, stages=stages, rates=rates, tokenizer=tokenizer,
                   prices_as_of=cfg.estimate.prices_as_of)
    tin, tout = est.llm_tokens_in, est.llm_tokens_out
    est.usd = {name: _usd(tin, tout, p.usd_per_1m_in, p.usd_per_1m_out) for name, p in cfg.estimate.prices.items()}
    est.usd[f"configured ({cfg.llm.model})"] = _usd(tin, tout, cfg.llm.usd_per_1k_in * 1000, cfg.llm.usd_per_1k_out * 1000)
    if cfg.llm.backend == "openai_batch":
        _price_batch(est, cfg)
    e = cfg.estimate
    est.gpu_hours = (tin / e.gpu_prefill_tokens_per_s + tout / e.gpu_decode_tokens_per_s) / 3600
    endpoints = max(1, len(cfg.llm.endpoint_urls()))
    est.wall_s = (tin / e.endpoint_prefill_tokens_per_s + tout / e.endpoint_decode_tokens_per_s) / endpoints
    return est


def _price_batch(est: Estimate, cfg: Config) -> None:
    """llm.backend openai_batch: the batched stages' tokens at each price's batch factor
    (ModelPrice.batch_factor, else llm.batch.price_factor), the other stages' at the full price."""
    stages = [s for s in est.stages if s.llm and s.stage in cfg.llm.batch.stages]
    bin_, bout = sum(s.tokens_in for s in stages), sum(s.tokens_out for s in stages)
    sin, sout = est.llm_tokens_in - bin_, est.llm_tokens_out - bout
    factor = cfg.llm.batch.price_factor

    def priced(per_m_in: float, per_m_out: float, f: float) -> float:
        return _usd(sin, sout, per_m_in, per_m_out) + f * _usd(bin_, bout, per_m_in, per_m_out)

    est.usd = {f"{name}, batch x{(p.batch_factor if p.batch_factor is not None else factor):g}":
               priced(p.usd_per_1m_in, p.usd_per_1m_out, p.batch_factor if p.batch_factor is not None else factor)
               for name, p in cfg.estimate.prices.items()}
    est.usd[f"configured ({cfg.llm.model}), batch x{factor:g}"] = priced(
        cfg.llm.usd_per_1k_in * 1000, cfg.llm.usd_per_1k_out * 1000, factor)
    est.batch = {"price_factor": factor, "stages": [s.stage for s in stages], "tokens_in": bin_, "tokens_out": bout}


# -- measured rates: from a calibration sample, or from an existing warehouse --------------------

def warehouse_rates(wh, cfg: Config, *, source: str) -> tuple[Rates, dict]:
    """Rates measured from what a warehouse holds: answer lengths, entities per unit, reported
    communities per entity, report context size, and how far the counted prompt tokens were from
    the ones the server reported. Returns (rates, counts of the units measured)."""
    from types import SimpleNamespace

    from pyspark.sql import functions as F

    from .steps import extract_identity

    fallback = Rates.from_config(cfg)
    _, phash, model = extract_identity(SimpleNamespace(cfg=cfg))
    units = wh.read("text_units")
    ex = wh.read("extractions").where((F.col("prompt_hash") == phash) & (F.col("model") == model)
                                      & (F.col("status") != "llm_error")).join(units.select("unit_id"), "unit_id", "left_semi")
    ex_row = ex.agg(F.count("*").alias("n"), F.sum("tokens_in").alias("tin"), F.avg("tokens_out").alias("tout"),
                    F.avg((F.col("gleanings") > 0).cast("double")).alias("glean")).first()
    counts = count_units(units.join(ex.select("unit_id"), "unit_id", "left_semi"), cfg)
    n_units, n_ents = counts["units"], wh.read("entities").count()
    corr = (ex_row["tin"] / counts["tokens_in"]) if counts["tokens_in"] and ex_row["tin"] else 1.0
    rates = Rates(
        extract_out_per_call=float(ex_row["tout"]) if ex_row["n"] and counts["requests"] else fallback.extract_out_per_call,
        report_out_per_call=fallback.report_out_per_call,
        entities_per_unit=n_ents / n_units if n_units else fallback.entities_per_unit,
        reports_per_entity=fallback.reports_per_entity,
        report_context_tokens=fallback.report_context_tokens,
        input_correction=corr, source=source,
        glean_fraction=float(ex_row["glean"]) if ex_row["n"] and ex_row["glean"] is not None else fallback.glean_fraction,
        # the rows' tokens_in / tokens_out add up over their gleaning rounds (stages/extract.py)
        gleaning_included=bool(ex_row["n"] and counts["requests"]),
    )
    reps = wh.read("community_reports").where(F.col("status") != "llm_error")
    rep = reps.agg(F.count("*").alias("n"), F.avg("tokens_in").alias("tin"), F.avg("tokens_out").alias("tout")).first()
    if rep["n"] and cfg.reports.per_domain:
        per_domain = wh.read("community_domain_reports").where(F.col("status") != "llm_error").count()
        rates.domain_reports_per_report = per_domain / rep["n"]
    if rep["n"] and n_ents:
        text_ratio = counts["text_tokens"] / counts["n_tokens"] if counts["n_tokens"] else 1.0
        rates.reports_per_entity = rep["n"] / n_ents
        rates.report_out_per_call = float(rep["tout"] or 0.0)
        rates.report_context_tokens = max(0.0, (float(rep["tin"] or 0.0) / corr - report_overhead(cfg)) / text_ratio)
    else:
        # No report to measure (e.g. a calibration sample whose communities are all too small):
        # the context is not a fixed share of the budget but what a report would be built from,
        # its entities' and relationships' lines (measured here, per entity) times the entities
        # per reported community the rates imply, capped by the budget.
        per_entity = _context_tokens_per_entity(wh)
        if per_entity is not None and rates.reports_per_entity > 0:
            rates.report_context_tokens = min(float(cfg.reports.max_input_tokens), per_entity / rates.reports_per_entity)
            rates.source += " (no report in it: report count and answer length from config, context from its entities)"
        else:
            rates.source += " (no report in it: report rates from config)"
    return rates, counts


def _context_tokens_per_entity(wh, limit: int = 2000) -> float | None:
    """Mean cl100k tokens per entity of the lines a report context holds (stages/reports.build_context):
    each entity's line plus its share of the relationship lines among them; on at most `limit` entities."""
    from pyspark.sql import functions as F

    from .tokens import count_tokens

    ents = wh.read("entities").orderBy("entity_id").select("entity_id", "title", "type", "description").limit(limit).collect()
    if not ents:
        return None
    title = {e["entity_id"]: e["title"] for e in ents}
    ids = list(title)
    rels = wh.read("relationships").where(F.col("source_id").isin(ids) & F.col("target_id").isin(ids)).select(
        "source_id", "target_id", "description", "weight").collect()
    total = sum(count_tokens(f"- {e['title']} ({e['type']}): {e['description'] or ''}") + 1 for e in ents)
    total += sum(count_tokens(f"- {title[r['source_id']]} -> {title[r['target_id']]} [weight {r['weight'] or 0:g}]: "
                              f"{r['description'] or ''}") + 1 for r in rels)
    return total / len(ents)


def _scratch_cfg(cfg: Config, folder: Path) -> Config:
    c = cfg.model_copy(deep=True)
    c.storage.warehouse, c.storage.index_dir = str(folder / "warehouse"), str(folder / "index")
    return c  # cache_dir is kept: answers paid for while calibrating are reused by the real build


def calibrate(cfg: Config, spark, text_units, n: int, folder: Path) -> Rates:
    """Run the real extract, resolve, communities and reports stages on n sampled units (in a
    scratch warehouse, through the normal path and the shared response cache) and measure."""
    from pyspark.sql import functions as F

    from .pipeline import RunContext, run_index

    ccfg = _scratch_cfg(cfg, folder)
    ctx = RunContext(ccfg, spark, kind="estimate")
    ctx.wh.ensure_all()
    order = F.sha2(F.concat_ws("|", F.col("unit_id"), F.lit(str(cfg.estimate.calibrate_seed))), 256)
    ctx.wh.overwrite("text_units", text_units.orderBy(order).limit(n))
    ctx.log(f"calibrating on {n} sampled units with the real model ({cfg.llm.model})")
    results = run_index(ctx, ["extract", "resolve", "communities", "reports"])
    rates, _ = warehouse_rates(ctx.wh, cfg, source=f"calibrated on {n} units")
    # Resolve's LLM calls (adjudications, description summaries) leave no per-call rows in the
    # warehouse; the sample run's own accounting measures them. A sample that made none leaves the
    # config's per-entity rates in place: no call on a few units is no rate for the corpus.
    used, n_ents = results["resolve"].usage, ctx.wh.read("entities").count()
    if used is not None and used.calls and n_ents:
        rates.resolve_calls_per_entity = used.calls / n_ents
        rates.resolve_in_per_call, rates.resolve_out_per_call = used.tokens_in / used.calls, used.tokens_out / used.calls
    return rates


def estimate_warehouse(wh, cfg: Config) -> Estimate:
    """What a full rebuild of the warehouse's live corpus would cost, at the rates it measured."""
    from pyspark.sql import functions as F

    rates, _ = warehouse_rates(wh, cfg, source="measured on the warehouse")
    counts = count_units(wh.read("text_units"), cfg)
    docs = wh.read("documents").where(~F.col("deleted")).count()
    return estimate_from_counts(counts, rates, cfg, documents=docs, overhead=report_overhead(cfg),
                                tokenizer=" ".join(map(str, counter_spec(cfg)[:2])))


def run_estimate(cfg: Config, spark, *, calibrate_n: int = 0, out_dir: str | Path | None = None,
                 sample_units: int | None = None) -> tuple[Estimate, Path]:
    """The dry run: ingest + chunk into a scratch warehouse, count, (calibrate), price, record.

    sample_units: see estimate_sample.count_prompt_tokens (None: every unit up to 200k, a
    sample with a stated bound above). Returns the estimate and the folder holding
    estimate.json and the chart."""
    from datetime import datetime, timezone

    from .delta_io import Warehouse
    from .pipeline import RunContext, run_index

    base = Path(cfg.estimate.scratch_dir or Path(cfg.storage.cache_dir) / "estimate").resolve()
    ctx = RunContext(cfg, spark, kind="estimate")  # only for its run id and log; writes nothing
    work = base / ctx.run_id
    started = datetime.now(timezone.utc)
    sctx = RunContext(_scratch_cfg(cfg, work / "corpus"), spark, kind="estimate")
    sctx.run_id = ctx.run_id
    results = run_index(sctx, ["ingest", "chunk"])
    units = sctx.wh.read("text_units")
    from .estimate_sample import count_prompt_tokens

    counts, sampling = count_prompt_tokens(units, cfg, sample_units)
    rates = calibrate(cfg, spark, units, calibrate_n, work / "calibration") if calibrate_n > 0 else Rates.from_config(cfg)
    spec = counter_spec(cfg)
    est = estimate_from_counts(counts, rates, cfg, documents=results["ingest"].rows["documents"],
                               overhead=report_overhead(cfg), tokenizer=f"{spec[0]} {Path(spec[1]).name}")
    est.sampling = sampling
    out = Path(out_dir).resolve() if out_dir else work
    out.mkdir(parents=True, exist_ok=True)
    (out / "estimate.json").write_text(json.dumps(est.to_dict(), indent=2, sort_keys=True))
    from .estimate_view import write_chart

    chart = write_chart(est, out / "estimate")
    ctx.log(f"estimate written to {out / 'estimate.json'} and {chart}")
    # One row in the real warehouse's `runs` table; nothing else there is touched.
    Warehouse(spark, cfg.storage.warehouse).upsert_records("runs", [dict(
        run_id=ctx.run_id, kind="estimate", config_hash=cfg.fingerprint(), started=started,
        finished=datetime.now(timezone.utc), status="ok", stage_counts=json.dumps(est.to_dict(), sort_keys=True))])
    return est, out


