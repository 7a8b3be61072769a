"""spark.jar_paths: what `make setup` fetched, and a clear error naming what is missing."""

from __future__ import annotations

import pytest

from corpusgraph.runner.spark import jar_paths


def _folder(tmp_path, *names):
    for name in names:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def test_delta_jars_listed_in_order(tmp_path):
    folder = _folder(tmp_path, "delta-storage-4.4.0.jar", "delta-spark_4.2_2.13-4.4.0.jar", "maven.log")
    assert [p.rsplit("/", 1)[1] for p in jar_paths(folder)] == ["delta-spark_4.2_2.13-4.4.0.jar",
                                                                "delta-storage-4.4.0.jar"]


def test_missing_delta_names_make_setup(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Delta jar.*make setup"):
        jar_paths(_folder(tmp_path, "hadoop-aws-3.5.0.jar"))


def test_s3a_needs_hadoop_aws(tmp_path):
    folder = _folder(tmp_path, "delta-spark_4.2_2.13-4.4.0.jar")
    assert len(jar_paths(folder)) == 1
    with pytest.raises(FileNotFoundError, match="s3a connector"):
        jar_paths(folder, s3a=True)
    _folder(tmp_path, "hadoop-aws-3.5.0.jar")
    assert len(jar_paths(folder, s3a=True)) == 2
