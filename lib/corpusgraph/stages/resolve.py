"""resolve: extractions -> entities, entity_aliases, relationships, claims.

Exact merging on a normalised name (case, punctuation, spacing and legal suffixes ignored).
Every mention's decision is kept in entity_aliases; relationship weights add up over all units
that state them. Relationship endpoints the model named but did not list as entities become
entities of type UNKNOWN rather than being dropped, so no stated edge is lost.
"""

from __future__ import annotations

from ..config import ResolveSection

__all__ = ["live_extractions", "mentions", "entities", "entity_aliases", "relationships", "claims", "normalised"]

UNKNOWN = "UNKNOWN"


def normalised(col, section: ResolveSection):
    """Spark column expression: the merge key of a name."""
    from pyspark.sql import functions as F

    key = F.lower(F.trim(col))
    key = F.regexp_replace(key, r"[^\p{L}\p{N}]+", " ")
    if section.strip_suffixes:
        key = F.regexp_replace(key, r"\s+(" + "|".join(section.strip_suffixes) + r")\s*$", "")
    return F.trim(F.regexp_replace(key, r"\s+", " "))


def _id(col):
    from pyspark.sql import functions as F

    return F.substring(F.sha2(col, 256), 1, 32)


def live_extractions(extractions, text_units, prompt_hash: str, model: str):
    """Successful extractions of this prompt and model for units that still exist."""
    from pyspark.sql import functions as F

    ok = extractions.where(
        (F.col("status") == "ok") & (F.col("prompt_hash") == prompt_hash) & (F.col("model") == model)
    )
    return ok.join(text_units.select("unit_id"), "unit_id", "left_semi")


def mentions(live, section: ResolveSection):
    """One row per (unit, named thing): listed entities plus relationship endpoints."""
    from pyspark.sql import functions as F

    listed = live.select("unit_id", F.explode("entities").alias("e")).select(
        "unit_id", F.col("e.name").alias("name"), F.col("e.type").alias("type"),
        F.col("e.description").alias("description"), F.lit(1).alias("listed"),
    )
    rels = live.select("unit_id", F.explode("relationships").alias("r"))
    ends = rels.select("unit_id", F.col("r.source").alias("name")).unionByName(
        rels.select("unit_id", F.col("r.target").alias("name"))
    ).select("unit_id", "name", F.lit(UNKNOWN).alias("type"), F.lit(None).cast("string").alias("description"),
             F.lit(0).alias("listed"))
    out = listed.unionByName(ends).withColumn("key", normalised(F.col("name"), section))
    return out.where(F.length("key") > 0).withColumn("entity_id", _id(F.col("key")))


def entities(ments, rels, section: ResolveSection):
    from pyspark.sql import functions as F

    listed_type = F.mode(F.when(F.col("listed") == 1, F.col("type")), True)
    ents = ments.groupBy("entity_id").agg(
        F.mode(F.when(F.col("listed") == 1, F.col("name")), True).alias("listed_title"),
        F.min("name").alias("any_title"),
        listed_type.alias("listed_type"),
        F.array_sort(F.collect_set(F.col("description"))).alias("descs"),
        F.array_sort(F.collect_set("name")).alias("aliases"),
        F.array_sort(F.collect_set("unit_id")).alias("unit_ids"),
    )
    degree = rels.select(F.explode(F.array("source_id", "target_id")).alias("entity_id")).groupBy("entity_id").agg(
        F.count("*").cast("int").alias("degree")
    )
    return ents.join(degree, "entity_id", "left").select(
        "entity_id",
        F.coalesce("listed_title", "any_title").alias("title"),
        F.coalesce("listed_type", F.lit(UNKNOWN)).alias("type"),
        F.substring(F.concat_ws(" ", "descs"), 1, section.max_description_chars).alias("description"),
        "aliases",
        "unit_ids",
        F.size("unit_ids").cast("int").alias("frequency"),
        F.coalesce("degree", F.lit(0)).cast("int").alias("degree"),
    )


def entity_aliases(ments):
    from pyspark.sql import functions as F

    return ments.select("name", "entity_id").distinct().groupBy(F.lower(F.trim("name")).alias("mention")).agg(
        F.min("entity_id").alias("entity_id")
    ).select(
        _id(F.col("mention")).alias("mention_key"), "mention", "entity_id",
        F.lit(1.0).alias("score"), F.lit("exact").alias("method"),
    )


def relationships(live, section: ResolveSection):
    """Undirected edges keyed by their sorted endpoint ids; strengths add up across units."""
    from pyspark.sql import functions as F

    r = live.select("unit_id", F.explode("relationships").alias("r")).select(
        "unit_id",
        _id(normalised(F.col("r.source"), section)).alias("a"),
        _id(normalised(F.col("r.target"), section)).alias("b"),
        normalised(F.col("r.source"), section).alias("ka"),
        normalised(F.col("r.target"), section).alias("kb"),
        F.col("r.description").alias("description"),
        F.col("r.strength").alias("strength"),
    ).where((F.length("ka") > 0) & (F.length("kb") > 0) & (F.col("a") != F.col("b")))
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


def claims(live, section: ResolveSection):
    from pyspark.sql import functions as F

    c = live.select("unit_id", F.explode("claims").alias("c"))
    subject = _id(normalised(F.col("c.subject"), section))
    obj = _id(normalised(F.col("c.object"), section))
    return c.select(
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
