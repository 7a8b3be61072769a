"""Rows as documents: CSV/TSV files, Delta tables (by path or catalog name) and DataFrames.

Each row is one record, mapped like a JSON-lines record (files._from_mapping: the text, title and
id fields, the access domain, the other columns as metadata). CSV files are read by Spark's CSV
reader with multiLine on (quoted fields may hold newlines; a file is then never split, so its rows
reach one task in order and are numbered there; the first line end in a file is its line end, and
another \\r or \\n is part of a cell, in both readers: see _line_rows), all columns as strings, and a
ragged row lands in a corrupt-record column and goes to quarantine as `bad_record`. A file that is
not text is refused whole first (head_refusal). A row whose text or title decoded to U+FFFD is
not in ingest.csv_encoding: `unsupported_encoding`. Table rows are named
`delta:<table or path>#<id>`; an id is required, since a position means nothing across versions.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
from typing import Iterable, Iterator

import pyarrow as pa

from corpusgraph.config import IngestSection, TableInput
from corpusgraph.stages.ingest.records import PARSED_SCHEMA, _from_mapping, _record_uri, parsed_batches, refuse, scan_form
from corpusgraph.tables import spark_struct

__all__ = ["csv_bytes_records", "head_refusal", "csv_header", "csv_delimiter", "column_name", "parse_csv_rows",
           "table_section", "parse_table_rows", "PATH_COL", "CORRUPT_COL", "DOMAIN_COL"]

PATH_COL, CORRUPT_COL = "_cg_input_file", "_cg_corrupt"  # added by the reader; never a user column
DOMAIN_COL = "access_domain"  # what _from_mapping reads a row's domain from


def column_name(i: int) -> str:
    """The name Spark's CSV reader gives column i. A header cell may hold anything (backticks,
    dots, control characters) that Spark refuses as an attribute name, so the reader's columns are
    named by position and _csv_records maps them back to the header's names."""
    return f"_cg_c{i}"


def csv_delimiter(uri: str, section: IngestSection) -> str:
    return section.csv_delimiter or ("\t" if uri.lower().endswith(".tsv") else ",")


_LINE_END = re.compile("\r\n|\r|\n")


def _line_rows(text: str, delimiter: str) -> Iterator[list[str]]:
    """csv.reader over `text`, with rows ended as Spark's CSV reader ends them: with multiLine on
    it takes the first line end in the file (\\r\\n, \\r or \\n) as the file's and reads any
    other \\r or \\n as part of a cell (checked with pyspark 4.2.0 on files of mixed line ends; one
    difference is left: in a file whose line end is \\r, Spark drops a \\n that ends the file). The
    standard library ends a row at any of them, so the others are swapped for characters the text
    does not hold while it reads, and swapped back in the cells."""
    first = _LINE_END.search(text)
    if first is None:
        yield from csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
        return
    end = first.group()
    cr, lf = (chr(c) for c in _unused(text, 2))
    if end == "\n":
        text = text.replace("\r", cr)
    elif end == "\r":
        text = text.replace("\n", lf)
    else:  # \r\n: a lone \r or \n is a cell's
        text = re.sub("(?<!\r)\n", lf, re.sub("\r(?!\n)", cr, text))
    for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter):
        yield [c.replace(cr, "\r").replace(lf, "\n") for c in row]


def _unused(text: str, n: int) -> list[int]:
    """n private-use code points that do not occur in text."""
    found = []
    for code in itertools.chain(range(0xE000, 0xF900), range(0xF0000, 0xFFFFE), range(0x100000, 0x10FFFE)):
        if chr(code) not in text:
            found.append(code)
            if len(found) == n:
                return found
    raise csv.Error("the text holds every private-use character")  # refused as a bad record by the callers


def csv_header(head: bytes, uri: str, section: IngestSection) -> list[str] | None:
    """The column names of a CSV file from its first bytes (quoting and a BOM respected), or None."""
    text = head.decode(section.csv_encoding, "replace").lstrip("\ufeff")
    try:
        row = next(_line_rows(text, csv_delimiter(uri, section)), None)
    except csv.Error:
        return None
    return [c.strip() for c in row] if row and any(c.strip() for c in row) else None


def _mapped(uri: str, row: dict, position: int, section: IngestSection) -> dict:
    if section.metadata_fields is not None:
        keep = {section.text_field, section.title_field, section.id_field, "domain", "access_domain",
                *section.metadata_fields}
        row = {k: v for k, v in row.items() if k in keep}
    rid_uri = _record_uri(uri, row, section, position)
    text, title = row.get(section.text_field), row.get(section.title_field)
    if any(isinstance(v, str) and "\ufffd" in v for v in (text, title)):
        return refuse(rid_uri, "unsupported_encoding", f"row {position} is not valid {section.csv_encoding}; set "
                      "ingest.csv_encoding")
    return _from_mapping(rid_uri, row, section)


SNIFF_BYTES = 8192


def head_refusal(head: bytes, section: IngestSection) -> tuple[str, str] | None:
    """(reason, detail) when a .csv/.tsv file is refused whole, else None. Judged on its first
    SNIFF_BYTES decoded in ingest.csv_encoding: any NUL, or over 10% control characters, is
    `binary` (a spreadsheet saved under a .csv name, a compressed file, random bytes); over 10%
    control characters and bytes not in the encoding together is `unsupported_encoding` for the
    file (text in another encoding, named in the detail). A few rows in another encoding stay far
    under that and go to quarantine row by row. Both readers (this module's, and the ingest
    step's, which reads the file's head on the driver) ask this first, so they refuse the same
    files whole."""
    text = head[:SNIFF_BYTES].decode(section.csv_encoding, "replace").lstrip("\ufeff")
    if "\x00" in text:
        return "binary", f"NUL characters in the first {SNIFF_BYTES} bytes (read as {section.csv_encoding})"
    control = sum(1 for ch in text if (ch < " " and ch not in "\t\n\r\f") or ch == "\x7f")
    if text and control / len(text) > 0.10:
        return "binary", f"{control} of the first {len(text)} characters are control characters: not delimited text"
    bad = text.count("\ufffd")
    if text and (control + bad) / len(text) > 0.10:
        return "unsupported_encoding", (f"{bad} of the first {len(text)} characters are not {section.csv_encoding}; "
                                        "set ingest.csv_encoding")
    return None


def csv_bytes_records(uri: str, data: bytes, section: IngestSection) -> Iterator[dict]:
    """A CSV file's bytes with the standard library (parse_file's path; the ingest step reads CSV
    with Spark's reader, which gives the same records)."""
    whole = head_refusal(data, section)
    if whole:
        yield refuse(uri, *whole)
        return
    text = data.decode(section.csv_encoding, "replace").lstrip("\ufeff")
    reader = _line_rows(text, csv_delimiter(uri, section))
    try:
        header = next(reader, None)
        if not header or not any(c.strip() for c in header):
            yield refuse(uri, "empty", "no header row")
            return
        header = [c.strip() for c in header]
        n = 0
        for n, cells in enumerate(reader, start=1):
            if not cells:
                continue
            if len(cells) != len(header):
                yield refuse(f"{uri}#L{n}", "bad_record", f"row has {len(cells)} fields, header has {len(header)}")
                continue
            yield _mapped(uri, dict(zip(header, cells)), n, section)
    except csv.Error as exc:
        yield refuse(uri, "bad_record", f"csv: {exc}")
        return
    if n == 0:
        yield refuse(uri, "empty", "no rows under the header")


def _corrupt_detail(raw: str, delimiter: str, columns: int) -> str:
    """Why Spark's reader put a row in the corrupt-record column, from the row's raw text (which may
    hold line ends and stray quotes: it is read, never trusted to parse)."""
    try:
        fields = len(next(csv.reader(io.StringIO(raw, newline=""), delimiter=delimiter), []))
    except csv.Error as exc:
        return f"row does not parse as delimited text: {exc}"
    return f"row has {fields} fields, header has {columns}"


def _csv_records(batches: Iterable[pa.RecordBatch], section: IngestSection, header: list[str],
                 delimiter: str) -> Iterator[dict]:
    seen: dict[str, int] = {}  # path -> rows so far (a multiLine file is read whole, in order, by one task)
    for batch in batches:
        for row in batch.to_pylist():
            path = scan_form(row.pop(PATH_COL))  # _metadata.file_path: a URI
            corrupt = row.pop(CORRUPT_COL)
            position = seen.get(path, 0) + 1
            seen[path] = position
            if corrupt is not None:
                rec = refuse(f"{path}#L{position}", "bad_record", _corrupt_detail(corrupt, delimiter, len(header)))
            else:  # the reader's columns are positional (column_name); the header names come back here
                rec = _mapped(path, {name: row[column_name(i)] for i, name in enumerate(header)}, position, section)
            rec["input_file"] = path
            yield rec


def parse_csv_rows(rows, section: IngestSection, header: list[str], delimiter: str):
    """rows: Spark's CSV reader over files sharing `header` and `delimiter`, all columns strings,
    with CORRUPT_COL and PATH_COL (the step reads them; see runner/steps/ingest.py) -> PARSED rows."""
    return rows.mapInArrow(lambda it: parsed_batches(_csv_records(it, section, header, delimiter)),
                           spark_struct(PARSED_SCHEMA))


def table_section(section: IngestSection, table: TableInput) -> IngestSection:
    """The ingest section with a table input's column mapping as its field names."""
    return section.model_copy(update={"text_field": table.text, "id_field": table.id,
                                      "title_field": table.title or "\x00no title column"})


def _table_records(batches: Iterable[pa.RecordBatch], section: IngestSection, prefix: str) -> Iterator[dict]:
    for batch in batches:
        for row in batch.to_pylist():
            rid = row.get(section.id_field)
            if rid in (None, ""):
                yield refuse(f"{prefix}#(no id)", "bad_record", f"row without a value in id column {section.id_field!r}")
                continue
            obj = {k: (v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else v) for k, v in row.items()}
            rec = _from_mapping(f"{prefix}#{rid}", obj, section)
            rec["input_file"] = prefix
            yield rec


def parse_table_rows(rows, section: IngestSection, prefix: str):
    """rows: the mapped columns of a table or DataFrame (id, text, title, access_domain, metadata
    columns) -> PARSED rows named `<prefix>#<id>`."""
    return rows.mapInArrow(lambda it: parsed_batches(_table_records(it, section, prefix)), spark_struct(PARSED_SCHEMA))
