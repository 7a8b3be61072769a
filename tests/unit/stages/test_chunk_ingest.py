import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusgraph.config import IngestSection
from corpusgraph.stages.chunk import chunk_text
from corpusgraph.stages.ingest.files import content_hash, parse_file
from corpusgraph.tokens import count_tokens

TEXT = ("Harbor Line moved reefer trailer R-77 from Rotterdam to Gdańsk in März 2026. " * 30).strip()


def test_chunks_cover_text_with_overlap_and_exact_offsets():
    chunks = chunk_text(TEXT, size=50, overlap=10)
    assert len(chunks) > 3
    for c in chunks:
        assert TEXT[c.char_start:c.char_end] == c.text
        assert c.n_tokens <= 50
    assert chunks[0].char_start == 0 and chunks[-1].char_end == len(TEXT)
    # consecutive windows overlap: the next one starts before the previous ends
    assert all(b.char_start < a.char_end for a, b in zip(chunks, chunks[1:]))
    assert sum(c.n_tokens for c in chunks) - 10 * (len(chunks) - 1) == count_tokens(TEXT)


def test_chunk_rejects_overlap_not_smaller_than_size():
    with pytest.raises(ValueError):
        chunk_text(TEXT, size=10, overlap=10)


def test_short_and_empty_texts():
    assert chunk_text("", 50, 10) == []
    (only,) = chunk_text("One sentence.", 50, 10)
    assert only.text == "One sentence." and only.ordinal == 0


SEC = IngestSection(max_bytes=1000, access_domain="ops")


def test_text_and_markdown_become_documents_with_content_hash_ids():
    (doc,) = parse_file("/x/a.md", b"# Weekly note\nAll good.", 23, SEC)
    assert doc["outcome"] == "document" and doc["title"] == "Weekly note"
    assert doc["content_hash"] == content_hash("# Weekly note\nAll good.")
    assert doc["access_domain"] == "ops"


@pytest.mark.parametrize(
    "name,data,reason",
    [
        ("/x/empty.txt", b"", "empty"),
        ("/x/blank.txt", b"  \n\t ", "empty"),
        ("/x/bin.txt", b"\x00\x01\x02binary", "binary"),
        ("/x/latin1.txt", "caf\u00e9 cr\u00e8me".encode("latin-1"), "not_utf8"),
        ("/x/image.png", b"\x89PNG", "unsupported_format"),
    ],
)
def test_bad_inputs_are_refused_with_a_reason(name, data, reason):
    (rec,) = parse_file(name, data, len(data), SEC)
    assert rec["outcome"] == "quarantine" and rec["reason"] == reason and rec["source_uri"] == name


def test_oversized_is_refused_from_its_length_alone():
    (rec,) = parse_file("/x/big.txt", None, 5000, SEC)
    assert rec["reason"] == "oversized" and "5000" in rec["detail"]


def test_jsonl_records_keep_domain_and_refuse_bad_lines():
    lines = [
        json.dumps({"id": "r1", "title": "T1", "text": "alpha", "domain": "finance", "date": "2026-01-02"}),
        "{not json",
        json.dumps({"id": "r3", "title": "T3"}),
    ]
    data = "\n".join(lines).encode()
    recs = parse_file("/x/r.jsonl", data, len(data), SEC)
    assert [r["outcome"] for r in recs] == ["document", "quarantine", "quarantine"]
    assert recs[0]["source_uri"] == "/x/r.jsonl#r1" and recs[0]["access_domain"] == "finance"
    assert json.loads(recs[0]["metadata"]) == {"id": "r1", "date": "2026-01-02"}
    assert recs[1]["reason"] == "bad_json" and recs[1]["source_uri"] == "/x/r.jsonl#L2"
    assert recs[2]["reason"] == "empty"


def test_parquet_rows_and_corrupt_parquet():
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": ["p1", "p2"], "text": ["one", "two"]}), buf)
    recs = parse_file("/x/t.parquet", buf.getvalue(), len(buf.getvalue()), SEC)
    assert [r["text"] for r in recs] == ["one", "two"]
    (bad,) = parse_file("/x/c.parquet", b"PAR1garbage", 11, SEC)
    assert bad["reason"] == "bad_parquet"
