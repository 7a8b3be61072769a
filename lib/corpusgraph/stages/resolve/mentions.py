"""resolve: extractions -> entities, entity_aliases, relationships, claims.

The base unit is the normalised name (case, accents, punctuation, spacing and legal suffixes
ignored): mentions with the same one are the same entity ("exact"). With method "similarity"
those names are then merged further by blocking, pair scoring, LLM adjudication of the ambiguous
band and guarded connected components (stages/resolve/blocking.py, stages/resolve/score.py, stages/resolve/merge.py);
the outcome reaches this module as a `mapping` (key -> entity_id, score, method) that every
output below accepts. Every mention's decision is kept in entity_aliases; relationship weights
add up over all units that state them and over merged endpoints. Relationship endpoints the
model named but did not list as entities become entities of type UNKNOWN rather than being
dropped, so no stated edge is lost.
"""

from __future__ import annotations

from corpusgraph.config import ResolveSection

__all__ = ["live_extractions", "stated_edges", "mentions", "remap", "grouped", "long_descriptions", "entities",
           "entity_aliases", "relationships", "claims", "normalised", "node_id"]

UNKNOWN = "UNKNOWN"
# Accented letters and their plain forms, one character each (Spark's translate is per character).
_ACCENTED = "àáâãäåāăąçćčďèéêëēėęěìíîïīįłñńňòóôõöøōőŕřśšşťùúûüūůűųýÿźżž"
_PLAIN = "aaaaaaaaacccdeeeeeeeeiiiiiilnnnoooooooorrssstuuuuuuuuyyzzz"


def normalised(col, section: ResolveSection):
    """Spark column expression: the merge key of a name."""
    from pyspark.sql import functions as F

    key = F.lower(F.trim(col))
    if section.fold_accents:
        key = F.translate(key, _ACCENTED, _PLAIN)
    key = F.regexp_replace(key, r"[^\p{L}\p{N}]+", " ")
    if section.strip_suffixes:
        key = F.regexp_replace(key, r"(\s+(" + "|".join(section.strip_suffixes) + r"))+\s*$", "")
    return F.trim(F.regexp_replace(key, r"\s+", " "))


def _id(col):
    from pyspark.sql import functions as F

    return F.substring(F.sha2(col, 256), 1, 32)


def node_id(key_col):
    """The id of a normalised name: also its entity id when nothing else merges into it."""
    return _id(key_col)


def live_extractions(extractions, text_units, prompt_hash: str, model: str):
    """Successful extractions of this prompt and model for units that still exist: the columns
    resolve reads (unit_id, entities, relationships, claims). The rest (the raw answers above
    all, most of the table's bytes) stays behind: resolve saves this frame, and writing the raw
    answers out again took most of that save (tests/benchmarks/results/scale.json,
    findings.resolve_2026_12_04_night)."""
    from pyspark.sql import functions as F

    ok = extractions.where(
        (F.col("status") == "ok") & (F.col("prompt_hash") == prompt_hash) & (F.col("model") == model)
    ).select("unit_id", "entities", "relationships", "claims")
    return ok.join(text_units.select("unit_id"), "unit_id", "left_semi")


def stated_edges(live, section: ResolveSection):
    """One row per relationship a unit states, with both endpoints' merge keys: unit_id, source,
    target, ka, kb, description, strength. Mentions, nodes and relationships all read the
    endpoints; resolve saves this frame once so the names are normalised once, not three times."""
    from pyspark.sql import functions as F

    r = live.select("unit_id", F.explode("relationships").alias("r"))
    return r.select(
        "unit_id", F.col("r.source").alias("source"), F.col("r.target").alias("target"),
        normalised(F.col("r.source"), section).alias("ka"), normalised(F.col("r.target"), section).alias("kb"),
        F.col("r.description").alias("description"), F.col("r.strength").alias("strength"),
    )


def mentions(live, section: ResolveSection, stated=None):
    """One row per (unit, named thing): listed entities plus relationship endpoints. `stated`:
    stated_edges(live, section), when the caller has it already."""
    from pyspark.sql import functions as F

    listed = live.select("unit_id", F.explode("entities").alias("e")).select(
        "unit_id", F.col("e.name").alias("name"), F.col("e.type").alias("type"),
        F.col("e.description").alias("description"), F.lit(1).alias("listed"),
    ).withColumn("key", normalised(F.col("name"), section))
    stated = stated_edges(live, section) if stated is None else stated
    ends = stated.select("unit_id", F.col("source").alias("name"), F.col("ka").alias("key")).unionByName(
        stated.select("unit_id", F.col("target").alias("name"), F.col("kb").alias("key"))
    ).select("unit_id", "name", F.lit(UNKNOWN).alias("type"), F.lit(None).cast("string").alias("description"),
             F.lit(0).alias("listed"), "key")
    out = listed.unionByName(ends)
    return out.where(F.length("key") > 0).withColumn("entity_id", node_id(F.col("key")))


def remap(ments, mapping):
    """Mentions with entity_id taken from a resolution mapping (key -> entity_id); keys the
    mapping lacks keep their own id."""
    from pyspark.sql import functions as F

    if mapping is None:
        return ments
    m = mapping.select("key", F.col("entity_id").alias("_resolved"))
    return ments.join(m, "key", "left").withColumn("entity_id", F.coalesce("_resolved", "entity_id")).drop("_resolved")


def grouped(ments):
    """One row per entity of the (remapped) mentions: its titles, type, descriptions (and them
    joined), aliases and units. long_descriptions and entities both read it; resolve saves it
    once, so the group-by over every mention runs once, not twice."""
    from pyspark.sql import functions as F

    return ments.groupBy("entity_id").agg(
        F.mode(F.when(F.col("listed") == 1, F.col("name")), True).alias("listed_title"),
        F.min("name").alias("any_title"),
        F.mode(F.when(F.col("listed") == 1, F.col("type")), True).alias("listed_type"),
        F.array_sort(F.collect_set(F.col("description"))).alias("descs"),
        F.array_sort(F.collect_set("name")).alias("aliases"),
        F.array_sort(F.collect_set("unit_id")).alias("unit_ids"),
    ).withColumn("title", F.coalesce("listed_title", "any_title")).withColumn(
        "type", F.coalesce("listed_type", F.lit(UNKNOWN))
    ).withColumn("joined", F.concat_ws(" ", F.filter("descs", lambda d: F.length(F.trim(d)) > 0)))


def long_descriptions(groups, section: ResolveSection):
    """Entities (of `grouped(mentions)`) whose joined descriptions exceed max_description_chars:
    the summariser's input (entity_id, title, type, text)."""
    from pyspark.sql import functions as F

    return groups.where(F.length("joined") > section.max_description_chars).select(
        "entity_id", "title", "type", F.col("joined").alias("text")
    )


def entities(groups, rels, section: ResolveSection, summaries=None):
    """One row per entity of `grouped(mentions)`. `summaries` (entity_id, summary): LLM
    summaries of the long joined descriptions; an entity without one keeps its descriptions
    joined, cut at the limit."""
    from pyspark.sql import functions as F

    ents = groups
    if summaries is not None:
        ents = ents.join(summaries.select("entity_id", "summary"), "entity_id", "left")
    else:
        ents = ents.withColumn("summary", F.lit(None).cast("string"))
    degree = rels.select(F.explode(F.array("source_id", "target_id")).alias("entity_id")).groupBy("entity_id").agg(
        F.count("*").cast("int").alias("degree")
    )
    return ents.join(degree, "entity_id", "left").select(
        "entity_id",
        "title",
        "type",
        F.coalesce(F.col("summary"), F.substring("joined", 1, section.max_description_chars)).alias("description"),
        "aliases",
        "unit_ids",
        F.size("unit_ids").cast("int").alias("frequency"),
        F.coalesce("degree", F.lit(0)).cast("int").alias("degree"),
    )


_DECISION_COLS = (("exact_id", "string"), ("rejected_id", "string"), ("rejected_score", "double"),
                  ("rejected_reason", "string"), ("error", "string"))


def entity_aliases(ments, decisions=None):
    """One row per distinct mention (trimmed, lower-cased): the entity it went to and why.

    decisions (key, entity_id, score, method, exact_id, rejected_id, rejected_score,
    rejected_reason, error), from resolve.merge.decisions: without it every mention is an exact
    merge onto its normalised name. exact_id is the entity the mention had by name alone, so a
    merge is undone by mapping its mentions back to exact_id; rejected_* is the best candidate
    it was not merged with and why (below_band, llm_no, llm_error, parse_error, guard, ...).
    """
    from pyspark.sql import functions as F

    per = ments.select(F.lower(F.trim("name")).alias("mention"), "key").distinct().groupBy("mention").agg(
        F.min("key").alias("key")
    )
    if decisions is None:
        out = per.withColumn("entity_id", node_id(F.col("key"))).withColumn("score", F.lit(1.0)).withColumn(
            "method", F.lit("exact")).withColumn("exact_id", F.col("entity_id"))
        for c, t in _DECISION_COLS[1:]:
            out = out.withColumn(c, F.lit(None).cast(t))
    else:
        out = per.join(decisions, "key", "left").withColumn("exact_id", F.coalesce("exact_id", node_id(F.col("key"))))
        out = out.withColumn("entity_id", F.coalesce("entity_id", "exact_id")).withColumn(
            "score", F.coalesce("score", F.lit(1.0))).withColumn("method", F.coalesce("method", F.lit("exact")))
    return out.select(_id(F.col("mention")).alias("mention_key"), "mention", "entity_id", "score", "method",
                      *[c for c, _ in _DECISION_COLS])


def _endpoint(name_col, section: ResolveSection):
    """(key, entity id) columns of a relationship or claim endpoint name."""
    key = normalised(name_col, section)
    return key, node_id(key)


def _map_ids(df, cols, mapping):
    """Replace the node ids in `cols` by their resolved entity ids."""
    from pyspark.sql import functions as F

    if mapping is None:
        return df
    m = mapping.select("node_id", "entity_id")
    for c in cols:
        df = df.join(m.withColumnRenamed("node_id", c).withColumnRenamed("entity_id", "_to"), c, "left").withColumn(
            c, F.coalesce("_to", c)).drop("_to")
    return df


def relationships(live, section: ResolveSection, mapping=None, stated=None):
    """Undirected edges keyed by their sorted endpoint ids; strengths add up across units and,
    with a mapping, across the merged names of each endpoint. An edge whose two ends merged into
    one entity is dropped (an entity is not its own neighbour). `stated`: stated_edges(live,
    section), when the caller has it already."""
    from pyspark.sql import functions as F

    stated = stated_edges(live, section) if stated is None else stated
    r = stated.select(
        "unit_id", node_id(F.col("ka")).alias("a"), node_id(F.col("kb")).alias("b"), "ka", "kb", "description",
        "strength",
    ).where((F.length("ka") > 0) & (F.length("kb") > 0))
    r = _map_ids(r, ["a", "b"], mapping).where(F.col("a") != F.col("b"))
    r = r.withColumn("source_id", F.least("a", "b")).withColumn("target_id", F.greatest("a", "b"))
    return r.groupBy("source_id", "target_id").agg(
        F.array_sort(F.collect_set("description")).alias("descs"),
        F.sum("strength").cast("double").alias("weight"),
        F.array_sort(F.collect_set("unit_id")).alias("unit_ids"),
    ).select(
        _id(F.concat_ws("|", "source_id", "target_id")).alias("rel_id"),
        "source_id",
        "target_id",
        F.substring(F.concat_ws(" ", "descs"), 1, section.max_description_chars).alias("description"),
        "weight",
        "unit_ids",
    )


def claims(live, section: ResolveSection, mapping=None):
    from pyspark.sql import functions as F

    c = live.select("unit_id", F.explode("claims").alias("c"))
    _, subject = _endpoint(F.col("c.subject"), section)
    _, obj = _endpoint(F.col("c.object"), section)
    out = c.select(
        _id(F.concat_ws("|", "unit_id", "c.subject", "c.object", "c.type", "c.description")).alias("claim_id"),
        subject.alias("subject_id"),
        obj.alias("object_id"),
        F.col("c.type").alias("type"),
        F.col("c.status").alias("status"),
        F.col("c.description").alias("description"),
        F.col("c.start").alias("start"),
        F.col("c.end").alias("end"),
        "unit_id",
    ).dropDuplicates(["claim_id"])
    return _map_ids(out, ["subject_id", "object_id"], mapping)
