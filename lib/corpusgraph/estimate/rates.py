"""The rates a build is priced at, and the price of rebuilding a warehouse.

What cannot be known before the model answers (answer lengths, entities per unit, communities
per entity, report context size) comes from `Rates`: the config's, a calibration on N sampled
units with the real model (runner/dry_run.py), or an existing warehouse's measured values (what
`update` uses to price a full rebuild: `estimate_warehouse`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from corpusgraph.estimate.count import ExtractCounting, count_units, report_overhead
from corpusgraph.estimate.model import CostSections, Estimate, Rates, estimate_from_counts

__all__ = ["warehouse_rates", "estimate_warehouse", "priced"]

# A prompt file's path from its configured name (Config.prompt_path; a step's StageContext.prompt_path).
PromptPath = Callable[[str], Path]


def _overhead(cost: CostSections, prompt_path: PromptPath, counting: ExtractCounting) -> int:
    from corpusgraph.prompts import load_prompt

    return report_overhead(cost.reports, load_prompt(prompt_path(cost.reports.prompt)), cost.llm, counting.counter())


def priced(counts: dict, rates: Rates, cost: CostSections, prompt_path: PromptPath, counting: ExtractCounting, *,
           documents: int, tokenizer: str) -> Estimate:
    """The estimate of a build from its counts and rates, with the report prompt's own overhead."""
    return estimate_from_counts(counts, rates, cost, documents=documents,
                                overhead=_overhead(cost, prompt_path, counting), tokenizer=tokenizer)


# -- measured rates: from a calibration sample, or from an existing warehouse --------------------

def warehouse_rates(wh, cost: CostSections, prompt_path: PromptPath, *, source: str) -> tuple[Rates, dict]:
    """Rates measured from what a warehouse holds: answer lengths, entities per unit, reported
    communities per entity, report context size, and how far the counted prompt tokens were from
    the ones the server reported. Returns (rates, counts of the units measured)."""
    from pyspark.sql import functions as F

    from corpusgraph.stages.extract.llm import extract_identity

    fallback = Rates.configured(cost.estimate, cost.extract, cost.reports)
    _, phash, model = extract_identity(cost.extract, prompt_path, cost.llm.for_stage("extract").model)
    counting = ExtractCounting.of(cost, prompt_path)
    units = wh.read("text_units")
    ex = wh.read("extractions").where((F.col("prompt_hash") == phash) & (F.col("model") == model)
                                      & (F.col("status") != "llm_error")).join(units.select("unit_id"), "unit_id", "left_semi")
    ex_row = ex.agg(F.count("*").alias("n"), F.sum("tokens_in").alias("tin"), F.avg("tokens_out").alias("tout"),
                    F.avg((F.col("gleanings") > 0).cast("double")).alias("glean")).first()
    counts = count_units(units.join(ex.select("unit_id"), "unit_id", "left_semi"), counting)
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
        # the rows' tokens_in / tokens_out add up over their gleaning rounds (stages/extract/llm.py)
        gleaning_included=bool(ex_row["n"] and counts["requests"]),
    )
    reps = wh.read("community_reports").where(F.col("status") != "llm_error")
    rep = reps.agg(F.count("*").alias("n"), F.avg("tokens_in").alias("tin"), F.avg("tokens_out").alias("tout")).first()
    if rep["n"] and cost.reports.per_domain:
        per_domain = wh.read("community_domain_reports").where(F.col("status") != "llm_error").count()
        rates.domain_reports_per_report = per_domain / rep["n"]
    if rep["n"] and n_ents:
        text_ratio = counts["text_tokens"] / counts["n_tokens"] if counts["n_tokens"] else 1.0
        rates.reports_per_entity = rep["n"] / n_ents
        rates.report_out_per_call = float(rep["tout"] or 0.0)
        rates.report_context_tokens = max(0.0, (float(rep["tin"] or 0.0) / corr - _overhead(cost, prompt_path, counting)) / text_ratio)
    else:
        # No report to measure (e.g. a calibration sample whose communities are all too small):
        # the context is not a fixed share of the budget but what a report would be built from,
        # its entities' and relationships' lines (measured here, per entity) times the entities
        # per reported community the rates imply, capped by the budget.
        per_entity = _context_tokens_per_entity(wh)
        if per_entity is not None and rates.reports_per_entity > 0:
            rates.report_context_tokens = min(float(cost.reports.max_input_tokens), per_entity / rates.reports_per_entity)
            rates.source += " (no report in it: report count and answer length from config, context from its entities)"
        else:
            rates.source += " (no report in it: report rates from config)"
    return rates, counts


def _context_tokens_per_entity(wh, limit: int = 2000) -> float | None:
    """Mean cl100k tokens per entity of the lines a report context holds (stages/reports.build_context):
    each entity's line plus its share of the relationship lines among them; on at most `limit` entities."""
    from pyspark.sql import functions as F

    from corpusgraph.tokens import count_tokens

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


def estimate_warehouse(wh, cost: CostSections, prompt_path: PromptPath) -> Estimate:
    """What a full rebuild of the warehouse's live corpus would cost, at the rates it measured.
    wh: anything with `read(table)` (a Warehouse, or a step's declared tables)."""
    from pyspark.sql import functions as F

    rates, _ = warehouse_rates(wh, cost, prompt_path, source="measured on the warehouse")
    counting = ExtractCounting.of(cost, prompt_path)
    counts = count_units(wh.read("text_units"), counting)
    docs = wh.read("documents").where(~F.col("deleted")).count()
    return priced(counts, rates, cost, prompt_path, counting, documents=docs,
                  tokenizer=" ".join(map(str, counting.spec[:2])))
