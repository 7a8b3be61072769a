"""Ray on Spark: `spark-submit jobs/index.py ... --set ray.address=spark` on a standalone cluster.

A Spark master and one worker with 2 cores run as separate processes on localhost
(tests/distributed/cluster.py); no Ray cluster is started beside them. The job builds the index
of three short sample documents with ray.address 'spark': corpusgraph starts Ray inside the Spark
application with ray.util.spark.setup_ray_cluster (the head on the driver with no CPU, one Ray
worker node of 1 CPU as a Spark task, the other core left for Spark's own stages), runs the LLM
and embedding passes on it, and shuts it down when the run ends. The model is the scripted
OpenAI-compatible server of the fault tests (tests/support/fault_server.py), so no real model
runs and every answer it delivered is logged.

What it proves, from outside the job: the run finishes with a full index; while it ran, every LLM
actor process sat below a Ray worker node launched by a Spark executor (the process tree: the
executor JVM, its Python worker, ray.util.spark.start_ray_node, `ray start`, the raylet, the
actor); the scripted server answered the calls; afterwards no process of that Ray cluster is
left, its temp folder is gone, and the master removed the Spark application.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.conftest import REPO
from tests.distributed.cluster import Daemons, SparkStandalone, localhost_cluster_env, spark_home, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.ray]

DOCS = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"
INPUTS = ["tallis-complaint-2026-05.md", "duisburg-weekly-2026-w20.txt", "rotterdam-weekly-2026-w30.txt"]
SERVER = REPO / "tests" / "support" / "fault_server.py"
ACTOR_MARKS = ("_LLMWorker",)  # an LLM actor's process title names its class


def _overlay(root: Path, spark_master: str, ray_root: Path, api_base: str) -> Path:
    """conf/local.yaml plus a cluster's Spark master, shared absolute paths, the scripted model,
    and the size of Ray on Spark (ray.address itself comes on the command line)."""
    conf = REPO / "conf"
    data = {
        "base": str(conf / "local.yaml"),
        "spark": {"master": spark_master, "jars_dir": str(REPO / "jars"), "driver_memory": "1g",
                  "extra": {"spark.sql.warehouse.dir": str(root / "spark-warehouse")}},
        "ray": {"actors": 1, "spark_workers": 1, "spark_cpus_per_worker": 1, "spark_object_store_mb": 256,
                "spark_temp_dir": str(ray_root)},
        "llm": {"backend": "openai", "preflight": False, "api_base": api_base, "model": "scripted", "concurrency": 2},
        "storage": {"warehouse": str(root / "warehouse"), "index_dir": str(root / "index"),
                    "cache_dir": str(root / "cache")},
        "ingest": {"inputs": [str(DOCS / name) for name in INPUTS]},
    }
    (root / "prompts").symlink_to(conf / "prompts", target_is_directory=True)
    path = root / "overlay.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _spark_submit(overlay: Path, master: str, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    jars = ",".join(sorted(str(p) for p in (REPO / "jars").glob("*.jar")))
    cmd = [
        str(spark_home() / "bin" / "spark-submit"), "--master", master, "--deploy-mode", "client",
        "--driver-memory", "1g", "--executor-memory", "1g", "--total-executor-cores", "2",
        "--jars", jars,
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={root}",
        str(REPO / "jobs" / "index.py"), "--conf", str(overlay), "--set", "ray.address=spark",
    ]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1200)


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


class ProcessWatch(threading.Thread):
    """Samples the process table while the job runs. Records the launchers of this test's Ray
    nodes (ray.util.spark.start_ray_node with --temp-dir under ray_root), every process below
    them (to check that none is left afterwards), and each LLM actor with the command lines of
    all its ancestors."""

    def __init__(self, ray_root: Path):
        super().__init__(daemon=True)
        self.ray_root = str(ray_root)
        self.done = threading.Event()
        self.launchers: dict[tuple[int, float], str] = {}
        self.family: dict[tuple[int, float], str] = {}
        self.actors: dict[tuple[int, float], list[str]] = {}

    def run(self) -> None:
        while not self.done.wait(0.5):
            for p in psutil.process_iter():
                cmd = _cmd(p)
                if "start_ray_node" in cmd and self.ray_root in cmd:
                    self._add_launcher(p, cmd)
                elif any(m in cmd for m in ACTOR_MARKS):
                    self._add_actor(p)

    def _add_launcher(self, p: psutil.Process, cmd: str) -> None:
        try:
            self.launchers[(p.pid, p.create_time())] = cmd
            for c in p.children(recursive=True):
                self.family.setdefault((c.pid, c.create_time()), _cmd(c))
        except psutil.NoSuchProcess:
            pass

    def _add_actor(self, p: psutil.Process) -> None:
        try:
            key = (p.pid, p.create_time())
            if key not in self.actors:
                chain = [_cmd(a) for a in p.parents()]
                if any(self.ray_root in c for c in chain):  # one of this test's Ray nodes
                    self.actors[key] = chain
        except psutil.NoSuchProcess:
            pass

    def alive(self) -> list[str]:
        """Processes seen in this Ray cluster (or naming its temp folder) that still run."""
        left = []
        for (pid, created), cmd in {**self.launchers, **self.family}.items():
            try:
                if psutil.Process(pid).create_time() == created:
                    left.append(f"{pid} {cmd[:120]}")
            except psutil.NoSuchProcess:
                pass
        for p in psutil.process_iter():
            if self.ray_root in _cmd(p) and not any(s.startswith(f"{p.pid} ") for s in left):
                left.append(f"{p.pid} {_cmd(p)[:120]}")
        return left


def _start_model(daemons: Daemons, root: Path) -> tuple[str, Path]:
    """The scripted server as one of the test's daemons; its first stdout line is its base URL."""
    served = root / "served.log"
    served.touch()
    proc, log = daemons.start("model", [sys.executable, str(SERVER), "--latency-s", "0.05", "--log", str(served)])
    wait_until(lambda: log.read_text().startswith("http"), "scripted model server listening", 60, proc, log)
    return log.read_text().splitlines()[0].strip(), served


def _one_run(warehouse: Path) -> tuple[dict, dict[str, dict]]:
    from deltalake import DeltaTable

    from corpusgraph.tables import table_path

    (run,) = DeltaTable(table_path(str(warehouse), "runs")).to_pyarrow_table().to_pylist()
    calls = DeltaTable(table_path(str(warehouse), "llm_calls")).to_pyarrow_table().to_pylist()
    return run, {c["stage"]: c for c in calls if c["run_id"] == run["run_id"]}


@pytest.mark.timeout(1800)
def test_ray_address_spark_runs_the_llm_actors_on_spark_tasks_and_shuts_ray_down(tmp_path):
    if importlib.util.find_spec("grpc") is None:
        pytest.fail("Ray on Spark needs Ray's client extra (grpcio): its head always starts a Ray Client server "
                    "(pip install 'ray[data,client]==2.60.0')")
    # Ray's unix sockets live under its temp dir: a short root under /tmp.
    ray_root = Path(tempfile.mkdtemp(prefix="cgrs-", dir="/tmp"))
    env = localhost_cluster_env()
    logs = tmp_path / "logs"
    logs.mkdir()
    daemons = Daemons(logs, env)
    watch = ProcessWatch(ray_root)
    try:
        api_base, served = _start_model(daemons, tmp_path)
        spark = SparkStandalone(daemons, tmp_path, cores=2, memory="2g").start()
        overlay = _overlay(tmp_path, spark.master_url, ray_root, api_base)
        watch.start()
        t0 = time.monotonic()
        submitted = _spark_submit(overlay, spark.master_url, tmp_path, env)
        job_s = time.monotonic() - t0
        (logs / "spark-submit.log").write_text(submitted.stdout + submitted.stderr)
        # The Ray cluster's processes end after the job; give its launchers their cleanup time.
        deadline = time.monotonic() + 90
        while watch.alive() and time.monotonic() < deadline:
            time.sleep(1)
        watch.done.set()
        watch.join(10)
        left = watch.alive()
        app = re.search(r"with app ID (app-[0-9-]+)", submitted.stdout + submitted.stderr)
        master_log = logs / "spark-master.log"
        removed = (lambda: app is not None and f"Removing app {app.group(1)}" in master_log.read_text(errors="replace"))
        app_removed = removed() or (time.sleep(10) or removed())
        record = {"job_s": round(job_s, 1), "launchers": list(watch.launchers.values()),
                  "actors": [chain[:6] for chain in watch.actors.values()], "left": left,
                  "temp_root": sorted(p.name for p in ray_root.iterdir())}
        (logs / "ray-on-spark.json").write_text(json.dumps(record, indent=2))
    finally:
        watch.done.set()
        daemons.stop()
        for line in watch.alive():  # only what this test's Ray started, by pid
            try:
                psutil.Process(int(line.split()[0])).kill()
            except (psutil.NoSuchProcess, ValueError):
                pass
        shutil.rmtree(ray_root, ignore_errors=True)

    out = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, out[-6000:]
    assert "Ray on Spark: up at" in out and "Ray on Spark: shut down" in out, out[-3000:]

    # Ray on Spark started one head (on the driver) and one worker node, under this test's temp root.
    heads = [c for c in record["launchers"] if "--head" in c]
    workers = [c for c in record["launchers"] if "--head" not in c]
    assert len(heads) == 1 and len(workers) == 1, record["launchers"]
    assert "--num-cpus=1" in workers[0], workers[0]
    # Every LLM actor ran on that worker node, which a Spark executor launched as a task.
    assert watch.actors, "no LLM actor process was seen under this test's Ray nodes"
    for chain in watch.actors.values():
        launcher = next(c for c in chain if "start_ray_node" in c)
        assert "--head" not in launcher, f"an LLM actor ran on the Ray head: {chain[:5]}"
        assert any("CoarseGrainedExecutorBackend" in c for c in chain), f"not below a Spark executor: {chain}"

    # The index was built, through the scripted model.
    run, calls = _one_run(tmp_path / "warehouse")
    assert run["status"] == "ok", run
    for stage in ("extract", "reports"):
        assert calls[stage]["calls"] > 0 and calls[stage]["errors"] == 0, calls[stage]
    assert len(served.read_text().split()) >= calls["extract"]["calls"] + calls["reports"]["calls"]
    assert (tmp_path / "index").is_dir() and any((tmp_path / "index").iterdir())

    # Shut down: no process of that Ray cluster left, its temp folder removed, the app ended.
    assert not left, left
    assert not [name for name in record["temp_root"] if not name.endswith(".lock")], record["temp_root"]
    assert app_removed, f"the Spark master did not remove the application {app and app.group(1)}"
    print(f"Ray on Spark index job: {job_s:.0f} s; {len(watch.actors)} LLM actor process(es) on the Spark-task node")
