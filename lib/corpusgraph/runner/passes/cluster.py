"""ray.address 'spark': Ray started on the Spark application's own workers for one run.

An index or update run opens a `ray_on_spark(cfg.ray, spark)` scope (cli.main._run_pipeline; the job
scripts under jobs/ for their other commands). Nothing starts when the scope opens: the first
stage that needs Ray (init_ray) calls `address()`, which starts the cluster with
ray.util.spark.setup_ray_cluster -- the head on the driver, with no Ray CPU, and
`ray.spark_workers` Ray worker nodes, each one long-running Spark task on the executors -- and
returns its address to join. A run whose stages never touch Ray pays nothing. When the scope
closes, also on failure, the driver disconnects and the cluster is shut down (its Spark job is
cancelled, which ends the worker nodes; the head is stopped and waited for).

Sizing (RaySection): each Ray worker node holds `spark_cpus_per_worker` Spark cores for the whole
run (a task resource profile; Spark >= 3.4, not local mode), so leave cores for Spark's own
stages; null gives each Ray worker node a whole Spark worker (its cores and GPUs). Ray's temp
folders go under `spark_temp_dir` on the driver and every worker: keep it short, since Ray's unix
socket paths under it must stay under 107 bytes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
import time
from typing import Iterator

from corpusgraph.config import RaySection
from corpusgraph.runner import progress

__all__ = ["SPARK", "address", "ray_on_spark", "setup_kwargs"]

SPARK = "spark"
HEAD_EXIT_WAIT_S = 60  # the head's launcher waits Ray's SIGTERM grace period, then removes its temp dir

_lock = threading.Lock()
_scope: dict | None = None  # the open scope: its Spark session, whether a start was tried, the address once up


@contextlib.contextmanager
def ray_on_spark(section: RaySection, spark) -> Iterator[None]:
    """A scope in which ray.address 'spark' resolves (starting Ray on Spark on first use).
    A no-op for any other address, and inside a scope already open."""
    global _scope
    if section.address != SPARK or _scope is not None:
        yield
        return
    with _lock:
        _scope = {"spark": spark, "address": None, "tried": False}
    try:
        yield
    finally:
        with _lock:
            tried, _scope = _scope["tried"], None
            if tried:
                _shutdown()


def address(section: RaySection) -> str | None:
    """The Ray address to join for this section: the Ray-on-Spark cluster of the open scope
    (started now if it is not yet) when address is 'spark', else section.address itself."""
    if section.address != SPARK:
        return section.address
    with _lock:
        if _scope is None:
            raise RuntimeError(
                "ray.address 'spark' starts Ray on the Spark workers only inside an index or update run "
                "(corpusgraph index/update, or a job script under jobs/); here give a Ray address or null")
        if _scope["address"] is None:
            _scope["tried"] = True
            _scope["address"] = _start(section, _scope["spark"])
        return _scope["address"]


def setup_kwargs(section: RaySection) -> dict:
    """setup_ray_cluster's arguments for this section (a fixed size: min = max worker nodes)."""
    kw: dict = {
        "max_worker_nodes": section.spark_workers,
        "min_worker_nodes": section.spark_workers,
        # The head is the driver's: no CPU, so every task and actor that claims one runs on a worker node.
        "num_cpus_head_node": 0,
        "ray_temp_root_dir": section.spark_temp_dir,
        "head_node_options": {"include_dashboard": False, "disable_usage_stats": None},
        "worker_node_options": {"disable_usage_stats": None},
    }
    if section.spark_cpus_per_worker is not None:
        # Ray on Spark takes CPUs and GPUs of a worker node together, or neither.
        kw["num_cpus_worker_node"] = section.spark_cpus_per_worker
        kw["num_gpus_worker_node"] = 0
    if section.spark_object_store_mb is not None:
        kw["object_store_memory_worker_node"] = section.spark_object_store_mb * 1024 * 1024
    return kw


def _start(section: RaySection, spark) -> str:
    import ray
    from ray.util.spark import setup_ray_cluster

    if importlib.util.find_spec("grpc") is None:
        # Ray on Spark always starts a Ray Client server on the head, and `ray start` refuses
        # that option without the client extra; say so before the head fails 20 s later.
        raise RuntimeError("ray.address 'spark' needs Ray's client extra on the driver: "
                           "pip install 'ray[data,client]==" + ray.__version__ + "' (grpcio)")
    if ray.is_initialized():  # setup_ray_cluster refuses a process already connected to a Ray
        ray.shutdown()
    os.makedirs(section.spark_temp_dir, exist_ok=True)
    t0 = time.perf_counter()
    progress.write(f"[corpusgraph] Ray on Spark: starting {section.spark_workers} Ray worker node(s) "
                   f"on the Spark workers (ray.address: spark)")
    gcs, _client = setup_ray_cluster(**setup_kwargs(section))
    progress.write(f"[corpusgraph] Ray on Spark: up at {gcs} in {time.perf_counter() - t0:.0f} s")
    return gcs


def _shutdown() -> None:
    import ray
    from ray.util.spark import cluster_init, shutdown_ray_cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = cluster_init._active_ray_cluster
    if cluster is None:  # never started, or setup failed and cleaned up after itself
        return
    head = cluster.head_proc
    shutdown_ray_cluster()
    try:
        head.wait(HEAD_EXIT_WAIT_S)
    except Exception:  # noqa: BLE001 - a head that does not exit in time is killed
        head.kill()
    progress.write("[corpusgraph] Ray on Spark: shut down")
