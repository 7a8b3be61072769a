"""The warehouse on object storage: Spark writes Delta tables to s3a://, delta-rs and pyarrow read them.

An S3-compatible server (moto's server mode) runs on localhost (tests/distributed/objectstore.py);
the test session's Spark gets the s3a settings that corpusgraph.storage derives for it, and
corpusgraph's own Warehouse writes through Hadoop's s3a connector (the jars of conf/jars.pom.xml).
What Spark committed is then read back by the JVM-free side, with no Spark involved: delta-rs
with the storage options for the same store, and pyarrow's S3FileSystem reading the Parquet files
the Delta log names.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow.parquet as pq
import pytest

from corpusgraph.delta_io import Warehouse
from corpusgraph.storage import arrow_filesystem, delta_storage_options, delta_uri, parse, spark_hadoop_conf
from corpusgraph.tables import spark_schema, table
from tests.distributed.objectstore import MotoServer

pytestmark = pytest.mark.spark

T0 = datetime(2026, 5, 1, 9, 30, tzinfo=timezone.utc)
DOCS = [
    dict(doc_id="d1", source_uri="s3a://in/a.md", title="A", text="Tallis complained.", content_hash="h1",
         access_domain="operations", metadata="{}", ingested_at=T0, deleted=False),
    dict(doc_id="d2", source_uri="s3a://in/b.txt", title="B", text="Duisburg, week 20.", content_hash="h2",
         access_domain="operations", metadata="{}", ingested_at=T0, deleted=False),
]
# The merge on doc_id below changes d2 (now deleted) and adds d3: three rows, written out by hand.
MERGED = [
    DOCS[0],
    {**DOCS[1], "deleted": True},
    dict(doc_id="d3", source_uri="s3a://in/c.txt", title="C", text="Rotterdam, week 30.", content_hash="h3",
         access_domain="finance", metadata='{"k": 1}', ingested_at=T0, deleted=False),
]


@pytest.fixture
def s3(tmp_path):
    with MotoServer(tmp_path / "moto.log") as settings:
        yield settings


@pytest.fixture
def s3a_spark(spark, s3):
    """The session's Spark pointed at this test's server; the settings are taken back afterwards."""
    conf = {key.removeprefix("spark.hadoop."): value for key, value in spark_hadoop_conf(s3).items()}
    # Each test's server has its own port: a cached S3AFileSystem for the bucket would keep the old one.
    conf["fs.s3a.impl.disable.cache"] = "true"
    for key, value in conf.items():
        spark.conf.set(key, value)
    yield spark
    for key in conf:
        spark.conf.unset(key)


def _frame(spark, rows):
    names = table("documents").schema.names
    return spark.createDataFrame([tuple(r[n] for n in names) for r in rows], spark_schema("documents"))


def test_warehouse_on_s3a_reads_back_through_delta_rs_and_pyarrow(s3a_spark, s3):
    from deltalake import DeltaTable

    wh = Warehouse(s3a_spark, "s3a://corpusgraph/run-1/warehouse")
    assert not wh.local
    wh.ensure_all(["documents"])
    wh.overwrite("documents", _frame(s3a_spark, DOCS))
    wh.merge("documents", _frame(s3a_spark, MERGED[1:]))

    location = wh.path("documents")
    by_id = lambda rows: sorted(rows, key=lambda r: r["doc_id"])  # noqa: E731
    assert by_id(wh.read("documents").toArrow().to_pylist()) == MERGED

    dt = DeltaTable(delta_uri(location), storage_options=delta_storage_options(location, s3))
    assert dt.version() == 2  # create, overwrite, merge: each one commit
    assert by_id(dt.to_pyarrow_table().to_pylist()) == MERGED

    # pyarrow alone: the live Parquet files the log names (the merge left the replaced ones behind).
    fs, _ = arrow_filesystem(location, s3)
    files = [f"{parse(uri).authority}/{parse(uri).path}" for uri in dt.file_uris()]
    assert files and all(fs.get_file_info(f).size > 0 for f in files)
    read = pq.read_table(files, filesystem=fs, schema=table("documents").schema)
    assert by_id(read.to_pylist()) == MERGED
