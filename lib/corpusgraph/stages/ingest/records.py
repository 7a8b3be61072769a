"""The record shapes every ingest reader returns, and the Arrow schema Spark gets them in.

A reader turns one input into records: a document (title, text, metadata, spans) or a refusal
(reason, detail) that goes to quarantine. Spans say where the pages, sections, slides or messages
of a document's text are, so chunking can keep to them and citations can name them.
"""

from __future__ import annotations

import hashlib
import json
import re
from urllib.parse import unquote
from typing import Iterable, Iterator

import pyarrow as pa

from corpusgraph.config import IngestSection
from corpusgraph.tables import table

__all__ = ["PARSED_SCHEMA", "SPAN", "content_hash", "refuse", "document", "utf8_ok", "parsed_batches", "RECORDS_PER_BATCH",
           "scan_form", "literal_path"]

_GLOB = re.compile(r"([\\{}\[\]*?])")

RECORDS_PER_BATCH = 2000  # records per Arrow batch out of a container file (bounds worker memory)

# kind: page (PDF, label "1".."n"), section (heading text), slide ("N"), message ("message
# '<subject>' of <date>"); spans of one kind are sorted by char_start (offsets in the text).
SPAN = table("documents").schema.field("spans").type.value_type

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
        ("input_file", pa.string()),  # the file a record came from (Parquet and CSV inputs)
        ("spans", pa.list_(SPAN)),  # null for plain text and JSON-lines records
    ]
)


def content_hash(text: str) -> str:
    """The document id: a hash of the text alone, so the same text from two places is one document."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def utf8_ok(value: str) -> bool:
    """Whether `value` can be stored: JSON's \\ud800-style escapes give strings with lone
    surrogates, which no UTF-8 column (Arrow, Delta, Spark) can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def scan_form(uri: str) -> str:
    """A file's name as source_uri holds it: the form the binaryFile scan writes in its path column
    (file:/x, decoded). The listing (DataFrame.inputFiles()) and _metadata.file_path write the same
    file as a URI (file:///x, percent-encoded: `sub%20dir/a%20b.txt`), so a file whose name holds a
    space, #, % or [ had two names, and a comparison of the two missed it."""
    return unquote(uri.replace("file:///", "file:/", 1))


def literal_path(path: str) -> str:
    """A decoded path (scan_form) as spark.read must be given it to read that one file: Spark reads
    a path as a glob pattern, so the glob characters of a name are escaped."""
    return _GLOB.sub(r"\\\1", path)


def refuse(uri: str, reason: str, detail: str) -> dict:
    return {"outcome": "quarantine", "source_uri": uri, "reason": reason, "detail": detail[:1000]}


def document(uri: str, title: str, text: str, domain: str, metadata: dict, spans: list[dict] | None = None) -> dict:
    rec = {
        "outcome": "document",
        "source_uri": uri,
        "title": title.strip()[:300],
        "text": text,
        "content_hash": content_hash(text),
        "access_domain": domain,
        "metadata": json.dumps(metadata, sort_keys=True, default=str),
    }
    if spans:
        rec["spans"] = spans
    return rec


def _from_mapping(uri: str, obj: object, section: IngestSection) -> dict:
    if not isinstance(obj, dict):
        return refuse(uri, "bad_record", f"expected a JSON object, got {type(obj).__name__}")
    text = obj.get(section.text_field)
    if not isinstance(text, str) or not text.strip():
        return refuse(uri, "empty", f"field {section.text_field!r} is missing or empty")
    if not utf8_ok(text):
        return refuse(uri, "not_utf8", f"field {section.text_field!r} holds a lone surrogate (an escape like \\ud800)")
    size = len(text.encode("utf-8"))
    if size > section.max_bytes:
        return refuse(uri, "oversized", f"record text of {size} bytes > ingest.max_bytes={section.max_bytes}")
    title = obj.get(section.title_field) or (text.strip().splitlines()[0][:120])
    domain = obj.get("domain") or obj.get("access_domain") or section.access_domain
    skip = {section.text_field, section.title_field, "domain", "access_domain"}
    metadata = {k: v for k, v in obj.items() if k not in skip}
    if not utf8_ok(str(domain)):
        return refuse(uri, "bad_record", "the access domain holds a lone surrogate")
    try:
        return document(uri, str(title).encode("utf-8", "replace").decode("utf-8"), text, str(domain), metadata)
    except (ValueError, RecursionError) as exc:  # metadata nested too deep to write back as JSON
        return refuse(uri, "bad_record", f"metadata: {type(exc).__name__}: {str(exc)[:200]}")


def _record_uri(uri: str, obj: object, section: IngestSection, position: int) -> str:
    rid = obj.get(section.id_field) if isinstance(obj, dict) else None
    if isinstance(rid, (dict, list)) or rid in (None, "") or not utf8_ok(str(rid)) or len(str(rid)) > 200:
        return f"{uri}#L{position}"  # an id that cannot name the record: its position does
    return f"{uri}#{rid}"


def parsed_batches(records: Iterable[dict]) -> Iterator[pa.RecordBatch]:
    """PARSED_SCHEMA batches of at most RECORDS_PER_BATCH records, in order."""
    chunk: list[dict] = []
    for rec in records:
        chunk.append(rec)
        if len(chunk) >= RECORDS_PER_BATCH:
            yield pa.RecordBatch.from_pylist(chunk, schema=PARSED_SCHEMA)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=PARSED_SCHEMA)
