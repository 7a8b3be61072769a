"""The mixed-format benchmark corpus: the synthetic corpus's texts (synthetic_corpus.py) written as
PDF (reportlab, A5 pages so a long text spans several), Word (python-docx), HTML (with navigation,
a cookie banner and a footer around the article), e-mail and plain text files, and the same texts
as JSON-lines: the reference. A benchmark harness, not product data.

    ensure(out, 10_000) -> manifest   (cached: a second call with the same size reads the manifest)

Layout: mixed/<format>/<id>.<suffix> (a folder per format, so each can be ingested alone) and
jsonl/docs-NN.jsonl (1,000 records each). The format of document i is drawn by
random.Random(i * 7919): 25 % PDF, 20 % Word, 20 % HTML, 15 % e-mail, 20 % text.
"""

from __future__ import annotations

import html
import json
import random
import time
from email.message import EmailMessage
from multiprocessing import Pool
from pathlib import Path

from tests.support import synthetic_corpus

__all__ = ["ensure", "MIX", "format_of"]

MIX = (("pdf", 0.25), ("docx", 0.20), ("html", 0.20), ("eml", 0.15), ("txt", 0.20))


def format_of(i: int) -> str:
    x, acc = random.Random(i * 7919).random(), 0.0
    for kind, share in MIX:
        acc += share
        if x < acc:
            return kind
    return "txt"


def _pdf(title: str, paras: list[str]) -> bytes:
    from reportlab.lib.pagesizes import A5

    from tests.support.format_fixtures import pdf_bytes

    return pdf_bytes(title, paras, pagesize=A5)


def _docx(title: str, paras: list[str]) -> bytes:
    from tests.support.format_fixtures import docx_bytes

    return docx_bytes(title, paras, heading_every=4)


def _html(title: str, paras: list[str]) -> bytes:
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paras)
    t = html.escape(title)
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{t}</title></head><body>"
            f"<nav><a href=/>Home</a> <a href=/news>News</a> <a href=/about>About</a></nav>"
            f"<div class=cookie>We use cookies to measure how our pages are read. <button>OK</button></div>"
            f"<main><article><h1>{t}</h1>{body}</article></main>"
            f"<footer>Copyright 2026 Example Records. All rights reserved.</footer></body></html>").encode("utf-8")


def _eml(i: int, title: str, paras: list[str]) -> bytes:
    msg = EmailMessage()
    msg["From"] = "Records Office <records@example.org>"
    msg["To"] = "archive@example.org"
    msg["Subject"] = title
    msg["Date"] = "Mon, 02 Mar 2026 10:00:00 +0000"
    msg["Message-ID"] = f"<record-{i}@example.org>"
    msg.set_content("\n\n".join(paras))
    return bytes(msg)


def _write(job: tuple[str, int, str, str, str]) -> str:
    root, i, doc_id, title, text = job
    paras = [p for p in text.split("\n\n") if p.strip()]
    kind = format_of(i)
    data = {"pdf": lambda: _pdf(title, paras), "docx": lambda: _docx(title, paras),
            "html": lambda: _html(title, paras), "eml": lambda: _eml(i, title, paras),
            "txt": lambda: (title + "\n\n" + text).encode("utf-8")}[kind]()
    (Path(root) / "mixed" / kind / f"{doc_id}.{kind}").write_bytes(data)
    return kind


def ensure(out: Path | str, n_docs: int, seed: int = 0) -> dict:
    """The corpus under `out` (made once); its manifest: files per format and seconds to make."""
    out = Path(out)
    manifest = out / "manifest.json"
    if manifest.is_file():
        found = json.loads(manifest.read_text())
        if found.get("documents") == n_docs and found.get("seed") == seed:
            return found
    import pyarrow.dataset as pads

    t0 = time.perf_counter()
    synthetic_corpus.ensure(out / "texts", n_docs, seed)
    rows = pads.dataset(out / "texts" / "parquet", format="parquet").to_table(columns=["id", "title", "text"]).to_pylist()
    for kind, _ in MIX:
        (out / "mixed" / kind).mkdir(parents=True, exist_ok=True)
    with Pool(2) as pool:
        kinds = pool.map(_write, [(str(out), i, r["id"], r["title"], r["text"]) for i, r in enumerate(rows)],
                         chunksize=50)
    (out / "jsonl").mkdir(exist_ok=True)
    for k in range(0, len(rows), 1000):
        lines = (json.dumps({"id": r["id"], "title": r["title"], "text": r["title"] + "\n\n" + r["text"]},
                            ensure_ascii=False) for r in rows[k:k + 1000])
        (out / "jsonl" / f"docs-{k // 1000:02d}.jsonl").write_text("\n".join(lines) + "\n")
    found = {"documents": n_docs, "seed": seed, "files": {kind: kinds.count(kind) for kind, _ in MIX},
             "seconds": round(time.perf_counter() - t0, 1)}
    manifest.write_text(json.dumps(found, indent=1))
    return found
