"""LLM progress is durable in Parquet shards, not in the response cache: a driver killed in the
middle of extraction, with the response cache turned off, loses at most about one batch of
answers per actor, and the rerun pays only for the rest.

The model is the scripted server of the fault tests (tests/support/fault_server.py), whose
log of delivered answers is what was paid for. `llm.cache: false` leaves the shards under
`storage.run_dir` as the only record of finished answers, which is the situation of a cluster
node that dies with its local cache.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.ray.test_faults import STAGES, ScriptedServer, _config, _overrides, _run, _tables, _wait_for, _write_inputs

# In the fault suite (`make test-faults`, run by .ci/run), beside the other kills mid-stage: three
# runs, two of them fresh `corpusgraph index` processes, the costliest test of the default tier.
pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow]

CONCURRENCY, ACTORS = 2, 1
# Rows an actor collects before writing a shard: a batch, max(8, llm.concurrency) (runner/passes/llm.py).
BATCH = max(8, CONCURRENCY)


def _cli(over: dict[str, str], log: Path) -> subprocess.Popen:
    cmd = [str(Path(sys.executable).with_name("corpusgraph")), "index", "--conf", str(REPO / "conf" / "local.yaml"),
           "--stages", ",".join(STAGES)]
    for k, v in {**over, "spark.master": "local[2]", "spark.driver_memory": "1g"}.items():
        cmd += ["--set", f"{k}={v}"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _extract_calls(warehouse: str) -> list[dict]:
    from deltalake import DeltaTable

    from corpusgraph.tables import table_path

    runs = {r["run_id"]: r["status"] for r in DeltaTable(table_path(warehouse, "runs")).to_pyarrow_table().to_pylist()}
    calls = DeltaTable(table_path(warehouse, "llm_calls")).to_pyarrow_table().to_pylist()
    return [dict(c, status=runs[c["run_id"]]) for c in calls if c["stage"] == "extract"]


@pytest.mark.timeout(900)
def test_driver_killed_mid_extract_without_a_cache_repays_at_most_a_batch(spark, tmp_path):
    # Smaller units than the fault tests' (some 30 calls): room for a kill after the first shard.
    no_cache = {"llm.cache": "false", "llm.concurrency": str(CONCURRENCY), "ray.actors": str(ACTORS),
                "chunk.size_tokens": "20"}
    # The clean run, in this process, for the tables to compare with.
    clean_root = tmp_path / "clean"
    clean_root.mkdir()
    server = ScriptedServer(clean_root / "served.log").start()
    try:
        ctx = _run(spark, _config(clean_root, _write_inputs(clean_root), server, **no_cache))
    finally:
        server.kill()
    units = ctx.results["extract"].rows["units"]
    assert units > 2 * BATCH, f"{units} units: too few for the kill to land between shards"
    clean_tables = _tables(str(clean_root / "wh"))

    root = tmp_path / "killed"
    root.mkdir()
    server = ScriptedServer(root / "served.log").start()
    try:
        over = _overrides(root, _write_inputs(root), server, **no_cache)
        proc = _cli(over, root / "first.log")
        # Past one batch: the first shard is written by then.
        _wait_for(lambda: server.n_delivered() >= BATCH + 2 or proc.poll() is not None, "extraction under way",
                  limit_s=600)
        assert proc.poll() is None, (root / "first.log").read_text()[-3000:]
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and everything it started (its local Ray)
        proc.wait(60)
        shards = list((root / "cache" / "progress" / "extract").rglob("*.parquet"))
        assert shards, "no shard was written before the kill"
        rerun = _cli(over, root / "second.log")
        assert rerun.wait(600) == 0, (root / "second.log").read_text()[-3000:]
    finally:
        server.kill()
    delivered = server.delivered
    repaid = {k for k, n in collections.Counter(delivered).items() if n > 1}
    # Without a cache, what the crash loses is the answers not yet in a shard: at most about a
    # batch per actor, plus the requests in flight at the kill.
    assert len(repaid) <= ACTORS * BATCH + CONCURRENCY * ACTORS, f"{len(repaid)} answers paid twice"
    assert len(set(delivered)) == units and len(delivered) == units + len(repaid)
    assert _tables(over["storage.warehouse"]) == clean_tables
    (done,) = [c for c in _extract_calls(over["storage.warehouse"]) if c["status"] == "ok"]
    # The rerun reused every durable answer (counted as cache hits) and paid for the rest; what
    # the killed attempt was paid for and did not make durable is exactly what was paid twice.
    assert 0 < done["cache_hits"] < units and done["calls"] == units - done["cache_hits"]
    paid_first = len(delivered) - done["calls"]
    assert paid_first - done["cache_hits"] == len(repaid)
    # The stage committed: its progress folder is gone.
    assert not list((root / "cache" / "progress" / "extract").rglob("*.parquet"))
