"""The warehouse on object storage: `corpusgraph index` writes its Delta tables to s3a://, and
delta-rs and pyarrow read them back.

An S3-compatible server (moto's server mode) runs on localhost (tests/distributed/objectstore.py).
`corpusgraph index --stages ingest,chunk` runs on the sample corpus with `storage.warehouse` an
s3a:// URI and the s3a settings that corpusgraph.storage.locations derives for that server in `spark.extra`:
Spark, through Hadoop's s3a connector (the jars of conf/jars.pom.xml), creates every table and
writes documents and text_units through corpusgraph's Warehouse. Then the JVM-free side reads what
Spark committed: delta-rs with the storage options for the same store, and pyarrow's
S3FileSystem reading the Parquet files that the Delta log names, and `corpusgraph tables` with the
store's settings in its environment. Nothing of the warehouse is on the local disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from corpusgraph.storage.locations import arrow_filesystem, delta_storage_options, delta_uri, parse, spark_hadoop_conf
from corpusgraph.tables import table
from tests.conftest import REPO
from tests.distributed.objectstore import MotoServer

pytestmark = pytest.mark.spark

DOCS = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"
WAREHOUSE = "s3a://corpusgraph/run-1/warehouse"
# The sample corpus, counted by hand: 26 .md and 11 .txt files (one document each) and
# records.jsonl (7 lines, one document each) make 26 + 11 + 7 = 44 documents, all distinct. With
# conf/local.yaml's 600-token units every sample document fits one unit: 44 text units.
N_DOCUMENTS = 44
N_TEXT_UNITS = 44


@pytest.fixture
def s3(tmp_path):
    with MotoServer(tmp_path) as settings:
        yield settings


def _overlay(tmp: Path, s3) -> Path:
    """conf/local.yaml with the warehouse on the server; the index and cache folders stay local."""
    (tmp / "prompts").symlink_to(REPO / "conf" / "prompts", target_is_directory=True)
    data = {
        "base": str(REPO / "conf" / "local.yaml"),
        "spark": {"master": "local[2]", "jars_dir": str(REPO / "jars"), "driver_memory": "1g",
                  "extra": {"spark.databricks.delta.snapshotPartitions": "2",
                            "spark.sql.warehouse.dir": str(tmp / "spark-warehouse"),
                            "spark.driver.extraJavaOptions": f"-Dderby.system.home={tmp}",
                            **spark_hadoop_conf(s3)}},
        "storage": {"warehouse": WAREHOUSE, "index_dir": str(tmp / "index"), "cache_dir": str(tmp / "cache")},
        "ingest": {"inputs": [str(DOCS)]},
    }
    path = tmp / "overlay.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _read_both(name: str, s3) -> tuple[list[dict], list[dict]]:
    """A table's rows as delta-rs reads them and as pyarrow reads the files its log names, by key."""
    from deltalake import DeltaTable

    location = f"{WAREHOUSE}/{name}"
    dt = DeltaTable(delta_uri(location), storage_options=delta_storage_options(location, s3))
    fs, _ = arrow_filesystem(location, s3)
    files = [f"{parse(uri).authority}/{parse(uri).path}" for uri in dt.file_uris()]
    key = lambda row: tuple(row[k] for k in table(name).key)  # noqa: E731
    by_rs = sorted(dt.to_pyarrow_table().to_pylist(), key=key)
    by_arrow = sorted(pq.read_table(files, filesystem=fs, schema=table(name).schema).to_pylist(), key=key)
    return by_rs, by_arrow


def test_index_writes_the_warehouse_to_s3a(tmp_path, s3):
    conf = _overlay(tmp_path, s3)
    run = subprocess.run([sys.executable, "-m", "corpusgraph.cli.main", "index", "--conf", str(conf),
                          "--stages", "ingest,chunk"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    assert not (tmp_path / "s3a:").exists()  # no URI taken for a relative folder

    documents, documents_arrow = _read_both("documents", s3)
    assert documents == documents_arrow
    assert len(documents) == N_DOCUMENTS
    assert {Path(d["source_uri"]).name.split("#")[0] for d in documents} >= {p.name for p in DOCS.iterdir()} - {
        "records.jsonl"}

    units, units_arrow = _read_both("text_units", s3)
    assert units == units_arrow
    assert len(units) == N_TEXT_UNITS
    assert {u["doc_id"] for u in units} == {d["doc_id"] for d in documents}

    runs, _ = _read_both("runs", s3)
    assert [(r["kind"], r["status"]) for r in runs] == [("index", "ok")]

    # The JVM-free command line, as the service would: delta-rs takes the s3a:// URI as it is and
    # the store's settings from the environment (AWS_ENDPOINT_URL, keys), the way a node gets them.
    env = {**os.environ, **delta_storage_options(WAREHOUSE, s3)}
    tables = subprocess.run([sys.executable, "-m", "corpusgraph.cli.main", "tables", "--conf", str(conf)], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert tables.returncode == 0, tables.stderr[-3000:]
    counts = {line.split()[0]: line.split()[1] for line in tables.stdout.splitlines() if "rows" in line}
    assert (counts["documents"], counts["text_units"], counts["runs"]) == (str(N_DOCUMENTS), str(N_TEXT_UNITS), "1")
