"""communities on small in-memory frames: what the index's communities step and the update's
incremental one compute between reading entities and relationships and writing communities
(runner/steps/index.communities, runner/steps/update.communities), without Delta. The steps
themselves run in the golden build (tests/spark/test_golden_tables.py) and the update sequence
(tests/e2e/test_update.py)."""

from __future__ import annotations

import pytest
from pyspark.testing import assertDataFrameEqual

from corpusgraph.config import CommunitiesSection, UpdateSection
from corpusgraph.runner.steps.index import graph_arrays, membership_frame
from corpusgraph.stages import communities as comm_stage
from corpusgraph.tables import spark_schema

pytestmark = pytest.mark.spark

# The columns of the stored partition an update reads back (runner/steps/update.communities).
OLD_COLUMNS = ("community_id", "level", "parent_id", "entity_ids", "graph_version", "modularity")


def _frames(spark, ents, rels):
    return (spark.createDataFrame(ents, spark_schema("entities")),
            spark.createDataFrame(rels, spark_schema("relationships")))


def detected(spark, ents, rels, section: CommunitiesSection):
    """The index's communities step between its read and its write."""
    ids, a, b, w, _ = graph_arrays(ents, rels)
    membership = comm_stage.detect(ids, a, b, w, section)
    return comm_stage.communities_from_membership(membership_frame(spark, membership), ents, rels).localCheckpoint()


def updated(spark, ents, rels, old, section: CommunitiesSection, redetect_drift: float):
    """The update's communities step between its reads and its write: (communities, decided)."""
    ids, a, b, w, _ = graph_arrays(ents, rels)
    old_rows = old.select(*OLD_COLUMNS).toArrow().to_pylist()
    membership, decided = comm_stage.extend_or_detect(ids, a, b, w, old_rows, section, redetect_drift)
    return comm_stage.communities_from_membership(membership_frame(spark, membership), ents,
                                                  rels).localCheckpoint(), decided


def test_communities_are_hierarchical_and_cover_every_entity(spark):
    # Two groups of 12 joined by one edge; each group is two 6-cliques tied by 18 edges. With
    # max_cluster_size 8, level 0 finds the groups and level 1 splits each into its cliques.
    ents, rels = [], []
    for c in range(2):
        ids = [f"e{c}_{i:02d}" for i in range(12)]
        ents += [(i, i.upper(), "ORGANIZATION", "d", [], [f"u{c}"], 1, 0) for i in ids]
        halves = [ids[:6], ids[6:]]
        for half in halves:
            rels += [(f"r_{a}_{b}", a, b, "", 1.0, [f"u{c}"]) for n, a in enumerate(half) for b in half[n + 1:]]
        rels += [(f"t_{a}_{b}", a, b, "", 1.0, [f"u{c}"]) for i, a in enumerate(halves[0])
                 for j, b in enumerate(halves[1]) if (i + j) % 2 == 0]
    rels.append(("bridge", "e0_00", "e1_00", "", 1.0, ["u0"]))
    ents, rels = _frames(spark, ents, rels)
    section = CommunitiesSection(max_cluster_size=8)
    out = detected(spark, ents, rels, section)
    comms = out.collect()
    level0 = [c for c in comms if c["level"] == 0]
    assert sorted(len(c["entity_ids"]) for c in level0) == [12, 12]
    assert len({c["level"] for c in comms}) >= 2
    by_id = {c["community_id"]: c for c in comms}
    for c in comms:
        if c["parent_id"]:
            assert set(c["entity_ids"]) <= set(by_id[c["parent_id"]]["entity_ids"])
        assert c["size"] == len(c["entity_ids"])
    assert all(len(c["rel_ids"]) == 15 + 15 + 18 for c in level0)  # the bridge belongs to neither
    assert sorted(len(c["entity_ids"]) for c in comms if c["level"] == 1) == [6, 6, 6, 6]
    # Same graph, same seed: the same communities, ids included.
    assertDataFrameEqual(detected(spark, ents, rels, section), out)


def _graph(spark, extra_nodes=(), extra_edges=()):
    # Two 6-cliques joined by one edge: level 0 finds the two cliques.
    groups = [[f"a{i}" for i in range(6)], [f"b{i}" for i in range(6)]]
    ids = [i for g in groups for i in g] + list(extra_nodes)
    rels = [(f"r_{x}_{y}", x, y, "", 1.0, ["u"]) for g in groups for n, x in enumerate(g) for y in g[n + 1:]]
    rels.append(("bridge", "a0", "b0", "", 1.0, ["u"]))
    rels += [(f"x_{x}_{y}", min(x, y), max(x, y), "", 1.0, ["u"]) for x, y in extra_edges]
    return _frames(spark, [(i, i.upper(), "ORGANIZATION", "d", [], ["u"], 1, 0) for i in ids], rels)


def _level0(comms):
    return {frozenset(r["entity_ids"]): r["community_id"] for r in comms.where("level = 0").collect()}


def test_small_change_keeps_the_partition_and_big_change_redetects(spark):
    section, drift_bar = CommunitiesSection(), UpdateSection().redetect_drift
    first = detected(spark, *_graph(spark), section)
    old = _level0(first)
    detected_q = {r["modularity"] for r in first.where("level = 0").collect()}
    assert set(old) == {frozenset(f"a{i}" for i in range(6)), frozenset(f"b{i}" for i in range(6))}

    # One new node tied to three of clique a: kept, placed with a; b's community keeps its id.
    kept, d = updated(spark, *_graph(spark, ["n1"], [("n1", "a1"), ("n1", "a2"), ("n1", "a3")]), first, section,
                      drift_bar)
    assert d["redetected"] == 0 and d["new_nodes"] == 1 and d["drift"] <= drift_bar
    level0 = _level0(kept)
    assert frozenset([*(f"a{i}" for i in range(6)), "n1"]) in level0
    b = frozenset(f"b{i}" for i in range(6))
    assert level0[b] == old[b]
    # The modularity recorded at detection stays the baseline that later drift is measured from.
    assert {r["modularity"] for r in kept.where("level = 0").collect()} == detected_q

    # Tie the cliques together with many edges: the old split no longer fits; re-detect in full,
    # and the result is exactly what a full detection gives on that graph.
    dense = [(f"a{i}", f"b{j}") for i in range(6) for j in range(6) if (i + j) % 2 == 0]
    graph = _graph(spark, ["n1"], [("n1", "a1"), ("n1", "a2"), ("n1", "a3"), *dense])
    redone, d = updated(spark, *graph, kept, section, drift_bar)
    assert d["redetected"] == 1 and d["drift"] > drift_bar
    assertDataFrameEqual(redone, detected(spark, *graph, section))
