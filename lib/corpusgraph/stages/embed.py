"""embed: text units, entities and reports -> embeddings (and, in the runner, FAISS files).

Each item's text is hashed; only items whose (kind, id, model, text hash) has no vector yet
are sent to the embedder, so re-runs and updates embed only what changed.
"""

from __future__ import annotations

__all__ = ["embedding_items", "pending_items", "KINDS"]

KINDS = ("text_unit", "entity", "community_report")


def embedding_items(text_units, entities, reports):
    """(kind, id, text, text_hash) for everything that gets a vector."""
    from pyspark.sql import functions as F

    units = text_units.select(F.lit("text_unit").alias("kind"), F.col("unit_id").alias("id"), "text")
    ents = entities.select(
        F.lit("entity").alias("kind"), F.col("entity_id").alias("id"),
        F.concat_ws(": ", "title", F.coalesce("description", F.lit(""))).alias("text"),
    )
    reps = reports.where(F.col("status") == "ok").select(
        F.lit("community_report").alias("kind"), F.col("community_id").alias("id"),
        F.concat_ws("\n", "title", "summary", F.concat_ws("\n", F.col("findings.summary"))).alias("text"),
    )
    items = units.unionByName(ents).unionByName(reps)
    return items.withColumn("text_hash", F.substring(F.sha2("text", 256), 1, 32))


def pending_items(items, embeddings, model: str):
    from pyspark.sql import functions as F

    have = embeddings.where(F.col("model") == model).select("kind", "id", "text_hash")
    return items.join(have, ["kind", "id", "text_hash"], "left_anti")
