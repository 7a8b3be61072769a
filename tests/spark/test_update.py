"""The update's own Spark steps on small fixtures: incremental chunking and the keep-or-re-detect
decision for communities, through the real steps and Delta tables."""

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


def _graph(spark, wh, extra_nodes=(), extra_edges=()):
    from corpusgraph.tables import spark_schema

    # Two 6-cliques joined by one edge: level 0 finds the two cliques.
    groups = [[f"a{i}" for i in range(6)], [f"b{i}" for i in range(6)]]
    ids = [i for g in groups for i in g] + list(extra_nodes)
    rels = [(f"r_{x}_{y}", x, y, "", 1.0, ["u"]) for g in groups for n, x in enumerate(g) for y in g[n + 1:]]
    rels.append(("bridge", "a0", "b0", "", 1.0, ["u"]))
    rels += [(f"x_{x}_{y}", min(x, y), max(x, y), "", 1.0, ["u"]) for x, y in extra_edges]
    wh.overwrite("entities", spark.createDataFrame([(i, i.upper(), "ORGANIZATION", "d", [], ["u"], 1, 0) for i in ids],
                                                   spark_schema("entities")))
    wh.overwrite("relationships", spark.createDataFrame(rels, spark_schema("relationships")))


def _level0(wh):
    return {frozenset(r["entity_ids"]): r["community_id"] for r in wh.read("communities").where("level = 0").collect()}


def test_small_change_keeps_the_partition_and_big_change_redetects(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage

    ctx = _ctx(spark, tmp_path)
    _graph(spark, ctx.wh)
    run_stage(ctx, "communities")
    old = _level0(ctx.wh)
    detected_q = {r["modularity"] for r in ctx.wh.read("communities").where("level = 0").collect()}
    assert set(old) == {frozenset(f"a{i}" for i in range(6)), frozenset(f"b{i}" for i in range(6))}

    # One new node tied to three of clique a: kept, placed with a; b's community keeps its id.
    _graph(spark, ctx.wh, ["n1"], [("n1", "a1"), ("n1", "a2"), ("n1", "a3")])
    res = run_stage(ctx, "communities_incremental")
    assert res.rows["redetected"] == 0 and res.rows["new_nodes"] == 1
    assert res.rows["drift"] <= ctx.cfg.update.redetect_drift
    kept = _level0(ctx.wh)
    assert frozenset([*(f"a{i}" for i in range(6)), "n1"]) in kept
    b = frozenset(f"b{i}" for i in range(6))
    assert kept[b] == old[b]
    # The modularity recorded at detection stays the baseline that later drift is measured from.
    assert {r["modularity"] for r in ctx.wh.read("communities").where("level = 0").collect()} == detected_q

    # Tie the cliques together with many edges: the old split no longer fits; re-detect in full,
    # and the result is exactly what a full communities step gives on that graph.
    dense = [(f"a{i}", f"b{j}") for i in range(6) for j in range(6) if (i + j) % 2 == 0]
    _graph(spark, ctx.wh, ["n1"], [("n1", "a1"), ("n1", "a2"), ("n1", "a3"), *dense])
    res = run_stage(ctx, "communities_incremental")
    assert res.rows["redetected"] == 1 and res.rows["drift"] > ctx.cfg.update.redetect_drift
    mine = sorted((r.asDict(recursive=True) for r in ctx.wh.read("communities").collect()), key=lambda r: r["community_id"])
    ref = _ctx(spark, tmp_path, name="ref")
    _graph(spark, ref.wh, ["n1"], [("n1", "a1"), ("n1", "a2"), ("n1", "a3"), *dense])
    run_stage(ref, "communities")
    assert mine == sorted((r.asDict(recursive=True) for r in ref.wh.read("communities").collect()),
                          key=lambda r: r["community_id"])
