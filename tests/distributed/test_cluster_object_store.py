"""The cluster path on object storage, at 10,000 documents, with a Ray worker node killed mid-extract.

On localhost, as separate processes: an S3-compatible server (moto's server mode), a standalone
Spark master and worker, a Ray head (no CPUs) and two Ray worker nodes, and the scripted scale
server (tests/support/scale_server.py) as the model, answering from the synthetic corpus's
ground truth and logging every chat answer it sends. There is no shared folder: the corpus, the
warehouse, the FAISS files and the run folder (hand-off files, durable LLM progress) live only on
the S3 server, and each node (the driver and each Ray worker node) keeps its response cache in a
folder of its own (`storage.cache_dir` names `$CG_NODE`, set per node).

`spark-submit jobs/index.py` builds the whole index of the synthetic corpus. Once a third of the
extraction answers are in, the Ray worker node that holds an LLM actor is killed (its whole
`ray start` process group). The run resumes the pass from its durable shards on the surviving
node; if the run fails instead, one rerun must finish. Then a local-mode build (`corpusgraph
index`, Spark local[2], a local Ray) of the same corpus, read from the same bucket, writes a local
warehouse, and:

- every compared table equals the local build's (run ids and timestamps aside, vectors rounded);
- the scripted server's log answered no request twice beyond what the kill could cost: the
  requests in flight at the kill, plus, per LLM actor, one batch of answers not yet written to a
  shard and the requests it had in flight when the failed pass was torn down;
- nothing was written to a local folder but the node caches and the logs.

The figures go to tests/benchmarks/results/cluster.json. CORPUSGRAPH_CLUSTER_DOCUMENTS sets the
corpus size (10000 by default; smaller only for trying the test out).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support import scale_server
from tests.support import synthetic_corpus
from tests.conftest import REPO
from tests.distributed.cluster import Daemons, RayLocalCluster, SparkStandalone, localhost_cluster_env, spark_home
from tests.distributed.objectstore import MotoServer

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.ray]

N_DOCS = int(os.environ.get("CORPUSGRAPH_CLUSTER_DOCUMENTS", "10000"))
SEED = 7
BUCKET = "corpusgraph"
COMPARED = ("documents", "text_units", "extractions", "entities", "entity_aliases", "relationships", "claims",
            "communities", "community_reports", "embeddings")
CONCURRENCY, ACTORS = 8, 2
BATCH = max(8, CONCURRENCY)  # rows an actor answers before it writes a shard (runner/passes/llm.py)
CHAT_LATENCY_S = 0.05
KILL_AT = 1 / 3  # of the clean extraction's answers, estimated from the corpus (see _expected_extract)
RESULTS = REPO / "tests" / "benchmarks" / "results" / "cluster.json"


def _common(server_url: str, s3) -> dict:
    """What both builds share: the model, chunking, packing and resolution of the scale benchmark
    (tests/benchmarks/test_scale.py), the store's settings, and Spark's parallelism fixed at 2 so
    that the two builds cut the same Spark partitions (extraction packs units within one)."""
    return {
        "llm": {"backend": "openai", "preflight": False, "api_base": server_url, "model": "scripted-scale", "concurrency": CONCURRENCY,
                "timeout_s": 300},
        "embeddings": {"backend": "openai", "api_base": server_url, "model": "scripted-scale-embed"},
        "chunk": {"size_tokens": 300, "overlap_tokens": 40},
        "extract": {"units_per_call": 6, "max_entities": 10, "max_relationships": 10, "max_tokens": 800},
        "resolve": {"method": "similarity", "llm_adjudication": False},
        "ingest": {"inputs": [f"s3a://{BUCKET}/corpus/"]},
        "storage": {"s3": {"endpoint": s3.endpoint, "region": s3.region, "access_key": s3.access_key,
                           "secret_key": s3.secret_key.get_secret_value(), "path_style": True}},
    }


def _overlay(root: Path, name: str, data: dict, base: Path = REPO / "conf" / "local.yaml") -> Path:
    """A config file over `base` (the config loader merges the two)."""
    if not (root / "prompts").exists():
        (root / "prompts").symlink_to(REPO / "conf" / "prompts", target_is_directory=True)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"base": str(base), **data}, sort_keys=False))
    return path


def _spark_submit(overlay: Path, master: str, root: Path, env: dict, log: Path) -> subprocess.Popen:
    jars = ",".join(sorted(str(p) for p in (REPO / "jars").glob("*.jar")))
    cmd = [
        str(spark_home() / "bin" / "spark-submit"), "--master", master, "--deploy-mode", "client",
        "--driver-memory", "2g", "--executor-memory", "2g", "--total-executor-cores", "1",
        "--conf", "spark.default.parallelism=2",
        "--jars", jars, "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={root}",
        str(REPO / "jobs" / "index.py"), "--conf", str(overlay),
    ]
    return subprocess.Popen(cmd, cwd=root, env={**env, "CG_NODE": "driver"}, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _local_index(overlay: Path, root: Path, env: dict, log: Path) -> int:
    cli = Path(sys.executable).with_name("corpusgraph")
    cmd = [str(cli), "index", "--conf", str(overlay)]
    with log.open("w") as out:
        return subprocess.run(cmd, cwd=root, env={**env, "CG_NODE": "local"}, stdout=out, stderr=subprocess.STDOUT,
                              timeout=3600).returncode


def _canonical(value):
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value


def _tables(warehouse: str, s3=None) -> dict[str, list[str]]:
    from corpusgraph.storage.locations import open_delta
    from corpusgraph.tables import table_path

    out = {}
    for name in COMPARED:
        tbl = open_delta(table_path(warehouse, name), s3).to_pyarrow_table()
        keep = [f.name for f in tbl.schema if f.name != "run_id" and not str(f.type).startswith("timestamp")]
        out[name] = sorted(json.dumps(_canonical(r), sort_keys=True, default=str) for r in tbl.select(keep).to_pylist())
    return out


def _runs(warehouse: str, s3=None) -> list[dict]:
    from corpusgraph.storage.locations import open_delta
    from corpusgraph.tables import table_path

    return open_delta(table_path(warehouse, "runs"), s3).to_pyarrow_table().to_pylist()


def _parquet_under(location: str, s3) -> list[str]:
    from pyarrow import fs as pafs

    from corpusgraph.storage.locations import arrow_filesystem

    fs, path = arrow_filesystem(location, s3)
    return [i.path for i in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
            if i.path.endswith(".parquet")]


def _llm_actor_nodes(nodes: list[subprocess.Popen]) -> dict[int, int]:
    """Worker node index -> LLM actor processes under its `ray start` process right now."""
    out: dict[int, int] = {}
    for i, node in enumerate(nodes):
        try:
            family = psutil.Process(node.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        n = 0
        for p in family:
            try:
                n += "_LLMWorker" in " ".join(p.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        out[i] = n
    return out


def _expected_extract(corpus: Path) -> int:
    """A lower bound of the clean build's extraction calls: one per six units of about 300 tokens
    (the pack size and unit length set in _common), counted from the corpus's approximate tokens."""
    manifest = json.loads((corpus / "manifest.json").read_text())
    return max(12, manifest["totals"]["approx_tokens"] // 300 // 6)


@pytest.mark.timeout(3600)
def test_index_on_object_storage_survives_a_killed_ray_worker_node(tmp_path):
    t0, load0 = time.monotonic(), os.getloadavg()
    corpus = tmp_path / "corpus"
    synthetic_corpus.ensure(corpus, N_DOCS, SEED)
    logs = tmp_path / "logs"
    logs.mkdir()
    ray_tmp = Path(tempfile.mkdtemp(prefix="cg-ray-", dir="/tmp"))
    nodes_root = tmp_path / "nodes"
    env = localhost_cluster_env()
    report: dict = {"documents": N_DOCS, "nodes": {"spark_workers": 1, "ray_workers": 2},
                    "storage": "s3a (localhost)", "killed": "ray worker node during extract",
                    "model": f"tests/support/scale_server.py, {CHAT_LATENCY_S} s per chat answer, 64 slots",
                    "llm": {"actors": ACTORS, "concurrency_per_actor": CONCURRENCY, "batch_rows": BATCH}}
    # A small latency per answer, so that requests are on the wire when the node dies.
    with MotoServer(logs) as s3, scale_server.running(
            corpus / "truth", "--chat-latency-s", str(CHAT_LATENCY_S), "--chat-slots", "64", "--dim", "64",
            "--log", str(tmp_path / "served.log")) as server:
        from corpusgraph.storage.locations import upload

        for f in sorted((corpus / "parquet").glob("*.parquet")):
            upload(f, f"s3://{BUCKET}/corpus/{f.name}", s3)
        common = _overlay(tmp_path, "common", _common(server.base_url, s3))
        daemons = Daemons(logs, env)
        try:
            spark = SparkStandalone(daemons, tmp_path, cores=1, memory="2g").start()
            ray = RayLocalCluster(daemons, ray_tmp, worker_cpus=1, workers=2,
                                  node_env=lambda i: {"CG_NODE": f"ray-{i}"}).start()
            cluster = _overlay(tmp_path, "cluster", {
                "spark": {"master": spark.master_url, "jars_dir": str(REPO / "jars"),
                          "extra": {"spark.sql.warehouse.dir": str(tmp_path / "spark-warehouse")}},
                "ray": {"address": ray.address, "actors": ACTORS},
                "storage": {"warehouse": f"s3a://{BUCKET}/cluster/warehouse",
                            "index_dir": f"s3a://{BUCKET}/cluster/index", "run_dir": f"s3a://{BUCKET}/cluster/run",
                            "cache_dir": str(nodes_root) + "/$CG_NODE/cache"},
            }, base=common)
            t_run = time.monotonic()
            proc = _spark_submit(cluster, spark.master_url, tmp_path, env, logs / "spark-submit.log")
            kill_at = int(_expected_extract(corpus) * KILL_AT)
            while proc.poll() is None and server.get_json("/stats")["served"].get("extract", 0) < kill_at:
                time.sleep(0.5)
            assert proc.poll() is None, (logs / "spark-submit.log").read_text()[-4000:]
            holding = _llm_actor_nodes(ray.nodes)
            victim = max(holding, key=holding.get)
            assert holding[victim] > 0, f"no LLM actor found under either Ray worker node: {holding}"
            in_flight = server.get_json("/stats")["in_flight"]["chat"]
            answered_at_kill = len((tmp_path / "served.log").read_text().split())
            os.killpg(ray.nodes[victim].pid, signal.SIGKILL)
            report.update(in_flight_at_kill=in_flight, llm_actors_killed=holding[victim],
                          answered_at_kill=answered_at_kill)
            rc = proc.wait(3600)
            reruns = 0
            if rc != 0:  # the run may fail with the node; one rerun must then finish
                reruns = 1
                proc = _spark_submit(cluster, spark.master_url, tmp_path, env, logs / "spark-submit-rerun.log")
                rc = proc.wait(3600)
            assert rc == 0, (logs / ("spark-submit-rerun.log" if reruns else "spark-submit.log")).read_text()[-5000:]
            report.update(cluster_seconds=round(time.monotonic() - t_run, 1), reruns=reruns)
            assert spark.executor_logs(), "no executor ran on the standalone Spark worker"
        finally:
            daemons.stop()
            shutil.rmtree(ray_tmp, ignore_errors=True)

        # The cluster build's answers; the local build's (below) are paid again on purpose.
        served_by_cluster = len((tmp_path / "served.log").read_text().split())
        t_local = time.monotonic()
        local = _overlay(tmp_path, "local", {
            "spark": {"master": "local[2]", "jars_dir": str(REPO / "jars"), "driver_memory": "2g",
                      "extra": {"spark.default.parallelism": "2",
                                "spark.sql.warehouse.dir": str(tmp_path / "spark-warehouse-local"),
                                "spark.driver.extraJavaOptions": f"-Dderby.system.home={tmp_path}"}},
            "ray": {"address": None, "num_cpus": 2, "actors": ACTORS},
            "storage": {"warehouse": str(tmp_path / "local" / "warehouse"), "index_dir": str(tmp_path / "local" / "index"),
                        "cache_dir": str(tmp_path / "local" / "cache")},
        }, base=common)
        assert _local_index(local, tmp_path, env, logs / "local.log") == 0, (logs / "local.log").read_text()[-5000:]
        report["local_seconds"] = round(time.monotonic() - t_local, 1)
        cluster_tables = _tables(f"s3a://{BUCKET}/cluster/warehouse", s3)
        runs = _runs(f"s3a://{BUCKET}/cluster/warehouse", s3)
        left_in_run_dir = _parquet_under(f"s3://{BUCKET}/cluster/run/progress", s3)
    local_tables = _tables(str(tmp_path / "local" / "warehouse"))

    delivered = (tmp_path / "served.log").read_text().split()[:served_by_cluster]
    counts = collections.Counter(delivered)
    repaid = sum(n - 1 for n in counts.values() if n > 1)
    equal = {name: cluster_tables[name] == local_tables[name] for name in COMPARED}
    report.update(seconds=round(time.monotonic() - t0, 1), repaid_calls=repaid, answered=len(delivered),
                  tables_equal_local=all(equal.values()), tables=equal,
                  rows={name: len(rows) for name, rows in cluster_tables.items()},
                  load_average_start=[round(x, 2) for x in load0],
                  load_average_end=[round(x, 2) for x in os.getloadavg()], cpus=os.cpu_count(),
                  date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if N_DOCS == 10_000:
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))

    assert len(cluster_tables["documents"]) == N_DOCS
    assert all(cluster_tables[name] for name in ("entities", "communities", "community_reports", "embeddings"))
    for name in COMPARED:
        assert equal[name], f"{name} differs between the cluster and local builds"
    assert sorted(r["status"] for r in runs)[-1] == "ok"
    # The kill costs at most: what was on the wire at the kill, and per actor, one batch of
    # answers not yet in a shard plus its requests in flight when the failed pass was torn down.
    bound = report["in_flight_at_kill"] + ACTORS * (BATCH + CONCURRENCY)
    assert repaid <= bound, f"{repaid} answers paid twice; the kill could cost at most {bound}"
    assert not left_in_run_dir, f"progress folders left after a finished run: {left_in_run_dir[:5]}"
    # No shared folder: what the nodes wrote locally is their own caches.
    assert sorted(p.name for p in nodes_root.iterdir()) <= ["driver", "ray-0", "ray-1"]
