"""Shared fixtures. Test tiers are markers (pyproject.toml); unmarked tests count as unit."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_collection_modifyitems(items):
    tiers = {"spark", "ray", "llm", "e2e", "slow"}
    for item in items:
        if not any(m.name in tiers for m in item.iter_markers()):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local[2] Spark session with Delta for the whole test run (start-up is ~10 s)."""
    from corpusgraph.config import SparkSection
    from corpusgraph.runner.spark import build_spark

    tmp = tmp_path_factory.mktemp("spark")
    section = SparkSection(
        master="local[2]",  # the 2-core CI machine; more threads only add contention
        app_name="corpusgraph-tests",
        jars_dir=str(REPO / "jars"),  # fetched by `make setup`; never resolved at start-up
        driver_memory="2g",
        shuffle_partitions=2,  # tiny fixtures: 200 default partitions would be 200 empty tasks
        extra={
            "spark.sql.warehouse.dir": str(tmp / "warehouse"),  # keep spark-warehouse/ out of the repo
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={tmp}",  # and derby.log
            "spark.databricks.delta.snapshotPartitions": "2",  # Delta log replay on 2 cores
        },
    )
    session = build_spark(section, local_dirs=str(tmp / "local"))
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def warehouse(spark, tmp_path):
    """A fresh, empty set of Delta tables per test."""
    from corpusgraph.storage.warehouse import Warehouse

    wh = Warehouse(spark, str(tmp_path / "warehouse"))
    wh.ensure_all()
    return wh
