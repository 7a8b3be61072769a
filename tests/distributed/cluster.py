"""A standalone Spark cluster and a two-node Ray cluster as separate processes on localhost.

Each daemon runs in the foreground as a child of the test (Spark's Master and Worker through
spark-class, `ray start --block` for each Ray node), so the test stops exactly the processes it
started, by pid; `ray stop` is never used, since it stops every Ray on the machine.

Localhost stands in for a cluster with what a real one also needs: one filesystem path visible
to every node (warehouse, cache and hand-off files), the same Python environment on every node
(Spark executors via spark.pyspark.python, Ray workers via the venv that ran `ray start`), and
ports chosen free rather than defaults another job may hold.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Callable, Sequence

import psutil

VENV_BIN = Path(sys.executable).parent


def spark_home() -> Path:
    """pyspark's install folder is a complete SPARK_HOME (bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_ports(n: int) -> list[int]:
    """n distinct ports that were free a moment ago (all held open together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_open(port: int) -> bool:
    with closing(socket.socket()) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(pred: Callable[[], bool], what: str, limit_s: float, proc: subprocess.Popen | None = None,
               log: Path | None = None) -> None:
    # A guard against a daemon that never comes up; nothing is asserted on how long it took.
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not happen (exit code {proc.poll() if proc else None}):\n{tail}")


class Daemons:
    """Foreground processes started by the test, stopped newest first, descendants included."""

    def __init__(self, logs: Path, env: dict[str, str]):
        self.logs, self.env = logs, env
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, cmd: Sequence[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
        """env: variables added to the shared environment for this daemon alone."""
        log = self.logs / f"{name}.log"
        proc = subprocess.Popen(list(cmd), env={**self.env, **(env or {})}, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))
        return proc, log

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            try:
                family = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                family = []
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes on TERM
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            _, alive = psutil.wait_procs(family, timeout=10)
            for p in alive:  # what TERM left behind, by pid
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            _kill_group(proc)
        self.procs.clear()

    def discard(self, proc: subprocess.Popen) -> None:
        """A daemon that exited on its own: kill what it left in its process group."""
        _kill_group(proc)
        self.procs = [(n, p) for n, p in self.procs if p is not proc]


def _kill_group(proc: subprocess.Popen) -> None:
    # Each daemon was started in its own session, so its process group id is its pid: this
    # reaches children it left behind after it exited (reparented, no longer its descendants).
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class SparkStandalone:
    """A Spark master and one worker (`--cores`, `--memory`) on 127.0.0.1."""

    def __init__(self, daemons: Daemons, work: Path, cores: int = 1, memory: str = "1g"):
        self.daemons, self.work, self.cores, self.memory = daemons, work, cores, memory
        self.port = self.worker_dir = None

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self) -> "SparkStandalone":
        cls = str(spark_home() / "bin" / "spark-class")
        self.port, ui, wport, wui = free_ports(4)
        proc, log = self.daemons.start("spark-master", [
            cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
            "--webui-port", str(ui)])
        wait_until(lambda: port_open(self.port), "Spark master listening", 120, proc, log)
        self.worker_dir = self.work / "spark-worker"
        self.worker_dir.mkdir(parents=True)
        proc, log = self.daemons.start("spark-worker", [
            cls, "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
            "--port", str(wport), "--webui-port", str(wui), "--cores", str(self.cores), "--memory", self.memory,
            "--work-dir", str(self.worker_dir)])
        wait_until(lambda: "Successfully registered with master" in log.read_text(errors="replace"),
                   "Spark worker registered with the master", 120, proc, log)
        return self

    def executor_logs(self) -> list[Path]:
        """stderr of every executor the worker ran (work-dir/<app-id>/<executor-id>/stderr)."""
        return sorted(self.worker_dir.glob("app-*/*/stderr"))


class RayLocalCluster:
    """A Ray head with no CPUs and `workers` worker nodes with `worker_cpus` each: every task and
    actor runs on a worker node, so a run that finishes proves the work crossed processes and
    nodes. node_env(i): variables for worker node i alone (its processes inherit them), e.g. the
    node-local cache folder a real node would have on its own disk."""

    def __init__(self, daemons: Daemons, temp_dir: Path, worker_cpus: int = 2,
                 object_store_bytes: int = 100 * 1024 * 1024, workers: int = 1,
                 node_env: Callable[[int], dict[str, str]] | None = None):
        self.daemons, self.temp_dir = daemons, temp_dir
        self.worker_cpus, self.object_store_bytes = worker_cpus, object_store_bytes
        self.workers, self.node_env = workers, node_env or (lambda i: {})
        self.gcs_port: int | None = None
        self.nodes: list[subprocess.Popen] = []  # the worker nodes' `ray start` processes

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def _node_args(self) -> list[str]:
        om, nm, agent, agent_grpc, rt_agent, metrics = free_ports(6)
        return ["--node-ip-address", "127.0.0.1", "--object-manager-port", str(om), "--node-manager-port", str(nm),
                "--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(agent_grpc),
                "--runtime-env-agent-port", str(rt_agent), "--metrics-export-port", str(metrics),
                "--object-store-memory", str(self.object_store_bytes), "--disable-usage-stats", "--block"]

    def start(self) -> "RayLocalCluster":
        ray = str(VENV_BIN / "ray")
        (self.gcs_port,) = free_ports(1)
        proc, log = self.daemons.start("ray-head", [
            ray, "start", "--head", "--port", str(self.gcs_port),
            "--num-cpus", "0", "--include-dashboard", "false", "--temp-dir", str(self.temp_dir),
            *self._node_args()])
        wait_until(lambda: port_open(self.gcs_port), "Ray head (GCS) listening", 120, proc, log)
        for i in range(self.workers):
            self._start_worker(ray, i)
        return self

    def _start_worker(self, ray: str, i: int) -> None:
        # `ray start` gives a new node 30 s (fixed in Ray) to register with the GCS; on a shared,
        # loaded machine that can pass, so a node that gave up is cleared away and started again.
        for attempt in range(1, 4):
            proc, log = self.daemons.start(f"ray-worker-{i}-{attempt}", [
                ray, "start", "--address", self.address, "--num-cpus", str(self.worker_cpus), *self._node_args()],
                env=self.node_env(i))
            try:
                wait_until(lambda: self.alive_nodes() == i + 2, f"Ray worker node {i} joined the head", 180, proc, log)
                self.nodes.append(proc)
                return
            except RuntimeError:
                if attempt == 3 or proc.poll() is None:
                    raise
                self.daemons.discard(proc)

    def alive_nodes(self) -> int:
        """Nodes the GCS reports alive, asked with `ray status` in a separate process."""
        out = subprocess.run([str(VENV_BIN / "ray"), "status", "--address", self.address], env=self.daemons.env,
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            return 0
        active = out.stdout.split("Active:", 1)[-1].split("Pending:", 1)[0]
        return sum(1 for line in active.splitlines() if line.strip().startswith("1 node_"))


def localhost_cluster_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every daemon and the driver share.

    RAY_AUTH_MODE=disabled: Ray 2.60 turns token auth on for new local clusters when a token
    file exists; on a localhost test cluster every process is ours, and one setting everywhere
    keeps head, worker and driver in agreement. RAY_ADDRESS is dropped so nothing joins a
    cluster by accident.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "SPARK_HOME", "PYSPARK_PYTHON")}
    env.update({
        "RAY_AUTH_MODE": "disabled",
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",  # master and worker daemons need little; keep the machine free
        "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    })
    env.update(extra or {})
    return env


__all__ = ["Daemons", "RayLocalCluster", "SparkStandalone", "free_ports", "localhost_cluster_env",
           "spark_home", "wait_until"]
