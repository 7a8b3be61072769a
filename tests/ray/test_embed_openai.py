"""The embed stage through the openai backend: real Spark and Delta, real Ray actors, and an
OpenAI-compatible /v1/embeddings server on 127.0.0.1 (tests/support/embed_server.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.run import RunContext
from corpusgraph.tables import spark_schema
from tests.conftest import REPO
from tests.support.embed_server import EmbedServer, vector_for

pytestmark = [pytest.mark.spark, pytest.mark.ray]

DIM = 24


def _df(spark, name, rows):
    schema = spark_schema(name)
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema)


@pytest.mark.timeout(1500)  # two embed runs; 290 s on an idle 2-core machine, 900 s under load average 30
def test_embed_stage_through_an_openai_endpoint(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage
    from corpusgraph.storage.vectors import VectorIndex

    with EmbedServer(dim=DIM, model="tiny-embed") as srv:
        cfg = load_config(REPO / "conf" / "local.yaml", {
            "storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
            "storage.cache_dir": str(tmp_path / "cache"),
            "embeddings.backend": "openai", "embeddings.model": "tiny-embed", "embeddings.api_base": srv.base_url,
            "embeddings.batch_size": "1", "embeddings.max_retries": "0", "embeddings.usd_per_1k_tokens": "0.5",
            "embeddings.exact_max_vectors": "5",  # the 8 units get an approximate index
        })
        ctx = RunContext(cfg, spark)
        ctx.wh.ensure_all()
        units = [{"unit_id": f"u{i}", "doc_id": "d1", "ordinal": i, "text": f"Unit {i} says thing {i}."}
                 for i in range(8)]
        ctx.wh.overwrite("documents", _df(spark, "documents", [{"doc_id": "d1", "title": "", "text": "...",
                                                               "deleted": False}]))
        ctx.wh.overwrite("text_units", _df(spark, "text_units", units))
        ctx.wh.overwrite("entities", _df(spark, "entities", [
            {"entity_id": "e1", "title": "Lisbon", "description": "A city."},
            {"entity_id": "e2", "title": "reject", "description": "refused by the server"},
        ]))
        result = run_stage(ctx, "embed")
        collected_by_embed = ctx.collected_bytes
        rerun = run_stage(ctx, "embed")
        requests_after_rerun = len(srv.requests)

    assert result.rows["embedded_now"] == 10 and result.rows["embed_failed"] == 1
    assert result.rows["text_unit_vectors"] == 8 and result.rows["entity_vectors"] == 1
    assert result.rows["community_report_vectors"] == 0
    assert any("first error: HTTP 400" in n for n in result.notes)
    u = result.usage  # one request per item (batch_size 1), one of them refused
    assert (u.calls, u.errors, u.cache_hits) == (10, 1, 0)
    assert u.tokens_in == sum(len(x["text"].split()) for x in units) + 3  # "Lisbon: A city." is 3 words
    assert u.usd == pytest.approx(u.tokens_in / 1000 * 0.5)
    assert result.driver_collected_bytes == 0  # counted by run_steps, not the step itself
    assert collected_by_embed == 0  # the vectors went to the index-building Ray task, never to the driver

    # The failed item stayed pending: the rerun sends it alone, and nothing else.
    assert rerun.rows["embedded_now"] == 1 and rerun.rows["embed_failed"] == 1
    assert requests_after_rerun == 11

    rows = {(r["kind"], r["id"]): r for r in ctx.wh.read("embeddings").collect()}
    assert set(rows) == {("text_unit", f"u{i}") for i in range(8)} | {("entity", "e1")}
    assert {r["model"] for r in rows.values()} == {"tiny-embed"}
    assert {len(r["vector"]) for r in rows.values()} == {DIM}  # the server's dimension, not 384
    want = vector_for("Unit 3 says thing 3.", DIM)
    np.testing.assert_allclose(rows[("text_unit", "u3")]["vector"], want / np.linalg.norm(want), rtol=1e-5)

    units_index = VectorIndex.load(tmp_path / "idx", "text_unit")
    meta = json.loads((tmp_path / "idx" / "text_unit.meta.json").read_text())
    assert (units_index.model, units_index.dim, len(units_index)) == ("tiny-embed", DIM, 8)
    assert meta["index"]["type"] == "ivf" and 0 < meta["index"]["recall_at_10"] <= 1
    q = np.asarray(rows[("text_unit", "u5")]["vector"], dtype=np.float32)
    assert units_index.search(q, 1)[0][0][0] == "u5"
    entity_index = VectorIndex.load(tmp_path / "idx", "entity")
    assert entity_index.ids == ["e1"] and entity_index.info["type"] == "flat"
    empty = VectorIndex.load(tmp_path / "idx", "community_report")
    assert len(empty) == 0 and empty.dim == DIM and empty.search(q, 3) == [[]]


def test_driver_bytes_are_counted_per_stage(spark, tmp_path):
    """run_steps adds what a step reported through ctx.note_collected to its StageResult."""
    from corpusgraph.runner.pipeline import run_steps
    from corpusgraph.runner.registry import Stage
    from corpusgraph.runner.run import StageResult

    cfg = load_config(REPO / "conf" / "local.yaml", {"storage.warehouse": str(tmp_path / "wh"),
                                                     "storage.cache_dir": str(tmp_path / "cache")})
    ctx = RunContext(cfg, spark)

    def collecting(c):
        c.note_collected(1000)
        c.note_collected(234)
        return StageResult()

    out = run_steps(ctx, [Stage("a", collecting), Stage("b", lambda c: StageResult())])
    assert out["a"].driver_collected_bytes == 1234 and out["b"].driver_collected_bytes == 0
    stage_counts = json.loads(ctx.wh.read("runs").collect()[0]["stage_counts"])
    assert stage_counts["a"]["driver_collected_bytes"] == 1234
