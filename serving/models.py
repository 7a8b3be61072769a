"""The graph routes' response models, derived from the table contracts (corpusgraph.tables).

An entity, relationship, claim, unit, document, community or report in a response has the
columns of its Delta table, under the same names and with the types the table declares; the
models are built from `table(name).schema`, so a column's type is written down once. Fields
beyond a table's (a caller's degree, a community's report title) are stated here.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Sequence

import pyarrow as pa
from pydantic import BaseModel, Field, create_model

from corpusgraph.tables import table

__all__ = ["row_model", "EntityOut", "RelationshipOut", "NeighbourOut", "ClaimOut", "CommunityRef", "UnitOut",
           "DocumentOut", "EntityDetail", "Finding", "ReportOut", "CommunityDetail", "CommunityPage", "EntityHit",
           "EntityHits", "UnitDetail"]


def _python_type(t: pa.DataType, name: str) -> Any:
    if pa.types.is_string(t):
        return str
    if pa.types.is_integer(t):
        return int
    if pa.types.is_floating(t):
        return float
    if pa.types.is_boolean(t):
        return bool
    if pa.types.is_timestamp(t):
        return dt.datetime
    if pa.types.is_list(t):
        return list[_python_type(t.value_type, name)]  # type: ignore[misc]
    if pa.types.is_struct(t):
        return struct_model(name, t)
    raise TypeError(f"no response type for {t}")


def struct_model(name: str, struct: pa.StructType) -> type[BaseModel]:
    """A model of an Arrow struct's fields, each of them nullable."""
    fields: dict[str, Any] = {f.name: (_python_type(f.type, name) | None, ...) for f in struct}
    return create_model(name, **fields)


def row_model(name: str, table_name: str, columns: Sequence[str], *, not_null: Sequence[str] = (),
              optional: Sequence[str] = (), **extra: Any) -> type[BaseModel]:
    """A model of `columns` of a table's rows, in that order, typed as the table declares them.

    The table's key columns and those in `not_null` are never null; a list column is a list
    (empty when the row has none); every other column may be null, and one in `optional` may be
    left out too. `extra`: further fields, as pydantic's create_model takes them, after the columns.
    """
    contract = table(table_name)
    fields: dict[str, Any] = {}
    for column in columns:
        kind = contract.schema.field(column).type
        py = _python_type(kind, name)
        if column in contract.key or column in not_null:
            fields[column] = (py, ...)
        elif pa.types.is_list(kind):
            fields[column] = (py, Field(default_factory=list))
        else:
            fields[column] = (py | None, None if column in optional else ...)
    fields.update(extra)
    return create_model(name, **fields)


EntityOut = row_model("EntityOut", "entities", ["entity_id", "title", "type", "description", "aliases", "frequency"],
                      optional=("frequency",),
                      degree=(int, Field(0, description="Relationships this caller can see.")))
RelationshipOut = row_model("RelationshipOut", "relationships",
                            ["rel_id", "source_id", "target_id", "description", "weight", "unit_ids"],
                            not_null=("source_id", "target_id"))
NeighbourOut = row_model(
    "NeighbourOut", "entities", ["entity_id", "title", "type"],
    rel_ids=(list[str], Field(description="The relationships (in `relationships`) that join it to the entity.")))
ClaimOut = row_model("ClaimOut", "claims",
                     ["claim_id", "subject_id", "object_id", "type", "status", "description", "unit_id"])
CommunityRef = row_model(
    "CommunityRef", "communities", ["community_id", "level", "parent_id", "size"], not_null=("level",),
    title=(str | None, Field(None, description="The report's title; null when the community has no report.")),
    rating=(float | None, None))
UnitOut = row_model("UnitOut", "text_units", ["unit_id", "doc_id", "ordinal", "text", "page_start", "page_end", "section"],
                    not_null=("doc_id", "text"), optional=("page_start", "page_end", "section"))
DocumentOut = row_model("DocumentOut", "documents", ["doc_id", "title", "source_uri", "access_domain"])
Finding = struct_model("Finding", table("community_reports").schema.field("findings").type.value_type)
ReportOut = row_model("ReportOut", "community_reports", ["title", "summary", "rating", "rating_explanation"],
                      findings=(list[Finding], Field(default_factory=list)))  # type: ignore[valid-type]

_VERSION = "The index version that answered (also X-Index-Version)."


class EntityDetail(BaseModel):
    entity: EntityOut  # type: ignore[valid-type]
    relationships: list[RelationshipOut] = Field(description="Heaviest first, at most `limit`.")  # type: ignore[valid-type]
    neighbours: list[NeighbourOut] = Field(description="The other ends of `relationships`.")  # type: ignore[valid-type]
    claims: list[ClaimOut]  # type: ignore[valid-type]
    communities: list[CommunityRef] = Field(description="Communities holding the entity, by level.")  # type: ignore[valid-type]
    units: list[UnitOut] = Field(  # type: ignore[valid-type]
        description="The text units the entity was extracted from, at most `limit`.")
    documents: list[DocumentOut] = Field(description="The documents of `units`.")  # type: ignore[valid-type]
    truncated: bool = Field(description="True when `limit` cut relationships, claims or units.")
    index_version: str | None = Field(None, description=_VERSION)


class CommunityDetail(CommunityRef):  # type: ignore[valid-type,misc]
    entities: list[NeighbourOut] = Field(  # type: ignore[valid-type]
        description="Members (rel_ids: the community's edges at that member).")
    children: list[str] = Field(description="Sub-communities one level down this caller can see.")
    report: ReportOut | None  # type: ignore[valid-type]
    index_version: str | None = Field(None, description=_VERSION)


class CommunityPage(BaseModel):
    levels: list[int] = Field(description="Levels with at least one community this caller can see.")
    total: int = Field(description="Communities matching the filter, before offset and limit.")
    communities: list[CommunityRef]  # type: ignore[valid-type]
    index_version: str | None = Field(None, description=_VERSION)


EntityHit = row_model(
    "EntityHit", "entities", ["entity_id", "title", "type", "description"],
    degree=(int, Field(0, description="Relationships this caller can see.")),
    matched=(str, Field(description="The name that matched, normalised: the title or an alias.")),
    how=(str, Field(description="exact (the whole name), prefix (the name starts with the text) or words (each "
                    "word typed starts a word of the name).")))


class EntityHits(BaseModel):
    q: str = Field(description="The text searched for, as sent.")
    entities: list[EntityHit] = Field(description="Best first: exact, then prefix, then word matches; within "  # type: ignore[valid-type]
                                      "each, the best connected first.")
    index_version: str | None = Field(None, description=_VERSION)


class UnitDetail(BaseModel):
    unit: UnitOut  # type: ignore[valid-type]
    document: DocumentOut | None = Field(description="The unit's document; null when its row is missing.")  # type: ignore[valid-type]
    index_version: str | None = Field(None, description=_VERSION)
