"""Resolution, part 1: the names to resolve (nodes) and the candidate pairs worth scoring.

A node is one normalised name (resolve.normalised) with everything its mentions said: type,
descriptions, the names it is related to. Comparing every node with every other is n^2, so
nodes are compared only inside blocks, which are cheap keys two spellings of one thing are
likely to share:

  ft:  first token              "contoso" for "Contoso" and "Contoso Pharma"
  lt:  last token (multi-word)  "smith" for "J. Smith" and "John Smith"
  st:  sorted tokens            word order: "Smith John" and "John Smith"
  ns:  name without spaces      "iphone15pro" for "iPhone15 Pro" and "iPhone 15 Pro"
  ac:  acronym                  "ibm" for "IBM" and "International Business Machines"
  sx:  soundex of first and last token  "Jon Smyth" and "John Smith"
  mh:  MinHash LSH bands over character trigrams: names that differ in form (typos,
       transliterations) share a band with a probability that grows with their trigram
       Jaccard similarity, 1 - (1 - J^rows)^bands.

The trigram MinHash signature is the blocking "embedding" at every corpus size: it costs a few
hashes per name in Spark, where the MiniLM model manages about 30 texts/s on this CPU, and
names that differ in form differ in characters, not in meaning. Description embeddings can
enter the pair score instead (resolve.score.pair_features takes optional node vectors); the
resolve step passes none, since the `embeddings` table is written after resolve and by entity,
so using it would make resolution depend on the warehouse's history (steps.index.resolve).

Keys are type-free on purpose: a relationship endpoint the model did not list has type
UNKNOWN and must still meet its typed spelling; type conflicts are settled in the score.
Block sizes are capped: a block with more than max_block_size names (the first token "john" in
a big corpus) is not paired all-to-all but by a sorted window, each name with the next
`window` names in key order, so pairs stay at most n * keys * max(max_block_size, window).
"""

from __future__ import annotations

from corpusgraph.config import ResolveSection
from corpusgraph.stages.resolve.mentions import UNKNOWN, node_id

__all__ = ["nodes", "block_keys", "candidate_pairs", "trigrams", "minhash_signature", "STOP_WORDS"]

# Words that carry no identity: ignored in acronyms and in description overlap.
STOP_WORDS = ["a", "an", "and", "the", "of", "for", "in", "on", "at", "to", "by", "with", "from", "is", "was",
              "are", "were", "its", "his", "her", "their", "that", "this", "which", "who", "has", "had", "have",
              "as", "it", "be", "been", "or", "de", "la", "le", "du", "der", "die", "und", "van", "von"]


def trigrams(key_col):
    """Character trigrams of ' key ' (padded, so short names still have several)."""
    from pyspark.sql import functions as F

    padded = F.concat(F.lit(" "), key_col, F.lit(" "))
    return F.array_distinct(F.transform(F.sequence(F.lit(1), F.greatest(F.length(padded) - 2, F.lit(1))),
                                        lambda i: F.substring(padded, i, 3)))


def minhash_signature(grams_col, n: int):
    """n MinHash values of a set of strings: the minimum of a seeded hash over the set, one per
    seed. Two sets agree on one value with probability equal to their Jaccard similarity."""
    from pyspark.sql import functions as F

    return F.transform(F.sequence(F.lit(0), F.lit(n - 1)),
                       lambda j: F.array_min(F.transform(grams_col, lambda g: F.xxhash64(g, j))))


def nodes(ments, live, section: ResolveSection, stated=None):
    """One row per normalised name: node_id, key, title, type, descriptions, neighbour keys,
    mention count, and the derived columns blocking and scoring use (tokens, trigrams,
    description words, acronym). `stated`: resolve.stated_edges(live, section), when the caller
    has it already (the neighbour keys come from it)."""
    from pyspark.sql import functions as F

    from corpusgraph.stages.resolve.mentions import stated_edges

    base = ments.groupBy("key").agg(
        F.mode(F.when(F.col("listed") == 1, F.col("type")), True).alias("ltype"),
        F.mode(F.when(F.col("listed") == 1, F.col("name")), True).alias("lname"),
        F.min("name").alias("aname"),
        F.array_sort(F.collect_set("description")).alias("descs"),
        F.count("*").alias("mentions"),
    )
    rels = (stated_edges(live, section) if stated is None else stated).select("ka", "kb")
    rels = rels.where((F.length("ka") > 0) & (F.length("kb") > 0) & (F.col("ka") != F.col("kb")))
    both = rels.select(F.col("ka").alias("key"), F.col("kb").alias("nkey")).unionByName(
        rels.select(F.col("kb").alias("key"), F.col("ka").alias("nkey")))
    neigh = both.groupBy("key").agg(F.array_sort(F.collect_set("nkey")).alias("neighbours"))
    out = base.join(neigh, "key", "left")
    tokens = F.split(F.col("key"), " ")
    words = F.split(F.lower(F.regexp_replace(F.concat_ws(" ", "descs"), r"[^\p{L}\p{N}]+", " ")), " ")
    stop = F.array(*[F.lit(w) for w in STOP_WORDS])
    content = F.filter(tokens, lambda t: ~F.array_contains(stop, t))
    initials = F.array_join(F.transform(content, lambda t: F.substring(t, 1, 1)), "")
    return out.select(
        node_id(F.col("key")).alias("node_id"),
        "key",
        F.coalesce("lname", "aname").alias("title"),
        F.coalesce("ltype", F.lit(UNKNOWN)).alias("type"),
        "descs",
        F.coalesce("neighbours", F.array().cast("array<string>")).alias("neighbours"),
        "mentions",
        tokens.alias("tokens"),
        trigrams(F.col("key")).alias("grams"),
        F.array_distinct(F.filter(words, lambda w: (F.length(w) > 2) & ~F.array_contains(stop, w))).alias("dwords"),
        # "ibm" for "international business machines"; a short one-word name is its own acronym.
        F.when(F.size(content) >= 2, initials).when(
            (F.size(tokens) == 1) & (F.length("key") <= 6), F.col("key")).alias("acronym"),
        F.regexp_replace("key", " ", "").alias("nospace"),
    )


def block_keys(nodes_df, section: ResolveSection):
    """(node_id, key, bkey): every block a node belongs to."""
    from pyspark.sql import functions as F

    tokens = F.col("tokens")
    first, last = tokens.getItem(0), F.element_at(tokens, -1)
    multi = F.size(tokens) >= 2
    keys = [
        F.when(F.length(first) >= 2, F.concat(F.lit("ft:"), first)),
        F.when(multi & (F.length(last) >= 2), F.concat(F.lit("lt:"), last)),
        F.when(multi, F.concat(F.lit("st:"), F.array_join(F.array_sort(tokens), " "))),
        F.concat(F.lit("ns:"), F.col("nospace")),
        F.when(F.length("acronym") >= 2, F.concat(F.lit("ac:"), F.col("acronym"))),
        F.when(F.length(F.soundex(first)) > 0,
               F.concat(F.lit("sx:"), F.soundex(first), F.lit("|"), F.soundex(last))),
    ]
    n = section.minhash_bands * section.minhash_rows
    with_sig = nodes_df
    if section.minhash_bands > 0:
        with_sig = nodes_df.withColumn("_sig", minhash_signature(F.col("grams"), n))
        r = section.minhash_rows
        keys += [F.concat(F.lit(f"mh{b}:"), F.xxhash64(F.slice("_sig", b * r + 1, r)).cast("string"))
                 for b in range(section.minhash_bands)]
    return with_sig.select("node_id", "key", F.explode(F.array(*keys)).alias("bkey")).where(
        F.col("bkey").isNotNull()).distinct()


def candidate_pairs(keys_df, section: ResolveSection):
    """(a, b) with a < b: node pairs sharing a block. A block up to max_block_size is paired
    all-to-all; a bigger one by a sorted window (each node with the `window` next in key order)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    sized = keys_df.withColumn("bsize", F.count("*").over(Window.partitionBy("bkey")))
    small = sized.where(F.col("bsize") <= section.max_block_size).select("bkey", "node_id")
    all_pairs = small.alias("x").join(small.alias("y"), "bkey").where(F.col("x.node_id") < F.col("y.node_id")).select(
        F.col("x.node_id").alias("a"), F.col("y.node_id").alias("b"))
    big = sized.where(F.col("bsize") > section.max_block_size).withColumn(
        "rn", F.row_number().over(Window.partitionBy("bkey").orderBy("key", "node_id")))
    ahead = big.select("bkey", F.col("node_id").alias("other"),
                       F.explode(F.sequence(F.col("rn") - section.window, F.col("rn") - 1)).alias("rn"))
    windowed = big.join(ahead, ["bkey", "rn"]).select(
        F.least("node_id", "other").alias("a"), F.greatest("node_id", "other").alias("b"))
    return all_pairs.unionByName(windowed).distinct()
