"""Prompt-token counting for large corpora: exact where it is cheap, sampled with a stated bound.

Counting a unit's extract prompt means building its request and running the target model's
tokenizer over it, the largest part of a dry run (its time on the scale corpora is in
tests/benchmarks/results/scale.json, under `estimate`). Packing units into calls needs only their cl100k counts (`text_units.n_tokens`,
written by chunk), so every unit is still packed exactly as count_units packs it: units, cl100k
tokens and calls are exact. Above `EXACT_MAX_UNITS` units only a seeded Bernoulli sample of the
packs (by a hash of the pack id, about `SAMPLE_UNITS` units in all) is rendered and tokenised,
and prompt and text tokens are scaled up by ratio estimators on the packs' cl100k tokens. Sampling
whole packs keeps the packing itself out of the error (clusters of sampled units would pack less
tightly than a full partition does, a bias of a few percent). The bound is the usual one for a
ratio estimator over a simple random sample, 1.96 standard errors with the finite-population
correction (Cochran, Sampling Techniques, 3rd ed., section 6.4), stated with the estimate.
"""

from __future__ import annotations

import hashlib
import math
from typing import Iterator, Sequence

import pyarrow as pa

from corpusgraph.estimate.count import ExtractCounting, count_units
from corpusgraph.stages.extract.llm import pack_rows
from corpusgraph.tables import spark_struct

__all__ = ["EXACT_MAX_UNITS", "SAMPLE_UNITS", "count_prompt_tokens", "ratio_estimate"]

EXACT_MAX_UNITS = 200_000  # up to here every prompt is counted (under a minute of counting per core)
SAMPLE_UNITS = 50_000      # units rendered and counted above it: the bound is then well under 1%
_Z95 = 1.96

# One row per batch with its exact totals (sampled = 0), one per sampled pack (sampled = 1).
_PACK_SCHEMA = pa.schema([("sampled", pa.int64()), ("requests", pa.int64()), ("tokens_in", pa.int64()),
                          ("text_tokens", pa.int64()), ("n_tokens", pa.int64()), ("units", pa.int64())])


def _in_sample(unit_ids: Sequence[str], fraction: float, seed: int) -> bool:
    digest = hashlib.sha256(f"{seed}:{'|'.join(unit_ids)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < fraction * 2**64


def _count_packs(batches: Iterator[pa.RecordBatch], counting: ExtractCounting, fraction: float,
                 seed: int) -> Iterator[pa.RecordBatch]:
    counter = counting.counter()
    for batch in batches:
        rows = sorted(batch.to_pylist(), key=lambda r: (int(r.get("n_tokens") or 0), r["unit_id"]))
        packs = pack_rows(rows, counting.section)  # as count_units' request builder packs one batch
        out = [{"sampled": 0, "requests": len(packs), "tokens_in": 0, "text_tokens": 0,
                "n_tokens": sum(int(r.get("n_tokens") or 0) for r in rows), "units": len(rows)}]
        for pack in packs:
            if _in_sample([u["unit_id"] for u in pack], fraction, seed):
                reqs = counting.requests(pack)
                out.append({"sampled": 1, "requests": len(reqs), "tokens_in": sum(counter(r) for r in reqs),
                            "text_tokens": sum(counter.text(u["text"] or "") for u in pack),
                            "n_tokens": sum(int(u.get("n_tokens") or 0) for u in pack), "units": len(pack)})
        yield pa.RecordBatch.from_pylist(out, schema=_PACK_SCHEMA)


def ratio_estimate(clusters: Sequence[dict], y: str, x: str, x_total: float, fraction: float) -> tuple[float, float]:
    """(estimated total of y, relative 95% bound) from sampled clusters with auxiliary x known in total.

    R = sum(y) / sum(x); total = R * x_total; Var(R) ~ (1 - f) / (m * xbar^2) * s^2, where
    s^2 = sum((y_i - R x_i)^2) / (m - 1) over the m clusters.
    """
    m = len(clusters)
    sy, sx = sum(c[y] for c in clusters), sum(c[x] for c in clusters)
    if m == 0 or sx == 0:
        return 0.0, float("inf") if x_total else 0.0
    r = sy / sx
    if m < 2 or r == 0:
        return r * x_total, float("inf") if m < 2 else 0.0
    s2 = sum((c[y] - r * c[x]) ** 2 for c in clusters) / (m - 1)
    xbar = sx / m
    se_r = math.sqrt(max(0.0, 1.0 - fraction) * s2 / m) / xbar
    return r * x_total, _Z95 * se_r / r


def count_prompt_tokens(text_units, counting: ExtractCounting, seed: int,
                        sample_units: int | None = None) -> tuple[dict, dict | None]:
    """(counts as estimate.count.count_units returns them, the sampling record or None when exact).

    seed: of the pack sample (estimate.calibrate_seed). sample_units: None counts every unit up
    to EXACT_MAX_UNITS and samples SAMPLE_UNITS above it; 0 always counts every unit; n > 0
    samples about n units whenever there are more.
    """
    if sample_units == 0 or counting.section.method != "llm":  # fast: no prompts to count
        return count_units(text_units, counting), None
    n_units = text_units.count()
    if sample_units is None:
        sample_units = SAMPLE_UNITS if n_units > EXACT_MAX_UNITS else 0
    if not 0 < sample_units < n_units:
        return count_units(text_units, counting), None
    fraction = sample_units / n_units
    rows = [r.asDict() for r in text_units.select("unit_id", "text", "n_tokens")
            .mapInArrow(lambda it: _count_packs(it, counting, fraction, seed), spark_struct(_PACK_SCHEMA)).collect()]
    totals = [r for r in rows if not r["sampled"]]
    packs = [r for r in rows if r["sampled"]]
    counts = {k: sum(r[k] for r in totals) for k in ("units", "n_tokens", "requests")}
    bounds = {"requests": 0.0}  # every pack is formed: the number of calls is exact
    for name in ("tokens_in", "text_tokens"):
        total, bound = ratio_estimate(packs, name, "n_tokens", counts["n_tokens"], fraction)
        counts[name] = int(round(total))
        bounds[name] = round(bound, 5)
    record = {"units_counted": sum(r["units"] for r in packs), "units_total": counts["units"],
              "packs_counted": len(packs), "packs_total": counts["requests"], "fraction": round(fraction, 6),
              "relative_error_95": bounds,
              "method": "every unit packed; a seeded Bernoulli sample of the packs rendered and tokenised; "
                        "ratio estimator on cl100k tokens"}
    return counts, record
