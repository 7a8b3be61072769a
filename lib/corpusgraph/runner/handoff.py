"""The Spark -> Parquet -> Ray -> Parquet pass of an LLM stage, written once for every stage.

Spark writes the rows to send into the stage's hand-off folder under `storage.run_dir` (a local
folder or an object-store URI), each with a key (`_unit`, a hash of the row). Ray actors
(runner/passes/llm.py) answer them and write each answered batch as a Parquet shard into the pass's
durable progress folder (storage/shards.py). A rerun after any crash sends only the rows with no
successful answer there; the pass's output is read back from the shards of every attempt, one
row per key. The driver reads back only counts and the bookkeeping columns; the caller merges the output frame
into its Delta table, after which the runner removes the progress folder. Writing a frame out
and reading it back also cuts its lineage, so the steps use `save` for any intermediate frame
they read more than once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pyspark.sql import Window
from pyspark.sql import functions as F

from corpusgraph.config import LLMSection, RaySection
from corpusgraph.llm.base import Usage
from corpusgraph.runner.failures import check_failures, spark_failures
from corpusgraph.runner.passes.llm import USAGE_SUMS, run_llm_task, usage_from_sums
from corpusgraph.runner.progress import Work
from corpusgraph.runner.run import StageContext
from corpusgraph.storage import locations as storage
from corpusgraph.storage.shards import ATTEMPT, UNIT, WRITTEN, fingerprint

__all__ = ["LLMPass", "save", "saved_rows", "to_model", "llm_pass"]


def save(st: StageContext, df, part: str):
    """df written to the stage's hand-off folder `part` and read back (computed once, from here on
    a plain Parquet scan)."""
    path = st.spark_location(st.handoff(part))
    df.write.mode("overwrite").parquet(path)
    return st.spark.read.parquet(path)


def saved_rows(df) -> int:
    """The rows of a frame `save` returned (a plain scan of the Parquet files it wrote): the sum of
    the files' footers when they are local files, read on the driver (a Spark count is one job, a
    fifth of a second on a tiny run, and a run counts its hand-offs a few dozen times); a Spark
    count otherwise. Only for save's frames: a filtered or joined frame has other rows than its files."""
    from urllib.parse import unquote, urlparse

    import pyarrow.parquet as pq

    files = df.inputFiles()
    if files and all(f.startswith("file:") for f in files):
        return sum(pq.read_metadata(unquote(urlparse(f).path)).num_rows for f in files)
    return df.count()


def _shards(st: StageContext, folder: str):
    """The shards written so far into a progress folder, or None when there are none."""
    if not any(n.endswith(".parquet") and not n.startswith((".", "_")) for n in storage.list_files(folder, st.s3)):
        return None
    return st.spark.read.parquet(st.spark_location(folder))


# Tries of one pass when Ray loses a worker, an actor or a node under it: each try sends only the
# rows with no durable answer yet. A node's death takes Ray some seconds to notice, and a try
# started before that may place an actor on the dead node; the wait before each try grows.
PASS_TRIES = 5
RETRY_WAIT_S = 5.0
_CRASHES = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
            "ObjectLostError", "OwnerDiedError", "LocalRayletDiedError")


def lost_to_a_crash(exc: BaseException) -> bool:
    """Whether a failed Ray pass failed because a process or node under it died (not because of
    its own code): the exception or any cause of it is one of Ray's crash errors."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if any(type(e).__name__ == name or name in str(e)[:2000] for name in _CRASHES):
            return True
        todo += [e.__cause__, e.__context__, getattr(e, "cause", None)]
    return False


def _pending(st: StageContext, keyed, earlier, part: str) -> int:
    """The rows of `keyed` with no successful answer among `earlier` (the progress folder's
    shards, `_shards`; None: none yet), saved as hand-off `<part>-pending`; how many they are."""
    pending = keyed
    if earlier is not None:
        done = earlier.where(~F.coalesce(F.col("llm_failed"), F.lit(False))).select(UNIT)
        pending = keyed.join(done.distinct(), UNIT, "left_anti")
    return saved_rows(save(st, pending, part + "-pending"))


def to_model(st: StageContext, task, part: str, n: int, *, llm: LLMSection, ray: RaySection, label: str,
             unit: str = "LLM calls"):
    """The n rows saved at hand-off `part` through `task` on Ray; (output frame, usage).

    Rows that an earlier attempt of this pass answered (durable in its progress folder) are not
    sent again; a pass that Ray loses a worker or node under is resumed the same way, up to
    PASS_TRIES times. label and unit: the progress bar's."""
    inputs = st.spark.read.parquet(st.spark_location(st.handoff(part)))
    keyed = inputs.withColumn(UNIT, F.sha2(F.to_json(F.struct(*[F.col(c) for c in inputs.columns])), 256))
    folder = st.progress_dir(part, fingerprint(task, llm.model, llm.temperature))
    earlier = _shards(st, folder)
    # A folder empty at the start holds, at the end, answers to this pass's rows only.
    fresh = earlier is None
    todo = _pending(st, keyed, earlier, part)
    if todo < n:
        st.log(f"  {st.name}: {n - todo} of {n} rows already answered by an earlier attempt (durable under {folder})")
    for attempt in range(1, PASS_TRIES + 1):
        if not todo:
            break
        try:
            run_llm_task(task, st.handoff(part + "-pending"), folder, llm=llm, ray_section=ray, cache_dir=st.node_cache_dir,
                         base_url=st.llm_base_url(llm), work=Work(label, unit, todo), s3=st.s3, attempt=st.run_id)
            break
        except Exception as exc:
            if attempt == PASS_TRIES or not lost_to_a_crash(exc):
                raise
            todo = _pending(st, keyed, _shards(st, folder), part)
            st.log(f"  {st.name}: Ray lost a worker under the pass ({type(exc).__name__}); {todo} rows have no "
                   f"durable answer yet: resuming them (try {attempt + 1} of {PASS_TRIES})")
            time.sleep(RETRY_WAIT_S * attempt)
    shards = _shards(st, folder)
    if shards is None:
        raise RuntimeError(f"{st.name}: the LLM pass {part!r} wrote no output under {folder}")
    # One row per key: a successful answer over a failed one, the latest over older ones; only
    # keys of this pass's input (an earlier attempt may have answered rows no longer pending).
    # That filter hashes every input row again (texts and priors included) and joins; a pass
    # that started on an empty folder has no other keys to filter out, and skips it.
    best = Window.partitionBy(UNIT).orderBy(F.coalesce(F.col("llm_failed"), F.lit(False)).asc(), F.col(WRITTEN).desc())
    mine = shards if fresh else shards.join(keyed.select(UNIT), UNIT, "left_semi")
    out = mine.withColumn("_pick", F.row_number().over(best)).where(F.col("_pick") == 1).drop("_pick")
    out = save(st, out, part + "-out")
    # Only the pass's seven usage sums come to the driver (one row); a row paid by an earlier
    # attempt counts as a cache hit of this one.
    sums = spark_usage_sums(out, st.run_id)
    st.note_collected(8 * len(sums))
    usage = usage_from_sums(sums, llm)
    if usage.errors:  # the provider's messages, once each; too many failures stop the run here
        check_failures(st.name, label, usage, spark_failures(out, st.run_id), llm, st.log)
    return out.drop(UNIT, ATTEMPT, WRITTEN), usage


def spark_usage_sums(out, attempt: str | None = None) -> dict:
    """passes.llm.USAGE_SUMS of an LLM pass's output rows, summed by Spark in one aggregation (the
    pyarrow twin is passes.llm.output_usage): a dict of seven integers."""
    def flag(name: str):
        return F.coalesce(F.col(name), F.lit(False)) if name in out.columns else F.lit(False)

    paid = ~flag("llm_cached")
    if attempt is not None:
        paid = paid & F.coalesce(F.col(ATTEMPT) == F.lit(attempt), F.lit(False))
    batch = paid & flag("llm_batch")

    def total(name: str, mask):
        return F.sum(F.when(mask, F.coalesce(F.col(name), F.lit(0))).otherwise(F.lit(0)))

    def count(mask):
        return F.sum(F.when(mask, F.lit(1)).otherwise(F.lit(0)))

    cols = {"rows": F.count(F.lit(1)), "calls": count(paid), "errors": count(paid & flag("llm_failed")),
            "tokens_in": total("llm_tokens_in", paid), "tokens_out": total("llm_tokens_out", paid),
            "batch_tokens_in": total("llm_tokens_in", batch), "batch_tokens_out": total("llm_tokens_out", batch)}
    row = out.agg(*[c.alias(k) for k, c in cols.items()]).first()
    return {k: int(row[k] or 0) for k in USAGE_SUMS}


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
    n = saved_rows(inputs)
    if n == 0:
        return LLMPass()
    st.log(f"  {st.name}: {n} {noun} to the model")
    out, usage = to_model(st, task, part, n, llm=llm, ray=ray, label=label, unit=unit)
    return LLMPass(n, out, usage)
