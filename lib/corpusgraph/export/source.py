"""The warehouse as an export reads it: Delta tables streamed in record batches (delta-rs and
pyarrow, no JVM), and the part of them a set of access domains may see.

Nothing reads a table whole. A `View` makes a few passes over the id columns and keeps what the
access rules (query/access.py, the service's own functions) need to decide a row without its
neighbours: every unit's domain, the visible entity and relationship ids, per-entity degree,
each community's level and view parent, each entity's communities. All of it is O(units +
entities + relationships + community memberships) small strings and ints (the exports' peak
memory on a large index: tests/benchmarks/results/export.json).
Descriptions, texts and id lists are only ever held one batch at a time, as the writers stream
each table again and decide row by row.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Iterator

import pyarrow as pa

from corpusgraph.config import S3Section
from corpusgraph.query.access import (community_visible, entity_visible, one_domain, parent_in_view,
                                      partial_view_community, relationship_visible)
from corpusgraph.query.rows import report_shown
from corpusgraph.query.store import IndexMissingError
from corpusgraph.storage.locations import open_delta
from corpusgraph.tables import table_path

__all__ = ["Source", "View", "BATCH_ROWS"]

# Rows per record batch: small enough that a batch of the widest table (communities, with its
# id lists) stays a few MB, large enough that per-batch overhead does not count.
BATCH_ROWS = 2048
# Tables a query store reads; an index may lack these optional ones (no claims, no per-domain reports).
_OPTIONAL = ("claims", "community_domain_reports")


class Source:
    """Each table opened once, at its current version, so every pass over it reads the same rows.
    warehouse: a folder or URI; s3: how to reach one on S3 (None: the environment's settings)."""

    def __init__(self, warehouse: str, batch_rows: int = BATCH_ROWS, s3: S3Section | None = None):
        self.warehouse = warehouse
        self.batch_rows = batch_rows
        self.s3 = s3
        self._tables: dict[str, object] = {}

    def table(self, name: str, missing_ok: bool = False):
        """The DeltaTable, or None for a missing optional table (any, with missing_ok); else IndexMissingError."""
        from deltalake.exceptions import TableNotFoundError

        if name not in self._tables:
            path = table_path(self.warehouse, name)
            try:
                self._tables[name] = open_delta(path, self.s3)
            except TableNotFoundError as exc:
                if name in _OPTIONAL or missing_ok:
                    self._tables[name] = None
                else:
                    raise IndexMissingError(
                        f"table {name!r} not found at {path}; run `corpusgraph index` first") from exc
        return self._tables[name]

    def versions(self) -> dict[str, int]:
        return {n: t.version() for n, t in sorted(self._tables.items()) if t is not None}

    def schema(self, name: str) -> pa.Schema | None:
        t = self.table(name)
        return None if t is None else t.to_pyarrow_dataset().schema

    def batches(self, name: str, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        t = self.table(name)
        if t is None:
            return
        # One fragment and one batch ahead at most: read-ahead is what would hold many row groups.
        yield from t.to_pyarrow_dataset().to_batches(columns=columns, batch_size=self.batch_rows,
                                                     batch_readahead=1, fragment_readahead=1)

    def rows(self, name: str, columns: list[str] | None = None) -> Iterator[dict]:
        for batch in self.batches(name, columns):
            yield from batch.to_pylist()


class _AllowedUnits:
    """`unit in allowed` as access.py's allowed-units set answers it, without building the set."""

    __slots__ = ("unit_domain", "domains")

    def __init__(self, unit_domain: dict[str, str | None], domains: frozenset[str]):
        self.unit_domain, self.domains = unit_domain, domains

    def __contains__(self, unit_id) -> bool:
        return self.unit_domain.get(unit_id) in self.domains


class View:
    """What `domains` may see of the warehouse (None: everything the service shows an unrestricted
    key: deleted documents and their units left out, every entity, relationship and community).

    Relationships and memberships whose entity is not in the export are left out in either case
    (counted in `dangling`), so that every edge written joins two nodes written.
    """

    def __init__(self, source: Source, domains: Iterable[str] | None = None):
        self.source = source
        self.domains = None if domains is None else frozenset(domains)
        self.dangling: dict[str, int] = defaultdict(int)
        self._read_units()
        self.allowed = None if self.domains is None else _AllowedUnits(self.unit_domain, self.domains)
        self._read_entities()
        self._read_relationships()
        self._read_communities()

    # -- passes ------------------------------------------------------------------------------

    def _read_units(self) -> None:
        canonical: dict[str, str] = {}  # one string object per domain, however many units name it
        doc_domain: dict[str, str | None] = {}
        deleted: set[str] = set()
        for r in self.source.rows("documents", ["doc_id", "access_domain", "deleted"]):
            d = r["access_domain"]
            doc_domain[r["doc_id"]] = canonical.setdefault(d, d) if d is not None else None
            if r["deleted"]:
                deleted.add(r["doc_id"])
        self.deleted_docs = deleted
        self.known_domains = frozenset(canonical)
        # Units of deleted documents keep their domain (an entity merged from one still carries its
        # text, so the access check must know it) but are not exported.
        self.unit_domain: dict[str, str | None] = {}
        self.dead_units: set[str] = set()
        for r in self.source.rows("text_units", ["unit_id", "doc_id"]):
            self.unit_domain[r["unit_id"]] = doc_domain.get(r["doc_id"])
            if r["doc_id"] in deleted:
                self.dead_units.add(r["unit_id"])

    def _read_entities(self) -> None:
        self.entities: set[str] = set()
        for r in self.source.rows("entities", ["entity_id", "unit_ids"]):
            if self.allowed is None or entity_visible(r, self.allowed):
                self.entities.add(r["entity_id"])

    def _read_relationships(self) -> None:
        self.relationships: set[str] = set()
        # Degree as the view sees it (access._select): the full count would tell of hidden edges.
        self.degree: dict[str, int] | None = None if self.domains is None else dict.fromkeys(self.entities, 0)
        for r in self.source.rows("relationships", ["rel_id", "source_id", "target_id", "unit_ids"]):
            if self.allowed is None:
                if r["source_id"] not in self.entities or r["target_id"] not in self.entities:
                    self.dangling["relationships"] += 1
                    continue
            elif not relationship_visible(r, self.entities, self.allowed):
                continue
            self.relationships.add(r["rel_id"])
            if self.degree is not None:
                self.degree[r["source_id"]] += 1
                if r["target_id"] != r["source_id"]:
                    self.degree[r["target_id"]] += 1

    def _read_communities(self) -> None:
        domains = self.domains
        # Per-domain reports of the view's domains: (community id, domain) keys only.
        keys = set()
        if domains is not None:
            for r in self.source.rows("community_domain_reports", ["community_id", "domain", "summary", "error"]):
                if r["domain"] in domains and report_shown(r):
                    keys.add((r["community_id"], r["domain"]))
        visible: dict[str, tuple[int, str | None, str | None]] = {}  # id -> (level, parent, one domain)
        self.partial: dict[tuple[str, str], dict] = {}  # (community id, domain) -> its view community
        base_parent: dict[tuple[str, str], str | None] = {}
        for r in self.source.rows("communities"):
            cid = r["community_id"]
            if self.allowed is None or community_visible(r, self.entities, self.relationships, self.allowed):
                visible[cid] = (r["level"], r["parent_id"],
                                None if domains is None else one_domain(r["unit_ids"], self.unit_domain))
            else:
                for d in sorted(domains):
                    if (cid, d) in keys:  # seen in part, through its report of domain d
                        self.partial[(cid, d)] = partial_view_community(
                            r, d, None, self.entities, self.relationships, self.unit_domain)
                        base_parent[(cid, d)] = r["parent_id"]
        self.view_parent: dict[str, str | None] = {}
        self.level: dict[str, int] = {}
        for cid, (level, parent, dom) in visible.items():
            self.level[cid] = level
            self.view_parent[cid] = parent if domains is None else parent_in_view(
                {"parent_id": parent}, dom, visible, self.partial)
        for (cid, d), com in self.partial.items():
            com["parent_id"] = parent_in_view({"parent_id": base_parent[(cid, d)]}, d, visible, self.partial)
            self.level[com["community_id"]] = com["level"]
            self.view_parent[com["community_id"]] = com["parent_id"]
        self.levels = sorted(set(self.level.values()))
        # entity id -> [(level, community id)] over the view's communities (partial ones too).
        self.memberships: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for com in self.communities(["community_id", "level", "entity_ids"]):
            for e in com["entity_ids"] or ():
                if e in self.entities:
                    self.memberships[e].append((com["level"], com["community_id"]))
                else:
                    self.dangling["memberships"] += 1

    # -- row streams for the writers ----------------------------------------------------------

    def entity_rows(self, columns: list[str] | None = None) -> Iterator[dict]:
        for batch in self.source.batches("entities", columns):
            for r in batch.to_pylist():
                if r["entity_id"] in self.entities:
                    if self.degree is not None:
                        r["degree"] = self.degree[r["entity_id"]]
                    yield r

    def relationship_rows(self, columns: list[str] | None = None) -> Iterator[dict]:
        for r in self.source.rows("relationships", columns):
            if r["rel_id"] in self.relationships:
                yield r

    def communities(self, columns: list[str] | None = None) -> Iterator[dict]:
        """The view's community rows, parents as the view shows them; then its partial communities."""
        for r in self.source.rows("communities", columns):
            cid = r["community_id"]
            if cid in self.view_parent:
                if "parent_id" in r:
                    r["parent_id"] = self.view_parent[cid]
                yield r
        for com in self.partial.values():
            yield {k: com[k] for k in columns} if columns else dict(com)

    def unit_visible(self, unit_id: str) -> bool:
        return (unit_id in self.unit_domain and unit_id not in self.dead_units
                and (self.domains is None or self.unit_domain[unit_id] in self.domains))

    def doc_visible(self, doc: dict) -> bool:
        return not doc.get("deleted") and (self.domains is None or doc.get("access_domain") in self.domains)

    def domains_of(self, unit_ids: Iterable[str] | None) -> list[str]:
        """The sorted access domains of these units (where an entity's or edge's text came from)."""
        return sorted({d for d in (self.unit_domain.get(u) for u in unit_ids or ()) if d is not None})

    def community_of(self, entity_id: str) -> dict[int, list[str]]:
        out: dict[int, list[str]] = defaultdict(list)
        for level, cid in self.memberships.get(entity_id, ()):
            out[level].append(cid)
        return out
