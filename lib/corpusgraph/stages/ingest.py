"""ingest: files -> documents and quarantine.

The pure part (`parse_file`) turns one file's bytes into document records or quarantine
records, never raising for bad input. The Spark part maps it over `binaryFile` rows with
mapInArrow and collapses duplicate texts by content hash.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import PurePosixPath
from typing import Iterator

import pyarrow as pa

from ..config import IngestSection

__all__ = ["parse_file", "PARSED_SCHEMA", "parse_files", "with_empty_files", "documents_from", "quarantine_from", "content_hash"]

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text"}
SUPPORTED = TEXT_SUFFIXES | {".jsonl", ".ndjson", ".parquet"}

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


def _from_mapping(uri: str, obj: object, section: IngestSection) -> dict:
    if not isinstance(obj, dict):
        return _refuse(uri, "bad_record", f"expected a JSON object, got {type(obj).__name__}")
    text = obj.get(section.text_field)
    if not isinstance(text, str) or not text.strip():
        return _refuse(uri, "empty", f"field {section.text_field!r} is missing or empty")
    title = obj.get(section.title_field) or (text.strip().splitlines()[0][:120])
    domain = obj.get("domain") or obj.get("access_domain") or section.access_domain
    skip = {section.text_field, section.title_field, "domain", "access_domain"}
    metadata = {k: v for k, v in obj.items() if k not in skip}
    return _document(uri, str(title), text, str(domain), metadata)


def _record_uri(uri: str, obj: object, section: IngestSection, position: int) -> str:
    rid = obj.get(section.id_field) if isinstance(obj, dict) else None
    return f"{uri}#{rid}" if rid not in (None, "") else f"{uri}#L{position}"


def parse_file(uri: str, data: bytes | None, size: int, section: IngestSection) -> list[dict]:
    """All records one input yields: documents, or quarantine rows that say why not."""
    suffix = PurePosixPath(uri).suffix.lower()
    if suffix not in SUPPORTED:
        return [_refuse(uri, "unsupported_format", f"suffix {suffix or '(none)'}; supported: {sorted(SUPPORTED)}")]
    if size > section.max_bytes:
        return [_refuse(uri, "oversized", f"{size} bytes > ingest.max_bytes={section.max_bytes}")]
    if not data:
        return [_refuse(uri, "empty", "zero bytes")]
    if suffix == ".parquet":
        return _parse_parquet(uri, data, section)
    if _looks_binary(data):
        return [_refuse(uri, "binary", "NUL or control bytes in the first 8 KiB")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [_refuse(uri, "not_utf8", str(exc))]
    text = text.lstrip("\ufeff")
    if suffix in TEXT_SUFFIXES:
        return [_text_record(uri, text, section)]
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            out.append(_refuse(f"{uri}#L{n}", "bad_json", str(exc)))
            continue
        out.append(_from_mapping(_record_uri(uri, obj, section, n), obj, section))
    return out or [_refuse(uri, "empty", "no records")]


def _parse_parquet(uri: str, data: bytes, section: IngestSection) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
    except Exception as exc:  # any reader failure is a property of the input
        return [_refuse(uri, "bad_parquet", f"{type(exc).__name__}: {exc}")]
    out = [_from_mapping(_record_uri(uri, row, section, n), row, section) for n, row in enumerate(rows, start=1)]
    return out or [_refuse(uri, "empty", "no rows")]


def _parse_batches(batches: Iterator[pa.RecordBatch], section: IngestSection) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        records: list[dict] = []
        cols = batch.to_pydict()
        for uri, size, data in zip(cols["path"], cols["length"], cols["content"]):
            records.extend(parse_file(uri, data, size, section))
        if records:
            yield pa.RecordBatch.from_pylist(records, schema=PARSED_SCHEMA)


def parse_files(files, section: IngestSection):
    """files: DataFrame(path, length, content) as read by Spark's binaryFile source.

    The binaryFile source pushes the length filter down, so oversized files are refused from
    their length alone and their content is never read.
    """
    from pyspark.sql import functions as F

    small = files.where(F.col("length") <= section.max_bytes).select("path", "length", "content")
    big = files.where(F.col("length") > section.max_bytes).select(
        "path", "length", F.lit(None).cast("binary").alias("content")
    )
    ddl = ", ".join(f"{f.name} string" for f in PARSED_SCHEMA)
    return small.unionByName(big).mapInArrow(lambda it: _parse_batches(it, section), ddl)


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
