"""What the job scripts do before corpusgraph's command runs: Ray on Spark, and on Databricks the
runtime's own Spark session.

    jobs/index.py [--ray-workers N] [--ray-cpus-per-worker C] [corpusgraph index options ...]

--ray-workers N (0, the default: none) is `--set ray.address=spark --set ray.spark_workers=N`
(and --ray-cpus-per-worker C is `--set ray.spark_cpus_per_worker=C`), given after the command's
own options so that they win: Ray starts inside this Spark application with
ray.util.spark.setup_ray_cluster, the head on the driver and N Ray worker nodes as Spark tasks on
the executors, when the first stage needs Ray, and is shut down when the command ends
(corpusgraph/ray_spark.py). Setting ray.address: spark in the config file does the same without
the option. index and update open that scope themselves (cli._run_pipeline); for the other
commands (estimate --calibrate) this script opens it. The Databricks bundle
(conf/databricks/databricks.yml) passes --ray-workers; under a plain spark-submit Ray may also
run apart (conf/cluster.yaml, ray.address host:port).

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


def ray_sets(opts: argparse.Namespace) -> list[str]:
    """The job options as the config settings they stand for (--set pairs)."""
    if opts.ray_workers < 0:
        raise SystemExit("--ray-workers takes a number of Ray worker nodes >= 0")
    sets = []
    if opts.ray_workers > 0:
        sets += ["ray.address=spark", f"ray.spark_workers={opts.ray_workers}"]
    if opts.ray_cpus_per_worker is not None:
        sets.append(f"ray.spark_cpus_per_worker={opts.ray_cpus_per_worker}")
    return [a for s in sets for a in ("--set", s)]


# The commands that open the Ray-on-Spark scope themselves (cli._run_pipeline).
OPENS_ITS_OWN_SCOPE = {"index", "update"}


def _config_and_spark(command: str, rest: Sequence[str]):
    """The config the command will read, and (for ray.address 'spark') the session it will use,
    made first: setup_ray_cluster needs an active one."""
    from corpusgraph.cli import build_parser
    from corpusgraph.config import load_config
    from corpusgraph.spark import build_spark

    args = build_parser().parse_args([command, *rest])
    overrides = dict(pair.split("=", 1) for pair in args.set)
    cfg = load_config(args.conf, overrides, env=os.environ)
    if cfg.ray.address != "spark":
        return cfg, None
    return cfg, build_spark(cfg.spark, set_master=False, storage=cfg.storage)


def run(command: str, argv: Sequence[str]) -> int:
    from corpusgraph.cli import main

    opts, rest = parser().parse_known_args(list(argv))
    argv = [command, "--submitted", *rest, *ray_sets(opts)]
    if on_databricks():
        _use_runtime_session()
    if command in OPENS_ITS_OWN_SCOPE:
        return main(argv)
    from corpusgraph.ray_spark import ray_on_spark

    cfg, spark = _config_and_spark(command, argv[1:])
    if spark is None:
        return main(argv)
    with ray_on_spark(cfg.ray, spark):
        return main(argv)
