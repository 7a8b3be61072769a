"""E-mail: .eml messages and .mbox mailboxes (the standard library's `email` and `mailbox`).

Why the standard library (README "Input formats"): it decodes RFC 2047 headers, picks the plain
or HTML body (`get_body`) and walks attachments; an unknown body charset raises, so the message
is quarantined as `unsupported_encoding` instead of being decoded into replacement characters
(what the mail-parser package, a wrapper over the same module, does silently).

A message's text is a short header preamble (subject, from, to, cc, date: the people in them are
worth extracting) and its body with the quoted reply thread removed (`ingest.email_quotes`).
Attachments of a supported format are parsed by the same dispatcher into documents of their
own, `<message uri>#attachment/<n>/<filename>`, with `parent_uri` pointing back; other
attachments are only listed in the message's metadata.
"""

from __future__ import annotations

import email
import functools
import mailbox
import os
import re
import tempfile
from email import policy
from email.policy import EmailPolicy
from email.utils import parsedate_to_datetime
from typing import Callable

from corpusgraph.stages.ingest.records import document, refuse
from corpusgraph.stages.ingest.spans import clean, span

__all__ = ["read_message", "read_mbox", "strip_quotes"]

# The first line of a quoted reply: Gmail/Apple "On <date>, <who> wrote:" (wrapped onto two lines
# too), its German, French and Spanish forms, Outlook's separators, a long underscore rule.
_REPLY = re.compile(
    r"^(?:On\s.{3,300}?\swrote:|Am\s.{3,300}?\sschrieb\s.{0,200}?:|Le\s.{3,300}?\sa écrit\s?:|El\s.{3,300}?\sescribió:"
    r"|-{2,}\s*(?:Original Message|Ursprüngliche Nachricht|Message d'origine)\s*-{2,}|_{10,}\s*$)",
    re.I | re.M | re.S)
_OUTLOOK = re.compile(r"^From:\s.+\n(?:.*\n){0,3}?(?:Sent|Date):\s.+\n(?:.*\n){0,3}?Subject:", re.M)
_SIGNATURE = re.compile(r"^-- ?$", re.M)
_QUOTE_HTML = ("//blockquote|//*[contains(@class,'gmail_quote')]|//*[@id='divRplyFwdMsg']|//*[@id='appendonsend']")

Parse = Callable[[str, bytes, int], list[dict]]  # (uri, bytes, depth) -> records; the dispatcher


@functools.lru_cache(maxsize=512)
def _parsed_header(name: str, value: str):
    return policy.default.header_fetch_parse(name, value)


class _ParsedOnce(EmailPolicy):
    """policy.default, except that a raw header value is parsed once, not on every read.

    The modern policy builds a new header object each time a header is fetched, and get_body,
    iter_attachments and get_content read Content-Type and Content-Disposition over and over
    (about 17 parses per message on the benchmark's mails: three quarters of a message's time).
    Header objects are immutable strings, so the same value maps to an equal object; the cache
    is keyed on the exact name and raw value and bounded."""

    def header_fetch_parse(self, name, value):
        if hasattr(value, "name"):  # already a header object (set through the API)
            return value
        return _parsed_header(name, value)


_POLICY = _ParsedOnce()


def strip_quotes(text: str) -> tuple[str, int]:
    """(the reply without the quoted thread and signature, characters removed).

    Cut at the first reply header (only a match under 400 characters holding an @ or a digit:
    a prose "On Monday ... he wrote:" is not a header), drop `>` lines, cut the signature."""
    cut = len(text)
    for rx in (_REPLY, _OUTLOOK):
        for m in rx.finditer(text):
            head = m.group(0)
            if len(head) < 400 and (rx is _OUTLOOK or "@" in head or re.search(r"\d", head) or head.startswith(("-", "_"))):
                cut = min(cut, m.start())
                break
    kept = "\n".join(ln for ln in text[:cut].split("\n") if not ln.lstrip().startswith(">"))
    sig = _SIGNATURE.search(kept)
    if sig:
        kept = kept[: sig.start()]
    kept = kept.strip()
    return kept, len(text) - len(kept)


def _html_text(html: str, drop_quotes: bool) -> str:
    import lxml.html

    root = lxml.html.document_fromstring(html)
    for el in root.xpath("//script|//style|//head"):
        el.drop_tree()
    if drop_quotes:
        for el in root.xpath(_QUOTE_HTML):
            el.drop_tree()
    for br in root.xpath("//br"):
        br.tail = "\n" + (br.tail or "")
    for block in root.xpath("//p|//div|//li|//tr|//h1|//h2|//h3|//h4|//table"):
        block.tail = "\n" + (block.tail or "")
    return re.sub(r"\n{3,}", "\n\n", root.text_content())


def _header(msg, name: str) -> str | None:
    try:
        value = msg.get(name)
    except Exception:  # noqa: BLE001 - a header the policy cannot parse is left out, not fatal
        return None
    return " ".join(str(value).split()) if value is not None else None


def _date(msg) -> str | None:
    raw = _header(msg, "Date")
    try:
        return parsedate_to_datetime(raw).isoformat() if raw else None
    except (TypeError, ValueError, IndexError):
        return None


def read_message(uri: str, data: bytes, *, domain: str, strip: bool, max_bytes: int, parse: Parse,
                 depth: int = 0) -> list[dict]:
    """One message -> its document (or refusal) and one record per supported attachment."""
    msg = email.message_from_bytes(data, policy=_POLICY)
    if msg.get_content_type() in ("application/pkcs7-mime", "multipart/encrypted"):
        return [refuse(uri, "encrypted", f"{msg.get_content_type()}: an encrypted (S/MIME or PGP) message")]
    meta = {k: _header(msg, h) for k, h in (("from", "From"), ("to", "To"), ("cc", "Cc"), ("subject", "Subject"),
                                            ("message_id", "Message-ID"), ("in_reply_to", "In-Reply-To"),
                                            ("references", "References"))}
    meta["date"] = _date(msg)
    meta = {k: v for k, v in meta.items() if v}
    body = msg.get_body(preferencelist=("plain", "html"))
    text, quoted = "", 0
    if body is not None:
        try:
            content = body.get_content()
        except LookupError:
            return [refuse(uri, "unsupported_encoding", f"body charset {body.get_content_charset()!r} is not known to "
                           "Python's codecs")]
        if isinstance(content, bytes):
            content = ""
        if body.get_content_type() == "text/html":
            content = _html_text(content, strip) if content.strip() else ""
        content = clean(content)
        text, quoted = strip_quotes(content) if strip else (content.strip(), 0)
    out, listed = [], []
    for n, part in enumerate(msg.iter_attachments(), start=1):
        listed.append(_attachment(uri, n, part, depth, max_bytes, parse, out))
    if listed:
        meta["attachments"] = listed
    meta["quoted_chars"] = quoted
    if not text.strip():
        attached = any(r["outcome"] == "document" for r in out)
        if not attached:
            return [refuse(uri, "empty", "no body text and no attachment of a supported format")] + out
        text = "(no body text; see the attachments)"
    subject = meta.get("subject", "")
    preamble = "\n".join(f"{label}: {meta[key]}" for label, key in (("Subject", "subject"), ("From", "from"),
                                                                      ("To", "to"), ("Cc", "cc"), ("Date", "date"))
                         if meta.get(key))
    full = (preamble + "\n\n" + text) if preamble else text
    label = f"message '{subject or '(no subject)'}'" + (f" of {meta['date'][:10]}" if meta.get("date") else "")
    rec = document(uri, subject or text.splitlines()[0][:120], full, domain, meta, [span("message", label, 0, len(full))])
    size = len(full.encode("utf-8"))
    if size > max_bytes:
        rec = refuse(uri, "oversized", f"message text of {size} bytes > ingest.max_bytes={max_bytes}")
    return [rec] + out


def _attachment(uri: str, n: int, part, depth: int, max_bytes: int, parse: Parse, out: list[dict]) -> dict:
    name = part.get_filename() or (f"message-{n}.eml" if part.get_content_type() == "message/rfc822" else f"part-{n}")
    name = name.replace("/", "_").replace("#", "_")
    child = f"{uri}#attachment/{n}/{name}"
    try:
        payload = part.get_payload(decode=True)
        if payload is None and part.get_content_type() == "message/rfc822":
            inner = part.get_payload()
            payload = inner[0].as_bytes() if isinstance(inner, list) and inner else b""
    except Exception as exc:  # noqa: BLE001 - a part that will not decode is listed with why
        return {"filename": name, "content_type": part.get_content_type(), "reason": f"{type(exc).__name__}: {exc}"}
    payload = payload or b""
    entry = {"filename": name, "content_type": part.get_content_type(), "bytes": len(payload)}
    records = parse(child, payload, depth + 1)
    if records is None:  # not a format we read: listed only
        return entry
    for rec in records:
        if rec["outcome"] == "document":
            meta = _loads(rec.get("metadata"))
            meta.update(parent_uri=uri, attachment=name)
            rec["metadata"] = _dumps(meta)
    out.extend(records)
    entry["source_uri"] = child
    return entry


def _loads(raw: str | None) -> dict:
    import json

    return json.loads(raw) if raw else {}


def _dumps(meta: dict) -> str:
    import json

    return json.dumps(meta, sort_keys=True, default=str)


def read_mbox(uri: str, data: bytes, **kw) -> list[dict]:
    """Every message of a mailbox, `<uri>#<n>` (1-based), each with its attachments."""
    fd, path = tempfile.mkstemp(suffix=".mbox")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        box = mailbox.mbox(path, create=False)
        out: list[dict] = []
        try:
            for n, key in enumerate(box.iterkeys(), start=1):
                out += read_message(f"{uri}#{n}", box.get_bytes(key), **kw)
        finally:
            box.close()
    finally:
        os.unlink(path)
    return out or [refuse(uri, "empty", "no messages in the mailbox")]
