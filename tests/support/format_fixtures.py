"""Our own input files for the format readers, written into a folder by `write_all(folder)`. Not a test module.

All text here is made up for these tests. HTML pages shaped like the real thing (a news article
with navigation, a cookie banner, promos, comments and a footer; a German blog in windows-1252 div
soup; a documentation page with headings and a table; a login wall), e-mail (a reply thread with
a quoted reply and PDF, DOCX and PNG attachments; an Outlook-style Latin-1 HTML reply; a message
whose charset Python does not know; an mbox of three), CSV and TSV files (quoted newlines, a
BOM, ragged rows, bad bytes), two-column PDFs whose drawing order is not the reading order
(reportlab), a slide deck (.pptx parts written by hand) and a long multi-page PDF with headings.
`EXPECTED` holds what a reader should make of each (hand-checked).
"""

from __future__ import annotations

import io
import mailbox
import textwrap
import zipfile
from email.message import EmailMessage
from pathlib import Path

__all__ = ["write_all", "pdf_bytes", "docx_bytes", "two_column_pdf", "pptx_bytes", "NEWS_MAIN", "BLOG_MAIN"]

NAV = ('<header><a class="logo" href="/">The Keelport Courier</a><nav><ul><li><a href="/news">News</a></li>'
       '<li><a href="/business">Business</a></li><li><a href="/harbour">Harbour</a></li><li><a href="/sport">Sport</a>'
       '</li><li><a href="/subscribe">Subscribe for 1 euro a week</a></li></ul></nav><form><input type="search" '
       'placeholder="Search the Courier"><button>Search</button></form></header>')
COOKIE = ('<div id="cookie-consent" class="cookie-banner" role="dialog"><p>We use cookies and similar technologies to '
          'remember your preferences, measure how our pages are read and show you relevant advertising. You can '
          'accept all cookies or reject the optional ones.</p><button>Accept all</button><button>Reject optional'
          '</button></div>')
FOOTER = ('<footer><ul><li><a href="/about">About the Courier</a></li><li><a href="/privacy">Privacy notice</a></li>'
          '</ul><p>Copyright 2026 Keelport Media Group. All rights reserved. Registered office: 4 Quay Row.</p></footer>')
NEWS_MAIN = [
    "The harbour authority of Keelport voted on Tuesday evening to lengthen the north quay by one hundred and forty "
    "metres, a project that has been argued over in the town for almost a decade.",
    "Mara Voss, who chairs the authority, said the extension would let two container feeders berth at once instead "
    "of queuing in the roads, where ships now wait for up to a day and a half in bad weather.",
    "The works are expected to cost thirty-one million euros. Half of the money comes from a regional fund; the rest "
    "will be borrowed against future berth fees.",
    "Fishermen who moor along the inner basin were less enthusiastic. Ilsa Brand, speaking for the cooperative, "
    "warned that two years of piling would stir up silt over the mussel beds south of the breakwater.",
]
NEWS_NEXT = ("What happens next", [
    "A public inquiry is not required, because the extension stays inside the existing port boundary.",
    "The authority will hold two open evenings at the Seamen's Hall, where engineers will show models of the quay.",
])
BLOG_MAIN = [
    "Im Hafen von Grauholm liegen seit dem Frühjahr drei neue Schlepper, die mit Batterien statt mit Diesel fahren.",
    "Der Betreiber rechnet damit, dass die Boote im Jahr rund neunhundert Tonnen Kohlendioxid weniger ausstoßen.",
    "Geladen werden sie nachts an einem eigenen Anschluss am Westkai, der aus dem Windpark gespeist wird.",
]
DOCS_SECTIONS = [
    ("Installing the gauge reader", "Download the archive for your platform and unpack it into a folder of your "
     "choice. The reader needs no administrator rights."),
    ("Connecting a tide gauge", "Plug the gauge into a free serial port, then choose the port in the Devices menu. "
     "The reader polls the gauge every ten seconds."),
    ("Exporting readings", "Readings can be exported as comma-separated values for any range of dates, with the "
     "station code, the time and the water level."),
]


def _p(texts) -> str:
    return "".join(f"<p>{t}</p>" for t in texts)


def news_html() -> bytes:
    return f"""<!DOCTYPE html><html lang="en-GB"><head><meta charset="utf-8">
<title>Keelport harbour votes to extend north quay | The Keelport Courier</title>
<link rel="canonical" href="https://courier.example/harbour/2026/03/north-quay-extension">
<meta name="author" content="Tomas Reyl"><script>window.dataLayer=[];</script></head>
<body>{COOKIE}{NAV}<main><article><h1>Keelport harbour votes to extend north quay</h1>
<p class="byline">By Tomas Reyl, harbour correspondent. 17 March 2026</p>{_p(NEWS_MAIN[:2])}
<div class="inline-promo"><a href="/subscribe">Enjoying our harbour coverage? Subscribe today.</a></div>
{_p(NEWS_MAIN[2:])}<h2>{NEWS_NEXT[0]}</h2>{_p(NEWS_NEXT[1])}
<div class="share"><a href="#">Share on social networks</a> <a href="#">Print</a></div></article>
<aside class="related"><h3>Most read</h3><ol><li><a href="/a1">Ferry timetable changes for the winter season</a></li>
<li><a href="/a2">Local bakery wins regional award for its rye loaf</a></li></ol></aside></main>
<section class="comments"><h3>Comments (2)</h3><div class="comment">Finally! Took them long enough.</div></section>
{FOOTER}</body></html>""".encode("utf-8")


def blog_html() -> bytes:
    return (f"""<html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1252">
<title>Leise Schlepper im Hafen &ndash; Hafenblog Grauholm</title></head><body>
<div class="menu"><a href="/">Start</a> | <a href="/archiv">Archiv</a> | <a href="/impressum">Impressum</a></div>
<div id="cookiehinweis">Diese Website verwendet Cookies. <a href="#">OK</a></div>
<div id="content"><div class="post"><div class="post-title">Leise Schlepper im Hafen</div>
<div class="entry">{_p(BLOG_MAIN)}</div></div></div>
<div id="footer">&copy; 2026 Hafenblog Grauholm &middot; <a href="/impressum">Impressum</a></div></body></html>""").encode("cp1252")


def docs_html() -> bytes:
    body = "".join(f"<h2>{h}</h2><p>{t}</p>" for h, t in DOCS_SECTIONS)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>User guide - Gauge Reader 3</title>
<link rel="canonical" href="https://docs.example/gauge-reader/3/guide.html"></head><body>
<div class="sidebar"><nav><ul><li><a href="#i">Installing</a></li><li><a href="#c">Connecting</a></li></ul></nav></div>
<div class="document" role="main"><h1>User guide</h1>{body}<h2>Stations</h2><table><tr><th>Code</th><th>Name</th></tr>
<tr><td>KP01</td><td>Keelport north</td></tr><tr><td>GH02</td><td>Grauholm west</td></tr></table></div>
<div class="footer">&copy; Copyright 2026, the Gauge Reader authors.</div></body></html>""".encode("utf-8")


def login_html() -> bytes:
    return b"""<html lang="en"><head><title>Sign in - Harbour Portal</title></head><body><nav><a href="/">Home</a></nav>
<form><label>User name</label><input name="u"><label>Password</label><input type="password" name="p">
<button>Sign in</button></form><footer>Harbour Portal 2026</footer></body></html>"""


def pdf_bytes(title: str, paragraphs: list[str], *, heading_every: int = 0, pagesize=None) -> bytes:
    """A text PDF (reportlab's canvas, Helvetica, our own word wrap); a new page when one fills up.
    heading_every: a bold "Part N" heading before every that many paragraphs. pagesize: A4 unless given."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfbase.pdfmetrics import stringWidth
    from reportlab.pdfgen import canvas

    pagesize = pagesize or A4
    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=pagesize, invariant=1, pageCompression=1)
    c.setTitle(title)
    c.setAuthor("corpusgraph test fixtures")
    width, height = pagesize
    y = height - 72
    c.setFont("Helvetica-Bold", 14)
    c.drawString(72, y, title)
    y -= 28
    c.setFont("Helvetica", 10.5)
    for i, para in enumerate(paragraphs):
        if heading_every and i and i % heading_every == 0:
            if y < 120:
                c.showPage()
                y = height - 72
            c.setFont("Helvetica-Bold", 12)
            c.drawString(72, y, f"Part {i // heading_every + 1}")
            c.setFont("Helvetica", 10.5)
            y -= 20
        line = ""
        for word in para.split():
            trial = (line + " " + word).strip()
            if stringWidth(trial, "Helvetica", 10.5) > width - 144:
                c.drawString(72, y, line)
                y -= 14
                line = word
                if y < 72:
                    c.showPage()
                    c.setFont("Helvetica", 10.5)
                    y = height - 72
            else:
                line = trial
        if line:
            c.drawString(72, y, line)
        y -= 20
        if y < 72:
            c.showPage()
            c.setFont("Helvetica", 10.5)
            y = height - 72
    c.showPage()
    c.save()
    return out.getvalue()


def docx_bytes(title: str, paragraphs: list[str], *, heading_every: int = 0) -> bytes:
    """A Word file written by python-docx: a title heading, paragraphs, "Part N" headings."""
    import docx

    d = docx.Document()
    d.core_properties.title = title
    d.core_properties.author = "corpusgraph test fixtures"
    d.add_heading(title, 1)
    for i, para in enumerate(paragraphs):
        if heading_every and i and i % heading_every == 0:
            d.add_heading(f"Part {i // heading_every + 1}", 2)
        d.add_paragraph(para)
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def _column_lines(k: int) -> list[str]:
    words = "harbour ledger freight lantern cobalt meridian quarry saffron tundra velvet willow anchor".split()
    text = " ".join(f"S{k}_{i:02d} " + " ".join(words[(i + j) % len(words)] for j in range(9)) + "."
                    for i in range(18))
    return textwrap.wrap(text, 42)


def two_column_pdf(mode: str) -> bytes:
    """A page with a full-width heading and two columns of numbered sentences (S1_00.. on the left,
    S2_00.. on the right), drawn right column first or line by line across both columns."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=A4, invariant=1)
    width, height = A4
    c.setFont("Helvetica-Bold", 14)
    c.drawString(72, height - 60, "Heading across both columns")
    c.setFont("Helvetica", 9)
    left, right = _column_lines(1), _column_lines(2)
    top = height - 90
    if mode == "right_first":
        for i, ln in enumerate(right):
            c.drawString(310, top - 11 * i, ln)
        for i, ln in enumerate(left):
            c.drawString(60, top - 11 * i, ln)
    else:
        for i in range(max(len(left), len(right))):
            if i < len(left):
                c.drawString(60, top - 11 * i, left[i])
            if i < len(right):
                c.drawString(310, top - 11 * i, right[i])
    c.showPage()
    c.save()
    return out.getvalue()


def _messages() -> tuple[EmailMessage, EmailMessage, EmailMessage]:
    first = EmailMessage()
    first["From"] = "Mara Voss <mara.voss@keelport-harbour.example>"
    first["To"] = "Ilsa Brand <ilsa@fishcoop.example>"
    first["Subject"] = "North quay works and the mussel beds"
    first["Date"] = "Wed, 18 Mar 2026 09:12:00 +0000"
    first["Message-ID"] = "<quay-001@keelport-harbour.example>"
    first.set_content("Dear Ilsa,\n\nthe silt screens will go up before any piling starts. We will publish water "
                      "samples every week.\n\nBest regards,\nMara\n-- \nMara Voss, Chair, Keelport Harbour Authority\n")
    reply = EmailMessage()
    reply["From"] = "Ilsa Brand <ilsa@fishcoop.example>"
    reply["To"] = "Mara Voss <mara.voss@keelport-harbour.example>"
    reply["Cc"] = "=?utf-8?q?J=C3=B8rgen_Lund?= <jorgen@fishcoop.example>"
    reply["Subject"] = "Re: North quay works and the mussel beds"
    reply["Date"] = "Thu, 19 Mar 2026 14:05:00 +0000"
    reply["Message-ID"] = "<coop-777@fishcoop.example>"
    reply["In-Reply-To"] = reply["References"] = "<quay-001@keelport-harbour.example>"
    reply.set_content("Hello Mara,\n\nthank you. The positions are in the attached schedule.\nOur members ask that "
                      "dredging stops during the spawning weeks in May.\n\nIlsa\n\nOn Wed, 18 Mar 2026 at 09:12, Mara "
                      "Voss <mara.voss@keelport-harbour.example> wrote:\n> Dear Ilsa,\n>\n> the silt screens will go "
                      "up before any piling starts.\n")
    reply.add_alternative("<html><body><div>Hello Mara,</div><div>thank you. The positions are in the attached "
                          "schedule.</div><div class=\"gmail_quote\"><blockquote>Dear Ilsa, the silt screens will go "
                          "up.</blockquote></div></body></html>", subtype="html")
    reply.add_attachment(pdf_bytes("Mussel bed positions", ["Bed A lies 200 m south of the breakwater light.",
                                                            "Bed B lies off Gull Rock at 12 m depth."]),
                         maintype="application", subtype="pdf", filename="bed-positions.pdf")
    reply.add_attachment(docx_bytes("Berth schedule", ["Dredging paused 4 to 29 May.",
                                                       "Piling only between 08:00 and 18:00."]),
                         maintype="application", subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
                         filename="schedule.docx")
    reply.add_attachment(b"\x89PNG\r\n\x1a\n" + b"\0" * 64, maintype="image", subtype="png", filename="map.png")
    outlook = EmailMessage()
    outlook["From"] = "=?iso-8859-1?q?Ren=E9_Quist?= <rene@grauholm-port.example>"
    outlook["To"] = "mara.voss@keelport-harbour.example"
    outlook["Subject"] = "=?iso-8859-1?q?R=E9union_=E0_Grauholm?="
    outlook["Date"] = "Fri, 20 Mar 2026 08:00:00 +0100"
    outlook["Message-ID"] = "<rq-1@grauholm-port.example>"
    outlook.set_content("<p>Bonjour Mara,</p><p>La réunion sur les écluses aura lieu vendredi à Grauholm.</p>"
                        "<div>-----Original Message-----<br>From: Mara Voss<br>Sent: Thursday<br>Subject: Réunion<br>"
                        "Could we meet next week?</div>", subtype="html", charset="iso-8859-1", cte="quoted-printable")
    return first, reply, outlook


def unknown_charset_eml() -> bytes:
    return (b"From: a@example.org\nTo: b@example.org\nSubject: Old system\nMessage-ID: <x@example.org>\n"
            b"MIME-Version: 1.0\nContent-Type: text/plain; charset=x-legacy-ebcdic\n\n\xc8\x85\x93\x93\x96\n")


def pptx_bytes(slides: list[tuple[str, list[str], str]]) -> bytes:
    """A minimal deck written part by part: (title, body lines, speaker notes) per slide."""
    pml, dml = ("http://schemas.openxmlformats.org/presentationml/2006/main",
                "http://schemas.openxmlformats.org/drawingml/2006/main")
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    pkg = "http://schemas.openxmlformats.org/package/2006/relationships"

    def rels(items: list[tuple[str, str, str]]) -> str:
        body = "".join(f'<Relationship Id="{i}" Type="{rel}/{k}" Target="{t}"/>' for i, k, t in items)
        return f'<?xml version="1.0"?><Relationships xmlns="{pkg}">{body}</Relationships>'

    def shape(text_lines: list[str], ph: str | None) -> str:
        ph_xml = f'<p:nvSpPr><p:nvPr><p:ph type="{ph}"/></p:nvPr></p:nvSpPr>' if ph else "<p:nvSpPr/>"
        paras = "".join(f"<a:p><a:r><a:t>{t}</a:t></a:r></a:p>" for t in text_lines)
        return f"<p:sp>{ph_xml}<p:txBody>{paras}</p:txBody></p:sp>"

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("_rels/.rels", rels([("rId1", "officeDocument", "ppt/presentation.xml")]))
        ids = "".join(f'<p:sldId id="{256 + n}" r:id="rId{n}"/>' for n in range(1, len(slides) + 1))
        z.writestr("ppt/presentation.xml", f'<p:presentation xmlns:p="{pml}" xmlns:r="{rel}"><p:sldIdLst>{ids}'
                                           "</p:sldIdLst></p:presentation>")
        z.writestr("ppt/_rels/presentation.xml.rels",
                   rels([(f"rId{n}", "slide", f"slides/slide{n}.xml") for n in range(1, len(slides) + 1)]))
        for n, (title, body, notes) in enumerate(slides, start=1):
            z.writestr(f"ppt/slides/slide{n}.xml", f'<p:sld xmlns:p="{pml}" xmlns:a="{dml}"><p:cSld><p:spTree>'
                                                   f'{shape([title], "title")}{shape(body, None)}</p:spTree></p:cSld></p:sld>')
            z.writestr(f"ppt/slides/_rels/slide{n}.xml.rels", rels([("rId1", "notesSlide", f"../notesSlides/notes{n}.xml")]))
            z.writestr(f"ppt/notesSlides/notes{n}.xml", f'<p:notes xmlns:p="{pml}" xmlns:a="{dml}"><p:cSld><p:spTree>'
                                                        f'{shape([notes, str(n)], None)}</p:spTree></p:cSld></p:notes>')
    return out.getvalue()


CSV_TEXT = ('id,title,text,owner\n'
            '1,Quay plan,"The north quay grows by 140 metres.\nWork starts after the storms.",Mara Voss\n'
            '2,Mussel beds,"Beds lie south of the breakwater; ""silt screens"" protect them.",Ilsa Brand\n'
            '3,Short row\n'
            '4,Too long,text,owner,extra\n')


def write_all(folder: Path) -> dict[str, Path]:
    """Every fixture file under `folder` (html/, email/, csv/, pdf/, pptx/); name -> path."""
    files = {
        "html/news.html": news_html(), "html/blog_de.html": blog_html(), "html/docs.html": docs_html(),
        "html/login.html": login_html(),
        "email/unknown-charset.eml": unknown_charset_eml(),
        "csv/notes.csv": ("\ufeff" + CSV_TEXT).encode("utf-8"),
        "csv/people.tsv": "id\ttext\n7\tTomas Reyl reports from the harbour.\n".encode("utf-8"),
        "csv/bad-bytes.csv": b"id,text\n9,caf\xe9 au lait in Grauholm\n",
        "pdf/two-columns-right-first.pdf": two_column_pdf("right_first"),
        "pdf/two-columns-interleaved.pdf": two_column_pdf("interleaved"),
        "pdf/long-report.pdf": pdf_bytes("Harbour annual report", [
            f"Section text {i}: the harbour handled {1000 + i} ships and the quay was repaired twice. " * 6
            for i in range(24)], heading_every=6),
        "pptx/deck.pptx": pptx_bytes([("Quay extension", ["140 metres longer", "Two feeders at once"], "Say the cost."),
                                      ("Mussel beds", ["Silt screens", "Weekly water samples"], "")]),
    }
    first, reply, outlook = _messages()
    files["email/reply-thread.eml"] = bytes(reply)
    files["email/outlook-latin1.eml"] = bytes(outlook)
    out = {}
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        out[name] = path
    box_path = folder / "email" / "thread.mbox"
    box = mailbox.mbox(str(box_path))
    for msg in (first, reply, outlook):
        box.add(msg)
    box.flush()
    box.close()
    out["email/thread.mbox"] = box_path
    return out
