"""The format readers on real files (../shared/data/formats: PDFs and Word files made by other
people's tools) and on our own fixtures (tests/support/format_fixtures.py): every file ends in a
document, with hand-checked text for several, or in quarantine with the right reason. Also the
per-file guard against a hang, a memory hog and a crash, page/section-aware chunking and the
citations it gives."""

from __future__ import annotations

import json
import re

import pytest

from corpusgraph.config import IngestSection
from corpusgraph.stages.ingest.files import parse_file
from tests.conftest import SHARED_DATA
from tests.support.format_fixtures import write_all

pytestmark = pytest.mark.unit

FORMATS = SHARED_DATA / "formats"

# file -> ("document", start of the text) or ("quarantine", reason); checked by hand against the files.
REAL = {
    "pdf/002-trivial-libre-office-writer.pdf": ("document", "Lorem ipsum dolor sit amet, consetetur sadipscing"),
    "pdf/GeoTopo-komprimiert.pdf": ("document", "Einführung in die\nGeometrie und Topologie"),
    "pdf/annotated_pdf.pdf": ("document", "Some text.\nLine 1\nLine 2\nNot highlighted"),
    "pdf/crazyones-pdfa.pdf": ("document", "The Crazy Ones\nOctober 14, 1998"),
    "pdf/google-doc-document.pdf": ("document", "Example document\nBeautiful is better than ugly."),
    "pdf/habibi.pdf": ("document", "حَبيبي habibi حَبيبي"),
    "pdf/imagemagick-images.pdf": ("quarantine", "no_text_layer"),
    "pdf/libre-office-link.pdf": ("document", "This is a link to an awesome blog."),
    "pdf/libreoffice-writer-password.pdf": ("quarantine", "encrypted"),
    "pdf/minimal-document.pdf": ("document", "Lorem ipsum dolor sit amet, consetetur sadipscing"),
    "pdf/mistitled_outlines_example.pdf": ("document", "Contents\n1 Foo 2"),
    "pdf/multicolumn.pdf": ("document", "Two-Column Document with Lorem Ipsum"),
    "pdf/pdfkit.pdf": ("document", "Header\nFoo: bar\nABC: DEF"),
    "pdf/pdflatex-4-pages.pdf": ("document", "Hello, here is some text without a meaning."),
    "pdf/pdflatex-forms.pdf": ("document", "Name\nCheck\nSubmit\n1"),
    "pdf/pdflatex-outline.pdf": ("document", "Contents\n1 Foo 2"),
    "pdf/with-attachment.pdf": ("document", "Lorem ipsum dolor sit amet, consetetur sadipscing"),
    "docx/blk-paras-and-tables.docx": ("document", "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n\n"
                                                   "Text before Table Between Text after"),
    "docx/comments-rich-para.docx": ("document", "Document text"),
    "docx/doc-coreprops.docx": ("quarantine", "empty"),
    "docx/doc-no-coreprops.docx": ("quarantine", "empty"),
    "docx/hdr-header-footer.docx": ("document", "section with header\n\nsection without header of its own."),
    "docx/num-having-numbering-part.docx": ("document", "- Paragraph having List Number style."),
    "docx/par-hyperlinks.docx": ("document", "No hyperlinks\n\nOne awesome hyperlink."),
    "docx/par-known-paragraphs.docx": ("document", "# Heading Paragraph\n\nNormal paragraph"),
    "docx/sty-having-no-styles-part.docx": ("quarantine", "empty"),
    "docx/tbl-2x2-table.docx": ("quarantine", "empty"),
    "docx/tbl-having-tables.docx": ("quarantine", "empty"),
}
INLINE = IngestSection(isolate_parsers=False)


def _records(path, section=INLINE, uri=None):
    data = path.read_bytes()
    return parse_file(uri or f"file:{path}", data, len(data), section)


def test_every_real_pdf_and_word_file_is_named_here():
    on_disk = {f"{p.parent.name}/{p.name}" for p in FORMATS.glob("*/*") if p.suffix in (".pdf", ".docx")}
    assert on_disk == set(REAL)


def test_every_real_file_ends_as_expected_through_the_guard():
    """Through the real worker process, as the ingest step parses them."""
    for name, (outcome, expect) in REAL.items():
        (rec,) = _records(FORMATS / name, IngestSection())
        assert rec["outcome"] == outcome, (name, rec.get("reason"), rec.get("detail"))
        if outcome == "document":
            assert rec["text"].startswith(expect), (name, rec["text"][:120])
        else:
            assert rec["reason"] == expect, (name, rec["detail"])


def test_pdf_metadata_pages_and_outline():
    (geo,) = _records(FORMATS / "pdf/GeoTopo-komprimiert.pdf")
    meta = json.loads(geo["metadata"])
    assert (geo["title"], meta["author"], meta["pages"]) == ("Geometrie und Topologie", "Martin Thoma", 117)
    assert meta["created"] == "2016-12-31T18:43:23+01:00"
    pages = [s for s in geo["spans"] if s["kind"] == "page"]
    sections = [s for s in geo["spans"] if s["kind"] == "section"]
    assert [p["label"] for p in pages] == [str(i) for i in range(1, 118)]
    assert all(a["char_end"] <= b["char_start"] for a, b in zip(pages, pages[1:]))
    assert len(sections) == 35 and sections[0]["label"] == "1 Topologische Grundbegriffe"
    assert sections[0]["char_start"] == pages[5]["char_start"]  # the outline points at page index 5
    (ann,) = _records(FORMATS / "pdf/annotated_pdf.pdf")
    assert ann["title"] == "Annotated PDF"
    (att,) = _records(FORMATS / "pdf/with-attachment.pdf")
    assert json.loads(att["metadata"])["attachments"] == ["image.png"]


def test_pdf_refusals_say_why():
    (img,) = _records(FORMATS / "pdf/imagemagick-images.pdf")
    assert img["detail"].startswith("pages=6 image_pages=6: ") and "OCR" in img["detail"]
    (locked,) = _records(FORMATS / "pdf/libreoffice-writer-password.pdf")
    assert "ingest.pdf_passwords" in locked["detail"]
    data = (FORMATS / "pdf/pdfkit.pdf").read_bytes()
    (cut,) = parse_file("file:/x/cut.pdf", data[: len(data) // 2], len(data) // 2, INLINE)
    assert cut["reason"] == "truncated"


@pytest.mark.parametrize("password", ["openpassword", "permissionpassword"])
def test_a_known_password_opens_the_encrypted_pdf(password):
    section = IngestSection(isolate_parsers=False, pdf_passwords=["wrong", password])
    (rec,) = _records(FORMATS / "pdf/libreoffice-writer-password.pdf", section)
    assert rec["outcome"] == "document" and rec["text"].startswith("Lorem ipsum dolor sit amet")
    assert password not in rec["metadata"]


def test_word_headers_footers_comments_and_headings():
    (blk,) = _records(FORMATS / "docx/blk-paras-and-tables.docx")
    meta = json.loads(blk["metadata"])
    assert meta["headers"] == ["Left-side\tRight-side"] or meta["headers"] == ["Left-side\nRight-side"]
    assert "Left-side" not in blk["text"]  # headers and footers are metadata, not text
    (com,) = _records(FORMATS / "docx/comments-rich-para.docx")
    meta = json.loads(com["metadata"])
    assert len(meta["comments"]) == 4 and meta["comments"][0]["author"] == "Steve Canny"
    assert "# Comments\n\nSteve Canny: Text with hyperlink https://google.com embedded." in com["text"]
    assert com["title"] == "Document text"
    (known,) = _records(FORMATS / "docx/par-known-paragraphs.docx")
    assert [(s["kind"], s["label"]) for s in known["spans"]] == [("section", "Heading Paragraph")]


def test_two_column_pages_read_column_by_column(tmp_path):
    files = write_all(tmp_path)
    for name in ("pdf/two-columns-right-first.pdf", "pdf/two-columns-interleaved.pdf"):
        (rec,) = _records(files[name])
        order = re.findall(r"S([12])_(\d\d)", rec["text"])
        assert order == [("1", f"{i:02d}") for i in range(18)] + [("2", f"{i:02d}") for i in range(18)], name
        assert rec["text"].startswith("Heading across both columns")
        (off,) = _records(files[name], IngestSection(isolate_parsers=False, pdf_columns="off"))
        assert re.findall(r"S([12])_(\d\d)", off["text"]) != order  # the drawing order is not the reading order
    (multi,) = _records(FORMATS / "pdf/multicolumn.pdf")  # a real two-column file whose stream order is right
    (multi_off,) = _records(FORMATS / "pdf/multicolumn.pdf", IngestSection(isolate_parsers=False, pdf_columns="off"))
    assert multi["text"].split() == multi_off["text"].split()


def _by_uri(records, root):
    return {r["source_uri"].split(str(root), 1)[1]: r for r in records}


def test_own_html_email_csv_and_slides(tmp_path):
    files = write_all(tmp_path)
    got = {}
    for path in files.values():
        got.update(_by_uri(_records(path), tmp_path))
    news = got["/html/news.html"]
    assert news["title"] == "Keelport harbour votes to extend north quay"
    assert "cookies" not in news["text"] and "Most read" not in news["text"] and "Subscribe" not in news["text"]
    assert "Took them long enough" not in news["text"] and "Copyright" not in news["text"]
    assert "The works are expected to cost thirty-one million euros." in news["text"]
    assert [s["label"] for s in news["spans"]][-1] == "What happens next"
    meta = json.loads(news["metadata"])
    assert (meta["lang"], meta["url"]) == ("en-GB", "https://courier.example/harbour/2026/03/north-quay-extension")
    assert "Frühjahr" in got["/html/blog_de.html"]["text"]  # windows-1252 declared and honoured
    assert [s["label"] for s in got["/html/docs.html"]["spans"]] == ["User guide", "Installing the gauge reader",
                                                                     "Connecting a tide gauge", "Exporting readings",
                                                                     "Stations"]
    assert "KP01 | Keelport north" in got["/html/docs.html"]["text"]
    assert got["/html/login.html"]["reason"] == "empty"
    reply = got["/email/reply-thread.eml"]
    assert "dredging stops during the spawning weeks in May" in reply["text"]
    assert "silt screens" not in reply["text"]  # the quoted message is left to its own document
    assert "Cc: Jørgen Lund <jorgen@fishcoop.example>" in reply["text"]
    meta = json.loads(reply["metadata"])
    assert meta["in_reply_to"] == "<quay-001@keelport-harbour.example>" and meta["quoted_chars"] > 0
    assert [a["filename"] for a in meta["attachments"]] == ["bed-positions.pdf", "schedule.docx", "map.png"]
    assert "source_uri" not in meta["attachments"][2]  # an image is listed, not ingested
    pdf = got["/email/reply-thread.eml#attachment/1/bed-positions.pdf"]
    assert pdf["text"].startswith("Mussel bed positions") and json.loads(pdf["metadata"])["parent_uri"].endswith(
        "/email/reply-thread.eml")
    assert got["/email/reply-thread.eml#attachment/2/schedule.docx"]["text"].startswith("# Berth schedule")
    outlook = got["/email/outlook-latin1.eml"]["text"]
    assert outlook.endswith("\n\nBonjour Mara,\nLa réunion sur les écluses aura lieu vendredi à Grauholm.")
    assert got["/email/unknown-charset.eml"]["reason"] == "unsupported_encoding"
    assert [k for k in got if k.startswith("/email/thread.mbox#") and "attachment" not in k] == [
        "/email/thread.mbox#1", "/email/thread.mbox#2", "/email/thread.mbox#3"]
    assert "Mara Voss, Chair" not in got["/email/thread.mbox#1"]["text"]  # the signature is cut
    assert got["/csv/notes.csv#1"]["text"] == "The north quay grows by 140 metres.\nWork starts after the storms."
    assert json.loads(got["/csv/notes.csv#2"]["metadata"]) == {"id": "2", "owner": "Ilsa Brand"}
    assert (got["/csv/notes.csv#L3"]["reason"], got["/csv/notes.csv#L4"]["reason"]) == ("bad_record", "bad_record")
    assert got["/csv/people.tsv#7"]["text"] == "Tomas Reyl reports from the harbour."
    assert got["/csv/bad-bytes.csv#9"]["reason"] == "unsupported_encoding"
    deck = got["/pptx/deck.pptx"]
    assert [(s["kind"], s["label"]) for s in deck["spans"]] == [("slide", "1"), ("slide", "2")]
    assert deck["text"].startswith("# Slide 1: Quay extension\n140 metres longer") and "Notes: Say the cost." in deck["text"]


def test_legacy_and_encrypted_office_files_are_refused_by_name():
    ole2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600
    (doc,) = parse_file("file:/x/old.docx", ole2, len(ole2), INLINE)
    assert doc["reason"] == "unsupported_format" and ".doc" in doc["detail"]
    locked = ole2 + "EncryptedPackage".encode("utf-16-le")
    (enc,) = parse_file("file:/x/locked.docx", locked, len(locked), INLINE)
    assert enc["reason"] == "encrypted"
    data = (FORMATS / "docx/par-hyperlinks.docx").read_bytes()
    (cut,) = parse_file("file:/x/cut.docx", data[:-200], len(data) - 200, INLINE)
    assert cut["reason"] == "truncated"


def test_size_limits_per_kind():
    data = (FORMATS / "pdf/pdfkit.pdf").read_bytes()
    (big,) = parse_file("file:/x/a.pdf", data, len(data), IngestSection(max_binary_bytes=1000))
    assert big["reason"] == "oversized" and "max_binary_bytes" in big["detail"]
    (long_text,) = parse_file("file:/x/a.pdf", data, len(data), IngestSection(isolate_parsers=False, max_bytes=5))
    assert long_text["reason"] == "oversized" and "extracted text" in long_text["detail"]


def test_the_guard_contains_a_hang_a_memory_hog_and_a_crash(tmp_path):
    from corpusgraph.stages.ingest.guard import ParseGuard

    section = IngestSection()
    guard = ParseGuard(400, module="tests.support.guard_worker")
    ok = (FORMATS / "pdf/pdfkit.pdf").read_bytes()
    try:
        assert guard.run("file:/x/fine.pdf", ok, section, 30)[0] == "ok"
        assert guard.run("file:/x/hang.pdf", ok, section, 1.0)[0] == "parse_timeout"
        status, detail = guard.run("file:/x/oom.pdf", ok, section, 60)
        assert status == "memory_limit", detail
        status, detail = guard.run("file:/x/segv.pdf", ok, section, 30)
        assert (status, detail.split(" (")[0]) == ("parser_crash", "the parse worker died by signal 11")
        status, records = guard.run("file:/x/fine.pdf", ok, section, 30)  # a fresh worker takes over
        assert status == "ok" and records[0]["text"] == "Header\nFoo: bar\nABC: DEF"
        assert guard.starts == 4  # first start, then after the timeout, the memory error and the crash
    finally:
        guard.close()


def test_a_real_file_past_the_time_limit_is_parse_timeout():
    (rec,) = _records(FORMATS / "pdf/GeoTopo-komprimiert.pdf", IngestSection(parse_timeout_s=0.05))
    assert rec["reason"] == "parse_timeout" and "ingest.parse_timeout_s" in rec["detail"]


def test_units_keep_to_page_boundaries_and_cite_them(tmp_path):
    from corpusgraph.query.answer import citations_for
    from corpusgraph.stages.chunk import chunk_text
    from corpusgraph.stages.ingest.spans import boundaries, locate

    files = write_all(tmp_path)
    (rec,) = _records(files["pdf/long-report.pdf"])
    pages = [s for s in rec["spans"] if s["kind"] == "page"]
    assert len(pages) >= 3
    plain = chunk_text(rec["text"], 200, 30)
    kept = chunk_text(rec["text"], 200, 30, boundaries=boundaries(rec["spans"]), slack=0.25)

    def crossing(units) -> int:
        spans = [locate(rec["spans"], c.char_start, c.char_end) for c in units]
        return sum(1 for first, last, _ in spans if first != last)

    assert crossing(kept) < crossing(plain)
    starts = {p["char_start"] for p in pages[1:]}
    assert [c for c in kept if c.char_start in starts]  # units that begin where a page begins
    assert all(c.n_tokens <= 200 for c in kept) and all(c.n_tokens >= 16 for c in kept[:-1])
    units = {f"u{c.ordinal}": {"doc_id": "d", **dict(zip(("page_start", "page_end", "section"),
                                                          locate(rec["spans"], c.char_start, c.char_end)))}
             for c in kept}
    cites = citations_for(list(units), units, {"d": {"source_uri": "file:/r.pdf", "title": "Harbour annual report"}})
    assert cites[0].locator == "page 1" and cites[-1].locator == f"page {len(pages)}"
    assert all(re.fullmatch(r"pages? \d+(-\d+)?", c.locator) for c in cites)


def test_citations_name_the_page_section_slide_or_message():
    from corpusgraph.query.answer import Answer, Citation, format_answer, locator

    assert locator(3, 3, None) == "page 3" and locator(3, 4, None) == "pages 3-4"
    assert locator(None, None, "Exporting readings") == "section 'Exporting readings'"
    assert locator(2, 2, "1 Topologische Grundbegriffe") == "page 2, section '1 Topologische Grundbegriffe'"
    assert locator(None, None, "slide 4") == "slide 4" and locator(None, None, None) == ""
    cite = Citation("u1", "d1", "file:/r.pdf", "Report", 3, 3, None, locator(3, 3, None))
    text = format_answer(Answer("q", "It is so.", "basic", [cite]))
    assert "[1] doc d1 (Report, file:/r.pdf, page 3) unit u1" in text.splitlines()
    assert Answer("q", "a", "basic", [cite]).to_dict()["citations"][0]["locator"] == "page 3"


def test_a_table_input_names_one_source():
    from corpusgraph.config import ConfigError, TableInput, load_config

    assert TableInput(table="spark_catalog.kb.articles").key() == "delta:spark_catalog.kb.articles"
    with pytest.raises(ValueError, match="exactly one of table"):
        TableInput(table="a.b", path="/x")
    cfg = load_config(None, {"ingest.inputs": "[docs/, {path: /data/articles, id: article_id, text: body}]",
                             "storage.schema": "kb"})
    assert cfg.ingest.inputs[0] == "docs/" and cfg.ingest.inputs[1].id == "article_id"
    assert cfg.storage.schema_name == "kb"
    with pytest.raises(ConfigError):
        load_config(None, {"ingest.inputs": "[{table: a.b, txt: body}]"})


def test_csv_rows_end_at_the_files_first_line_end_in_the_header_and_the_rows():
    from corpusgraph.stages.ingest.tabular import csv_bytes_records, csv_header

    data = b"id,title,text\r1,Quay,The quay opens.\r2,Lock only\r"
    assert csv_header(data, "file:/x/a.csv", INLINE) == ["id", "title", "text"]
    got = list(csv_bytes_records("file:/x/a.csv", data, INLINE))
    assert [r.get("reason") for r in got] == [None, "bad_record"] and got[0]["text"] == "The quay opens."
    # The first line end is the file's, as in Spark's reader: another \r or \n belongs to its cell.
    mixed = b"id,text\r\n1,Line one\nline two\r\n2,Cut\rhere\r\n"
    assert [r["text"] for r in csv_bytes_records("file:/x/m.csv", mixed, INLINE)] == ["Line one\nline two", "Cut\rhere"]
    assert [r["text"] for r in csv_bytes_records("file:/x/n.csv", b"id,text\n1,A\rB\n", INLINE)] == ["A\rB"]


def test_a_file_that_is_not_delimited_text_is_refused_whole():
    import gzip

    from corpusgraph.stages.ingest.tabular import csv_bytes_records

    rows = b"id,text\n" + b"".join(b"%d,Row %d of the quay log.\n" % (i, i) for i in range(300))
    controls = bytes(range(1, 9)) * 40 + rows[:200]  # no NUL, a third control characters
    cyrillic = ("id,text\n" + "".join(f"{i},Причал {i} закрыт на ремонт.\n" for i in range(30))).encode("cp1251")
    for name, data, reason in (("packed.csv", gzip.compress(rows), "binary"), ("controls.tsv", controls, "binary"),
                               ("cyrillic.csv", cyrillic, "unsupported_encoding")):
        (rec,) = list(csv_bytes_records(f"file:/x/{name}", data, INLINE))
        assert rec["reason"] == reason, (name, rec)
    assert "csv_encoding" in rec["detail"]
    cp1251 = INLINE.model_copy(update={"csv_encoding": "cp1251"})
    assert len([r for r in csv_bytes_records("file:/x/cyrillic.csv", cyrillic, cp1251) if not r.get("reason")]) == 30
    # One row in another encoding is that row's refusal, not the file's.
    latin = b"id,text\n" + b"".join(b"%d,Row %d of the quay log.\n" % (i, i) for i in range(20)) + \
        "21,Écluse réparée\n".encode("latin-1")
    got = list(csv_bytes_records("file:/x/latin.csv", latin, INLINE))
    assert [r.get("reason") for r in got].count("unsupported_encoding") == 1 and len(got) > 10
