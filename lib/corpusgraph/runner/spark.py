"""The one place a Spark session is built (jobs and the CLI call it; transforms never do)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from corpusgraph.config import SparkSection, StorageSection

__all__ = ["build_spark", "jar_paths", "use_active_session"]

# Set by use_active_session(): build_spark then hands out the process's active session.
_ACTIVE_SESSION_ONLY = False


def use_active_session() -> None:
    """Make build_spark return the session the process already has instead of building one.

    On Databricks the job's runtime made that session, with Delta built in and no jars/ folder;
    the job scripts (jobs/ray_on_spark.py) call this there before the command runs."""
    global _ACTIVE_SESSION_ONLY
    _ACTIVE_SESSION_ONLY = True


def jar_paths(jars_dir: str | Path, *, s3a: bool = False) -> list[str]:
    """The jars fetched by `make setup` (Delta; hadoop-aws and the AWS SDK for s3a://); a clear
    error when Delta's, or with s3a=True the s3a connector's, are missing."""
    folder = Path(jars_dir).resolve()
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    names = [Path(j).name for j in jars]
    needed = [("delta-spark", "Delta")] + ([("hadoop-aws", "s3a connector (hadoop-aws)")] if s3a else [])
    for prefix, what in needed:
        if not any(prefix in name for name in names):
            raise FileNotFoundError(
                f"no {what} jar in {folder}: run `make setup` (it fetches them from Maven Central once)"
            )
    return jars


def _uses_s3a(section: SparkSection) -> bool:
    return any(key.startswith(("spark.hadoop.fs.s3a.", "spark.hadoop.fs.s3.")) for key in section.extra)


def build_spark(section: SparkSection, *, set_master: bool = True, local_dirs: str | None = None,
                storage: StorageSection | None = None):
    """A SparkSession with Delta enabled through spark.jars: no dependency resolution at start.

    set_master=False under spark-submit, where the master comes from the command line.
    storage: where a run keeps its files; when any of them is on S3, Hadoop's s3a connector is
    pointed at the store of storage.s3 (spark.extra still wins over what that derives).
    """
    from pyspark.sql import SparkSession

    from corpusgraph.storage.locations import spark_hadoop_conf, uses_s3

    if _ACTIVE_SESSION_ONLY:
        return SparkSession.builder.getOrCreate()

    derived = spark_hadoop_conf(storage.s3) if storage is not None and uses_s3(storage) else {}
    builder = (
        SparkSession.builder.appName(section.app_name)
        .config("spark.jars", ",".join(jar_paths(section.jars_dir, s3a=bool(derived) or _uses_s3a(section))))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.shuffle.partitions", str(section.shuffle_partitions))
        # One machine: the UI costs start-up time and a port, and nobody looks at it in batch runs.
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", section.driver_memory)
        # Arrow makes toPandas/mapInArrow hand-offs columnar instead of row-by-row pickling.
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if set_master:
        builder = builder.master(section.master)
    # Python workers must run the interpreter that has corpusgraph installed, not whatever
    # `python3` is first on PATH. pyspark takes the worker interpreter from this variable when
    # the context starts (the spark.pyspark.python conf is not consulted on the Python side).
    # Under spark-submit, `--conf spark.pyspark.python=...` sets it before this runs and wins;
    # without it, executors get this driver's own interpreter path, right wherever every node
    # has the same environment at the same path (one venv on a shared or identical filesystem).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if local_dirs:
        builder = builder.config("spark.local.dir", local_dirs)
    for key, value in {**derived, **section.extra}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
