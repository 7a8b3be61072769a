"""storage/locations.py: one location and one set of S3 settings, told to Spark, delta-rs and pyarrow."""

from __future__ import annotations

import os

import pytest
from pyarrow import fs

from corpusgraph.config import S3Section
from corpusgraph.storage.locations import (Location, arrow_filesystem, delta_storage_options, delta_uri,
                                           parse, spark_hadoop_conf)

LOCAL_S3 = S3Section(endpoint="http://127.0.0.1:9000", access_key="k", secret_key="s", path_style=True)


@pytest.mark.parametrize("location, expected", [
    ("work/warehouse", Location("", "", "work/warehouse")),
    ("/abs/warehouse", Location("", "", "/abs/warehouse")),
    ("s3a://bucket/run/warehouse", Location("s3a", "bucket", "run/warehouse")),
    ("s3://bucket/w/", Location("s3", "bucket", "w/")),
    ("gs://bucket/w", Location("gs", "bucket", "w")),
    ("abfss://data@acct.dfs.core.windows.net/w", Location("abfss", "data@acct.dfs.core.windows.net", "w")),
    ("dbfs:/mnt/corpus/w", Location("dbfs", "", "/mnt/corpus/w")),
    ("file:///tmp/w", Location("file", "", "/tmp/w")),
])
def test_parse(location, expected):
    assert parse(location) == expected


@pytest.mark.parametrize("location", ["hdfs://nn/w", "s3a:///no-bucket"])
def test_parse_refuses(location):
    with pytest.raises(ValueError):
        parse(location)


def test_spark_conf_for_a_local_server():
    assert spark_hadoop_conf(LOCAL_S3) == {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": "k",
        "spark.hadoop.fs.s3a.secret.key": "s",
    }


def test_spark_conf_for_aws_leaves_credentials_to_the_default_chain():
    conf = spark_hadoop_conf(S3Section(region="eu-west-1"))
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert not any(k.endswith(("endpoint", "access.key", "secret.key", "credentials.provider")) for k in conf)


def test_delta_storage_options():
    assert delta_storage_options("s3a://b/w/documents", LOCAL_S3) == {
        "AWS_REGION": "us-east-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
    }
    assert delta_storage_options("work/warehouse/documents", LOCAL_S3) == {}
    assert delta_storage_options("gs://b/w/documents") == {}


@pytest.mark.parametrize("location, expected", [
    ("s3a://b/w/documents", "s3://b/w/documents"),
    ("s3://b/w/documents", "s3://b/w/documents"),
    ("dbfs:/mnt/w/documents", "/dbfs/mnt/w/documents"),
    ("file:///tmp/w/documents", "/tmp/w/documents"),
    ("gs://b/w/documents", "gs://b/w/documents"),
    ("work/w/documents", "work/w/documents"),
])
def test_delta_uri(location, expected):
    assert delta_uri(location) == expected


def test_arrow_filesystem_s3_points_at_the_endpoint():
    s3, path = arrow_filesystem("s3a://bucket/w/documents/", LOCAL_S3)
    assert isinstance(s3, fs.S3FileSystem)
    assert path == "bucket/w/documents"
    assert s3.region == "us-east-1"
    # The endpoint is not a public attribute; the filesystem's pickled arguments carry it.
    assert "127.0.0.1:9000" in repr(s3.__reduce__())


def test_arrow_filesystem_local_and_dbfs():
    local, path = arrow_filesystem("work/w")
    # pyarrow's local filesystem takes absolute paths: a relative folder is made absolute here.
    assert isinstance(local, fs.LocalFileSystem) and path == os.path.join(os.getcwd(), "work", "w")
    _, path = arrow_filesystem("dbfs:/mnt/w")
    assert path == "/dbfs/mnt/w"
