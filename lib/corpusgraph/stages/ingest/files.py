"""ingest: files -> documents and quarantine.

The pure part (`parse_file`) turns one file's bytes into document records or quarantine
records, never raising for bad input. The Spark part maps it over `binaryFile` rows with
mapInArrow and collapses duplicate texts by content hash. Parquet inputs are read by Spark's own
Parquet reader instead (stages/ingest/parquet.py: row groups in parallel, no whole-file bytes).

A JSON-lines or Parquet file is a container of documents: `ingest.max_bytes` applies to each
record's text (an oversized record is quarantined as `file#id`), and a JSON-lines file as a
whole only has to fit `ingest.max_file_bytes` (one task reads it). `.jsonl.gz` is decompressed
as a stream, line by line.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import zlib
from pathlib import PurePosixPath
from typing import Iterable, Iterator

import pyarrow as pa

from corpusgraph.config import IngestSection
from corpusgraph.tables import spark_struct

__all__ = ["parse_file", "iter_file", "suffix_of", "is_container", "PARSED_SCHEMA", "parse_files", "with_empty_files", "documents_from", "quarantine_from", "content_hash"]

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
SUPPORTED = TEXT_SUFFIXES | JSONL_SUFFIXES | {".parquet"} | {s + ".gz" for s in JSONL_SUFFIXES}
_RECORDS_PER_BATCH = 2000  # records per Arrow batch out of a container file (bounds worker memory)

# One row per parsed record: outcome is "document" or "quarantine".
PARSED_SCHEMA = pa.schema(
    [
        ("outcome", pa.string()),
        ("source_uri", pa.string()),
        ("title", pa.string()),
        ("text", pa.string()),
        ("content_hash", pa.string()),
        ("access_domain", pa.string()),
        ("metadata", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("input_file", pa.string()),  # the file a record came from (Parquet inputs only)
    ]
)


def content_hash(text: str) -> str:
    """The document id: a hash of the text alone, so the same text from two places is one document."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _refuse(uri: str, reason: str, detail: str) -> dict:
    return {"outcome": "quarantine", "source_uri": uri, "reason": reason, "detail": detail[:1000]}


def _looks_binary(data: bytes) -> bool:
    head = data[:8192]
    if b"\x00" in head:
        return True
    control = sum(1 for b in head if b < 9 or 13 < b < 32)
    return len(head) > 0 and control / len(head) > 0.10


def _utf8(value: str) -> bool:
    """Whether `value` can be stored: JSON's \\ud800-style escapes give strings with lone
    surrogates, which no UTF-8 column (Arrow, Delta, Spark) can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _document(uri: str, title: str, text: str, domain: str, metadata: dict) -> dict:
    return {
        "outcome": "document",
        "source_uri": uri,
        "title": title.strip()[:300],
        "text": text,
        "content_hash": content_hash(text),
        "access_domain": domain,
        "metadata": json.dumps(metadata, sort_keys=True, default=str),
    }


def _text_record(uri: str, text: str, section: IngestSection) -> dict:
    if not text.strip():
        return _refuse(uri, "empty", "no text after decoding")
    first = text.strip().splitlines()[0]
    title = first.lstrip("#").strip() or PurePosixPath(uri).stem
    return _document(uri, title, text, section.access_domain, {})


def suffix_of(uri: str) -> str:
    """The format suffix, lower case: '.jsonl.gz' for a compressed JSON-lines file."""
    suffixes = [x.lower() for x in PurePosixPath(uri).suffixes[-2:]]
    if len(suffixes) == 2 and suffixes[1] == ".gz" and suffixes[0] in JSONL_SUFFIXES:
        return suffixes[0] + ".gz"
    return PurePosixPath(uri).suffix.lower()


def is_container(uri: str) -> bool:
    """JSON-lines (plain or gzip): many documents per file, read whole by one task."""
    return suffix_of(uri) in JSONL_SUFFIXES | {s + ".gz" for s in JSONL_SUFFIXES}


def _from_mapping(uri: str, obj: object, section: IngestSection) -> dict:
    if not isinstance(obj, dict):
        return _refuse(uri, "bad_record", f"expected a JSON object, got {type(obj).__name__}")
    text = obj.get(section.text_field)
    if not isinstance(text, str) or not text.strip():
        return _refuse(uri, "empty", f"field {section.text_field!r} is missing or empty")
    if not _utf8(text):
        return _refuse(uri, "not_utf8", f"field {section.text_field!r} holds a lone surrogate (an escape like \\ud800)")
    size = len(text.encode("utf-8"))
    if size > section.max_bytes:
        return _refuse(uri, "oversized", f"record text of {size} bytes > ingest.max_bytes={section.max_bytes}")
    title = obj.get(section.title_field) or (text.strip().splitlines()[0][:120])
    domain = obj.get("domain") or obj.get("access_domain") or section.access_domain
    skip = {section.text_field, section.title_field, "domain", "access_domain"}
    metadata = {k: v for k, v in obj.items() if k not in skip}
    if not _utf8(str(domain)):
        return _refuse(uri, "bad_record", "the access domain holds a lone surrogate")
    try:
        return _document(uri, str(title).encode("utf-8", "replace").decode("utf-8"), text, str(domain), metadata)
    except (ValueError, RecursionError) as exc:  # metadata nested too deep to write back as JSON
        return _refuse(uri, "bad_record", f"metadata: {type(exc).__name__}: {str(exc)[:200]}")


def _record_uri(uri: str, obj: object, section: IngestSection, position: int) -> str:
    rid = obj.get(section.id_field) if isinstance(obj, dict) else None
    if isinstance(rid, (dict, list)) or rid in (None, "") or not _utf8(str(rid)) or len(str(rid)) > 200:
        return f"{uri}#L{position}"  # an id that cannot name the record: its position does
    return f"{uri}#{rid}"


def parse_file(uri: str, data: bytes | None, size: int, section: IngestSection) -> list[dict]:
    """All records one input yields: documents, or quarantine rows that say why not."""
    return list(iter_file(uri, data, size, section))


def iter_file(uri: str, data: bytes | None, size: int, section: IngestSection) -> Iterator[dict]:
    """parse_file as a stream of records (a container file may hold millions)."""
    suffix = suffix_of(uri)
    if suffix not in SUPPORTED:
        yield _refuse(uri, "unsupported_format", f"suffix {suffix or '(none)'}; supported: {sorted(SUPPORTED)}")
        return
    limit, name = (section.max_file_bytes, "max_file_bytes") if is_container(uri) else (section.max_bytes, "max_bytes")
    if size > limit:
        hint = "; split it, or use Parquet (read by row group)" if is_container(uri) else ""
        yield _refuse(uri, "oversized", f"{size} bytes > ingest.{name}={limit}{hint}")
        return
    if not data:
        yield _refuse(uri, "empty", "zero bytes")
        return
    if suffix == ".parquet":
        yield from _parse_parquet(uri, data, section)
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


def parsed_batches(records: Iterable[dict]) -> Iterator[pa.RecordBatch]:
    """PARSED_SCHEMA batches of at most _RECORDS_PER_BATCH records, in order."""
    chunk: list[dict] = []
    for rec in records:
        chunk.append(rec)
        if len(chunk) >= _RECORDS_PER_BATCH:
            yield pa.RecordBatch.from_pylist(chunk, schema=PARSED_SCHEMA)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=PARSED_SCHEMA)


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
    container = F.lit(False)
    for suffix in sorted(JSONL_SUFFIXES | {x + ".gz" for x in JSONL_SUFFIXES}):
        container = container | lower.endswith(suffix)
    fits = (container & (F.col("length") <= section.max_file_bytes)) | (
        ~container & (F.col("length") <= section.max_bytes))
    small = files.where(fits).select("path", "length", "content")
    big = files.where(~fits).select("path", "length", F.lit(None).cast("binary").alias("content"))
    return small.unionByName(big).mapInArrow(lambda it: _parse_batches(it, section), spark_struct(PARSED_SCHEMA))


def with_empty_files(files, listed: list[str]):
    """Spark's file scan skips zero-byte files; add them back (from the listing) so that they
    reach quarantine as `empty` instead of vanishing. listed: paths as DataFrame.inputFiles()."""
    from pyspark.sql import functions as F

    spark = files.sparkSession
    # inputFiles() says file:///x where the scan says file:/x; compare on one form.
    norm = [p.replace("file:///", "file:/", 1) for p in listed]
    all_files = spark.createDataFrame([(p,) for p in norm], "path string")
    empties = all_files.join(files.select("path"), "path", "left_anti")
    return files.select("path", "length", "content").unionByName(
        empties.select("path", F.lit(0).cast("long").alias("length"), F.lit(None).cast("binary").alias("content"))
    )


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
        F.count("*").alias("copies"),
    ).select(
        F.col("content_hash").alias("doc_id"),
        "source_uri",
        "title",
        "text",
        "content_hash",
        "access_domain",
        "metadata",
        F.current_timestamp().alias("ingested_at"),
        F.lit(False).alias("deleted"),
        "copies",
    )


def quarantine_from(parsed):
    from pyspark.sql import functions as F

    return parsed.where(F.col("outcome") == "quarantine").select(
        "source_uri", "reason", "detail", F.current_timestamp().alias("seen_at")
    )
