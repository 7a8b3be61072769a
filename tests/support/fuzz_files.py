"""Generated input files for the ingest fuzz tests: (name, bytes) from a seed. Not a test module.

Kinds: random bytes under any suffix; text in the wrong or mixed encodings, cut inside a
character, with BOMs and NUL bytes; one long line; JSON lines with wrong types, deep nesting,
huge values, lone-surrogate escapes, odd numbers and broken lines; gzip whole, cut or fake;
Parquet with the text column missing, of the wrong type, null, or the file cut short; empty files.
"""

from __future__ import annotations

import gzip
import io
import json
import random

__all__ = ["make_file", "SUFFIXES", "damaged", "DAMAGE"]

SUFFIXES = [".txt", ".md", ".markdown", ".jsonl", ".ndjson", ".jsonl.gz", ".parquet", ".TXT", ".JSONL", ".pdf",
            ".gz", "", ".txt.gz", ".docx", ".pptx", ".html", ".eml", ".mbox", ".csv", ".tsv"]
DAMAGE = ("truncate", "flip", "zero", "cut_tail")
_SAMPLE = "Mara Voss founded the Lumen Guild in Port Keel. Ilsa Brand — directrice — signed in Grey Hollow. 😀"


def _text(rng: random.Random) -> str:
    words = _SAMPLE.split()
    return " ".join(rng.choice(words) for _ in range(rng.randrange(1, 40)))


def _encoded(rng: random.Random) -> bytes:
    text = _text(rng)
    data = text.encode(rng.choice(["utf-8", "utf-16", "utf-16-le", "latin-1", "cp1252", "utf-32"]), "replace")
    pick = rng.randrange(5)
    if pick == 0:
        data = data[: rng.randrange(len(data) + 1)]  # cut, maybe inside a character
    elif pick == 1:
        data = b"\xef\xbb\xbf" + data
    elif pick == 2:
        at = rng.randrange(len(data) + 1)
        data = data[:at] + b"\x00" * rng.randrange(1, 4) + data[at:]
    elif pick == 3:
        data = text.encode("utf-8") + "é and ü".encode("latin-1")  # two encodings in one file
    return data


def _json_line(rng: random.Random) -> bytes:
    pick = rng.randrange(12)
    if pick == 0:
        return b'{"text": ' + b"[" * rng.choice([10, 900, 5000, 50_000]) + b"]"
    if pick == 1:
        return b'{"text": "%s", "n": %s}' % (_text(rng).encode(), rng.choice([b"1" * 5000, b"NaN", b"1e999", b"-0"]))
    if pick == 2:
        return b'{"text": "\\ud800 lone", "title": "\\udfff"}'
    if pick == 3:
        return b'{"id": "\\ud800", "text": "a record with a bad id", "access_domain": "\\ud801"}'
    if pick == 4:
        return json.dumps(rng.choice([[], 7, "text", None, True, {"text": 5}, {"text": ""}, {"text": None},
                                      {"title": "no text"}, {"text": ["a", "b"]}])).encode()
    if pick == 5:
        return json.dumps({"text": _text(rng), "meta": {"k": [1, {"d": [None] * 50}]}, "id": [1, 2]}).encode()
    if pick == 6:
        return json.dumps({"text": _text(rng) * rng.randrange(1, 200)}).encode()[: rng.randrange(1, 60)]  # cut
    if pick == 7:
        return b"   "
    if pick == 8:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
    if pick == 9:
        return json.dumps({"text": _text(rng), "id": rng.randrange(10**6), "domain": rng.choice(["a", "b", 3])}).encode()
    if pick == 10:
        return json.dumps({"text": _text(rng)}, ensure_ascii=False).encode("latin-1", "replace")
    return json.dumps({"text": _text(rng), "title": _text(rng)}).encode()


def _jsonl(rng: random.Random) -> bytes:
    lines = [_json_line(rng) for _ in range(rng.randrange(0, 8))]
    return rng.choice([b"\n", b"\r\n", b"\n\n"]).join(lines) + rng.choice([b"", b"\n"])


def _parquet(rng: random.Random) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = rng.randrange(0, 5)
    columns = {
        0: {"text": pa.array([_text(rng) for _ in range(n)])},
        1: {"body": pa.array([_text(rng) for _ in range(n)])},  # text column missing
        2: {"text": pa.array([rng.randrange(100) for _ in range(n)])},  # wrong type
        3: {"text": pa.array([None] * n, pa.string()), "id": pa.array(list(range(n)))},
        4: {"text": pa.array([_text(rng).encode() for _ in range(n)])},  # binary
        5: {"text": pa.array([_text(rng) for _ in range(n)]), "title": pa.array([[1, 2]] * n),
            "extra": pa.array([{"a": 1}] * n)},
    }[rng.randrange(6)]
    out = io.BytesIO()
    pq.write_table(pa.table(columns), out)
    data = out.getvalue()
    return data[: rng.randrange(len(data))] if rng.random() < 0.2 else data


def make_file(seed: int) -> tuple[str, bytes]:
    """One generated input: its file name (with a suffix) and its bytes."""
    rng = random.Random(seed)
    kind = rng.randrange(10)
    if kind == 0:
        return f"f{seed}{rng.choice(SUFFIXES)}", bytes(rng.randrange(256) for _ in range(rng.randrange(300)))
    if kind == 1:
        return f"f{seed}{rng.choice(['.txt', '.md'])}", _encoded(rng)
    if kind == 2:
        return f"f{seed}.txt", (_text(rng) * 2000).replace(" ", "-").encode()  # one long line, no breaks
    if kind in (3, 4):
        return f"f{seed}{rng.choice(['.jsonl', '.ndjson'])}", _jsonl(rng)
    if kind == 5:
        body = _jsonl(rng)
        gz = gzip.compress(body)
        return f"f{seed}.jsonl.gz", rng.choice([gz, gz[: max(1, len(gz) // 2)], body, gzip.compress(b"\x00\x01" * 9)])
    if kind == 6:
        return f"f{seed}.parquet", _parquet(rng)
    if kind == 7:
        return f"f{seed}{rng.choice(SUFFIXES)}", b""
    if kind == 8:
        return f"f{seed}.md", ("# " + _text(rng) + "\n\n" + _text(rng)).encode()
    return f"f{seed}.jsonl", json.dumps({"text": _text(rng)}).encode() + b"\n"


def damaged(data: bytes, rng: random.Random, kind: str | None = None) -> tuple[str, bytes]:
    """A real file damaged one way (kind, or one drawn): cut short at a random point, a few bytes
    flipped, a block zeroed, or its last bytes dropped. Returns (kind, bytes)."""
    kind = kind or rng.choice(DAMAGE)
    n = len(data)
    if kind == "truncate":
        return kind, data[: rng.randrange(1, max(2, n))]
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randrange(1, 20)):
            i = rng.randrange(n)
            out[i] ^= 1 << rng.randrange(8)
        return kind, bytes(out)
    if kind == "zero":
        at, size = rng.randrange(n), rng.randrange(16, 4096)
        return kind, data[:at] + b"\0" * min(size, n - at) + data[at + size:]
    return kind, data[: max(1, n - rng.randrange(1, min(n, 2048)))]
