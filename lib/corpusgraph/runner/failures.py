"""A stage whose LLM calls failed: the provider's own messages shown once each with a count and the
setting that fixes them (llm/fixes.py), and the run stopped when every call of a pass failed, or
more than llm.max_failed_share of them once llm.failed_share_min_calls were sent, before the next
stage builds on nothing. The runner records the reason in `runs` (runner/pipeline.py) and the
command exits non-zero (cli/main.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from corpusgraph.config import LLMSection
from corpusgraph.llm.base import Usage
from corpusgraph.llm.fixes import fix_for

__all__ = ["StageFailed", "Failure", "failure_lines", "check_failures", "MESSAGES_SHOWN"]

MESSAGES_SHOWN = 5  # distinct messages shown per pass (the most frequent first)


class StageFailed(RuntimeError):
    """A stage stopped the run: too many of its calls failed, or the preflight was refused.
    `usage`: what the stage spent before it stopped (recorded in llm_calls)."""

    def __init__(self, stage: str, reason: str, usage: Usage | None = None) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage, self.reason, self.usage = stage, reason, usage


@dataclass
class Failure:
    """One distinct error of a pass: how many calls got it."""

    message: str
    count: int
    status: int | None = None
    fix: str | None = field(default=None)

    def __post_init__(self) -> None:
        if self.fix is None:
            self.fix = fix_for(self.status, None, None, self.message)


def failure_lines(failures: list[Failure]) -> list[str]:
    """One line per distinct message (count first), with its fix where one is known."""
    out = []
    for f in failures:
        out.append(f"  x{f.count}: {f.message}" + (f"\n      fix: {f.fix}" if f.fix else ""))
    return out


def check_failures(stage: str, what: str, usage: Usage, failures: list[Failure], llm: LLMSection, log) -> None:
    """Log a pass's failures and raise StageFailed when they pass the configured share.

    what: the pass, as the log names it ("extract round0"); usage: its calls and errors (paid in
    this attempt); failures: its distinct messages, most frequent first."""
    if not usage.errors:
        return
    share = usage.errors / usage.calls if usage.calls else 1.0
    log(f"  {what}: {usage.errors} of {usage.calls} LLM calls failed ({share:.0%}); the endpoint said:")
    for line in failure_lines(failures):
        log(line)
    if usage.calls and (usage.errors == usage.calls or (usage.calls >= llm.failed_share_min_calls
                                                         and share > llm.max_failed_share)):
        top = failures[0] if failures else Failure("no message recorded", usage.errors)
        rule = "every call" if usage.errors == usage.calls else f"more than llm.max_failed_share ({llm.max_failed_share:g})"
        raise StageFailed(stage, f"{usage.errors} of {usage.calls} LLM calls of {what} failed ({rule}); the run "
                                 f"stops before later stages build on nothing. Most frequent: {top.message}"
                                 + (f" -- fix: {top.fix}" if top.fix else ""), usage)


def spark_failures(out, attempt: str | None) -> list[Failure]:
    """The distinct errors of an LLM pass's output rows (runner/passes/llm.META), counted by Spark;
    only the MESSAGES_SHOWN most frequent come to the driver."""
    from pyspark.sql import functions as F

    from corpusgraph.storage.shards import ATTEMPT

    if "llm_error_text" not in out.columns:  # shards written before the column existed
        return []
    failed = F.coalesce(F.col("llm_failed"), F.lit(False))
    if attempt is not None and ATTEMPT in out.columns:
        failed = failed & F.coalesce(F.col(ATTEMPT) == F.lit(attempt), F.lit(False))
    rows = (out.where(failed).groupBy("llm_error_status", "llm_error_text").count()
            .orderBy(F.desc("count"), "llm_error_text").limit(MESSAGES_SHOWN).collect())
    return [Failure(r["llm_error_text"] or "no message", int(r["count"]),
                    int(r["llm_error_status"]) if r["llm_error_status"] is not None else None) for r in rows]
