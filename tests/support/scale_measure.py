"""What the scale benchmark measures besides the pipeline's own StageResults.

`ProcessSampler`: a background thread that samples the resident memory of this process tree
(psutil) every `interval_s` and keeps, per pipeline stage, the peak of each group: the driver
(this Python process), the Spark JVM, Spark's Python workers, Ray (every Ray process: raylet,
GCS and workers; RSS counts the shared object store once per process that maps it, so the sum
is an upper bound), the scripted server. The stage comes from `StageLog`, a text stream given to
RunContext as its `out` that notes each "stage i/n: name" line the pipeline logs.

`resolution_pairs`: pairwise merge precision and recall over mentions (unit, name as extracted),
the gold cluster of a mention being the world entity whose normalised form it is, the predicted
one the entity that entity_aliases gives its trimmed lower-cased name (as in test_resolution.py).
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
import time
from collections import defaultdict

GROUPS = ("driver", "jvm", "spark_python", "ray", "server")
_STAGE = re.compile(r"stage \d+/\d+: (\w+)")


def classify(proc, me: int, server_pid: int | None) -> str | None:
    """Which group a process belongs to (None: not counted)."""
    if proc.pid == me:
        return "driver"
    if server_pid is not None and proc.pid == server_pid:
        return "server"
    try:
        name = proc.name()
        cmd = " ".join(proc.cmdline()[:4])
    except Exception:  # gone, or not ours to read
        return None
    if name == "java" or "java" in cmd.split(" ")[0]:
        return "jvm"
    if "pyspark" in cmd:
        return "spark_python"
    if name.startswith("ray::") or "ray" in name or "/ray/" in cmd or "raylet" in cmd or "gcs_server" in cmd \
            or "default_worker.py" in cmd:
        return "ray"
    return None


class ProcessSampler(threading.Thread):
    def __init__(self, interval_s: float = 0.5, server_pid: int | None = None):
        super().__init__(daemon=True)
        self.interval_s, self.server_pid = interval_s, server_pid
        self.stage = "setup"
        self.peaks: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(GROUPS, 0.0))
        self.samples = 0
        self._halt = threading.Event()

    def sample(self) -> dict[str, float]:
        import psutil

        me = psutil.Process(os.getpid())
        totals = dict.fromkeys(GROUPS, 0.0)
        for p in [me, *me.children(recursive=True)]:
            group = classify(p, me.pid, self.server_pid)
            if group is None:
                continue
            try:
                totals[group] += p.memory_info().rss / 2**20
            except Exception:
                continue
        return totals

    def run(self) -> None:
        while not self._halt.is_set():
            totals = self.sample()
            peaks = self.peaks[self.stage]
            for g, mb in totals.items():
                peaks[g] = max(peaks[g], mb)
            self.samples += 1
            self._halt.wait(self.interval_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


class StageLog(io.TextIOBase):
    """RunContext's log stream: echoes to stderr and tells the sampler which stage runs."""

    def __init__(self, sampler: ProcessSampler, echo=sys.stderr, on_stage_done=None):
        self.sampler, self.echo, self.on_stage_done = sampler, echo, on_stage_done
        self.lines: list[str] = []

    def write(self, s: str) -> int:
        m = _STAGE.search(s)
        if m:
            self.sampler.stage = m.group(1)
        self.lines.append(s)
        self.echo.write(s)
        # The pipeline logs "done in" after it stored the stage's result: a partial record can be
        # written then, so a run stopped later still leaves the stages it finished.
        if self.on_stage_done is not None and "  done in " in s:
            try:
                self.on_stage_done()
            except Exception as exc:  # a failed partial record must not stop the run it measures
                self.echo.write(f"[scale benchmark] partial record not written: {exc!r}\n")
        return len(s)

    def flush(self) -> None:
        self.echo.flush()


def resolution_pairs(spark, wh, truth_dir) -> dict:
    """Pairwise merge precision and recall over the extracted mentions, against the world."""
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from tests.support.resolution_set import normalised

    t0 = time.perf_counter()
    ents = pq.read_table(f"{truth_dir}/entities.parquet", columns=["entity", "forms"]).to_pylist()
    gold_of = {}
    for e in ents:
        for f in e["forms"]:
            gold_of.setdefault(normalised(f), e["entity"])
    ments = wh.read("extractions").where(F.col("status") == "ok").select(
        "unit_id", F.explode("entities").alias("e")).select("unit_id", F.col("e.name").alias("name")).distinct()
    aliases = wh.read("entity_aliases").select("mention", "entity_id")
    # Counted per (name, entity) in Spark: one row per distinct name comes back, not one per
    # mention (18M mentions at 1M documents overran spark.driver.maxResultSize).
    joined = ments.withColumn("mention", F.lower(F.trim("name"))).join(aliases, "mention", "left") \
        .groupBy("name", "entity_id").agg(F.count("*").alias("n")).toPandas()
    names = joined["name"].drop_duplicates()
    gold_map = {n: gold_of.get(normalised(n), -1) for n in names}
    joined["gold"] = joined["name"].map(gold_map)
    unknown = int(joined.loc[joined["gold"] < 0, "n"].sum())
    unaliased = int(joined.loc[joined["entity_id"].isna(), "n"].sum())
    df = joined[(joined["gold"] >= 0) & joined["entity_id"].notna()]

    def pairs(counts: pd.Series) -> int:
        c = counts.to_numpy(dtype=np.int64)
        return int((c * (c - 1) // 2).sum())

    tp = pairs(df.groupby(["entity_id", "gold"])["n"].sum())
    predicted = pairs(df.groupby("entity_id")["n"].sum())
    true = pairs(df.groupby("gold")["n"].sum())
    # The baseline: one entity per normalised name (resolve.method exact, in its Python twin).
    df = df.assign(exact=df["name"].map({n: normalised(n) for n in names}))
    tp_x, pred_x = pairs(df.groupby(["exact", "gold"])["n"].sum()), pairs(df.groupby("exact")["n"].sum())
    return {"mentions": int(df["n"].sum()), "mentions_not_in_world": unknown, "mentions_without_alias": unaliased,
            "gold_entities": int(df["gold"].nunique()), "predicted_entities": int(df["entity_id"].nunique()),
            "precision": round(tp / predicted, 4) if predicted else 1.0,
            "recall": round(tp / true, 4) if true else 1.0,
            "exact_name_precision": round(tp_x / pred_x, 4) if pred_x else 1.0,
            "exact_name_recall": round(tp_x / true, 4) if true else 1.0,
            "true_pairs": true, "predicted_pairs": predicted, "seconds": round(time.perf_counter() - t0, 1)}
