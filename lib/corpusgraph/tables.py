"""Every Delta table's name, key and schema, declared once: the contract between the stages, the service and the tests.

Schemas are written as pyarrow schemas so that the JVM-free side (the service, the query
engine, tests) can use them without pyspark; `spark_schema()` derives the Spark StructType
that the pipeline checks every stage's output against and creates the tables with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

__all__ = ["Table", "TABLES", "table", "spark_schema", "spark_struct", "table_path"]

_TS = pa.timestamp("us", tz="UTC")
_STR_LIST = pa.list_(pa.string())


@dataclass(frozen=True)
class Table:
    name: str
    key: tuple[str, ...]
    schema: pa.Schema
    doc: str
    # Columns added to the contract after writers of the table existed: a frame may leave them out
    # (they are written as null), so those writers and older warehouses keep working.
    optional: tuple[str, ...] = ()


def _t(name: str, key: tuple[str, ...], doc: str, *fields: tuple[str, pa.DataType]) -> Table:
    return Table(name, key, pa.schema([pa.field(n, t) for n, t in fields]), doc)


_ENTITY_MENTION = pa.struct([("name", pa.string()), ("type", pa.string()), ("description", pa.string())])
_REL_MENTION = pa.struct(
    [("source", pa.string()), ("target", pa.string()), ("description", pa.string()), ("strength", pa.int32())]
)
_CLAIM_MENTION = pa.struct(
    [
        ("subject", pa.string()),
        ("object", pa.string()),
        ("type", pa.string()),
        ("status", pa.string()),
        ("description", pa.string()),
        ("start", pa.string()),
        ("end", pa.string()),
    ]
)
# A page, section, slide or message of a document's text (stages/ingest/spans.py).
_SPAN = pa.struct([("kind", pa.string()), ("label", pa.string()), ("char_start", pa.int32()),
                   ("char_end", pa.int32())])
_FINDING = pa.struct([("summary", pa.string()), ("explanation", pa.string())])

_ALL = [
    _t(
        "documents", ("doc_id",), "One row per distinct input document; ids are content hashes.",
        ("doc_id", pa.string()), ("source_uri", pa.string()), ("title", pa.string()), ("text", pa.string()),
        ("content_hash", pa.string()), ("access_domain", pa.string()), ("metadata", pa.string()),
        ("ingested_at", _TS), ("deleted", pa.bool_()),
        # Where the pages, sections, slides or messages of the text lie (null for plain text).
        ("spans", pa.list_(_SPAN)),
    ),
    _t(
        "quarantine", ("source_uri",), "Inputs that were refused, with the reason; never silently dropped.",
        ("source_uri", pa.string()), ("reason", pa.string()), ("detail", pa.string()), ("seen_at", _TS),
    ),
    _t(
        "source_rows", ("source_uri",),
        "The rows of table and DataFrame inputs behind the documents: which row holds which text, so an "
        "update that reads only a table's changes (its change data feed) knows which documents are still held.",
        ("source_uri", pa.string()), ("input", pa.string()), ("content_hash", pa.string()),
        ("version", pa.int64()), ("deleted", pa.bool_()),
    ),
    _t(
        "input_versions", ("input",), "The version of each table input that ingest read last, and how.",
        ("input", pa.string()), ("version", pa.int64()), ("mode", pa.string()), ("rows", pa.int64()),
        ("read_at", _TS),
    ),
    _t(
        "text_units", ("unit_id",), "Token-based chunks with character offsets, pages and section in their document.",
        ("unit_id", pa.string()), ("doc_id", pa.string()), ("ordinal", pa.int32()), ("text", pa.string()),
        ("n_tokens", pa.int32()), ("char_start", pa.int32()), ("char_end", pa.int32()),
        # The pages the unit's first and last characters are on (null: a document without pages)
        # and the section its first character is in: a heading, "slide N" or "message '<subject>'".
        ("page_start", pa.int32()), ("page_end", pa.int32()), ("section", pa.string()),
    ),
    _t(
        "extractions", ("unit_id", "prompt_hash", "model"), "One LLM extraction result per unit, prompt and model.",
        ("unit_id", pa.string()), ("prompt_hash", pa.string()), ("model", pa.string()), ("status", pa.string()),
        ("entities", pa.list_(_ENTITY_MENTION)), ("relationships", pa.list_(_REL_MENTION)),
        ("claims", pa.list_(_CLAIM_MENTION)), ("tokens_in", pa.int64()), ("tokens_out", pa.int64()),
        ("gleanings", pa.int32()), ("error", pa.string()), ("raw", pa.string()), ("run_id", pa.string()),
        ("extracted_at", _TS),
    ),
    _t(
        "entities", ("entity_id",), "Resolved entities.",
        ("entity_id", pa.string()), ("title", pa.string()), ("type", pa.string()), ("description", pa.string()),
        ("aliases", _STR_LIST), ("unit_ids", _STR_LIST), ("frequency", pa.int32()), ("degree", pa.int32()),
    ),
    _t(
        "entity_aliases", ("mention_key",), "Every resolution decision: which mention went to which entity, and why.",
        ("mention_key", pa.string()), ("mention", pa.string()), ("entity_id", pa.string()),
        ("score", pa.float64()), ("method", pa.string()),
        # exact_id: the entity by name alone (undo a merge by mapping back to it); rejected_*: the
        # best candidate not merged with, and why (below_band, llm_no, parse_error, guard, ...).
        ("exact_id", pa.string()), ("rejected_id", pa.string()), ("rejected_score", pa.float64()),
        ("rejected_reason", pa.string()), ("error", pa.string()),
    ),
    _t(
        "resolve_pairs", ("a", "b"),
        "The scored and decided candidate pairs of the last similarity resolve (a < b, node ids of "
        "normalised names), with each endpoint's signature (a hash of the node features the score and "
        "the adjudication request read: key, title, type, descriptions, neighbours). An update reuses a "
        "pair's score, and its LLM verdict, while both signatures and the fingerprints still match, and "
        "scores and asks only the rest.",
        ("a", pa.string()), ("b", pa.string()), ("sig_a", pa.string()), ("sig_b", pa.string()),
        # score_fp: scoring code version and weights; verdict_fp: adjudication prompt, schema, model,
        # temperature and token limit (null where the pair got no verdict).
        ("score_fp", pa.string()), ("score", pa.float64()), ("type_clash", pa.bool_()),
        ("verdict_fp", pa.string()), ("same", pa.bool_()), ("llm_status", pa.string()), ("llm_error", pa.string()),
        ("merge", pa.bool_()), ("method", pa.string()), ("reason", pa.string()),
    ),
    _t(
        "relationships", ("rel_id",), "Undirected relationships between entities, weights accumulated.",
        ("rel_id", pa.string()), ("source_id", pa.string()), ("target_id", pa.string()),
        ("description", pa.string()), ("weight", pa.float64()), ("unit_ids", _STR_LIST),
    ),
    _t(
        "claims", ("claim_id",), "Claims about entities, each tied to its source unit.",
        ("claim_id", pa.string()), ("subject_id", pa.string()), ("object_id", pa.string()), ("type", pa.string()),
        ("status", pa.string()), ("description", pa.string()), ("start", pa.string()), ("end", pa.string()),
        ("unit_id", pa.string()),
    ),
    _t(
        "communities", ("community_id",), "Hierarchical Leiden communities; level 0 is the coarsest.",
        ("community_id", pa.string()), ("level", pa.int32()), ("parent_id", pa.string()),
        ("entity_ids", _STR_LIST), ("rel_ids", _STR_LIST), ("unit_ids", _STR_LIST), ("size", pa.int32()),
        ("graph_version", pa.string()), ("modularity", pa.float64()),
    ),
    _t(
        "community_reports", ("community_id",), "One LLM report per community, built bottom-up.",
        ("community_id", pa.string()), ("level", pa.int32()), ("title", pa.string()), ("summary", pa.string()),
        ("findings", pa.list_(_FINDING)), ("rating", pa.float64()), ("rating_explanation", pa.string()),
        ("built_from", pa.string()), ("status", pa.string()), ("error", pa.string()), ("model", pa.string()),
        ("tokens_in", pa.int64()), ("tokens_out", pa.int64()),
    ),
    _t(
        "community_domain_reports", ("community_id", "domain"),
        "reports.per_domain: a community whose units span several access domains gets one report per domain, "
        "written only from that domain's units, entities and relationships (query/access.py shows them to "
        "callers of that domain who cannot see the whole community).",
        ("community_id", pa.string()), ("domain", pa.string()), ("level", pa.int32()), ("title", pa.string()),
        ("summary", pa.string()), ("findings", pa.list_(_FINDING)), ("rating", pa.float64()),
        ("rating_explanation", pa.string()), ("built_from", pa.string()), ("status", pa.string()),
        ("error", pa.string()), ("model", pa.string()), ("tokens_in", pa.int64()), ("tokens_out", pa.int64()),
    ),
    _t(
        "embeddings", ("kind", "id", "model"), "Vectors for units, entities and reports.",
        ("kind", pa.string()), ("id", pa.string()), ("model", pa.string()), ("text_hash", pa.string()),
        ("vector", pa.list_(pa.float32())),
    ),
    _t(
        "llm_calls", ("run_id", "stage"), "LLM accounting per run and stage.",
        ("run_id", pa.string()), ("stage", pa.string()), ("calls", pa.int64()), ("tokens_in", pa.int64()),
        ("tokens_out", pa.int64()), ("cache_hits", pa.int64()), ("errors", pa.int64()), ("usd", pa.float64()),
        ("seconds", pa.float64()),
    ),
    _t(
        "runs", ("run_id",), "One row per index, update or estimate run.",
        ("run_id", pa.string()), ("kind", pa.string()), ("config_hash", pa.string()), ("started", _TS),
        ("finished", _TS), ("status", pa.string()), ("stage_counts", pa.string()),
    ),
]

# Issue 41's location columns: where in its file a document's parts and a unit lie.
_OPTIONAL = {"documents": ("spans",), "text_units": ("page_start", "page_end", "section")}
_ALL = [Table(t.name, t.key, t.schema, t.doc, _OPTIONAL.get(t.name, ())) for t in _ALL]

TABLES: dict[str, Table] = {}
for _table in _ALL:
    if _table.name in TABLES:
        raise RuntimeError(f"table {_table.name} declared twice")
    TABLES[_table.name] = _table


def table(name: str) -> Table:
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known: {sorted(TABLES)}") from None


def table_path(warehouse: str, name: str) -> str:
    """Location of a table under the warehouse (a local folder or a URI)."""
    table(name)
    if "://" in warehouse:
        return warehouse.rstrip("/") + "/" + name
    return str(Path(warehouse).resolve() / name)


def _spark_type(t: pa.DataType):
    from pyspark.sql import types as T

    if pa.types.is_string(t):
        return T.StringType()
    if pa.types.is_int32(t):
        return T.IntegerType()
    if pa.types.is_int64(t):
        return T.LongType()
    if pa.types.is_float64(t):
        return T.DoubleType()
    if pa.types.is_float32(t):
        return T.FloatType()
    if pa.types.is_boolean(t):
        return T.BooleanType()
    if pa.types.is_timestamp(t):
        return T.TimestampType()
    if pa.types.is_list(t):
        return T.ArrayType(_spark_type(t.value_type), True)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, _spark_type(f.type), True) for f in t])
    raise TypeError(f"no Spark type for {t}")


def spark_struct(schema: pa.Schema):
    """The Spark StructType of any Arrow schema: the one Arrow-to-Spark conversion, used for the
    tables and for the intermediate schemas that stages hand to mapInArrow (imports pyspark lazily)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, _spark_type(f.type), True) for f in schema])


def spark_schema(name: str):
    """The Spark StructType of a table (the service never calls this)."""
    return spark_struct(table(name).schema)
