"""Resolution, part 2: score candidate pairs and decide which merge.

Features of a pair (a, b) of nodes, each in [0, 1]:

  name          best of: normalised Levenshtein similarity of the keys, the same on sorted
                tokens (word order), character-trigram Jaccard, 1 when the names are equal
                without spaces, 0.95 when one is the other's acronym, 0.9 when the tokens align
                with initials ("j smith" / "john smith").
  desc          overlap of the description content words, |A & B| / min(|A|, |B|); replaced by
                the cosine of the description embeddings where both exist; null when a side has
                no description.
  neighbours    overlap of the names each is related to, |A & B| / min(|A|, |B|); null when a
                side has none.
  no_context    1 when both desc and neighbours are null: the name is all there is.
  name_strong   (name - 0.8) / 0.2 above 0.8, else 0: a near-identical spelling is much
                stronger evidence than a merely similar one.
  small_edit    1 when the keys are at most 2 edits apart and both have 6+ characters (a typo).
  initials      1 when the tokens align with initials (see name).
  extra_tail    1 when the shorter name is the longer one cut short ("contoso" / "contoso
                emea", "paris" / "paris hilton", "nova 12" / "nova 12 pro"): the extra word
                often names a different thing.
  extra_head    1 when the shorter name ends the longer one ("nova 12" / "contoso nova 12"):
                often a brand or title in front.
  extra_inner   1 for other strict token subsets ("john smith" / "john a smith").
  number_clash  1 when the numbers in the names differ ("windows 10" / "windows 11").
  related       1 when either is a relationship partner of the other: a text that relates two
                names treats them as two things.

score = sigmoid(bias + sum(weight_f * f)) with missing features as 0, and 0 when both types are
known and differ. The weights (ResolveSection.weights) were fit by logistic regression on the
labelled set of tests/support/resolution_set.py (seed 1) and are evaluated on another seed.
Decisions: score >= auto_threshold merges ("similarity"); [band_low, auto_threshold) goes to the
LLM when adjudication is on ("llm" when it says yes); below the band nothing merges.

Reuse across runs (the `resolve_pairs` table). A pair's score reads only its two nodes' key,
type, descriptions and neighbour keys, and its adjudication request reads those plus the titles;
`node_signatures` hashes exactly these. A stored pair whose two signatures and `score_fingerprint`
(this module's SCORE_VERSION and the weights) still match has the score it would get again, so
`split_pairs` keeps it and hands only the others (a new or changed endpoint) to pair_features.
Thresholds are not in the fingerprint: decide() runs over every pair on each resolve.
"""

from __future__ import annotations

from corpusgraph.config import ResolveSection
from corpusgraph.stages.resolve.mentions import UNKNOWN

__all__ = ["pair_features", "score_pairs", "band", "decide", "FEATURES", "SCORE_VERSION", "node_signatures",
           "score_fingerprint", "with_signatures", "split_pairs", "stored_pairs"]

# Bump when pair_features or score_pairs change what a score is: stored scores stop matching.
SCORE_VERSION = "1"

FEATURES = ["name", "name_strong", "small_edit", "initials", "desc", "neighbours", "no_context", "extra_tail", "extra_head", "extra_inner",
            "number_clash", "related"]


def _overlap(x, y):
    """|x & y| / min(|x|, |y|) of two arrays; null when either is empty."""
    from pyspark.sql import functions as F

    small = F.least(F.size(x), F.size(y))
    return F.when(small > 0, F.size(F.array_intersect(x, y)) / small)


def _lev_sim(x, y):
    from pyspark.sql import functions as F

    longest = F.greatest(F.length(x), F.length(y))
    return F.when(longest > 0, 1 - F.levenshtein(x, y) / longest).otherwise(F.lit(0.0))


def _initials_align(ta, tb):
    """Same number of tokens and every token equal, nearly equal (a typo) or an initial of its
    counterpart, the last one not an initial: "j smith" / "john smith", "j smiht" / "john smith"."""
    from pyspark.sql import functions as F

    def compatible(i):
        x, y = F.try_element_at(ta, i), F.try_element_at(tb, i)
        initial = ((F.length(x) == 1) | (F.length(y) == 1)) & (F.substring(x, 1, 1) == F.substring(y, 1, 1))
        return F.coalesce((_lev_sim(x, y) >= 0.75) | initial, F.lit(False))

    same_shape = (F.size(ta) == F.size(tb)) & (F.size(ta) >= 2)
    ok = F.forall(F.sequence(F.lit(1), F.greatest(F.size(ta), F.lit(1))), compatible)
    lasts = (F.length(F.element_at(ta, -1)) > 1) & (F.length(F.element_at(tb, -1)) > 1)
    return same_shape & lasts & ok & (F.col("key_a") != F.col("key_b"))


def _cosine(x, y):
    from pyspark.sql import functions as F

    return F.aggregate(F.zip_with(x, y, lambda p, q: p * q), F.lit(0.0), lambda acc, v: acc + v)


def _node_side(nodes_df, vectors=None):
    """What a pair score reads of one node, computed once per node rather than once per pair:
    the key and its tokens, the tokens sorted and joined, the numbers in the key, the acronym and
    the name without spaces, and the three sets (character trigrams, description words, neighbour
    keys) as 64-bit hashes. A pair then intersects arrays of longs instead of strings (faster, every
    feature identical: tests/benchmarks/results/scale.json, findings.resolve_parts_2026_12_03): every
    set is already distinct, so |A & B| is the same count on the hashes unless two different
    strings of the two sides collide in 64 bits, and a union is |A| + |B| - |A & B|."""
    from pyspark.sql import functions as F

    def hashed(c):
        return F.transform(F.col(c), lambda s: F.xxhash64(s))

    n = nodes_df.select(
        "node_id", "key", "type", "tokens", "acronym", "nospace",
        F.array_join(F.array_sort("tokens"), " ").alias("sorted"),
        F.array_sort(F.regexp_extract_all("key", F.lit(r"(\d+)"), 1)).alias("nums"),
        F.xxhash64("key").alias("key_h"),
        hashed("grams").alias("grams_h"), hashed("dwords").alias("dwords_h"), hashed("neighbours").alias("neigh_h"),
    )
    if vectors is not None:
        return n.join(vectors.select("node_id", "vector"), "node_id", "left")
    return n.withColumn("vector", F.lit(None).cast("array<float>"))


def pair_features(pairs, nodes_df, vectors=None):
    """(a, b) -> (a, b, type_a, type_b, <FEATURES>). vectors: optional (node_id, vector) of
    L2-normalised description embeddings."""
    from pyspark.sql import functions as F

    n = _node_side(nodes_df, vectors)
    a = n.select(*[F.col(c).alias(c + "_a") for c in n.columns])
    b = n.select(*[F.col(c).alias(c + "_b") for c in n.columns])
    df = pairs.join(a, pairs["a"] == a["node_id_a"]).join(b, pairs["b"] == b["node_id_b"])
    ka, kb, ta, tb = F.col("key_a"), F.col("key_b"), F.col("tokens_a"), F.col("tokens_b")
    common_grams = F.size(F.array_intersect("grams_h_a", "grams_h_b"))
    tri = common_grams / (F.size("grams_h_a") + F.size("grams_h_b") - common_grams)
    acr = ((F.col("acronym_a") == F.col("nospace_b")) & (F.size(tb) == 1) & (F.size(ta) >= 2)) | (
        (F.col("acronym_b") == F.col("nospace_a")) & (F.size(ta) == 1) & (F.size(tb) >= 2))
    # Computed once as columns: each is read by two features.
    df = df.withColumn("_initials", _initials_align(ta, tb))
    df = df.withColumn("_name", F.greatest(
        _lev_sim(ka, kb), _lev_sim(F.col("sorted_a"), F.col("sorted_b")), tri,
        F.when(F.col("nospace_a") == F.col("nospace_b"), 1.0).otherwise(0.0),
        F.when(acr, 0.95).otherwise(0.0),
        F.when(F.col("_initials"), 0.9).otherwise(0.0),
    ))
    name, initials = F.col("_name"), F.col("_initials")
    small_edit = (F.levenshtein(ka, kb) <= 2) & (F.least(F.length(ka), F.length(kb)) >= 6)
    cos = F.when(F.col("vector_a").isNotNull() & F.col("vector_b").isNotNull(),
                 _cosine(F.col("vector_a"), F.col("vector_b")))
    desc = F.coalesce(cos, _overlap(F.col("dwords_h_a"), F.col("dwords_h_b")))
    neigh = _overlap(F.col("neigh_h_a"), F.col("neigh_h_b"))
    common = F.size(F.array_intersect(ta, tb))
    extra = (F.size(ta) != F.size(tb)) & (common == F.least(F.size(ta), F.size(tb)))
    short_key = F.when(F.size(ta) < F.size(tb), ka).otherwise(kb)
    long_key = F.when(F.size(ta) < F.size(tb), kb).otherwise(ka)
    tail = extra & F.startswith(long_key, F.concat(short_key, F.lit(" ")))
    head = extra & F.endswith(long_key, F.concat(F.lit(" "), short_key))
    related = F.array_contains("neigh_h_a", F.col("key_h_b")) | F.array_contains("neigh_h_b", F.col("key_h_a"))
    return df.select(
        "a", "b", F.col("type_a"), F.col("type_b"),
        name.cast("double").alias("name"),
        F.greatest(F.lit(0.0), (name - 0.8) / 0.2).cast("double").alias("name_strong"),
        small_edit.cast("double").alias("small_edit"),
        initials.cast("double").alias("initials"),
        desc.cast("double").alias("desc"),
        neigh.cast("double").alias("neighbours"),
        (desc.isNull() & neigh.isNull()).cast("double").alias("no_context"),
        tail.cast("double").alias("extra_tail"),
        (head & ~tail).cast("double").alias("extra_head"),
        (extra & ~head & ~tail).cast("double").alias("extra_inner"),
        (F.col("nums_a") != F.col("nums_b")).cast("double").alias("number_clash"),
        related.cast("double").alias("related"),
    )


def score_pairs(features, section: ResolveSection):
    """features -> features + score in [0, 1] and type_clash."""
    from pyspark.sql import functions as F

    w = section.weights
    z = F.lit(float(w.get("bias", 0.0)))
    for f in FEATURES:
        z = z + F.lit(float(w.get(f, 0.0))) * F.coalesce(F.col(f), F.lit(0.0))
    clash = (F.col("type_a") != F.col("type_b")) & (F.col("type_a") != UNKNOWN) & (F.col("type_b") != UNKNOWN)
    return features.withColumn("type_clash", clash).withColumn(
        "score", F.when(clash, F.lit(0.0)).otherwise(1 / (1 + F.exp(-z))))


def band(scored, section: ResolveSection):
    """Pairs in the ambiguous band, best first, at most max_adjudications of them."""
    from pyspark.sql import functions as F

    inside = scored.where((F.col("score") >= section.band_low) & (F.col("score") < section.auto_threshold))
    return inside.orderBy(F.col("score").desc(), "a", "b").limit(section.max_adjudications)


def decide(scored, section: ResolveSection, verdicts=None):
    """Every scored pair with its decision: merge (bool), method (similarity, llm) and reason.

    verdicts (a, b, same, status, error): the LLM's answers for band pairs. Reasons for a
    non-merge: type_clash, below_band, not_asked (band, adjudication off or over the cap),
    llm_no, llm_error, parse_error.
    """
    from pyspark.sql import functions as F

    s = scored
    if verdicts is not None:
        s = s.join(verdicts.select("a", "b", "same", F.col("status").alias("llm_status"),
                                   F.col("error").alias("llm_error")), ["a", "b"], "left")
    else:
        s = s.withColumn("same", F.lit(None).cast("boolean")).withColumn(
            "llm_status", F.lit(None).cast("string")).withColumn("llm_error", F.lit(None).cast("string"))
    auto = F.col("score") >= section.auto_threshold
    in_band = (F.col("score") >= section.band_low) & ~auto
    llm_yes = in_band & (F.col("llm_status") == "ok") & F.coalesce(F.col("same"), F.lit(False))
    reason = (F.when(auto | llm_yes, F.lit(None).cast("string"))
              .when(F.col("type_clash"), "type_clash")
              .when(~in_band, "below_band")
              .when(F.col("llm_status").isNull(), "not_asked")
              .when(F.col("llm_status") == "ok", "llm_no")
              .otherwise(F.col("llm_status")))
    return s.withColumn("merge", auto | llm_yes).withColumn(
        "method", F.when(auto, "similarity").when(llm_yes, "llm")).withColumn("reason", reason).withColumn(
        "error", F.col("llm_error"))


# -- reuse of stored pairs (resolve_pairs) ----------------------------------------------------------

SIGNATURE_COLS = ("key", "title", "type", "descs", "neighbours")


def node_signatures(nodes_df):
    """(node_id, sig): a hash of every node column a pair score or an adjudication request reads
    (the other node columns, tokens, grams, dwords, acronym, nospace, derive from these)."""
    from pyspark.sql import functions as F

    return nodes_df.select("node_id", F.substring(F.sha2(F.to_json(F.struct(*SIGNATURE_COLS)), 256), 1, 32)
                           .alias("sig"))


def score_fingerprint(section: ResolveSection) -> str:
    """What a stored score depends on besides its two nodes: the scoring code's version and the weights."""
    import hashlib
    import json

    payload = json.dumps({"version": SCORE_VERSION, "features": FEATURES, "unknown": UNKNOWN,
                          "weights": {k: float(v) for k, v in section.weights.items()}}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def with_signatures(pairs, sigs):
    """(a, b) -> (a, b, sig_a, sig_b)."""
    from pyspark.sql import functions as F

    return pairs.select("a", "b").join(sigs.select(F.col("node_id").alias("a"), F.col("sig").alias("sig_a")), "a") \
        .join(sigs.select(F.col("node_id").alias("b"), F.col("sig").alias("sig_b")), "b").select("a", "b", "sig_a", "sig_b")


def split_pairs(current, stored, fingerprint: str):
    """(reused, todo). current: (a, b, sig_a, sig_b) of this run's candidate pairs; stored: the
    resolve_pairs table. reused: current pairs whose stored row has the same signatures and score
    fingerprint, with the stored score, type_clash and verdict columns; todo: (a, b) of the rest,
    the only pairs that need scoring."""
    from pyspark.sql import functions as F

    keys = ["a", "b", "sig_a", "sig_b"]
    valid = stored.where(F.col("score_fp") == fingerprint).select(
        *keys, "score", "type_clash", "verdict_fp", "same", "llm_status", "llm_error")
    reused = current.join(valid, keys, "inner")
    todo = current.join(valid.select(*keys), keys, "left_anti").select("a", "b")
    return reused, todo


def stored_pairs(decided, current, score_fp: str, verdict_fp: str | None):
    """decide()'s rows with their signatures and fingerprints: the next resolve_pairs table.
    verdict_fp goes only on rows that hold a verdict (llm_status set)."""
    from pyspark.sql import functions as F

    return decided.join(current, ["a", "b"]).select(
        "a", "b", "sig_a", "sig_b", F.lit(score_fp).alias("score_fp"), "score", "type_clash",
        F.when(F.col("llm_status").isNotNull(), F.lit(verdict_fp)).cast("string").alias("verdict_fp"),
        "same", "llm_status", "llm_error", "merge", "method", "reason")
