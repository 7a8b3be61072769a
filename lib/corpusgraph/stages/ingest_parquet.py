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

from ..config import IngestSection
from .ingest import PARSED_SCHEMA, _from_mapping, _record_uri, _refuse, parsed_batches

__all__ = ["probe_footers", "parse_parquet_rows", "PATH_COL", "ROW_COL"]

PATH_COL, ROW_COL = "_cg_input_file", "_cg_row_index"  # added by the reader; never a user column


def _local_form(uri: str) -> str:
    """file:/x and file:///x are one file; the scan and the listing write them differently."""
    return uri.replace("file:///", "file:/", 1)


def probe_footers(paths: Sequence[str]) -> tuple[list[str], list[dict]]:
    """(readable paths with rows, quarantine records for the others), reading footers only."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    good, bad = [], []
    for uri in paths:
        name = _local_form(uri)
        try:
            # pyarrow wants file:///x where Spark writes file:/x.
            fs, path = pafs.FileSystem.from_uri("file:///" + uri[len("file:/"):].lstrip("/")
                                                if uri.startswith("file:/") else uri)
            if fs.get_file_info(path).size == 0:
                bad.append(_refuse(name, "empty", "zero bytes"))
                continue
            with fs.open_input_file(path) as f:
                rows = pq.ParquetFile(f).metadata.num_rows
        except Exception as exc:  # any reader failure is a property of the input
            bad.append(_refuse(name, "bad_parquet", f"{type(exc).__name__}: {exc}"))
            continue
        if rows == 0:
            bad.append(_refuse(name, "empty", "no rows"))
        else:
            good.append(uri)
    return good, bad


def _json_safe(value):
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return value


def _row_records(batches: Iterator[pa.RecordBatch], section: IngestSection) -> Iterator[dict]:
    for batch in batches:
        for row in batch.to_pylist():
            path = _local_form(row.pop(PATH_COL))
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
    ddl = ", ".join(f"{f.name} string" for f in PARSED_SCHEMA)
    return rows.mapInArrow(lambda it: _rows_to_records(it, section), ddl)

