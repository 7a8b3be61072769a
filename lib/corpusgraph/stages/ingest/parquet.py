"""ingest, Parquet inputs: Spark's own Parquet reader, so a multi-GB file is read by row group in
parallel and never as one binary value.

Each row is one record, parsed by the same rules as a JSON-lines record (ingest._from_mapping:
text, title and id fields, domain, the other columns as metadata, `ingest.max_bytes` per record)
and named `file#<id>`, or `file#L<row>` (1-based) without an id. Before Spark reads them, every
file's footer is checked (`probe_footers`, on the caller's side: a footer is a few KB): a file
that is not Parquet, or has no rows, goes to quarantine with its reason instead of failing the
whole read.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa

from corpusgraph.config import IngestSection
from corpusgraph.stages.ingest.records import PARSED_SCHEMA, _from_mapping, _record_uri, parsed_batches
from corpusgraph.stages.ingest.records import refuse as _refuse
from corpusgraph.stages.ingest.records import scan_form
from corpusgraph.tables import spark_struct

__all__ = ["filesystem", "read_head", "probe_footers", "parse_parquet_rows", "PATH_COL", "ROW_COL"]

PATH_COL, ROW_COL = "_cg_input_file", "_cg_row_index"  # added by the reader; never a user column


def filesystem(uri: str, s3=None):
    """(pyarrow filesystem, path) of a file as Spark's listing names it."""
    import pyarrow.fs as pafs

    from corpusgraph.storage import locations as storage

    # pyarrow wants file:///x where Spark writes file:/x.
    if uri.startswith("file:/"):
        return pafs.FileSystem.from_uri("file:///" + uri[len("file:/"):].lstrip("/"))
    if uri.split("://", 1)[0].lower() in (*storage.S3_SCHEMES, "gs", "abfss"):
        return storage.arrow_filesystem(uri, s3)
    return pafs.FileSystem.from_uri(uri)


def read_head(uri: str, size: int, s3=None) -> bytes:
    """The first `size` bytes of a file (a CSV header; never the whole file)."""
    fs, path = filesystem(uri, s3)
    with fs.open_input_stream(path) as f:
        return f.read(size)


def probe_footers(paths: Sequence[str], s3=None) -> tuple[list[str], list[dict]]:
    """(readable paths with rows, quarantine records for the others), reading footers only.
    s3: how to reach an S3 store (corpusgraph.config.S3Section) for s3a:// and s3:// inputs."""
    import pyarrow.parquet as pq

    good, bad = [], []
    columns: dict[str, tuple[str, str]] = {}  # column (lower case) -> (type, first file with it)
    for uri in paths:
        name = scan_form(uri)
        try:
            fs, path = filesystem(uri, s3)
            if fs.get_file_info(path).size == 0:
                bad.append(_refuse(name, "empty", "zero bytes"))
                continue
            with fs.open_input_file(path) as f:
                footer = pq.ParquetFile(f)
                rows, schema = footer.metadata.num_rows, footer.schema_arrow
        except Exception as exc:  # any reader failure is a property of the input
            bad.append(_refuse(name, "bad_parquet", f"{type(exc).__name__}: {exc}"))
            continue
        if rows == 0:
            bad.append(_refuse(name, "empty", "no rows"))
            continue
        conflict = _schema_conflict(schema, columns)
        if conflict:
            bad.append(_refuse(name, "schema_conflict", conflict))
            continue
        for field in schema:
            columns.setdefault(field.name.lower(), (str(field.type), name))
        good.append(uri)
    return good, bad


def _schema_conflict(schema: pa.Schema, columns: dict[str, tuple[str, str]]) -> str | None:
    """Why Spark could not read this file together with the files accepted before it, or None.

    All accepted files are read as one DataFrame (mergeSchema), and Spark fails the whole read
    when one column has two types, or when names differ only in case; such a file is refused
    on its own instead."""
    seen: set[str] = set()
    for field in schema:
        key = field.name.lower()
        if key in seen or field.name in (PATH_COL, ROW_COL):
            return f"column {field.name!r} appears twice (names are compared without case) or is reserved"
        seen.add(key)
        earlier = columns.get(key)
        if earlier is not None and earlier[0] != str(field.type):
            return (f"column {field.name!r} is {field.type} here but {earlier[0]} in {earlier[1]}, read earlier; "
                    "files read together must agree on column types")
    return None


def _json_safe(value):
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return value


def _row_records(batches: Iterator[pa.RecordBatch], section: IngestSection) -> Iterator[dict]:
    for batch in batches:
        for row in batch.to_pylist():
            path = scan_form(row.pop(PATH_COL))  # _metadata.file_path: a URI
            position = int(row.pop(ROW_COL)) + 1
            obj = {k: _json_safe(v) for k, v in row.items()}
            rec = _from_mapping(_record_uri(path, obj, section, position), obj, section)
            rec["input_file"] = path
            yield rec


def _rows_to_records(batches: Iterator[pa.RecordBatch], section: IngestSection) -> Iterator[pa.RecordBatch]:
    return parsed_batches(_row_records(batches, section))


def parse_parquet_rows(rows, section: IngestSection):
    """rows: a Parquet DataFrame with PATH_COL and ROW_COL added (the step reads it as
    spark.read.parquet(...).select("*", _metadata.file_path, _metadata.row_index)) -> PARSED rows."""
    return rows.mapInArrow(lambda it: _rows_to_records(it, section), spark_struct(PARSED_SCHEMA))

