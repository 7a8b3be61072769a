"""Pair scoring, measured: the product's hashed-set features against string sets, same run.

resolve.score.pair_features prepares each node's side once (_node_side) and intersects its three
sets (character trigrams, description words, neighbour keys) as arrays of 64-bit hashes. The
reference here is the same pair code fed string sets instead (_node_side with the strings kept),
which is what a pair intersected before the hashing. Both score the candidate pairs of generated
mentions (resolution_set.generate_mentions, CORPUSGRAPH_BENCH_PAIR_SCORING_MENTIONS, default
200k) that the product's blocking gives (test_resolution.blocking_pairs: the frames steps.index.resolve
saves), each written to Parquet as steps.index.resolve writes "scored-now", alternately, three times
each; the first pass of each is JIT warm-up and not counted. Every feature, the score and
type_clash must be the same on every pair: the hashing is a speed change, not a scoring change
(SCORE_VERSION unchanged, stored scores stay valid).

Writes tests/benchmarks/results/pair_scoring.json.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import time

import pytest

from tests.support.resolution_set import generate_mentions
from tests.benchmarks.test_resolution import blocking_pairs, load_extractions
from tests.benchmarks.test_resolution import spark  # noqa: F401  (the fixture: local[2], 6g)
from tests.conftest import REPO
from tests.support.resolve_fixtures import fresh_context

pytestmark = [pytest.mark.slow, pytest.mark.spark]

RESULTS = REPO / "tests" / "benchmarks" / "results" / "pair_scoring.json"
MENTIONS = int(os.environ.get("CORPUSGRAPH_BENCH_PAIR_SCORING_MENTIONS", "200000"))
ROUNDS = 3


def string_side(product_side):
    """The reference node side: the product's columns with the sets and the key left as strings."""

    def side(nodes_df, vectors=None):
        from pyspark.sql import functions as F

        strings = nodes_df.select("node_id", F.col("key").alias("key_h"), F.col("grams").alias("grams_h"),
                                  F.col("dwords").alias("dwords_h"), F.col("neighbours").alias("neigh_h"))
        hashed = product_side(nodes_df, vectors)
        return hashed.drop("key_h", "grams_h", "dwords_h", "neigh_h").join(strings, "node_id")

    return side


def test_hashed_sets_score_the_same_pairs_faster(spark, tmp_path, monkeypatch):  # noqa: F811
    from pyspark.sql import functions as F

    from corpusgraph.stages.resolve import score as RS

    rows, _ = generate_mentions(MENTIONS, seed=7)
    ctx = fresh_context(spark, tmp_path / "run")
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    load_extractions(ctx, rows, tmp_path / "run")
    del rows
    n_nodes, n_pairs = blocking_pairs(ctx)
    nodes = spark.read.parquet(ctx.handoff("bench-blocking", "nodes"))
    pairs = spark.read.parquet(ctx.handoff("bench-blocking", "pairs"))
    product_side = RS._node_side

    def scored(side, out):
        monkeypatch.setattr(RS, "_node_side", side)
        t0 = time.perf_counter()
        RS.score_pairs(RS.pair_features(pairs, nodes), ctx.cfg.resolve).write.mode("overwrite").parquet(str(out))
        return time.perf_counter() - t0

    secs = {"hashed": [], "strings": []}
    for _ in range(ROUNDS):
        secs["hashed"].append(scored(product_side, tmp_path / "hashed"))
        secs["strings"].append(scored(string_side(product_side), tmp_path / "strings"))
    monkeypatch.setattr(RS, "_node_side", product_side)

    new, ref = spark.read.parquet(str(tmp_path / "hashed")), spark.read.parquet(str(tmp_path / "strings"))
    cols = RS.FEATURES + ["score", "type_clash", "type_a", "type_b"]
    both = new.alias("n").join(ref.alias("r"), ["a", "b"], "full_outer")
    differ = both.select(*[F.sum((~F.col(f"n.{c}").eqNullSafe(F.col(f"r.{c}"))).cast("int")).alias(c)
                           for c in cols]).first().asDict()
    counts = (new.count(), ref.count(), both.count())
    merges = new.where(F.col("score") >= ctx.cfg.resolve.auto_threshold).count()

    hashed, strings = statistics.median(secs["hashed"][1:]), statistics.median(secs["strings"][1:])
    out = {
        "mentions": MENTIONS, "nodes": n_nodes, "pairs": n_pairs, "pairs_over_threshold": merges,
        "seconds": {k: [round(s, 2) for s in v] for k, v in secs.items()},
        "median_seconds_after_warmup": {"hashed": round(hashed, 2), "strings": round(strings, 2)},
        "strings_over_hashed": round(strings / hashed, 2),
        "pairs_differing_per_column": differ,
        "how": "score_pairs(pair_features(candidate pairs, nodes)) written to Parquet; alternately, "
               f"{ROUNDS} passes each, the first of each not counted (JIT warm-up); Spark local[2]",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Spark local[2]",
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))

    assert counts == (n_pairs, n_pairs, n_pairs), counts
    assert merges > 0  # the set has pairs that merge: the comparison is not over all-zero scores
    assert all(v == 0 for v in differ.values()), differ
