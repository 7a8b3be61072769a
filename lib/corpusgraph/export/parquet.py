"""The tables as plain Parquet files (<table>.parquet), for tools that do not read Delta.

Without domains: every table at its current version, every row and column as stored (deleted
documents keep their `deleted` flag), copied batch by batch. With domains: only the tables the
access rules cover, each holding what the view shows (query/access.py): documents and units of
the domains, visible entities with the view's degree, relationships, claims, communities with
their view parents, per-domain reports' communities under their view ids, and shown reports.
Tables no rule covers (extractions, aliases, embeddings, accounting, ...) are left out, since
they may hold any domain's text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from corpusgraph.export.source import Source, View
from corpusgraph.query.access import claim_visible, domain_view_id
from corpusgraph.query.rows import report_shown
from corpusgraph.tables import TABLES

__all__ = ["write_parquet", "VIEW_TABLES"]

VIEW_TABLES = ("documents", "text_units", "entities", "relationships", "claims", "communities", "community_reports")


def _write_rows(path: Path, schema: pa.Schema, rows: Iterable[dict], batch_rows: int) -> int:
    n = 0
    with pq.ParquetWriter(path, schema) as w:
        pending: list[dict] = []
        for r in rows:
            pending.append(r)
            if len(pending) >= batch_rows:
                w.write_batch(pa.RecordBatch.from_pylist(pending, schema=schema))
                n += len(pending)
                pending.clear()
        if pending:
            w.write_batch(pa.RecordBatch.from_pylist(pending, schema=schema))
            n += len(pending)
    return n


def _copy(source: Source, name: str, path: Path) -> int:
    n = 0
    with pq.ParquetWriter(path, source.schema(name)) as w:
        for batch in source.batches(name):
            w.write_batch(batch)
            n += batch.num_rows
    return n


def _view_rows(view: View, name: str) -> Iterator[dict]:
    src = view.source
    if name == "documents":
        return (d for d in src.rows(name) if view.doc_visible(d))
    if name == "text_units":
        return (u for u in src.rows(name) if view.unit_visible(u["unit_id"]))
    if name == "entities":
        return view.entity_rows()
    if name == "relationships":
        return view.relationship_rows()
    if name == "claims":
        return (c for c in src.rows(name) if claim_visible(c, view.entities, view.allowed))
    if name == "communities":
        return view.communities()
    if name == "community_reports":
        return _reports(view)
    raise KeyError(name)


def _reports(view: View) -> Iterator[dict]:
    for r in view.source.rows("community_reports"):
        if r["community_id"] in view.view_parent and report_shown(r):
            yield r
    if view.partial:
        for r in view.source.rows("community_domain_reports"):
            if (r["community_id"], r["domain"]) in view.partial and report_shown(r):
                yield {**r, "community_id": domain_view_id(r["community_id"], r["domain"])}


def write_parquet(source: Source, view: View | None, out_dir: Path) -> dict:
    """Write <out_dir>/<table>.parquet for each table (view None: all tables, as stored)."""
    written: dict[str, int] = {}
    names = list(TABLES) if view is None else list(VIEW_TABLES)
    for name in names:
        if source.table(name, missing_ok=True) is None:
            continue
        path = out_dir / f"{name}.parquet"
        if view is None:
            written[name] = _copy(source, name, path)
        else:
            schema = source.schema(name)
            written[name] = _write_rows(path, schema, _view_rows(view, name), source.batch_rows)
    return {"tables": written, "left_out": [n for n in TABLES if n not in written]}
