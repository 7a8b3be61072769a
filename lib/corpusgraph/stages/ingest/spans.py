"""Spans: where the pages, sections, slides and messages of a document's text lie.

Readers build a document's text from parts (pages, blocks under headings) and record each part's
character range; Markdown-like text (our DOCX and HTML output, .md inputs) gets section spans
from its ATX headings. `locate` answers, for a text unit's range, the pages and the section it
came from: what a citation names.
"""

from __future__ import annotations

import bisect
import re
from typing import Iterable, Sequence

__all__ = ["span", "heading_spans", "join_pages", "locate", "boundaries", "clean"]

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
_FENCE = re.compile(r"^(```|~~~)", re.M)


def span(kind: str, label: str, start: int, end: int) -> dict:
    return {"kind": kind, "label": label[:300], "char_start": int(start), "char_end": int(end)}


def clean(text: str) -> str:
    """Line ends to \\n; NUL and the non-characters some extractors leave are dropped."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "").replace("\ufffe", "").replace(
        "\uffff", "")


def heading_spans(text: str) -> list[dict]:
    """One section span per ATX heading (`# Title` .. `###### Title`) outside fenced code blocks,
    from the heading to the next heading (any level) or the end."""
    fenced: list[tuple[int, int]] = []
    marks = [m.start() for m in _FENCE.finditer(text)]
    for a, b in zip(marks[0::2], marks[1::2] + [len(text)] * (len(marks) % 2)):
        fenced.append((a, b))
    heads = [(m.start(), m.group(2).strip()) for m in _HEADING.finditer(text)
             if not any(a <= m.start() < b for a, b in fenced)]
    out = []
    for i, (start, label) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
        out.append(span("section", label, start, len(text[:end].rstrip())))
    return out


def join_pages(pages: Sequence[str], kind: str = "page", labels: Iterable[str] | None = None) -> tuple[str, list[dict]]:
    """Pages joined by blank lines, with one span per page (1-based labels unless given).
    Every page gets a span, an empty one too, so page numbers stay those of the file."""
    labels = list(labels) if labels is not None else [str(i) for i in range(1, len(pages) + 1)]
    parts, spans, pos = [], [], 0
    for label, page in zip(labels, pages):
        if parts:
            parts.append("\n\n")
            pos += 2
        body = page.strip("\n")
        parts.append(body)
        spans.append(span(kind, label, pos, pos + len(body)))
        pos += len(body)
    return "".join(parts), spans


def boundaries(spans: Sequence[dict] | None) -> list[int]:
    """Character offsets where a page, section, slide or message starts (not the first)."""
    return sorted({int(s["char_start"]) for s in spans or () if s["char_start"] > 0})


def _at(items: list[dict], pos: int) -> dict | None:
    i = bisect.bisect_right([s["char_start"] for s in items], pos) - 1
    return items[i] if i >= 0 else None


def locate(spans: Sequence[dict] | None, c0: int, c1: int) -> tuple[int | None, int | None, str | None]:
    """(page_start, page_end, section) of the character range [c0, c1) of a text.

    Pages are those holding the range's first and last characters; the section is the innermost
    one holding its first character (a slide or a message counts as a section, labelled
    "slide N" or by its subject)."""
    if not spans:
        return None, None, None
    pages = sorted((s for s in spans if s["kind"] == "page"), key=lambda s: s["char_start"])
    sections = sorted((s for s in spans if s["kind"] in ("section", "slide", "message")), key=lambda s: s["char_start"])
    p0, p1 = _at(pages, c0), _at(pages, max(c0, c1 - 1))
    section = _at(sections, c0)
    if section is not None and section["char_end"] < c0:
        section = None  # the range starts after that section ended (text between sections)

    def number(p: dict | None) -> int | None:
        return int(p["label"]) if p is not None and str(p["label"]).isdigit() else None

    label = None
    if section is not None:
        label = f"slide {section['label']}" if section["kind"] == "slide" else section["label"]
    return number(p0), number(p1), label
