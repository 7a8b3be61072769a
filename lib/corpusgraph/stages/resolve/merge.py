"""Resolution, part 3: merged groups (connected components) and the decision of every name.

Connected components by min-label propagation with hooking and pointer jumping, in
DataFrames (the GraphFrames jar has no Spark 4 build to fetch): each round a node takes the
smallest label among itself and its neighbours, the node its neighbour is labelled with takes
it too (hooking: one tree joins the other at its root, not only at the edge's two ends), then
every node takes the label of its label. Labels stay node ids of the node's own component and
only fall, and a round that changes nothing leaves each component labelled with its smallest
id, as plain propagation does; but plain propagation moves a label one edge per round, so a
chain of merges whose ids are in random order (they are hashes) took rounds in proportion to
its length, where hooking needs a few rounds whatever the order
(tests/benchmarks/results/scale.json, findings.connected_components). The loop and its
convergence test (an action) are the step's (steps.index.resolve); `cc_step` is one pure round.

Chain guard. Merging is transitive, so a chain a-b, b-c, c-d of pairwise-plausible merges can
join names that share nothing. A component larger than max_component_size is therefore re-cut:
  1. inside it, only edges scoring at least strict_threshold are kept and components are
     recomputed over them (`guard_edges`);
  2. a component still too large becomes a star (`star_cut`): its medoid is the member with
     the highest sum of edge scores, members with a kept edge to the medoid join it, every
     other member stays on its own. Nothing is merged through an intermediary.
Every cut edge is recorded as a non-merge with reason "guard".
"""

from __future__ import annotations

from corpusgraph.config import ResolveSection

__all__ = ["cc_start", "cc_step", "changed", "component_sizes", "oversized_members", "guard_edges", "star_cut",
           "decisions", "mapping_columns", "with_cut"]


def cc_start(nodes_df):
    """Every node in its own component."""
    from pyspark.sql import functions as F

    return nodes_df.select("node_id", F.col("node_id").alias("label"))


def _both_ways(edges):
    from pyspark.sql import functions as F

    return edges.select(F.col("a").alias("src"), F.col("b").alias("dst")).unionByName(
        edges.select(F.col("b").alias("src"), F.col("a").alias("dst")))


def cc_step(labels, edges):
    """One round: min-label propagation, hooking of each edge's far label onto the near one's
    root, and one pointer jump."""
    from pyspark.sql import functions as F

    ends = _both_ways(edges).join(labels.select(F.col("node_id").alias("src"), F.col("label").alias("from_src")),
                                  "src").join(labels.select(F.col("node_id").alias("dst"),
                                                            F.col("label").alias("of_dst")), "dst")
    sent = ends.select(F.col("dst").alias("node_id"), F.col("from_src").alias("label"))
    hooked = ends.select(F.col("of_dst").alias("node_id"), F.col("from_src").alias("label"))
    best = labels.unionByName(sent).unionByName(hooked).groupBy("node_id").agg(F.min("label").alias("label"))
    hop = best.select(F.col("node_id").alias("label"), F.col("label").alias("label2"))
    return best.join(hop, "label", "left").select("node_id", F.least("label", F.coalesce("label2", "label")).alias("label"))


def changed(old, new):
    """Rows whose label moved in a round (0 means converged)."""
    from pyspark.sql import functions as F

    return old.join(new.withColumnRenamed("label", "new"), "node_id").where(F.col("label") != F.col("new"))


def component_sizes(labels):
    return labels.groupBy("label").count().withColumnRenamed("count", "size")


def oversized_members(labels, section: ResolveSection):
    """(node_id) of every member of a component over max_component_size: the only nodes whose
    components the chain guard can change. Every edge outside them is kept, so the components
    there are already the ones a recomputation would give, labels included (smallest id)."""
    from pyspark.sql import functions as F

    big = component_sizes(labels).where(F.col("size") > section.max_component_size).select("label")
    return labels.join(big, "label", "left_semi").select("node_id")


def guard_edges(edges, labels, section: ResolveSection):
    """(kept, cut): inside a component over max_component_size only edges clearing
    strict_threshold stay."""
    from pyspark.sql import functions as F

    big = component_sizes(labels).where(F.col("size") > section.max_component_size).select("label")
    flagged = edges.join(labels.withColumnRenamed("node_id", "a"), "a").join(big.withColumn("big", F.lit(True)),
                                                                            "label", "left")
    weak = F.coalesce(F.col("big"), F.lit(False)) & (F.col("score") < section.strict_threshold)
    cols = edges.columns
    return flagged.where(~weak).select(*cols), flagged.where(weak).select(*cols)


def star_cut(labels, edges, section: ResolveSection):
    """(labels, cut edges): components still over max_component_size become stars around their
    medoid (highest sum of edge scores; ties to the smallest id)."""
    from pyspark.sql import functions as F

    big = component_sizes(labels).where(F.col("size") > section.max_component_size).select("label")
    members = labels.join(big, "label", "left_semi")
    ends = edges.select(F.col("a").alias("node_id"), "score").unionByName(edges.select(F.col("b").alias("node_id"), "score"))
    strength = members.join(ends, "node_id").groupBy("label", "node_id").agg(F.sum("score").alias("w"))
    medoid = strength.groupBy("label").agg(
        F.min_by("node_id", F.struct(-F.col("w"), F.col("node_id"))).alias("medoid"))
    in_big = edges.join(members.select(F.col("node_id").alias("a"), "label"), "a").join(medoid, "label")
    spokes = in_big.where((F.col("a") == F.col("medoid")) | (F.col("b") == F.col("medoid")))
    joined = spokes.select(F.when(F.col("a") == F.col("medoid"), F.col("b")).otherwise(F.col("a")).alias("node_id"),
                           "medoid").unionByName(medoid.select(F.col("medoid").alias("node_id"), "medoid"))
    new_labels = labels.join(joined, "node_id", "left").join(big.withColumn("big", F.lit(True)), "label", "left").select(
        "node_id",
        F.when(F.col("big").isNull(), F.col("label")).otherwise(F.coalesce("medoid", "node_id")).alias("label"))
    cut = in_big.where((F.col("a") != F.col("medoid")) & (F.col("b") != F.col("medoid"))).select(*edges.columns)
    return new_labels, cut


def decisions(nodes_df, labels, decided, cut=None):
    """Per node key: (key, node_id, entity_id, score, method, exact_id, rejected_id,
    rejected_score, rejected_reason, error), the mapping resolve.py's outputs take.

    A node that is its component's label keeps its id ("exact", 1.0); any other took the best
    merge edge it has to a member of its component (its score and method). rejected_* is the
    best-scoring pair of the node that did not merge it with its candidate's entity. Ties go to
    the larger other id, so the same inputs always give the same mapping.
    decided: resolve.score.decide's rows; cut: edges the chain guard dropped.

    Cost: each decided pair takes its two entities in two joins, and only then is it turned into
    its two ends; one aggregation per node finds both its attaching edge and its best rejection.
    (Joining the labels onto both orientations, twice the pairs, and aggregating twice grew
    faster than the corpus: tests/benchmarks/results/scale.json, findings.one_m_2026_12_05.)
    """
    from pyspark.sql import functions as F

    lab = labels.select("node_id", F.col("label").alias("entity_id"))
    d = with_cut(decided.select("a", "b", "score", "merge", "method", "reason", "error"), cut)
    d = d.join(lab.select(F.col("node_id").alias("a"), F.col("entity_id").alias("ea")), "a").join(
        lab.select(F.col("node_id").alias("b"), F.col("entity_id").alias("eb")), "b")
    same = F.col("ea") == F.col("eb")
    d = d.select("score", "method", "error", (F.col("merge") & same).alias("attaches"), (~same).alias("rejects"),
                 F.coalesce("reason", F.lit("guard")).alias("reason"),
                 F.array(F.struct(F.col("a").alias("node_id"), F.col("b").alias("other"),
                                  F.col("eb").alias("other_entity")),
                         F.struct(F.col("b").alias("node_id"), F.col("a").alias("other"),
                                  F.col("ea").alias("other_entity"))).alias("ends"))
    ends = d.select(F.explode("ends").alias("e"), "*").select("e.*", "score", "method", "error", "attaches",
                                                              "rejects", "reason")
    order = F.struct("score", "other")
    best = ends.groupBy("node_id").agg(
        F.max_by(F.struct("score", "method", "error"), F.when(F.col("attaches"), order)).alias("att"),
        F.max_by(F.struct("other_entity", "score", "reason", "error"), F.when(F.col("rejects"), order)).alias("rej"))
    named = nodes_df.select("node_id", "key").join(lab, "node_id", "left")
    return mapping_columns(named.join(best, "node_id", "left"))


def with_cut(decided, cut):
    """Decided pairs with the chain guard's cut edges (a, b) turned into non-merges, reason "guard";
    as they are when cut is None."""
    from pyspark.sql import functions as F

    if cut is None:
        return decided
    cut_keys = cut.select("a", "b", F.lit(True).alias("was_cut"))
    d = decided.join(cut_keys, ["a", "b"], "left").withColumn("was_cut", F.coalesce("was_cut", F.lit(False)))
    return d.withColumn("merge", F.col("merge") & ~F.col("was_cut")).withColumn(
        "reason", F.when(F.col("was_cut"), "guard").otherwise(F.col("reason")))


def mapping_columns(joined):
    """decisions()'s output columns from each node's (node_id, key, entity_id) and its best
    attaching edge `att` (score, method, error) and best rejection `rej` (other_entity, score,
    reason, error), either null."""
    from pyspark.sql import functions as F

    own = F.col("entity_id") == F.col("node_id")
    return joined.select(
        "key", "node_id",
        F.coalesce("entity_id", "node_id").alias("entity_id"),
        F.when(own | F.col("att").isNull(), F.lit(1.0)).otherwise(F.col("att.score")).alias("score"),
        F.when(own | F.col("att").isNull(), F.lit("exact")).otherwise(F.col("att.method")).alias("method"),
        F.col("node_id").alias("exact_id"),
        F.col("rej.other_entity").alias("rejected_id"),
        F.col("rej.score").alias("rejected_score"),
        F.col("rej.reason").alias("rejected_reason"),
        F.coalesce(F.when(~own, F.col("att.error")), F.col("rej.error")).alias("error"),
    )
