"""PDF: the text layer page by page (pypdfium2), in column order, with metadata and outline sections.

Why pypdfium2 (README "Input formats"): the fastest reader measured here with a clean text layer
(ligatures resolved, text drawn off the page clipped), one binary wheel and no dependencies.
pypdf reads the pages pdfium gets wrong: right-to-left scripts, which pdfium returns in visual
order, and files pdfium cannot open at all. OCR is out of scope: a PDF with no text layer is
quarantined as `no_text_layer` with its page counts.
"""

from __future__ import annotations

import io
import math
import re
from datetime import datetime, timedelta, timezone

from corpusgraph.stages.ingest.spans import clean, join_pages, span

__all__ = ["read_pdf", "page_text", "find_gutter"]

_RTL = re.compile(r"[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFF]")
_TAIL = 1024  # %%EOF must appear within this many bytes of the end (readers tolerate a little junk)
_PLACEHOLDER_TITLES = {"untitled", "untitled document", "title", "document"}


class Refused(Exception):
    """A property of the input that sends it to quarantine: (reason, detail)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _open(data: bytes, passwords: list[str]):
    """(pdfium document, password used). Raises Refused for encrypted or unreadable files."""
    import pypdfium2 as pdfium

    tried = 0
    for pw in [None, *passwords]:
        try:
            return pdfium.PdfDocument(data, password=pw), pw
        except pdfium.PdfiumError as exc:
            if "password" in str(exc).lower():
                tried += pw is not None
                continue
            raise
    raise Refused("encrypted", f"password-protected PDF; none of the {tried} passwords in ingest.pdf_passwords "
                  "opens it")


def find_gutter(rects: list[tuple[float, float, float, float]], width: float, min_lines: int = 4) -> float | None:
    """The x of the gap between two text columns, or None for a single-column page.

    Looked for in the middle 30-70 % of the page: the x crossed by the fewest text rects, taken
    only when few rects cross it (titles and full-width paragraphs may), the gap is at least 3 pt
    wide, and both sides hold at least `min_lines` lines a quarter of the page wide, side by side."""
    if len(rects) < 2 * min_lines:
        return None
    lo, hi = int(0.3 * width), int(0.7 * width)
    # How many rects cross each integer x in [lo, hi] (strictly inside them): a difference array,
    # linear in rects + width rather than their product.
    diff = [0] * (hi - lo + 2)
    for left, _, right, _ in rects:
        a, b = max(lo, math.floor(left) + 1), min(hi, math.ceil(right) - 1)
        if a <= b:
            diff[a - lo] += 1
            diff[b - lo + 1] -= 1
    crossing, running = {}, 0
    for x in range(lo, hi + 1):
        running += diff[x - lo]
        crossing[x] = running
    least = min(crossing.values())
    if least > 0.2 * len(rects):
        return None
    limit = least + max(1, int(0.05 * len(rects)))
    runs, start, prev = [], None, None
    for x in range(lo, hi + 2):
        ok = crossing.get(x, limit + 1) <= limit
        if ok and start is None:
            start = x
        if not ok and start is not None:
            runs.append((start, prev))
            start = None
        prev = x
    if not runs:
        return None
    a, b = max(runs, key=lambda r: r[1] - r[0])
    if b - a < 3:
        return None
    gutter = (a + b) / 2
    left = [r for r in rects if r[2] <= gutter and r[2] - r[0] >= 0.25 * width]
    right = [r for r in rects if r[0] >= gutter and r[2] - r[0] >= 0.25 * width]
    if len(left) < min_lines or len(right) < min_lines:
        return None
    beside = sum(1 for a_ in right if any(b_[1] < a_[3] and a_[1] < b_[3] for b_ in left))
    return gutter if beside >= min_lines else None


def page_text(page, columns: bool = True) -> str:
    """A page's text, clipped to the page; two columns are read left then right, with lines that
    cross the gutter (titles, full-width paragraphs) kept in place between them."""
    tp = page.get_textpage()
    try:
        if not columns:
            return tp.get_text_bounded()
        width, height = page.get_size()
        rects = [tp.get_rect(i) for i in range(tp.count_rects())]
        gutter = find_gutter(rects, width)
        if gutter is None:
            return tp.get_text_bounded()
        parts: list[str] = []
        band: list[tuple[float, float, float, float]] = []

        def flush() -> None:
            if band:
                top, bottom = max(r[3] for r in band) + 1, min(r[1] for r in band) - 1
                parts.append(tp.get_text_bounded(0, bottom, gutter, top))
                parts.append(tp.get_text_bounded(gutter, bottom, width, top))
                band.clear()

        for r in sorted(rects, key=lambda r: -r[3]):
            if r[0] < gutter < r[2]:
                flush()
                parts.append(tp.get_text_bounded(0, r[1] - 0.5, width, r[3] + 0.5))
            else:
                band.append(r)
        flush()
        return "\n".join(p.strip("\r\n") for p in parts if p.strip())
    finally:
        tp.close()


def _pdf_date(value: str | None) -> str | None:
    """D:YYYYMMDDHHmmSS+HH'mm' (PDF 32000-1, 7.9.4) as ISO 8601; None when it is not one."""
    m = re.match(r"D:(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?([Zz+\-])?(\d{2})?'?(\d{2})?", value or "")
    if not m:
        return None
    y, mo, d, h, mi, s = (int(g) if g else dflt for g, dflt in zip(m.groups()[:6], (0, 1, 1, 0, 0, 0)))
    try:
        tz = timezone.utc
        if m.group(7) in ("+", "-"):
            offset = timedelta(hours=int(m.group(8) or 0), minutes=int(m.group(9) or 0))
            tz = timezone(offset if m.group(7) == "+" else -offset)
        return datetime(y, mo, d, h, mi, s, tzinfo=tz).isoformat()
    except ValueError:
        return None


def _metadata(doc, n_pages: int) -> dict:
    raw = doc.get_metadata_dict(skip_empty=True)
    meta = {k.lower(): v.strip() for k, v in raw.items() if isinstance(v, str) and v.strip()}
    for key in ("creationdate", "moddate"):
        if key in meta:
            meta["created" if key == "creationdate" else "modified"] = _pdf_date(meta.pop(key)) or None
    meta["pages"] = n_pages
    return {k: v for k, v in meta.items() if v is not None}


def _title(meta: dict, first_page: str, stem: str) -> str:
    title = re.sub(r"^Microsoft (Word|PowerPoint) - ", "", meta.get("title", "")).strip()
    if title.lower() in _PLACEHOLDER_TITLES or title == stem or re.fullmatch(r".+\.(docx?|pdf|odt)", title, re.I):
        title = ""
    if not title:
        title = next((ln.strip() for ln in first_page.splitlines() if ln.strip()), "")[:120]
    return title or stem


def _outline(doc, page_spans: list[dict]) -> list[dict]:
    """Section spans from the bookmarks: each from the start of its page to the start of the next
    entry's page (page-grained; nested entries become their own spans)."""
    entries = []
    for item in doc.get_toc(max_depth=8):
        dest = item.get_dest()
        index = dest.get_index() if dest is not None else None
        title = (item.get_title() or "").strip()
        if index is not None and 0 <= index < len(page_spans) and title:
            entries.append((page_spans[index]["char_start"], title))
    entries.sort(key=lambda e: e[0])
    end = page_spans[-1]["char_end"] if page_spans else 0
    return [span("section", title, start, entries[i + 1][0] if i + 1 < len(entries) and entries[i + 1][0] > start
                 else end) for i, (start, title) in enumerate(entries)]


def _pypdf_pages(data: bytes, password: str | None, wanted: list[int] | None = None) -> list[str]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        reader.decrypt(password or "")
    pages = reader.pages
    return [(pages[i].extract_text() or "") for i in (wanted if wanted is not None else range(len(pages)))]


def read_pdf(data: bytes, stem: str, passwords: list[str], columns: bool = True) -> dict:
    """One PDF -> {title, text, metadata, spans}. Raises Refused (truncated, encrypted, corrupt,
    no_text_layer, empty); any other exception is a parser failure the caller reports."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    if b"%%EOF" not in data[-_TAIL:]:
        raise Refused("truncated", f"no %%EOF in the last {_TAIL} bytes (file cut short?)")
    try:
        doc, password = _open(data, passwords)
    except pdfium.PdfiumError as exc:
        try:  # pdfium refuses some damaged files that pypdf still reads
            texts = _pypdf_pages(data, None)
        except Exception as second:  # noqa: BLE001 - any pypdf failure is a property of this file
            raise Refused("corrupt", f"PdfiumError: {exc}; pypdf: {type(second).__name__}: {second}") from None
        return _assemble([clean(t) for t in texts], {"pages": len(texts), "reader": "pypdf"}, [], stem, [])
    try:
        pages, image_pages, rtl = [], [], []
        for i in range(len(doc)):
            page = doc[i]
            try:
                text = clean(page_text(page, columns))
                if _RTL.search(text):
                    rtl.append(i)
                if not text.strip() and any(True for _ in page.get_objects(
                        filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2)):
                    image_pages.append(i + 1)
                pages.append(text)
            finally:
                page.close()
        if rtl:  # pdfium gives right-to-left scripts in visual order; pypdf in logical order
            for i, text in zip(rtl, _pypdf_pages(data, password, rtl)):
                pages[i] = clean(text)
        meta = _metadata(doc, len(pages))
        _, page_spans = join_pages(pages)
        outline = _outline(doc, page_spans)
        attachments = [doc.get_attachment(i).get_name() for i in range(doc.count_attachments())]
    finally:
        doc.close()
    if attachments:
        meta["attachments"] = attachments  # listed only: files inside a PDF are not ingested
    if password is not None:
        meta["encrypted"] = True
    if not any(p.strip() for p in pages):
        if image_pages:
            raise Refused("no_text_layer", f"pages={len(pages)} image_pages={len(image_pages)}: scanned or "
                          "image-only; OCR is not done by corpusgraph")
        raise Refused("empty", f"pages={len(pages)}: no text on any page")
    return _assemble(pages, meta, outline, stem, image_pages)


def _assemble(pages: list[str], meta: dict, outline: list[dict], stem: str, image_pages: list[int]) -> dict:
    text, page_spans = join_pages(pages)
    if not text.strip():
        raise Refused("empty", f"pages={len(pages)}: no text on any page")
    if image_pages:
        meta["image_only_pages"] = image_pages
    return {"title": _title(meta, pages[0] if pages else "", stem), "text": text, "metadata": meta,
            "spans": page_spans + outline}
