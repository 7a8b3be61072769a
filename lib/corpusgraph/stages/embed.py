"""embed: text units, entities and reports -> embeddings (and, in the runner, FAISS files).

A text unit is embedded as its document's title, a newline, then the unit's text ("title\ntext")
when the document has a non-blank title that is not already the unit's first line, and as the
unit's text alone otherwise: passages of Wikipedia-style corpora say "he" or "it" where the
title is meant, so the title carries the subject that the text leaves implicit. Questions are embedded as they are (they have no title).

Each item's text is hashed (the text as embedded, title included); only items whose (kind, id,
model, text hash) has no vector yet are sent to the embedder, so re-runs and updates embed only
what changed, and a unit whose title or text changed is embedded again. A text unit's hash also
covers how the embedder reads a long text (`unit_recipe`: "windows" where the bundled model reads
it in windows, empty where it cuts it), so switching embeddings.windows embeds the units again;
entity and report texts are short and keep their hashes.
"""

from __future__ import annotations

__all__ = ["embedding_items", "unit_texts", "pending_items", "KINDS"]

KINDS = ("text_unit", "entity", "community_report")


def unit_texts(text_units, documents=None):
    """(unit_id, text) with each unit's text prefixed by "<document title>\n" where the
    document (joined on doc_id) has a non-blank title that is not already the unit's first line
    (leading whitespace and '#' aside); without `documents`, the text alone."""
    from pyspark.sql import functions as F

    if documents is None:
        return text_units.select("unit_id", "text")
    titles = documents.select("doc_id", F.trim(F.col("title")).alias("_title")).dropDuplicates(["doc_id"])
    has_title = F.coalesce(F.length("_title"), F.lit(0)) > 0
    # A unit whose first line is the title (the first unit of a text or markdown file, or of a
    # record without a title field: ingest then takes the title from the first line, cut at 120
    # characters) is not given it twice. A passage that merely starts with its title's words
    # ("Film Journal International is a ...") still gets it, like every other unit.
    first_line = F.regexp_replace(F.regexp_extract(F.col("text"), r"^[\s#]*([^\r\n]*)", 1), r"\s+$", "")
    opens_with_title = (first_line == F.col("_title")) | (
        (F.length("_title") >= 120) & first_line.startswith(F.col("_title")))
    return text_units.join(titles, "doc_id", "left").select(
        "unit_id",
        F.when(has_title & ~F.coalesce(opens_with_title, F.lit(False)),
               F.concat(F.col("_title"), F.lit("\n"), F.col("text")))
        .otherwise(F.col("text")).alias("text"),
    )


def embedding_items(text_units, entities, reports, documents=None, unit_recipe: str = ""):
    """(kind, id, text, text_hash) for everything that gets a vector; `documents` (the documents
    table) supplies the titles that text units are embedded with (see unit_texts); `unit_recipe`
    goes into the text units' hashes (module docstring)."""
    from pyspark.sql import functions as F

    units = unit_texts(text_units, documents).select(
        F.lit("text_unit").alias("kind"), F.col("unit_id").alias("id"), "text")
    ents = entities.select(
        F.lit("entity").alias("kind"), F.col("entity_id").alias("id"),
        F.concat_ws(": ", "title", F.coalesce("description", F.lit(""))).alias("text"),
    )
    reps = reports.where(F.col("status") == "ok").select(
        F.lit("community_report").alias("kind"), F.col("community_id").alias("id"),
        F.concat_ws("\n", "title", "summary", F.concat_ws("\n", F.col("findings.summary"))).alias("text"),
    )
    items = units.unionByName(ents).unionByName(reps)
    hashed = F.col("text")
    if unit_recipe:
        hashed = F.when(F.col("kind") == "text_unit", F.concat(F.col("text"), F.lit("\x1f" + unit_recipe))).otherwise(hashed)
    return items.withColumn("text_hash", F.substring(F.sha2(hashed, 256), 1, 32))


def pending_items(items, embeddings, model: str):
    """The items with no vector for (kind, id, model, text_hash): new items and items whose
    embedded text changed (a changed hash is re-embedded; the merge on (kind, id, model) then
    replaces the old vector)."""
    from pyspark.sql import functions as F

    have = embeddings.where(F.col("model") == model).select("kind", "id", "text_hash")
    return items.join(have, ["kind", "id", "text_hash"], "left_anti")
