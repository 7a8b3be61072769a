"""Shared fixtures. Test tiers are markers (pyproject.toml); unmarked tests count as unit."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# Fuzzing budgets, as hypothesis profiles: the default tier draws a small sample on every run;
# `make test-fuzz` (pytest -m fuzz --hypothesis-profile fuzz, run by .ci/run) the full budgets:
# 10,000 answers per parser (examples of ten) and 2,000 generated files (a fifth as many examples).
# A test that names max_examples itself keeps it.
settings.register_profile("small", max_examples=30, derandomize=True)  # the same sample every run
settings.register_profile("fuzz", max_examples=1000)
settings.load_profile("small")  # --hypothesis-profile replaces it


def pytest_collection_modifyitems(items):
    tiers = {"spark", "ray", "llm", "e2e", "slow"}  # fuzz tests are unit tests with a bigger budget
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
            # A JVM error's Java stack in the Python traceback: a planner failure seen once in a full
            # run (tests/verbs/test_resolve.py, 2026-12-07) showed only its message without it.
            "spark.sql.pyspark.jvmStacktrace.enabled": "true",
        },
    )
    session = build_spark(section, local_dirs=str(tmp / "local"))
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def scripted_url():
    """The scripted OpenAI-compatible server (tests/support/scripted_server.py), for the whole session."""
    from tests.support import scripted_server

    with scripted_server.running() as url:
        yield url


@pytest.fixture
def warehouse(spark, tmp_path):
    """A fresh, empty set of Delta tables per test."""
    from corpusgraph.storage.warehouse import Warehouse

    wh = Warehouse(spark, str(tmp_path / "warehouse"))
    wh.ensure_all()
    return wh
