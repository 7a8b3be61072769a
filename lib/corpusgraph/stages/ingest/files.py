"""ingest: files -> documents and quarantine.

The pure part (`parse_file`) turns one file's bytes into document records or quarantine
records, never raising for bad input. The Spark part maps it over `binaryFile` rows with
mapInArrow and collapses duplicate texts by content hash. Parquet and CSV inputs are read by
Spark's own readers instead (stages/ingest/parquet.py, tabular.py: no whole-file bytes). PDF,
Word, PowerPoint, HTML and e-mail files go to the readers of formats.py through the guard's worker
process (guard.py: a time and memory limit per file); text and JSON-lines are read here, inline.

A JSON-lines, Parquet, CSV or mbox file is a container of documents: `ingest.max_bytes` applies
to each record's text (an oversized record is quarantined as `file#id`), and a JSON-lines or
mbox file as a whole only has to fit `ingest.max_file_bytes` (one task reads it); a binary
document file is held to `ingest.max_binary_bytes`. `.jsonl.gz` is decompressed as a stream,
line by line. Markdown files get section spans from their headings.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import PurePosixPath
from typing import Iterable, Iterator

import pyarrow as pa

from corpusgraph.config import IngestSection
from corpusgraph.stages.ingest.formats import BINARY_SUFFIXES, CONTAINER_SUFFIXES
from corpusgraph.stages.ingest.records import PARSED_SCHEMA, _from_mapping, _record_uri, content_hash, parsed_batches
from corpusgraph.stages.ingest.records import document as _document
from corpusgraph.stages.ingest.records import refuse as _refuse
from corpusgraph.stages.ingest.records import scan_form
from corpusgraph.stages.ingest.spans import heading_spans
from corpusgraph.tables import spark_struct

__all__ = ["parse_file", "iter_file", "suffix_of", "is_container", "PARSED_SCHEMA", "parse_files", "with_empty_files", "documents_from", "quarantine_from", "content_hash"]

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text"}
MARKDOWN_SUFFIXES = {".md", ".markdown"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
CSV_SUFFIXES = {".csv", ".tsv"}
SUPPORTED = (TEXT_SUFFIXES | JSONL_SUFFIXES | {".parquet"} | {s + ".gz" for s in JSONL_SUFFIXES} | CSV_SUFFIXES
             | BINARY_SUFFIXES)


def _looks_binary(data: bytes) -> bool:
    head = data[:8192]
    if b"\x00" in head:
        return True
    control = sum(1 for b in head if b < 9 or 13 < b < 32)
    return len(head) > 0 and control / len(head) > 0.10


def _text_record(uri: str, text: str, section: IngestSection) -> dict:
    if not text.strip():
        return _refuse(uri, "empty", "no text after decoding")
    first = text.strip().splitlines()[0]
    title = first.lstrip("#").strip() or PurePosixPath(uri).stem
    spans = heading_spans(text) if suffix_of(uri) in MARKDOWN_SUFFIXES else None
    return _document(uri, title, text, section.access_domain, {}, spans)


def suffix_of(uri: str) -> str:
    """The format suffix, lower case: '.jsonl.gz' for a compressed JSON-lines file."""
    suffixes = [x.lower() for x in PurePosixPath(uri).suffixes[-2:]]
    if len(suffixes) == 2 and suffixes[1] == ".gz" and suffixes[0] in JSONL_SUFFIXES:
        return suffixes[0] + ".gz"
    return PurePosixPath(uri).suffix.lower()


def is_container(uri: str) -> bool:
    """JSON-lines (plain or gzip) and mailboxes: many documents per file, read whole by one task."""
    return suffix_of(uri) in JSONL_SUFFIXES | {s + ".gz" for s in JSONL_SUFFIXES} | CONTAINER_SUFFIXES


def size_limit(uri: str, section: IngestSection) -> tuple[int, str]:
    """(the largest size of this file, the setting that says so)."""
    if is_container(uri):
        return section.max_file_bytes, "max_file_bytes"
    if suffix_of(uri) in BINARY_SUFFIXES:
        return section.max_binary_bytes, "max_binary_bytes"
    return section.max_bytes, "max_bytes"


def parse_file(uri: str, data: bytes | None, size: int, section: IngestSection) -> list[dict]:
    """All records one input yields: documents, or quarantine rows that say why not."""
    return list(iter_file(uri, data, size, section))


def iter_file(uri: str, data: bytes | None, size: int, section: IngestSection) -> Iterator[dict]:
    """parse_file as a stream of records (a container file may hold millions)."""
    suffix = suffix_of(uri)
    if suffix not in SUPPORTED:
        yield _refuse(uri, "unsupported_format", f"suffix {suffix or '(none)'}; supported: {sorted(SUPPORTED)}")
        return
    limit, name = size_limit(uri, section)
    if size > limit:
        hint = "; split it, or use Parquet (read by row group)" if is_container(uri) else ""
        yield _refuse(uri, "oversized", f"{size} bytes > ingest.{name}={limit}{hint}")
        return
    if not data:
        yield _refuse(uri, "empty", "zero bytes")
        return
    if suffix in BINARY_SUFFIXES:
        yield from _binary_records(uri, data, section)
        return
    if suffix == ".parquet":
        yield from _parse_parquet(uri, data, section)
        return
    if suffix in CSV_SUFFIXES:
        from corpusgraph.stages.ingest.tabular import csv_bytes_records

        yield from csv_bytes_records(uri, data, section)
        return
    if suffix.endswith(".gz"):
        yield from _jsonl_records(uri, gzip.GzipFile(fileobj=io.BytesIO(data)), section, compressed=True)
        return
    if _looks_binary(data):
        yield _refuse(uri, "binary", "NUL or control bytes in the first 8 KiB")
        return
    if suffix in TEXT_SUFFIXES:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield _refuse(uri, "not_utf8", str(exc))
            return
        yield _text_record(uri, text.lstrip("\ufeff"), section)
        return
    yield from _jsonl_records(uri, io.BytesIO(data), section, compressed=False)


def _binary_records(uri: str, data: bytes, section: IngestSection) -> list[dict]:
    """PDF, Word, PowerPoint, HTML and e-mail files: through the guard's worker process (a time and
    memory limit per file) unless ingest.isolate_parsers is off."""
    if not section.isolate_parsers:
        from corpusgraph.stages.ingest.formats import parse

        return parse(uri, data, section)
    from corpusgraph.stages.ingest.guard import guard_for

    status, value = guard_for(section.parse_memory_mb).run(uri, data, section, section.parse_timeout_s)
    return value if status == "ok" else [_refuse(uri, status, str(value))]


def _jsonl_records(uri: str, stream: Iterable[bytes], section: IngestSection, compressed: bool) -> Iterator[dict]:
    """One record per non-blank line; a bad line is quarantined as `file#L<n>` and the rest go on.
    Lines are split on LF only (JSON strings may hold U+2028 and other Unicode line breaks)."""
    any_record = False
    n = 0
    try:
        for n, raw in enumerate(stream, start=1):
            if n == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")
                if compressed and _looks_binary(raw[:8192]):
                    yield _refuse(uri, "binary", "NUL or control bytes in the first decompressed line")
                    return
            if not raw.strip():
                continue
            any_record = True
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                yield _refuse(f"{uri}#L{n}", "not_utf8", str(exc))
                continue
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, 5,000-digit numbers, deep nesting
                yield _refuse(f"{uri}#L{n}", "bad_json", f"{type(exc).__name__}: {str(exc)[:300]}")
                continue
            yield _from_mapping(_record_uri(uri, obj, section, n), obj, section)
    except (OSError, EOFError, zlib.error) as exc:  # a corrupt or truncated gzip stream
        yield _refuse(uri, "bad_gzip", f"after line {n}: {type(exc).__name__}: {exc}")
        return
    if not any_record:
        yield _refuse(uri, "empty", "no records")


def _parse_parquet(uri: str, data: bytes, section: IngestSection) -> list[dict]:
    """A Parquet file's bytes (parse_file's path; the Spark step reads Parquet with Spark's reader)."""
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
    except Exception as exc:  # any reader failure is a property of the input
        return [_refuse(uri, "bad_parquet", f"{type(exc).__name__}: {exc}")]
    out = [_from_mapping(_record_uri(uri, row, section, n), row, section) for n, row in enumerate(rows, start=1)]
    return out or [_refuse(uri, "empty", "no rows")]


def _file_records(batches: Iterator[pa.RecordBatch], section: IngestSection) -> Iterator[dict]:
    for batch in batches:
        for i in range(batch.num_rows):  # one file's bytes at a time, not the batch's as Python objects
            row = batch.slice(i, 1).to_pylist()[0]
            try:
                yield from iter_file(row["path"], row["content"], row["length"], section)
            except Exception as exc:  # a parser bug must cost one file, not the whole run (fuzz tests hunt them)
                yield _refuse(row["path"], "ingest_error", f"{type(exc).__name__}: {str(exc)[:300]}")


def _parse_batches(batches: Iterator[pa.RecordBatch], section: IngestSection) -> Iterator[pa.RecordBatch]:
    return parsed_batches(_file_records(batches, section))


def parse_files(files, section: IngestSection):
    """files: DataFrame(path, length, content) as read by Spark's binaryFile source.

    The binaryFile source pushes the length filter down, so oversized files are refused from
    their length alone and their content is never read. The limit is ingest.max_bytes for a
    document file and ingest.max_file_bytes for a JSON-lines container (whose records are then
    held to max_bytes each).
    """
    from pyspark.sql import functions as F

    lower = F.lower(F.col("path"))

    def any_suffix(suffixes) -> object:
        hit = F.lit(False)
        for suffix in sorted(suffixes):
            hit = hit | lower.endswith(suffix)
        return hit

    container = any_suffix(JSONL_SUFFIXES | {x + ".gz" for x in JSONL_SUFFIXES} | CONTAINER_SUFFIXES)
    binary = ~container & any_suffix(BINARY_SUFFIXES)
    fits = ((container & (F.col("length") <= section.max_file_bytes))
            | (binary & (F.col("length") <= section.max_binary_bytes))
            | (~container & ~binary & (F.col("length") <= section.max_bytes)))
    small = files.where(fits).select("path", "length", "content")
    big = files.where(~fits).select("path", "length", F.lit(None).cast("binary").alias("content"))
    return small.unionByName(big).mapInArrow(lambda it: _parse_batches(it, section), spark_struct(PARSED_SCHEMA))


def with_empty_files(files, listed: list[str], driver_sees_files: bool = False):
    """Spark's file scan skips zero-byte files; add them back (from the listing) so that they
    reach quarantine as `empty` instead of vanishing. listed: paths as DataFrame.inputFiles().

    driver_sees_files (local Spark, file: paths): the driver's file system is the tasks', so the
    empty files are found by their size on the driver (10,000 stats take milliseconds) instead of
    joining the listing with a second scan of the files' paths (a scan, a shuffle and a join: about
    a second on the 10,000-file benchmark)."""
    from pyspark.sql import functions as F

    spark = files.sparkSession
    norm = [scan_form(p) for p in listed]  # the listing's URIs in the scan's form
    if driver_sees_files:
        empties = _zero_byte(norm)
        if empties is not None:
            frame = files.select("path", "length", "content")
            if not empties:
                return frame
            return frame.unionByName(spark.createDataFrame([(p, 0, None) for p in empties],
                                                           "path string, length long, content binary"))
    all_files = spark.createDataFrame([(p,) for p in norm], "path string")
    empties = all_files.join(files.select("path"), "path", "left_anti")
    return files.select("path", "length", "content").unionByName(
        empties.select("path", F.lit(0).cast("long").alias("length"), F.lit(None).cast("binary").alias("content"))
    )


def _zero_byte(paths: list[str]) -> list[str] | None:
    """The paths (file:/x) of zero-byte files, or None when one cannot be looked at (gone since the
    listing, or not a file: path): the caller then asks Spark."""
    import os

    empties = []
    for p in paths:
        if not p.startswith("file:"):
            return None
        try:
            if os.stat(p[len("file:"):]).st_size == 0:
                empties.append(p)
        except OSError:
            return None
    return empties


def documents_from(parsed):
    """One row per distinct text: duplicates collapse onto the smallest source_uri."""
    from pyspark.sql import functions as F

    docs = parsed.where(F.col("outcome") == "document")
    first = F.min_by  # deterministic representative of each duplicate group
    return docs.groupBy("content_hash").agg(
        F.min("source_uri").alias("source_uri"),
        first("title", "source_uri").alias("title"),
        first("text", "source_uri").alias("text"),
        first("access_domain", "source_uri").alias("access_domain"),
        first("metadata", "source_uri").alias("metadata"),
        first("spans", "source_uri").alias("spans"),
        F.count("*").alias("copies"),
    ).select(
        F.col("content_hash").alias("doc_id"),
        "source_uri",
        "title",
        "text",
        "content_hash",
        "access_domain",
        "metadata",
        "spans",
        F.current_timestamp().alias("ingested_at"),
        F.lit(False).alias("deleted"),
        "copies",
    )


def quarantine_from(parsed):
    from pyspark.sql import functions as F

    return parsed.where(F.col("outcome") == "quarantine").select(
        "source_uri", "reason", "detail", F.current_timestamp().alias("seen_at")
    )
