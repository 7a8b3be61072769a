"""The readers of binary and markup formats behind one call: bytes of a file -> records.

`parse(uri, data, section)` picks the reader by suffix (PDF, Word, PowerPoint, HTML, e-mail,
mailbox) and turns everything a reader can say about a bad file into a quarantine record with a
precise reason (README "Input formats" lists them). It runs inside the guard's worker process
(guard.py), so a reader that hangs, eats memory or crashes costs that file only. An unexpected
exception is still a record (`corrupt`, with the exception), never a failed task; MemoryError is
left to the worker, which reports it as `memory_limit`.
"""

from __future__ import annotations

import zipfile
from pathlib import PurePosixPath

from corpusgraph.config import IngestSection
from corpusgraph.stages.ingest.records import document, refuse
from corpusgraph.stages.ingest.spans import clean, heading_spans

__all__ = ["parse", "BINARY_SUFFIXES", "CONTAINER_SUFFIXES", "suffix"]

PDF, DOCX, PPTX = ".pdf", ".docx", ".pptx"
HTML = {".html", ".htm", ".xhtml"}
EMAIL, MBOX = ".eml", ".mbox"
BINARY_SUFFIXES = {PDF, DOCX, PPTX, EMAIL, MBOX} | HTML
CONTAINER_SUFFIXES = {MBOX}  # many documents per file, held to ingest.max_file_bytes
_ATTACHED_TEXT = {".txt", ".md", ".markdown", ".text"}
_MAX_DEPTH = 2  # a message inside a message inside a message is not followed further
_ZIP_MAGIC = b"PK\x03\x04"


def suffix(uri: str) -> str:
    return PurePosixPath(uri.split("#attachment/")[-1]).suffix.lower()


def parse(uri: str, data: bytes, section: IngestSection, depth: int = 0) -> list[dict]:
    """Records of one file of a binary format (documents and quarantine rows)."""
    records = _parse(uri, data, section, depth)
    return records if records is not None else [refuse(uri, "unsupported_format", f"suffix {suffix(uri) or '(none)'}")]


def _parse(uri: str, data: bytes, section: IngestSection, depth: int) -> list[dict] | None:
    kind = suffix(uri)
    if kind not in BINARY_SUFFIXES and not (depth and kind in _ATTACHED_TEXT):
        return None
    if not data:
        return [refuse(uri, "empty", "zero bytes")]
    limit = section.max_file_bytes if kind in CONTAINER_SUFFIXES else section.max_binary_bytes
    if len(data) > limit:
        name = "max_file_bytes" if kind in CONTAINER_SUFFIXES else "max_binary_bytes"
        return [refuse(uri, "oversized", f"{len(data)} bytes > ingest.{name}={limit}")]
    stem = PurePosixPath(uri.split("#attachment/")[-1].split("#")[0]).stem
    try:
        if kind in (EMAIL, MBOX):
            from corpusgraph.stages.ingest import mail

            def child(c_uri: str, c_data: bytes, c_depth: int) -> list[dict] | None:
                if c_depth > _MAX_DEPTH:
                    return None
                return _parse(c_uri, c_data, section, c_depth)

            kw = dict(domain=section.access_domain, strip=section.email_quotes == "strip", max_bytes=section.max_bytes,
                      parse=child, depth=depth)
            return mail.read_mbox(uri, data, **kw) if kind == MBOX else mail.read_message(uri, data, **kw)
        return [_finish(uri, _read(kind, data, stem, section), section)]
    except MemoryError:
        raise
    except _Refusal as exc:
        return [refuse(uri, exc.reason, exc.detail)]
    except Exception as exc:  # noqa: BLE001 - whatever a reader raises is a property of this file
        reason, detail = _explain(kind, data, exc)
        return [refuse(uri, reason, detail)]


class _Refusal(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _read(kind: str, data: bytes, stem: str, section: IngestSection) -> dict:
    if kind == PDF:
        from corpusgraph.stages.ingest.pdf import Refused, read_pdf

        try:
            return read_pdf(data, stem, list(section.pdf_passwords), columns=section.pdf_columns == "auto")
        except Refused as exc:
            raise _Refusal(exc.reason, exc.detail) from None
    if kind in (DOCX, PPTX):
        from corpusgraph.stages.ingest import ooxml

        if data.startswith(ooxml.OLE2_MAGIC):
            raise _Refusal(*ooxml.ole2_kind(data))
        part_limit = section.max_binary_bytes * 20  # compressed XML inflates 5-20x; more is a bomb
        try:
            if kind == DOCX:
                return ooxml.read_docx(data, stem, part_limit, comments=section.docx_comments)
            return ooxml.read_pptx(data, stem, part_limit)
        except ooxml.OversizedPart as exc:
            raise _Refusal("oversized", f"decompressed part too large: {exc}") from None
        except ValueError as exc:
            if str(exc) == "empty":
                raise _Refusal("empty", "no text in the document body") from None
            raise
    if kind in HTML:
        from corpusgraph.stages.ingest.html import Unreadable, read_html

        try:
            return read_html(data, stem, section.html_min_chars)
        except Unreadable as exc:
            raise _Refusal(exc.reason, exc.detail) from None
    return _attached_text(data, stem)


def _attached_text(data: bytes, stem: str) -> dict:
    """A .txt or .md attachment of a message (files of those formats are read by files.py)."""
    try:
        text = clean(data.decode("utf-8").lstrip("\ufeff"))
    except UnicodeDecodeError as exc:
        raise _Refusal("not_utf8", str(exc)) from None
    if not text.strip():
        raise _Refusal("empty", "no text after decoding")
    title = text.strip().splitlines()[0].lstrip("#").strip() or stem
    return {"title": title, "text": text, "metadata": {}, "spans": heading_spans(text)}


def _finish(uri: str, parsed: dict, section: IngestSection) -> dict:
    text = parsed["text"]
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > section.max_bytes:
        return refuse(uri, "oversized", f"extracted text of {size} bytes > ingest.max_bytes={section.max_bytes}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return refuse(uri, "unsupported_encoding", "the extracted text holds lone surrogates")
    return document(uri, parsed["title"] or uri.rsplit("/", 1)[-1], text, section.access_domain,
                    parsed.get("metadata") or {}, parsed.get("spans") or None)


def _explain(kind: str, data: bytes, exc: Exception) -> tuple[str, str]:
    """(reason, detail) for a reader's exception."""
    detail = f"{type(exc).__name__}: {str(exc)[:300]}"
    if kind in (DOCX, PPTX):
        if isinstance(exc, zipfile.BadZipFile) and data.startswith(_ZIP_MAGIC) and "not a zip file" in str(exc):
            return "truncated", f"{detail} (the zip's central directory is missing: file cut short?)"
        if not data.startswith(_ZIP_MAGIC):
            return "corrupt", f"not a zip package (no PK header); {detail}"
    return "corrupt", detail

