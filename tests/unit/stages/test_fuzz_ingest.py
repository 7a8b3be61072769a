"""Ingest's parser over generated files: every input ends in documents or quarantine rows with a
reason, the counts add up, the rows fit the Arrow schema Spark gets, and nothing raises.

Generated files (fuzz_files.py), ten per hypothesis example, a fifth as many examples as the
loaded profile's (tests/conftest.py): a small sample in the default tier, 2,000 files under
`make test-fuzz`; a 50 MB line and a few hand-made shapes are examples of their own. The real PDF
and Word files and our own HTML, e-mail, CSV and slide fixtures, damaged (cut short, bytes flipped,
a block zeroed, the tail dropped), go through the real parse worker: 60 variants here, 600 under
`make test-fuzz`. The Spark-level run over a folder of generated files is tests/spark/test_ingest_fuzz.py.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from corpusgraph.config import IngestSection
from corpusgraph.stages.ingest.files import JSONL_SUFFIXES, PARSED_SCHEMA, is_container, iter_file, suffix_of
from tests.support.fuzz_files import make_file

pytestmark = [pytest.mark.unit, pytest.mark.fuzz]

BATCH = 10
EXAMPLES = max(1, settings().max_examples // 5)  # the loaded profile's (tests/conftest.py)
FILES = EXAMPLES * BATCH
SECTION = IngestSection(max_bytes=200_000)


def _utf8(value) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_file(name: str, data: bytes, section: IngestSection = SECTION) -> list[dict]:
    uri = f"file:/in/{name}"
    records = list(iter_file(uri, data, len(data), section))
    assert records, "an input vanished"
    for rec in records:
        assert rec["outcome"] in ("document", "quarantine")
        assert rec["source_uri"].startswith(uri) and _utf8(rec["source_uri"])
        if rec["outcome"] == "quarantine":
            assert isinstance(rec["reason"], str) and rec["reason"] and isinstance(rec["detail"], str)
        else:
            text = rec["text"]
            assert isinstance(text, str) and text.strip() and len(text.encode("utf-8")) <= section.max_bytes
            assert rec["content_hash"] == hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
            assert all(_utf8(rec[k]) for k in ("title", "access_domain", "metadata"))
    pa.RecordBatch.from_pylist(records, schema=PARSED_SCHEMA)  # what Spark is handed: must not raise
    if not is_container(uri) and suffix_of(uri) not in (".parquet", ".csv", ".tsv", ".eml"):
        assert len(records) == 1  # a document file is one document or one refusal (a message: and its attachments)
    if suffix_of(uri) in JSONL_SUFFIXES and len(records) > 1:
        # A JSON-lines file read line by line: one row per non-blank line, none lost or doubled.
        lines = [x for x in data.removeprefix(b"\xef\xbb\xbf").split(b"\n") if x.strip()]
        assert len(records) == len(lines)
    return records


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.integers(0, 2**32))
def _fuzz(seed):
    for i in range(BATCH):
        name, data = make_file(seed * BATCH + i)
        try:
            outcomes = check_file(name, data)
        except BaseException:
            note(f"failing file: {name} ({len(data)} bytes) from make_file({seed * BATCH + i}): {data[:200]!r}")
            raise
        _SEEN["files"] += 1
        for rec in outcomes:
            _SEEN[rec["outcome"]] += 1


_SEEN: dict[str, int] = {}


def test_generated_files_end_in_documents_or_quarantine():
    _SEEN.update(files=0, document=0, quarantine=0)
    _fuzz()
    assert _SEEN["files"] >= FILES
    # Both outcomes occur, so the generator reaches past the first refusal.
    assert _SEEN["document"] > FILES / 10 and _SEEN["quarantine"] > FILES / 10


@pytest.mark.parametrize("name, data, reason", [
    ("deep.jsonl", b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", "bad_json"),
    ("digits.jsonl", b'{"text": "t", "n": ' + b"1" * 5000 + b"}\n", "bad_json"),
    ("surrogate.jsonl", b'{"text": "\\ud800 x"}\n', "not_utf8"),
    ("domain.jsonl", b'{"text": "fine", "access_domain": "\\udc00"}\n', "bad_record"),
])
def test_lines_that_used_to_raise_are_quarantined(name, data, reason):
    records = check_file(name, data)
    assert [r["reason"] for r in records] == [reason]


def test_an_id_or_title_with_a_lone_surrogate_still_gives_a_document():
    records = check_file("ids.jsonl", b'{"id": "\\ud800", "title": "\\udfff t", "text": "kept"}\n')
    assert [(r["outcome"], r["source_uri"].rsplit("#", 1)[1]) for r in records] == [("document", "L1")]


def test_a_single_50_mb_line():
    line = b'{"text": "' + b"word " * 10_000_000 + b'"}'
    assert len(line) > 50_000_000
    (rec,) = check_file("big.jsonl", line + b"\n")  # over max_bytes: refused by size, with a reason
    assert rec["reason"] == "oversized"
    (doc,) = check_file("big.jsonl", line, IngestSection(max_bytes=60_000_000))
    assert doc["outcome"] == "document" and len(doc["text"]) == 50_000_000
    (txt,) = check_file("big.txt", b"word " * 10_000_000, IngestSection(max_bytes=60_000_000))
    assert txt["outcome"] == "document"


# What a damaged file may end as (README "Input formats" lists the reasons); never ingest_error,
# which would mean our own code raised.
DAMAGE_REASONS = {"truncated", "corrupt", "empty", "encrypted", "no_text_layer", "unsupported_encoding",
                  "unsupported_format", "bad_record", "oversized", "not_utf8", "parse_timeout", "memory_limit",
                  "parser_crash", "binary"}


def _real_inputs(tmp_path, max_bytes: int) -> list:
    from tests.conftest import SHARED_DATA
    from tests.support.format_fixtures import write_all

    real = [p for p in sorted((SHARED_DATA / "formats").glob("*/*")) if p.suffix in (".pdf", ".docx")]
    own = sorted(write_all(tmp_path).values())
    return [p for p in real + own if p.stat().st_size <= max_bytes]


def fuzz_real_files(tmp_path, variants: int, max_bytes: int, seed: int = 41) -> dict:
    import random
    from collections import Counter

    from tests.support.fuzz_files import damaged

    rng = random.Random(seed)
    inputs = _real_inputs(tmp_path, max_bytes)
    section = IngestSection(parse_timeout_s=30)
    outcomes: Counter = Counter()
    for i in range(variants):
        path = inputs[i % len(inputs)]
        kind, data = damaged(path.read_bytes(), rng)
        name = f"v{i}-{kind}-{path.name}"
        records = check_file(name, data, section)
        for rec in records:
            if rec["outcome"] == "quarantine":
                assert rec["reason"] in DAMAGE_REASONS, (name, rec["reason"], rec["detail"])
            outcomes[rec["outcome"] if rec["outcome"] == "document" else rec["reason"]] += 1
    return dict(outcomes)


def test_damaged_real_files_end_in_documents_or_quarantine(tmp_path):
    """The default tier's small profile: 60 variants of the files under 100 KB."""
    seen = fuzz_real_files(tmp_path, variants=60, max_bytes=100_000)
    assert seen.get("document", 0) > 5 and sum(v for k, v in seen.items() if k != "document") > 5


@pytest.mark.slow
def test_damaged_real_files_large_profile(tmp_path):
    """600 variants of every file, the 1.8 MB booklet included."""
    seen = fuzz_real_files(tmp_path, variants=600, max_bytes=10**9, seed=4141)
    print("damaged real files:", seen)
    assert seen.get("document", 0) > 50
