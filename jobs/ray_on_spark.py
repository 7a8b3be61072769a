"""What the job scripts do before corpusgraph's command runs: Ray on Spark, and on Databricks the
runtime's own Spark session.

    jobs/index.py [--ray-workers N] [--ray-cpus-per-worker C] [corpusgraph index options ...]

--ray-workers N (0, the default: none) starts a Ray cluster inside this Spark application with
ray.util.spark.setup_ray_cluster: the head on the driver, up to N Ray worker nodes as Spark tasks
on the executors. The command then joins it (ray.address set to its address) and the cluster is
shut down when the command ends. The Databricks bundle (conf/databricks/databricks.yml) passes
it; under a plain spark-submit, Ray usually runs apart (conf/cluster.yaml, ray.address).

On Databricks (DATABRICKS_RUNTIME_VERSION set) the job already has a Spark session with Delta
built in and no jars/ folder: corpusgraph's build_spark, which adds the Delta jars that `make
setup` fetched, is swapped for that session. (That belongs in corpusgraph.spark.build_spark
itself; it is here until build_spark learns it.)
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence


def parser() -> argparse.ArgumentParser:
    """The options a job script takes before corpusgraph's own (the rest go to the command)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--ray-workers", type=int, default=0, metavar="N",
                   help="start Ray on Spark with up to N Ray worker nodes (0: no Ray on Spark)")
    p.add_argument("--ray-cpus-per-worker", type=int, default=None, metavar="C",
                   help="CPUs of each Ray worker node (default: a whole Spark worker's cores)")
    return p


def on_databricks() -> bool:
    return bool(os.environ.get("DATABRICKS_RUNTIME_VERSION"))


def _use_runtime_session() -> None:
    import corpusgraph.spark
    from pyspark.sql import SparkSession

    def runtime_session(section, **_ignored):
        return SparkSession.builder.getOrCreate()

    corpusgraph.spark.build_spark = runtime_session  # the CLI imports it at call time


def _spark_for(command: str, rest: Sequence[str]):
    """The session the command will use, made first: setup_ray_cluster needs an active one."""
    from corpusgraph.cli import build_parser
    from corpusgraph.config import load_config
    from corpusgraph.spark import build_spark

    args = build_parser().parse_args([command, *rest])
    overrides = dict(pair.split("=", 1) for pair in args.set)
    cfg = load_config(args.conf, overrides, env=os.environ)
    return build_spark(cfg.spark, set_master=False, storage=cfg.storage)


def run(command: str, argv: Sequence[str]) -> int:
    from corpusgraph.cli import main

    opts, rest = parser().parse_known_args(list(argv))
    rest = ["--submitted", *rest]
    if on_databricks():
        _use_runtime_session()
    if opts.ray_workers <= 0:
        return main([command, *rest])
    from ray.util.spark import setup_ray_cluster, shutdown_ray_cluster

    _spark_for(command, rest)
    # The head node (this driver) gets no Ray CPU by default: the LLM actors run on the workers,
    # and corpusgraph's driver-side Ray task claims none (ray_runner.py).
    address, _ = setup_ray_cluster(max_worker_nodes=opts.ray_workers, num_cpus_worker_node=opts.ray_cpus_per_worker)
    try:
        return main([command, *rest, "--set", f"ray.address={address}"])
    finally:
        shutdown_ray_cluster()
