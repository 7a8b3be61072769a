"""What the job scripts do before corpusgraph's command runs: Ray on Spark, and on Databricks the
runtime's own Spark session.

    jobs/index.py [--ray-workers N] [--ray-cpus-per-worker C] [corpusgraph index options ...]

--ray-workers N (0, the default: none) is `--set ray.address=spark --set ray.spark_workers=N`
(and --ray-cpus-per-worker C is `--set ray.spark_cpus_per_worker=C`), given after the command's
own options so that they win: Ray starts inside this Spark application with
ray.util.spark.setup_ray_cluster, the head on the driver and N Ray worker nodes as Spark tasks on
the executors, when the first stage needs Ray, and is shut down when the command ends
(corpusgraph/runner/passes/cluster.py). Setting ray.address: spark in the config file does the same without
the option. index and update open that scope themselves (cli.main._run_pipeline); for the other
commands (estimate --calibrate) this script opens it. The Databricks bundle
(conf/databricks/databricks.yml) passes --ray-workers; under a plain spark-submit Ray may also
run apart (conf/cluster.yaml, ray.address host:port).

On Databricks (DATABRICKS_RUNTIME_VERSION set) the job already has a Spark session with Delta
built in and no jars/ folder: corpusgraph.use_active_session() makes build_spark, which would add
the Delta jars that `make setup` fetched, hand out that session instead.
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


# The commands that open the Ray-on-Spark scope themselves (cli.main._run_pipeline).
OPENS_ITS_OWN_SCOPE = {"index", "update"}


def _config_and_spark(command: str, rest: Sequence[str]):
    """The config the command will read, and (for ray.address 'spark') the session it will use,
    made first: setup_ray_cluster needs an active one."""
    from corpusgraph import build_parser, build_spark, load_config

    args = build_parser().parse_args([command, *rest])
    overrides = dict(pair.split("=", 1) for pair in args.set)
    cfg = load_config(args.conf, overrides, env=os.environ)
    if cfg.ray.address != "spark":
        return cfg, None
    return cfg, build_spark(cfg.spark, set_master=False, storage=cfg.storage)


def run(command: str, argv: Sequence[str]) -> int:
    from corpusgraph import main, ray_on_spark, use_active_session

    opts, rest = parser().parse_known_args(list(argv))
    argv = [command, "--submitted", *rest, *ray_sets(opts)]
    if on_databricks():
        use_active_session()
    if command in OPENS_ITS_OWN_SCOPE:
        return main(argv)
    cfg, spark = _config_and_spark(command, argv[1:])
    if spark is None:
        return main(argv)
    with ray_on_spark(cfg.ray, spark):
        return main(argv)
