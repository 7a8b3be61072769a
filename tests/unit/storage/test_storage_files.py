"""storage's JVM-free file helpers on plain folders (the same calls reach S3 in
tests/distributed/test_object_store_query.py): open_delta, list_files, upload, download."""

from __future__ import annotations

import pyarrow as pa
import pytest

from corpusgraph.config import S3Section
from corpusgraph.storage.locations import download, list_files, open_delta, upload

pytestmark = pytest.mark.unit


def test_upload_download_and_list_on_a_folder(tmp_path):
    src = tmp_path / "a.bin"
    src.write_bytes(b"\x00vectors\xff")
    upload(src, str(tmp_path / "remote" / "deep" / "a.bin"))
    upload(src, str(tmp_path / "remote" / "deep" / "b.bin"))
    assert list_files(str(tmp_path / "remote" / "deep")) == ["a.bin", "b.bin"]
    assert list_files(str(tmp_path / "remote")) == []  # files directly under it only
    assert list_files(str(tmp_path / "absent")) == []
    download(str(tmp_path / "remote" / "deep" / "b.bin"), tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
    with pytest.raises(FileNotFoundError):
        download(str(tmp_path / "remote" / "nothing.bin"), tmp_path / "x.bin")


def test_open_delta_reads_a_local_table_whatever_the_s3_settings(tmp_path):
    from deltalake import write_deltalake
    from deltalake.exceptions import TableNotFoundError

    write_deltalake(str(tmp_path / "t"), pa.table({"x": [1, 2, 3]}))
    for s3 in (None, S3Section(), S3Section(endpoint="http://127.0.0.1:1", path_style=True)):
        assert open_delta(str(tmp_path / "t"), s3).to_pyarrow_table().num_rows == 3
    assert open_delta(str(tmp_path / "t"), version=0).version() == 0
    with pytest.raises(TableNotFoundError):
        open_delta(str(tmp_path / "missing"))
