"""The ingest and chunk steps on small fixtures, through the real steps and Delta tables: what
ingest writes and quarantines, soft deletes, and the chunk step's units. Stage transforms on
in-memory frames are in tests/verbs/."""

from __future__ import annotations

import json

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO

pytestmark = pytest.mark.spark


def _ctx(spark, tmp_path, inputs):
    cfg = load_config(
        REPO / "conf" / "local.yaml",
        {"storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
         "storage.cache_dir": str(tmp_path / "cache"), "ingest.max_bytes": "2000",
         "chunk.size_tokens": "40", "chunk.overlap_tokens": "8"},
    )
    cfg.ingest.inputs = [str(p) for p in inputs]
    ctx = RunContext(cfg, spark)
    ctx.wh.ensure_all()
    return ctx


def _write_inputs(folder):
    folder.mkdir()
    (folder / "a.md").write_text("# Hub note\nThe Lisbon hub reported late pickups by Castor Haulage. " * 4)
    (folder / "b.txt").write_text("Castor Haulage\nCastor Haulage runs the night shift at the Porto hub.")
    (folder / "dup.txt").write_text("Castor Haulage\nCastor Haulage runs the night shift at the Porto hub.")
    (folder / "empty.md").write_text("")
    (folder / "bin.txt").write_bytes(b"\x00\x01binary\x00")
    (folder / "latin.txt").write_bytes("d\u00e9j\u00e0 vu".encode("latin-1"))
    (folder / "huge.txt").write_text("word " * 1000)  # 5,000 bytes > max_bytes 2,000
    (folder / "r.jsonl").write_text(
        json.dumps({"id": "r1", "title": "Budget", "text": "The finance team froze hiring.", "domain": "finance"})
        + "\n{broken\n"
    )


def test_ingest_and_chunk_write_documents_quarantine_and_units(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage

    _write_inputs(tmp_path / "in")
    ctx = _ctx(spark, tmp_path, [tmp_path / "in"])
    res = run_stage(ctx, "ingest")
    q = {r["source_uri"].rsplit("/", 1)[-1]: r["reason"] for r in ctx.wh.read("quarantine").collect()}
    assert res.rows == {"documents": 3, "duplicates_collapsed": 1, "quarantined": 5}
    assert q == {"empty.md": "empty", "bin.txt": "binary", "latin.txt": "not_utf8", "huge.txt": "oversized",
                 "r.jsonl#L2": "bad_json"}
    docs = {r["source_uri"].rsplit("/", 1)[-1]: r for r in ctx.wh.read("documents").collect()}
    assert set(docs) == {"a.md", "b.txt", "r.jsonl#r1"}  # dup.txt collapsed onto b.txt
    assert docs["r.jsonl#r1"]["access_domain"] == "finance" and docs["a.md"]["access_domain"] == "operations"

    run_stage(ctx, "chunk")
    units = ctx.wh.read("text_units").collect()
    by_doc = {}
    for u in units:
        by_doc.setdefault(u["doc_id"], []).append(u)
        assert docs_text(docs, u["doc_id"])[u["char_start"]:u["char_end"]] == u["text"]
    assert len(by_doc[docs["a.md"]["doc_id"]]) > 1  # the long note is split into windows
    assert sorted(u["ordinal"] for u in by_doc[docs["a.md"]["doc_id"]]) == list(range(len(by_doc[docs["a.md"]["doc_id"]])))

    # A second ingest of the same inputs changes nothing; removing a file soft-deletes its document.
    run_stage(ctx, "ingest")
    assert ctx.wh.read("documents").count() == 3
    (tmp_path / "in" / "a.md").unlink()
    run_stage(ctx, "ingest")
    deleted = {r["source_uri"].rsplit("/", 1)[-1] for r in ctx.wh.read("documents").where("deleted").collect()}
    assert deleted == {"a.md"}
    run_stage(ctx, "chunk")
    assert docs["a.md"]["doc_id"] not in {r["doc_id"] for r in ctx.wh.read("text_units").collect()}


def docs_text(docs, doc_id):
    return next(d["text"] for d in docs.values() if d["doc_id"] == doc_id)

