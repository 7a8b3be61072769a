"""What a run costs before it does any work: the fixed overhead per stage on a tiny corpus.

Issue 42 (the test suite builds small indexes many times) and issue 45 (the README's first command)
both name it: on three short documents, with the LLM answers coming from the scripted server in
microseconds, almost every second a run takes is the machinery around the data. This benchmark
indexes three documents (three sentences each) through `run_index` on local[2] Spark with Delta,
local Ray and the scripted OpenAI-compatible server, three times in one process:

- `first`: this test's first run, into a fresh warehouse; run alone (`make bench-overhead`) it is
  the first of the process too (a JVM that has planned nothing yet, Ray's first actors), while
  under `make bench` the benchmarks before it have warmed both;
- `again`: the same documents into another fresh warehouse (a warm JVM and Ray: what every later
  build of a test session pays);
- `rerun`: `again`'s warehouse indexed once more (every LLM answer and vector already there: the
  run that pays nothing).

Per stage it records the seconds, the Spark SQL executions the stage started (counted by execution
id in Spark's SQL status store, so retention does not cap the count) split into those Delta runs
internally for its own bookkeeping (snapshot state, file filtering: descriptions beginning
"Delta:"), MERGE commands and the rest, and the Spark driver JVM's CPU seconds (from
/proc/<pid>/stat: user + system). The Ray passes' seconds are inside their stages' seconds.
There is no reference and no target here: the figures are the baseline that work on the fixed
overhead is measured against. Run alone: `make bench-overhead` (one minute or two of CPU
contention moves these figures by 10-20%).
"""

from __future__ import annotations

import json
import os
import platform
import time
from datetime import datetime, timezone

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.spark, pytest.mark.ray]

RESULTS = REPO / "tests" / "benchmarks" / "results" / "run_overhead.json"
DOCS = {
    "dock.md": "Brightwater Haulage moved trailer R-77 from Valencia to Milan. Giulia Sarti runs the Milan "
               "dock. The Milan dock closed early on Friday.",
    "cheese.md": "Orsolya Foods complained to Halvard Quist about spoiled cheese. Orsolya Foods ships from "
                 "Gdansk. Halvard Quist refunded the load.",
    "depot.txt": "Kestrel Logistics opened a depot in Leipzig. Kestrel Logistics hired Anton Weber in Leipzig. "
                 "Anton Weber drives to Dresden.",
}


class _Meter:
    """Spark SQL executions and driver JVM CPU seconds, read before and after each stage."""

    def __init__(self, spark):
        self.store = spark._jsparkSession.sharedState().statusStore()
        self.jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())

    def jvm_cpu_s(self) -> float:
        with open(f"/proc/{self.jvm_pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def executions(self) -> dict[int, str]:
        """The descriptions of the executions the store retains, by execution id."""
        found = self.store.executionsList()
        return {int(found.apply(i).executionId()): str(found.apply(i).description()) for i in range(found.size())}

    def last_id(self) -> int:
        return max(self.executions(), default=-1)


def _measured_run(ctx, meter: _Meter) -> dict:
    """run_index(ctx) with each stage metered; {stage: figures}, plus the whole run's. A stage's
    seconds are the ones the runner records (StageResult.seconds)."""
    import corpusgraph.runner.pipeline as pipeline

    stages: dict[str, dict] = {}
    call = pipeline._call

    def metered(run, stage):
        first, cpu0 = meter.last_id(), meter.jvm_cpu_s()
        try:
            return call(run, stage)
        finally:
            cpu = meter.jvm_cpu_s() - cpu0
            mine = {i: d for i, d in meter.executions().items() if i > first}
            count = max(mine, default=first) - first  # by id: the store may have dropped some descriptions
            delta = sum(1 for d in mine.values() if d.startswith("Delta:"))
            merge = sum(1 for d in mine.values() if not d.startswith("Delta:") and "MERGE" in d)
            stages[stage.recorded_as] = {"spark_sql_executions": count, "delta_internal": delta, "merge": merge,
                                         "other": count - delta - merge, "jvm_cpu_s": round(cpu, 2)}

    pipeline._call = metered
    started, cpu0 = time.perf_counter(), meter.jvm_cpu_s()
    try:
        pipeline.run_index(ctx)
    finally:
        pipeline._call = call
    stages = {name: {"seconds": round(ctx.results[name].seconds, 2), **figures} for name, figures in stages.items()}
    total = {"seconds": round(time.perf_counter() - started, 2), "jvm_cpu_s": round(meter.jvm_cpu_s() - cpu0, 2),
             "spark_sql_executions": sum(s["spark_sql_executions"] for s in stages.values()),
             "delta_internal": sum(s["delta_internal"] for s in stages.values())}
    return {"stages": stages, "total": total}


def test_fixed_overhead_per_stage_on_three_documents(spark, tmp_path, scripted_url):
    from corpusgraph.config import load_config
    from corpusgraph.runner.run import RunContext

    inputs = tmp_path / "in"
    inputs.mkdir()
    for name, text in DOCS.items():
        (inputs / name).write_text(text)

    def cfg(root):
        return load_config(REPO / "conf" / "local.yaml", {
            "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
            "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{inputs}]",
            "llm.backend": "openai", "llm.api_base": scripted_url, "llm.model": "scripted", "llm.concurrency": "8"})

    meter = _Meter(spark)
    load = os.getloadavg()
    runs = {}
    first = RunContext(cfg(tmp_path / "first"), spark)
    runs["first"] = _measured_run(first, meter)
    again_cfg = cfg(tmp_path / "again")
    again = RunContext(again_cfg, spark)
    runs["again"] = _measured_run(again, meter)
    rerun = RunContext(again_cfg, spark)
    runs["rerun"] = _measured_run(rerun, meter)

    # What was measured is a run that did its work: every stage ran, the graph is there, and the
    # rerun sent nothing to the model.
    for name, ctx in (("first", first), ("again", again), ("rerun", rerun)):
        assert list(runs[name]["stages"]) == list(ctx.results)[: len(runs[name]["stages"])], name
        assert all(s["spark_sql_executions"] > 0 for s in runs[name]["stages"].values()), name
    assert again.results["extract"].usage.calls > 0 and again.wh.read("entities").count() > 0
    assert rerun.results["extract"].usage.calls == 0 and rerun.results["reports"].usage.calls == 0

    result = {
        "corpus": {"documents": len(DOCS), "words": sum(len(t.split()) for t in DOCS.values()),
                   "text_units": again.results["chunk"].rows["text_units"]},
        "runs": runs,
        "spark": {"master": spark.sparkContext.master,
                  "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions")},
        "load_average": {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "measured": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "how": "tests/benchmarks/test_run_overhead.py (make bench-overhead): run_index on local[2] Spark + Delta, "
               "local Ray and the scripted server; per stage its seconds, the Spark SQL executions it started "
               "(Delta's internal ones apart) and the driver JVM's CPU seconds",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for name, run in runs.items():
        print(f"{name}: {run['total']}")
        for stage, figures in run["stages"].items():
            print(f"  {stage}: {figures}")
