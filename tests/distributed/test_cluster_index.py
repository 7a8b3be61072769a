"""The distributed path: spark-submit against a standalone Spark cluster and a two-node Ray cluster.

A Spark master and worker and a Ray head and worker run as separate processes on localhost
(tests/distributed/cluster.py). `spark-submit jobs/index.py` builds the index of three sample
documents against them with the real embedded model; then a local-mode run (`corpusgraph index`,
Spark local[2], a local Ray) builds the same corpus from the same config into a second warehouse.
Both runs share one response cache, as the nodes of a cluster share one filesystem.

What it proves: the cluster run finishes with Spark work on a standalone executor and every Ray
task and actor on the Ray worker node (the head has no CPUs); the two warehouses hold the same
tables, deterministic ids included; and the local run pays for no LLM call, because every answer
the cluster's actors received is in the shared cache.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.distributed.cluster import Daemons, RayLocalCluster, SparkStandalone, localhost_cluster_env, spark_home

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.llm, pytest.mark.spark, pytest.mark.ray]

DOCS = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"
# Three of the shortest sample documents: one text unit each, a small graph, a few reports.
INPUTS = ["tallis-complaint-2026-05.md", "duisburg-weekly-2026-w20.txt", "rotterdam-weekly-2026-w30.txt"]
COMPARED = ("documents", "text_units", "extractions", "entities", "entity_aliases", "relationships", "claims",
            "communities", "community_reports", "embeddings")
LLM_STAGES = ("extract", "reports")


def _overlay(root: Path, spark_master: str, ray_address: str) -> Path:
    """conf/local.yaml plus what a cluster changes: the Spark master, the Ray address, and paths
    every node can reach (absolute, since spark-submit runs from elsewhere)."""
    conf = REPO / "conf"
    data = {
        "base": str(conf / "local.yaml"),
        "spark": {"master": spark_master, "jars_dir": str(REPO / "jars"), "driver_memory": "1g",
                  "extra": {"spark.sql.warehouse.dir": str(root / "spark-warehouse")}},
        "ray": {"address": ray_address},
        "storage": {"warehouse": str(root / "cluster" / "warehouse"), "index_dir": str(root / "cluster" / "index"),
                    "cache_dir": str(root / "cache")},
        "ingest": {"inputs": [str(DOCS / name) for name in INPUTS]},
    }
    # Prompt paths resolve against the config file's folder: give this one the project's prompts.
    (root / "prompts").symlink_to(conf / "prompts", target_is_directory=True)
    path = root / "cluster-overlay.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _spark_submit(overlay: Path, master: str, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    jars = ",".join(sorted(str(p) for p in (REPO / "jars").glob("*.jar")))
    cmd = [
        str(spark_home() / "bin" / "spark-submit"), "--master", master, "--deploy-mode", "client",
        "--driver-memory", "1g", "--executor-memory", "512m", "--total-executor-cores", "1",
        "--jars", jars,
        # The interpreter with corpusgraph installed, for the driver and every executor.
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={root}",
        str(REPO / "jobs" / "index.py"), "--conf", str(overlay),
    ]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1500)


def _local_index(overlay: Path, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    cli = Path(sys.executable).with_name("corpusgraph")
    over = {"spark.master": "local[2]", "ray.address": "null",
            "storage.warehouse": str(root / "local" / "warehouse"), "storage.index_dir": str(root / "local" / "index")}
    cmd = [str(cli), "index", "--conf", str(overlay)] + [a for k, v in over.items() for a in ("--set", f"{k}={v}")]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1500)


def _canonical(value):
    """Vectors rounded: the two runs embed on different processes whose BLAS may sum in another
    order; anything else must match exactly."""
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value


def _tables(warehouse: Path) -> dict[str, list[str]]:
    """Each compared table as sorted canonical JSON rows, without run ids and timestamps."""
    from deltalake import DeltaTable

    from corpusgraph.tables import table_path

    out = {}
    for name in COMPARED:
        tbl = DeltaTable(table_path(str(warehouse), name)).to_pyarrow_table()
        keep = [f.name for f in tbl.schema if f.name != "run_id" and not str(f.type).startswith("timestamp")]
        out[name] = sorted(json.dumps(_canonical(r), sort_keys=True, default=str) for r in tbl.select(keep).to_pylist())
    return out


def _one_run(warehouse: Path) -> tuple[dict, dict[str, dict]]:
    """The single `runs` row of a warehouse and its llm_calls rows by stage."""
    from deltalake import DeltaTable

    from corpusgraph.tables import table_path

    (run,) = DeltaTable(table_path(str(warehouse), "runs")).to_pyarrow_table().to_pylist()
    calls = DeltaTable(table_path(str(warehouse), "llm_calls")).to_pyarrow_table().to_pylist()
    return run, {c["stage"]: c for c in calls if c["run_id"] == run["run_id"]}


@pytest.mark.timeout(2400)
def test_spark_submit_on_standalone_spark_and_ray_cluster_matches_local_mode(tmp_path):
    # Ray's unix sockets live under its temp dir and their paths must stay under ~100 bytes.
    ray_tmp = Path(tempfile.mkdtemp(prefix="cg-ray-", dir="/tmp"))
    env = localhost_cluster_env()
    logs = tmp_path / "logs"
    logs.mkdir()
    daemons = Daemons(logs, env)
    try:
        spark = SparkStandalone(daemons, tmp_path, cores=1, memory="1g").start()
        ray = RayLocalCluster(daemons, ray_tmp, worker_cpus=2).start()
        overlay = _overlay(tmp_path, spark.master_url, ray.address)
        submitted = _spark_submit(overlay, spark.master_url, tmp_path, env)
        (logs / "spark-submit.log").write_text(submitted.stdout + submitted.stderr)
        assert submitted.returncode == 0, (submitted.stdout + submitted.stderr)[-5000:]
        executor_logs = spark.executor_logs()
    finally:
        daemons.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert executor_logs, "no executor ran on the standalone Spark worker"

    local = _local_index(overlay, tmp_path, env)
    (logs / "local.log").write_text(local.stdout + local.stderr)
    assert local.returncode == 0, (local.stdout + local.stderr)[-5000:]

    cluster_tables = _tables(tmp_path / "cluster" / "warehouse")
    local_tables = _tables(tmp_path / "local" / "warehouse")
    assert len(cluster_tables["text_units"]) == len(INPUTS)
    assert cluster_tables["entities"] and cluster_tables["communities"] and cluster_tables["community_reports"], \
        "the cluster run built an empty graph: nothing to compare"
    for name in COMPARED:
        assert local_tables[name] == cluster_tables[name], f"{name} differs between the cluster and local runs"

    cluster_run, cluster_calls = _one_run(tmp_path / "cluster" / "warehouse")
    local_run, local_calls = _one_run(tmp_path / "local" / "warehouse")
    assert cluster_run["status"] == local_run["status"] == "ok"
    assert cluster_run["config_hash"] != local_run["config_hash"]  # the two runs really differed in config
    for stage in LLM_STAGES:
        assert cluster_calls[stage]["calls"] > 0 and cluster_calls[stage]["errors"] == 0, cluster_calls[stage]
        # The cluster's actors paid; the local run found every answer in the shared cache.
        assert local_calls[stage]["calls"] == 0, local_calls[stage]
        assert local_calls[stage]["cache_hits"] == cluster_calls[stage]["calls"] + cluster_calls[stage]["cache_hits"]
