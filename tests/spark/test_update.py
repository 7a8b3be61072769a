"""The update's incremental chunk step on small fixtures, through the real steps and Delta tables
(its MERGE and delete of text_units). The keep-or-re-detect decision for communities runs on
in-memory frames in tests/verbs/test_communities.py."""

from __future__ import annotations

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO

pytestmark = pytest.mark.spark


def _ctx(spark, tmp_path, name="wh", **overrides):
    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(tmp_path / name), "storage.index_dir": str(tmp_path / "idx"),
        "storage.cache_dir": str(tmp_path / "cache"), "chunk.size_tokens": "40", "chunk.overlap_tokens": "8",
        "ingest.inputs": f"[{tmp_path / 'in'}]", **overrides})
    ctx = RunContext(cfg, spark, kind="update")
    ctx.wh.ensure_all()
    return ctx


def test_chunk_adds_units_of_new_documents_and_removes_those_of_deleted_ones(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.md").write_text("The Lisbon hub reported late pickups by Castor Haulage. " * 6)
    (folder / "b.txt").write_text("Castor Haulage runs the night shift at the Porto hub.")
    ctx = _ctx(spark, tmp_path)
    run_stage(ctx, "ingest")
    run_stage(ctx, "chunk")
    before = {r["unit_id"]: r["doc_id"] for r in ctx.wh.read("text_units").collect()}
    (folder / "b.txt").write_text("Castor Haulage moved the night shift to the Braga hub.")  # changed
    (folder / "c.txt").write_text("Delta Freight opened an office in Faro.")  # new
    (folder / "a.md").unlink()  # deleted
    run_stage(ctx, "ingest")
    res = run_stage(ctx, "chunk_incremental")
    assert {k: res.rows[k] for k in ("docs_added", "docs_changed", "docs_deleted")} == \
        {"docs_added": 1, "docs_changed": 1, "docs_deleted": 1}
    after = {r["unit_id"]: r["doc_id"] for r in ctx.wh.read("text_units").collect()}
    assert res.rows["units_removed"] == len(before) and res.rows["units_added"] == len(after) == 2
    # The same units as chunking the live documents from scratch.
    run_stage(ctx, "chunk")
    assert {r["unit_id"] for r in ctx.wh.read("text_units").collect()} == set(after)

