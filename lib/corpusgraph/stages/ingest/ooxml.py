"""Word (.docx) and PowerPoint (.pptx): our own reader of the OOXML parts, zipfile + lxml.

Why not python-docx (README "Input formats"): opening a file with it parses every part, the
349 KB styles part of its own template included, and it invents core properties a file lacks;
reading only the parts we need gives the same blocks, headers, footers and comments on the real
test files at a fraction of the time. Headings become Markdown `#` lines (their level from the
style id, the style's name or its outline level, so localised Word works), so a DOCX reads like
our Markdown inputs and gets section spans the same way. Headers and footers are boilerplate:
they go into metadata, not the text. A slide deck is one document with one span per slide.
"""

from __future__ import annotations

import io
import posixpath
import re
import zipfile

from corpusgraph.stages.ingest.spans import clean, heading_spans, join_pages

__all__ = ["read_docx", "read_pptx", "OLE2_MAGIC", "ole2_kind"]

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
PML = "http://schemas.openxmlformats.org/presentationml/2006/main"
REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # legacy .doc/.ppt, and encrypted OOXML containers


def _w(tag: str) -> str:
    return f"{{{W}}}{tag}"


_P, _TBL, _TR, _TC, _T, _TAB, _BR, _CR = map(_w, ["p", "tbl", "tr", "tc", "t", "tab", "br", "cr"])
_TXBX, _SDT, _SDTC, _CUSTOM = map(_w, ["txbxContent", "sdt", "sdtContent", "customXml"])
_INLINE = set(map(_w, ["r", "hyperlink", "ins", "smartTag", "customXml", "fldSimple", "sdt", "sdtContent", "moveTo"]))


def _parser():
    from lxml import etree

    # No entity expansion, no network, no huge trees: an XML bomb or an external entity fails the part.
    return etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, remove_comments=True)


class _Package:
    """The parts of one OOXML zip, each read at most `part_limit` decompressed bytes."""

    def __init__(self, data: bytes, part_limit: int):
        self.zip = zipfile.ZipFile(io.BytesIO(data))
        self.limit, self.parser = part_limit, _parser()

    def xml(self, part: str):
        from lxml import etree

        info = self.zip.getinfo(part)
        if info.file_size > self.limit:
            raise OversizedPart(f"part {part} decompresses to {info.file_size} bytes > {self.limit}")
        return etree.fromstring(self.zip.read(part), self.parser)

    def rels(self, part: str) -> dict[str, tuple[str, str]]:
        folder, name = posixpath.split(part)
        try:
            root = self.xml(posixpath.join(folder, "_rels", name + ".rels"))
        except KeyError:
            return {}
        return {r.get("Id"): (r.get("Type", "").rsplit("/", 1)[-1], posixpath.normpath(posixpath.join(folder, r.get("Target", ""))).lstrip("/"))
                for r in root if r.get("TargetMode") != "External"}

    def main_part(self) -> str:
        for kind, target in self.rels("").values():
            if kind == "officeDocument":
                return target
        raise KeyError("no officeDocument relationship in _rels/.rels")


class OversizedPart(Exception):
    """A part of the zip that would decompress past the limit (a zip bomb, or just too big)."""


def ole2_kind(data: bytes) -> tuple[str, str]:
    """(reason, detail) for an OLE2 compound file: an encrypted OOXML, or a legacy binary format."""
    if "EncryptedPackage".encode("utf-16-le") in data[:1 << 20] or b"EncryptedPackage" in data[:1 << 20]:
        return "encrypted", "password-protected Office file (OOXML in an encrypted container)"
    return "unsupported_format", "legacy Office 97-2003 binary file (.doc/.ppt/.xls); save it as .docx or .pptx"


def _run_text(p) -> str:
    out: list[str] = []

    def walk(el) -> None:
        for ch in el:
            if ch.tag == _T:
                out.append(ch.text or "")
            elif ch.tag == _TAB:
                out.append("\t")
            elif ch.tag in (_BR, _CR):
                out.append("\n")
            elif ch.tag in _INLINE:
                walk(ch)

    walk(p)
    return "".join(out)


def _heading_levels(pkg: _Package, body, styles_parts: list[str]) -> dict[str, int]:
    """Style id -> heading level (Title is 1). Built-in English ids need no styles part; others
    (localised, custom) are looked up by style name or outline level."""
    used = {e.get(_w("val")) for e in body.iter(_w("pStyle"))}
    levels: dict[str, int] = {}
    for sid in used:
        m = re.fullmatch(r"[Hh]eading(\d)", sid or "")
        if m:
            levels[sid] = int(m.group(1))
        elif sid == "Title":
            levels[sid] = 1
    if used - set(levels):
        for part in styles_parts:
            for st in pkg.xml(part).iter(_w("style")):
                name_el = st.find(_w("name"))
                name = (name_el.get(_w("val")) if name_el is not None else "") or ""
                outline = st.find(f"{_w('pPr')}/{_w('outlineLvl')}")
                m = re.fullmatch(r"heading (\d)", name.lower())
                if m:
                    levels[st.get(_w("styleId"))] = int(m.group(1))
                elif name.lower() == "title":
                    levels[st.get(_w("styleId"))] = 1
                elif outline is not None and outline.get(_w("val")) not in (None, "9"):
                    levels[st.get(_w("styleId"))] = int(outline.get(_w("val"))) + 1
    return levels


def _body_blocks(body, levels: dict[str, int]) -> list[str]:
    blocks: list[str] = []

    def walk(el, in_table: bool) -> None:
        for ch in el:
            if ch.tag == _P:
                style = ch.find(f"{_w('pPr')}/{_w('pStyle')}")
                sid = style.get(_w("val")) if style is not None else None
                text = _run_text(ch)
                if text.strip():
                    level = levels.get(sid)
                    if level is not None and not in_table:
                        blocks.append("#" * min(level, 6) + " " + " ".join(text.split()))
                    else:
                        listed = ch.find(f"{_w('pPr')}/{_w('numPr')}") is not None or (sid or "").lower().startswith("list")
                        blocks.append(("- " if listed else "") + text)
                for box in ch.iter(_TXBX):  # text boxes after their anchor paragraph
                    walk(box, in_table)
            elif ch.tag == _TBL:
                for row in ch.findall(_TR):
                    cells = []
                    for cell in row.findall(_TC):
                        parts: list[str] = []
                        for sub in cell:
                            if sub.tag == _P:
                                parts.append(_run_text(sub).strip())
                            elif sub.tag == _TBL:  # a nested table is flattened into its cell
                                mark = len(blocks)
                                walk([sub], True)
                                parts += blocks[mark:]
                                del blocks[mark:]
                        cells.append(" ".join(x for x in parts if x))
                    if any(cells):
                        blocks.append(" | ".join(cells))
            elif ch.tag in (_SDT, _SDTC, _CUSTOM):
                walk(ch, in_table)

    walk(body, False)
    return blocks


def read_docx(data: bytes, stem: str, part_limit: int, comments: bool = True) -> dict:
    """One .docx -> {title, text, metadata, spans}; raises zipfile/lxml/KeyError on a broken file
    (the caller maps them to quarantine reasons) and ValueError("empty") when the body has no text."""
    pkg = _Package(data, part_limit)
    main = pkg.main_part()
    by_kind: dict[str, list[str]] = {}
    for kind, target in pkg.rels(main).values():
        by_kind.setdefault(kind, []).append(target)
    body = pkg.xml(main).find(_w("body"))
    if body is None:
        raise KeyError(f"{main} has no w:body")
    blocks = _body_blocks(body, _heading_levels(pkg, body, by_kind.get("styles", [])))

    def part_text(part: str) -> str:
        return "\n".join(t for t in (_run_text(p) for p in pkg.xml(part).iter(_P)) if t.strip())

    meta: dict = {}
    for key in ("header", "footer"):
        texts = [t for t in dict.fromkeys(part_text(p) for p in by_kind.get(key, [])) if t]
        if texts:
            meta[key + "s"] = texts
    notes = [{"author": c.get(_w("author")) or "", "text": " ".join(_run_text(p) for p in c.iter(_P)).strip()}
             for part in by_kind.get("comments", []) for c in pkg.xml(part).iter(_w("comment"))]
    if notes:
        meta["comments"] = notes
    meta.update(_core_properties(pkg))
    if not any(b.strip() for b in blocks):
        raise ValueError("empty")
    first_heading = next((b.lstrip("#").strip() for b in blocks if b.startswith("#")), "")
    first_line = blocks[0].removeprefix("- ").strip()[:120]
    if comments and notes:
        blocks.append("# Comments")
        blocks += [f"{c['author']}: {c['text']}" if c["author"] else c["text"] for c in notes if c["text"]]
    text = clean("\n\n".join(blocks))
    title = meta.get("title") or first_heading or first_line or stem
    return {"title": title, "text": text, "metadata": meta, "spans": heading_spans(text)}


def _core_properties(pkg: _Package) -> dict:
    """docProps/core.xml fields that are present and non-empty (nothing is made up when it is absent)."""
    from lxml import etree

    part = next((t for k, t in pkg.rels("").values() if k == "core-properties"), None)
    if part is None:
        return {}
    out = {}
    try:
        root = pkg.xml(part)
    except KeyError:
        return {}
    for el in root:
        name = etree.QName(el).localname
        if el.text and el.text.strip() and name in ("title", "creator", "subject", "keywords", "created", "modified",
                                                   "language", "description"):
            out["author" if name == "creator" else name] = el.text.strip()
    return out


def _drawing_paras(root) -> list[str]:
    return ["".join(t.text or "" for t in p.iter(f"{{{A}}}t")) for p in root.iter(f"{{{A}}}p")]


def read_pptx(data: bytes, stem: str, part_limit: int) -> dict:
    """One .pptx -> a document with `# Slide N: title`, the slide's text and its speaker notes,
    one `slide` span per slide."""
    pkg = _Package(data, part_limit)
    main = pkg.main_part()
    rels = pkg.rels(main)
    pages, labels, content = [], [], False
    for n, sid in enumerate(pkg.xml(main).iter(f"{{{PML}}}sldId"), start=1):
        part = rels[sid.get(f"{{{REL}}}id")][1]
        slide = pkg.xml(part)
        title = ""
        for shape in slide.iter(f"{{{PML}}}sp"):
            ph = shape.find(f".//{{{PML}}}ph")
            if ph is not None and ph.get("type") in ("title", "ctrTitle"):
                title = " ".join(t for t in _drawing_paras(shape) if t.strip())
                break
        body = [t for t in _drawing_paras(slide) if t.strip() and t != title]
        notes = []
        for kind, target in pkg.rels(part).values():
            if kind == "notesSlide":
                notes = [t for t in _drawing_paras(pkg.xml(target)) if t.strip() and not t.strip().isdigit()]
        content = content or bool(title or body or notes)
        text = f"# Slide {n}" + (f": {title}" if title else "") + "\n" + "\n".join(body)
        if notes:
            text += "\n\nNotes: " + "\n".join(notes)
        pages.append(clean(text))
        labels.append(str(n))
    text, spans = join_pages(pages, kind="slide", labels=labels)
    if not content:
        raise ValueError("empty")
    meta = {"slides": len(pages), **_core_properties(pkg)}
    first = next((p.splitlines()[0].split(": ", 1)[-1] for p in pages if ": " in p.splitlines()[0]), "")
    return {"title": meta.get("title") or first or stem, "text": text, "metadata": meta, "spans": spans}
