"""The Spark -> Parquet -> Ray -> Parquet pass of an LLM stage, written once for every stage.

Spark writes the rows to send into the stage's hand-off folder; Ray actors (ray_runner.py) turn
them into output rows next to it; the driver reads back only the bookkeeping columns for the
stage's usage, and the caller merges the output frame into its Delta table. Writing a frame out
and reading it back also cuts its lineage, so the steps use `save` for any intermediate frame
they read more than once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import LLMSection, RaySection
from .llm.base import Usage
from .progress import Work
from .ray_runner import output_usage, run_llm_task
from .run import StageContext

__all__ = ["LLMPass", "save", "to_model", "llm_pass"]


def save(st: StageContext, df, part: str):
    """df written to the stage's hand-off folder `part` and read back (computed once, from here on
    a plain Parquet scan)."""
    path = st.handoff(part)
    df.write.mode("overwrite").parquet(path)
    return st.spark.read.parquet(path)


def to_model(st: StageContext, task, part: str, n: int, *, llm: LLMSection, ray: RaySection, label: str,
             unit: str = "LLM calls"):
    """The n rows saved at hand-off `part` through `task` on Ray; (output frame, usage).

    label and unit: the progress bar's, whose total is n."""
    out_path = st.handoff(part + "-out")
    run_llm_task(task, st.handoff(part), out_path, llm=llm, ray_section=ray, cache_dir=str(st.cache_dir),
                 base_url=st.llm_base_url(), work=Work(label, unit, n))
    usage, nbytes = output_usage(out_path, llm)
    st.note_collected(nbytes)
    return st.spark.read.parquet(out_path), usage


@dataclass
class LLMPass:
    sent: int = 0  # rows handed to the model; 0: nothing was sent and `out` is None
    out: object = None  # the task's output rows (a DataFrame, bookkeeping columns included)
    usage: Usage = field(default_factory=Usage)


def llm_pass(st: StageContext, task, rows, part: str, *, llm: LLMSection, ray: RaySection, label: str,
             unit: str = "LLM calls", noun: str = "rows") -> LLMPass:
    """rows -> hand-off `part` -> the model; nothing is started for no rows. noun: what the log
    line calls the rows ("  <stage>: <n> <noun> to the model")."""
    inputs = save(st, rows, part)
    n = inputs.count()
    if n == 0:
        return LLMPass()
    st.log(f"  {st.name}: {n} {noun} to the model")
    out, usage = to_model(st, task, part, n, llm=llm, ray=ray, label=label, unit=unit)
    return LLMPass(n, out, usage)
