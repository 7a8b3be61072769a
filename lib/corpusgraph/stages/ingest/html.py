"""HTML: the main content of a page (trafilatura), not its navigation, banners and footer.

Why trafilatura (README "Input formats"): the best word-level F1 against hand-labelled main text
on our test pages (a news page with navigation, cookie banner, promos and comments; German div
soup; a documentation page), and it keeps headings and tables, which we write as Markdown so a
page gets section spans like a Markdown file. Title, canonical URL, author and date come from its
metadata; the language from the page's own `lang` declaration (we do not guess one).
"""

from __future__ import annotations

import codecs
import functools
import re

from corpusgraph.stages.ingest.spans import clean, heading_spans

__all__ = ["read_html", "declared_charset"]

_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", re.I)
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>])")  # Markdown escapes trafilatura adds ("2\. April")


def declared_charset(data: bytes) -> str | None:
    """The charset a page declares in its first 4 KiB (<meta charset> or http-equiv), if any."""
    m = _CHARSET.search(data[:4096])
    return m.group(1).decode("ascii", "replace") if m else None


def _head_facts(data: bytes) -> dict:
    """lang and canonical URL straight from the markup (one lxml parse)."""
    import lxml.html

    try:
        root = lxml.html.document_fromstring(data)
    except Exception:  # noqa: BLE001 - markup lxml cannot parse at all has no head facts
        return {}
    lang = root.get("lang") or next(iter(root.xpath("//meta[@http-equiv='content-language' or "
                                                    "@http-equiv='Content-Language']/@content")), None)
    canonical = next(iter(root.xpath("//link[@rel='canonical']/@href")), None)
    return {"lang": lang.strip() if isinstance(lang, str) and lang.strip() else None,
            "canonical": canonical.strip() if isinstance(canonical, str) else None}


@functools.lru_cache(maxsize=1)
def _extractor():
    """trafilatura's options, built once per process: bare_extraction reads them and never changes
    them (a recall retry works on a copy), and building them per page parsed its configuration file
    each time (a tenth of a page's time on our pages).

    extensive_search off: otherwise a footer's "(c) 2026" is taken for the page's date."""
    from trafilatura.settings import Extractor

    return Extractor(output_format="python", with_metadata=True, tables=True, formatting=True, comments=False,
                     date_params={"extensive_search": False, "original_date": True})


class Unreadable(Exception):
    """(reason, detail) of a page that cannot be read as text."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def read_html(data: bytes, stem: str, min_chars: int) -> dict:
    """One page -> {title, text, metadata, spans}; raises Unreadable (unsupported_encoding, empty)."""
    import trafilatura

    charset = declared_charset(data)
    if charset:
        try:
            codecs.lookup(charset)
        except LookupError:
            raise Unreadable("unsupported_encoding", f"the page declares charset {charset!r}, which Python's codecs "
                             "do not know") from None
    doc = trafilatura.bare_extraction(data, options=_extractor())
    text = ""
    if doc is not None and doc.body is not None:
        # doc.text: the body as Markdown-like text (headings, lists, tables), what xmltotxt writes
        # with formatting on; bare_extraction has already rendered it for the python format.
        text = clean(_ESCAPE.sub(r"\1", doc.text or "")).strip()
    if len("".join(text.split())) < min_chars:  # characters other than white space
        raise Unreadable("empty", f"main text of {len(text.strip())} characters < ingest.html_min_chars={min_chars}: "
                         "no main content found (login, consent or JavaScript-only page?)")
    facts = _head_facts(data)
    meta = {"url": (doc.url if doc is not None else None) or facts.get("canonical"), "lang": facts.get("lang"),
            "author": doc.author, "date": doc.date, "sitename": doc.sitename, "hostname": doc.hostname}
    meta = {k: v for k, v in meta.items() if v}
    title = (doc.title or "").strip() or next((ln.lstrip("#").strip() for ln in text.splitlines() if ln.strip()), stem)
    return {"title": title, "text": text, "metadata": meta, "spans": heading_spans(text)}
