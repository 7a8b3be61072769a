"""The runner: a named pipeline of the registry (runner/registry.py), stage by stage, recorded.

A stage step (runner/steps/index.py) reads its inputs from Delta, calls the pure transforms of stages/,
and writes its outputs; this module hands it its tables and config sections, times it,
accounts for its LLM use, records the run in `runs` and `llm_calls`, and prints a summary at
the end. The run context and stage result live in runner/run.py and are importable from here.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from corpusgraph.llm.base import Usage
from corpusgraph.runner import registry
from corpusgraph.runner.failures import StageFailed
from corpusgraph.runner.progress import spark_tasks
from corpusgraph.runner.registry import Stage
from corpusgraph.runner.run import RunContext, StageResult
from corpusgraph.storage.diskfull import explain_disk_full
from corpusgraph.storage.runlock import holding_run_lock

__all__ = ["run_pipeline", "run_index", "run_stage", "run_steps", "run_update", "format_summary"]


def _record_run(ctx: RunContext, started: datetime, status: str) -> None:
    """Upsert the run's `runs` row (and its llm_calls rows).

    Called with "running" before the first stage, so a driver killed mid-run still leaves its
    row (status running, no finish time), then again at the end. A run that finished but got
    no answer for some requests (errors in any stage's usage) is "partial": a rerun pays only
    for those.
    """
    if status == "ok" and any(r.usage is not None and r.usage.errors for r in ctx.results.values()):
        status = "partial"
    counts = {name: {**r.rows, "seconds": round(r.seconds, 2), "driver_collected_bytes": r.driver_collected_bytes}
              for name, r in ctx.results.items()}
    failure = ctx.failure
    if failure:  # why a failed run stopped (runner/failures.py), where `runs` keeps the stage counts
        counts["_failure"] = failure
    row = dict(run_id=ctx.run_id, kind=ctx.kind, config_hash=ctx.cfg.fingerprint(), started=started,
               finished=None if status == "running" else datetime.now(timezone.utc), status=status,
               stage_counts=json.dumps(counts, sort_keys=True))
    ctx.wh.upsert_records("runs", [row])
    calls = [
        dict(run_id=ctx.run_id, stage=name, calls=r.usage.calls, tokens_in=r.usage.tokens_in,
             tokens_out=r.usage.tokens_out, cache_hits=r.usage.cache_hits, errors=r.usage.errors,
             usd=float(r.usage.usd), seconds=float(r.seconds))
        for name, r in ctx.results.items() if r.usage is not None
    ]
    ctx.wh.upsert_records("llm_calls", calls)


def run_pipeline(ctx: RunContext, name: str, only: list[str] | None = None) -> dict[str, StageResult]:
    """Run the named pipeline of the registry (all its stages, or those `only` names, in the
    pipeline's order) and record the run."""
    chosen = registry.pipeline(name)
    if only:
        known = [s.recorded_as for s in chosen]
        unknown = [s for s in only if s not in known]
        if unknown:
            raise ValueError(f"unknown stages {unknown}; known: {known}")
        chosen = [s for s in chosen if s.recorded_as in only]
    results = run_steps(ctx, chosen)
    if name in ("index", "update") and ctx.cfg.storage.schema_name:
        from corpusgraph.storage.catalog import register_tables

        names = register_tables(ctx.spark, ctx.cfg.storage)
        ctx.log(f"tables registered as {names[0].rsplit('.', 1)[0]}.<table> ({len(names)} tables)")
    return results


def run_index(ctx: RunContext, stages: list[str] | None = None) -> dict[str, StageResult]:
    """Pipeline `index` (all stages, or the named subset, in registry order)."""
    return run_pipeline(ctx, "index", stages)


def run_update(ctx: RunContext) -> dict[str, StageResult]:
    """Pipeline `update` (what each of its steps redoes: runner/steps/update.py), its cost step
    pricing a full rebuild at the warehouse's own rates (estimate/rates.py)."""
    return run_pipeline(ctx, "update")


def run_stage(ctx: RunContext, name: str) -> StageResult:
    """One registry stage by name, outside any recorded run (tests, tools): the same StageContext
    and sections the runner would hand it; its result is not added to ctx.results."""
    return _call(ctx, registry.stages()[name])


def _call(ctx: RunContext, stage: Stage) -> StageResult:
    sc = ctx.stage(stage.recorded_as, reads=stage.reads, writes=stage.writes)
    # A stage's llm section is its own: llm with its llm.stages entry (model, endpoint, price).
    sections = {s: ctx.cfg.llm.for_stage(stage.recorded_as) if s == "llm" else getattr(ctx.cfg, s)
                for s in stage.sections}
    result = stage.step(sc, **sections)
    ctx.finish_stage()  # committed: the durable progress of its LLM passes is in Delta now
    return result


@holding_run_lock  # one run at a time per warehouse; a second refuses naming the first (storage/runlock.py)
@explain_disk_full  # ENOSPC from Python or the JVM: one DiskFullError naming the full folder (storage/diskfull.py)
def run_steps(ctx: RunContext, ordered: list[Stage]) -> dict[str, StageResult]:
    """Run stages in the given order, time and log them, and record the run (runs, llm_calls)
    under each stage's recorded name."""
    started = datetime.now(timezone.utc)
    ctx.wh.ensure_all()
    _record_run(ctx, started, "running")
    status = "failed"
    try:
        if ctx.preflight:
            _preflight(ctx, ordered)
        for i, stage in enumerate(ordered, start=1):
            name = stage.recorded_as
            ctx.log(f"stage {i}/{len(ordered)}: {name}")
            t0 = time.perf_counter()
            ctx.collected_bytes = 0
            try:
                with spark_tasks(ctx.spark, name):  # the stage's Spark jobs, between its driver-fed bars
                    result = _call(ctx, stage)
            except StageFailed as exc:  # recorded with what the stage paid before it stopped
                ctx.results[name] = StageResult(rows={"stopped": 1}, usage=exc.usage,
                                                seconds=time.perf_counter() - t0)
                ctx.failure = {"stage": exc.stage, "reason": exc.reason}
                ctx.log(f"stage {name} stopped the run: {exc.reason}")
                raise
            result.seconds = time.perf_counter() - t0
            result.driver_collected_bytes += ctx.collected_bytes
            if result.usage is not None:
                result.usage.seconds = result.seconds
            ctx.results[name] = result
            ctx.log(f"  done in {result.seconds:.1f}s: " + ", ".join(f"{k}={v}" for k, v in result.rows.items()))
            for note in result.notes:
                ctx.log(f"  {note}")
        status = "ok"
    finally:
        ctx.close()
        _record_run(ctx, started, status)
    return ctx.results


def _preflight(ctx: RunContext, ordered: list[Stage]) -> None:
    from corpusgraph.runner.doctor import preflight

    try:
        preflight(ctx.cfg, [s.recorded_as for s in ordered], ctx.endpoint.url, ctx.log)
    except StageFailed as exc:
        ctx.failure = {"stage": exc.stage, "reason": exc.reason}
        raise


def format_summary(ctx: RunContext, total_seconds: float) -> str:
    head = f"{'stage':<12}{'seconds':>9}{'LLM calls':>11}{'cache hits':>12}{'tokens in':>11}{'tokens out':>12}{'errors':>8}{'usd':>9}  rows"
    lines = [f"run {ctx.run_id} ({ctx.kind})", head, "-" * len(head)]
    total = Usage()
    for name, r in ctx.results.items():
        u = r.usage or Usage()
        total.merge(u)
        rows = ", ".join(f"{k}={v}" for k, v in r.rows.items())
        llm = r.usage is not None
        lines.append(
            f"{name:<12}{r.seconds:>9.1f}{(u.calls if llm else '-'):>11}{(u.cache_hits if llm else '-'):>12}"
            f"{(u.tokens_in if llm else '-'):>11}{(u.tokens_out if llm else '-'):>12}{(u.errors if llm else '-'):>8}"
            f"{(f'{u.usd:.4f}' if llm else '-'):>9}  {rows}"
        )
    lines.append("-" * len(head))
    lines.append(
        f"{'total':<12}{total_seconds:>9.1f}{total.calls:>11}{total.cache_hits:>12}{total.tokens_in:>11}"
        f"{total.tokens_out:>12}{total.errors:>8}{total.usd:>9.4f}"
    )
    if total.calls == 0:
        lines.append("No LLM call was paid for in this run: every result was already stored or cached.")
    return "\n".join(lines)
