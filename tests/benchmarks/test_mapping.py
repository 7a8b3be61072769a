"""The merge mapping (resolve.merge.decisions), measured: the product's one-aggregation form
against the form before it, same run, same inputs.

decisions() turns every decided candidate pair into its two names' decisions: each name's best
attaching merge edge and its best rejection. The form before it (`two_way_reference` below, as
it was in the product) turned the decided pairs into both orientations first (2x the pairs),
joined the labels onto both, and aggregated twice; at 1M documents it took 627 s of a 5,586 s
resolve, 25x its 100k time for 10x the names. The product now joins the two labels onto each
pair once, turns each pair into its two ends after that, and finds both per name in one
aggregation.

Inputs: generated mentions (resolution_set.generate_mentions, CORPUSGRAPH_BENCH_MAPPING_MENTIONS,
default 300k) through the product's blocking, scoring, decisions, components and chain guard,
each saved as steps.index.resolve saves it. Each form's mapping is written to Parquet, alternately,
three passes each; the first of each is warm-up and not counted. The entity, the score and the
rejected score must be the same on every name; the method, rejected entity, reason and error may
differ only where two pairs tie on score (the form before broke ties in no set order; the
product takes the larger other id), and those names are counted.

Writes tests/benchmarks/results/mapping.json.
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

RESULTS = REPO / "tests" / "benchmarks" / "results" / "mapping.json"
MENTIONS = int(os.environ.get("CORPUSGRAPH_BENCH_MAPPING_MENTIONS", "300000"))
ROUNDS = 3
COLS = ["entity_id", "score", "method", "rejected_id", "rejected_score", "rejected_reason", "error"]


def two_way_reference(nodes_df, labels, decided, cut=None):
    """resolve.merge.decisions as it was before the one-aggregation form (the reference); the
    guard's cut and the output columns are the product's (with_cut, mapping_columns), the same in both forms."""
    from pyspark.sql import functions as F

    from corpusgraph.stages.resolve import merge as RM

    lab = labels.select("node_id", F.col("label").alias("entity_id"))
    d = RM.with_cut(decided.select("a", "b", "score", "merge", "method", "reason", "error"), cut)
    both = d.select(F.col("a").alias("node_id"), F.col("b").alias("other"), "score", "merge", "method", "reason",
                    "error").unionByName(
        d.select(F.col("b").alias("node_id"), F.col("a").alias("other"), "score", "merge", "method", "reason", "error"))
    both = both.join(lab, "node_id").join(lab.select(F.col("node_id").alias("other"),
                                                     F.col("entity_id").alias("other_entity")), "other")
    same = F.col("entity_id") == F.col("other_entity")
    attach = both.where(F.col("merge") & same).groupBy("node_id").agg(
        F.max_by(F.struct("score", "method", "error"), "score").alias("att"))
    reject = both.where(~same).groupBy("node_id").agg(
        F.max_by(F.struct("other_entity", "score", F.coalesce("reason", F.lit("guard")).alias("reason"), "error"),
                 "score").alias("rej"))
    return RM.mapping_columns(nodes_df.select("node_id", "key").join(lab, "node_id", "left").join(
        attach, "node_id", "left").join(reject, "node_id", "left"))


def test_one_aggregation_gives_the_same_mapping_faster(spark, tmp_path):  # noqa: F811
    from pyspark.sql import functions as F

    from corpusgraph.runner.steps import resolve as RR
    from corpusgraph.stages.resolve import merge as RM
    from corpusgraph.stages.resolve import score as RS

    rows, _ = generate_mentions(MENTIONS, seed=7)
    ctx = fresh_context(spark, tmp_path / "run")
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    load_extractions(ctx, rows, tmp_path / "run")
    del rows
    n_nodes, n_pairs = blocking_pairs(ctx)
    sec = ctx.cfg.resolve

    def save(df, part):
        path = ctx.handoff("bench-mapping", part)
        df.write.mode("overwrite").parquet(path)
        return spark.read.parquet(path)

    nodes = spark.read.parquet(ctx.handoff("bench-blocking", "nodes"))
    pairs = spark.read.parquet(ctx.handoff("bench-blocking", "pairs"))
    decided = save(RS.decide(RS.score_pairs(RS.pair_features(pairs, nodes), sec), sec, None), "decided")
    edges = decided.where("merge").select("a", "b", "score", "method")
    labels, rounds = RR._components(save, sec, nodes, edges, "cc", [])
    labels, cut = RR.guarded(save, sec, edges, labels, [])
    n_cut, n_merges = cut.count(), edges.count()

    def timed(fn, out):
        t0 = time.perf_counter()
        fn(nodes, labels, decided, cut).write.mode("overwrite").parquet(str(out))
        return time.perf_counter() - t0

    secs = {"one_aggregation": [], "two_way_reference": []}
    for _ in range(ROUNDS):
        secs["one_aggregation"].append(timed(RM.decisions, tmp_path / "new"))
        secs["two_way_reference"].append(timed(two_way_reference, tmp_path / "ref"))

    new, ref = spark.read.parquet(str(tmp_path / "new")), spark.read.parquet(str(tmp_path / "ref"))
    both = new.alias("n").join(ref.alias("r"), "key", "full_outer")
    differ = both.select(*[F.sum((~F.col(f"n.{c}").eqNullSafe(F.col(f"r.{c}"))).cast("int")).alias(c)
                           for c in COLS]).first().asDict()
    # Names with a tie: two decided pairs of equal score among their attaching or rejecting ones.
    ends = decided.select(F.col("a").alias("n"), "score").unionByName(decided.select(F.col("b").alias("n"), "score"))
    tied = ends.groupBy("n", "score").count().where("count > 1").select("n").distinct().count()
    counts = (new.count(), ref.count(), both.count())
    merged = new.where(F.col("entity_id") != F.col("node_id")).count()

    a, b = statistics.median(secs["one_aggregation"][1:]), statistics.median(secs["two_way_reference"][1:])
    out = {
        "mentions": MENTIONS, "names": n_nodes, "candidate_pairs": n_pairs, "merge_edges": n_merges,
        "components_rounds": rounds, "guard_cut_edges": n_cut, "names_merged": merged,
        "seconds": {k: [round(s, 2) for s in v] for k, v in secs.items()},
        "median_seconds_after_warmup": {"one_aggregation": round(a, 2), "two_way_reference": round(b, 2)},
        "reference_over_product": round(b / a, 2),
        "names_differing_per_column": differ,
        "names_with_a_score_tie": tied,
        "how": "resolve.merge.decisions(nodes, labels, decided, cut) written to Parquet, against the form before "
               f"it; alternately, {ROUNDS} passes each, the first of each not counted; Spark local[2], 6g driver",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Spark local[2]",
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))

    assert counts == (n_nodes, n_nodes, n_nodes), counts
    assert merged > 0 and n_cut > 0  # merges and guard cuts both happen: the comparison has work in it
    assert differ["entity_id"] == differ["score"] == differ["rejected_score"] == 0, differ
    assert max(differ.values()) <= tied, (differ, tied)
