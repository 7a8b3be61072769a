"""The rows the query side reads, typed per table, each missing value given one meaning.

The columns are the table contracts' (tables.py; tests/unit/query/test_query.py checks that these
types name exactly those columns). A null is filled at load where the contract gives it one
meaning, so no reader guesses a default of its own:

- a relationship's `weight` is the sum of the strengths of the mentions behind it, and
  extraction keeps every strength between 1 and 10: a missing weight counts as one mention, 1.0;
- a missing list (aliases, unit ids, entity ids, relationship ids, findings) is empty;
- a report without a rating rates 0.

Other nulls mean "none" and stay None: a claim without an object, a community without a parent,
a document without an access domain, an entity or report without a title.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, TypedDict

__all__ = [
    "DocumentRow", "UnitRow", "EntityRow", "RelationshipRow", "ClaimRow", "CommunityRow", "Finding", "ReportRow",
    "DomainReportRow", "ROW_TYPES", "KEYS", "FILL", "filled", "report_shown",
]


class DocumentRow(TypedDict):
    # Only what citations and access need: the text column is the bulk of the table.
    doc_id: str
    source_uri: str | None
    title: str | None
    access_domain: str | None
    deleted: bool | None


class UnitRow(TypedDict):
    unit_id: str
    doc_id: str
    ordinal: int | None
    text: str | None
    n_tokens: int | None
    char_start: int | None
    char_end: int | None
    page_start: int | None
    page_end: int | None
    section: str | None


class EntityRow(TypedDict):
    entity_id: str
    title: str | None
    type: str | None
    description: str | None
    aliases: list[str]
    unit_ids: list[str]
    frequency: int | None
    degree: int | None


class RelationshipRow(TypedDict):
    rel_id: str
    source_id: str
    target_id: str
    description: str | None
    weight: float
    unit_ids: list[str]


class ClaimRow(TypedDict):
    claim_id: str
    subject_id: str | None
    object_id: str | None
    type: str | None
    status: str | None
    description: str | None
    start: str | None
    end: str | None
    unit_id: str | None


class CommunityRow(TypedDict):
    community_id: str
    level: int
    parent_id: str | None
    entity_ids: list[str]
    rel_ids: list[str]
    unit_ids: list[str]
    size: int | None
    graph_version: str | None
    modularity: float | None


class Finding(TypedDict):
    summary: str | None
    explanation: str | None


class ReportRow(TypedDict):
    community_id: str
    level: int
    title: str | None
    summary: str | None
    findings: list[Finding]
    rating: float
    rating_explanation: str | None
    built_from: str | None
    status: str | None
    error: str | None
    model: str | None
    tokens_in: int | None
    tokens_out: int | None


class DomainReportRow(ReportRow):
    domain: str


# Table name -> its row type, for the tables the store reads.
ROW_TYPES: dict[str, type] = {
    "documents": DocumentRow, "text_units": UnitRow, "entities": EntityRow, "relationships": RelationshipRow,
    "claims": ClaimRow, "communities": CommunityRow, "community_reports": ReportRow,
    "community_domain_reports": DomainReportRow,
}

# Each table's id column, by which the store looks its rows up.
KEYS: dict[str, str] = {
    "documents": "doc_id", "text_units": "unit_id", "entities": "entity_id", "relationships": "rel_id",
    "claims": "claim_id", "communities": "community_id", "community_reports": "community_id",
}
_LISTS = ("aliases", "unit_ids", "entity_ids", "rel_ids", "findings")
# The one meaning of a null, per table and column (the module docstring says why).
FILL: dict[str, dict[str, Any]] = {
    "entities": {"aliases": [], "unit_ids": []},
    "relationships": {"weight": 1.0, "unit_ids": []},
    "communities": {"entity_ids": [], "rel_ids": [], "unit_ids": []},
    "community_reports": {"findings": [], "rating": 0.0},
    "community_domain_reports": {"findings": [], "rating": 0.0},
}


def filled(table: str, rows: Iterable[dict]) -> list[dict]:
    """`rows` of `table` with their nulls filled as the table's contract means them."""
    fill = FILL.get(table)
    if not fill:
        return list(rows)
    out = []
    for row in rows:
        for column, default in fill.items():
            if row.get(column) is None:
                row[column] = list(default) if column in _LISTS else default
        out.append(row)
    return out


def report_shown(report: Mapping) -> bool:
    """Reports that failed to build have no summary; they would only put noise in a context."""
    return bool((report.get("summary") or "").strip()) and not report.get("error")
