"""The index as the query side sees it: Delta tables read once through delta-rs, plus FAISS.

Nothing here imports pyspark: the service reads the warehouse with the `deltalake` package.
Each table stays as Arrow columns (columns.py's Rows: read as a mapping of id -> row dict, a
row built when it is read), and the one-to-many lookups (an entity's edges, its communities,
its claims) are integer arrays: at 100k documents the whole store takes 1.8x less memory than
the row dicts it replaced; an index of 1.43M entities (300k documents) loads in 7.2 GB, where
the row dicts of a 1.42M-entity index took ~30 GB (README "Scaling";
tests/benchmarks/results/store_memory.json, service_load.json and scale.json).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from corpusgraph.query.columns import CsrMap, Rows, UnitDomains
from corpusgraph.query.rows import FILL, KEYS, DomainReportRow, filled, report_shown
from corpusgraph.storage.locations import S3Settings, open_delta
from corpusgraph.tables import table as table_contract
from corpusgraph.tables import table_path
from corpusgraph.text import normalise_name

__all__ = ["IndexStore", "StoreTables", "IndexMissingError"]

# Document columns needed for citations; the text column is the bulk of the table and the
# query side never shows whole documents, so it is not read.
_DOC_COLUMNS = ["doc_id", "source_uri", "title", "access_domain", "deleted"]
_REQUIRED = ("documents", "text_units", "entities", "relationships", "communities", "community_reports")
# Claims extraction is optional in the pipeline; without the table local search has no claims.
_OPTIONAL = ("claims", "community_domain_reports")
_VECTOR_KINDS = ("text_unit", "entity")
# Entity names are matched as word n-grams of the question; longer names are rare and this
# bounds the work per question regardless of how many entities there are.
_MAX_NAME_WORDS = 8


class IndexMissingError(FileNotFoundError):
    """A table or vector index the queries need is not there (the index was not built)."""


def _read_table(warehouse: str, name: str, columns: list[str] | None = None, s3: S3Settings | None = None):
    """The table as one Arrow table (delta-rs, no JVM)."""
    from deltalake.exceptions import TableNotFoundError

    path = table_path(warehouse, name)
    try:
        return open_delta(path, s3).to_pyarrow_table(columns=columns)
    except TableNotFoundError as exc:
        raise IndexMissingError(
            f"table {name!r} not found at {path}; run `corpusgraph index` first"
        ) from exc


def _rows(name: str, table) -> Rows:
    """One table's Rows, keyed and filled as its contract says (rows.py)."""
    return Rows(table, KEYS[name], FILL.get(name))


def _shown(table):
    """Reports that report_shown keeps: a summary with text and no error."""
    import pyarrow.compute as pc

    if not table.num_rows:
        return table
    summary = pc.fill_null(pc.utf8_length(pc.utf8_trim_whitespace(table.column("summary"))), 0)
    error = pc.fill_null(pc.utf8_length(table.column("error")), 0)
    return table.filter(pc.and_(pc.greater(summary, 0), pc.equal(error, 0)))


@dataclass
class StoreTables:
    """What a store is made of: its tables as `Rows` (docs without deleted documents, units
    without theirs), each unit's access domain (deleted documents' units too), the per-domain
    reports, and, for a restricted view (access.restrict), its domains, the whole index it was cut
    from, the communities it sees only in part, and where its vectors come from."""

    docs: Rows
    units: Rows
    unit_domain: Mapping[str, str | None]
    entities: Rows
    relationships: Rows
    claims: Rows
    communities: Rows
    reports: Rows
    domain_reports: dict[tuple[str, str], DomainReportRow] = field(default_factory=dict)  # (community, domain)
    domains: frozenset[str] | None = None  # None: the whole index
    base: IndexStore | None = None  # the whole index a view was cut from
    partial_communities: frozenset[str] = frozenset()  # communities a view shows one domain's report of
    vectors: Callable[[str], Any] | None = None  # kind -> vector index; None: the FAISS files in index_dir

    @classmethod
    def read(cls, warehouse: str, s3: S3Settings | None = None) -> StoreTables:
        """The query tables of a warehouse (delta-rs, no JVM)."""
        def optional(name: str):
            try:
                return _read_table(warehouse, name, None, s3)
            except IndexMissingError:
                return None

        tables = {"documents": _read_table(warehouse, "documents", _DOC_COLUMNS, s3),
                  **{name: _read_table(warehouse, name, None, s3)
                     for name in ("text_units", "entities", "relationships", "communities", "community_reports")},
                  "claims": optional("claims") or table_contract("claims").schema.empty_table()}
        # Per-domain reports of communities that mix domains (reports.per_domain); only
        # restricted views show them (access.py). An index built before them has none.
        domain_reports = optional("community_domain_reports")
        return cls.from_arrow(tables, domain_reports.to_pylist() if domain_reports is not None else [])

    @classmethod
    def from_arrow(cls, tables: dict, domain_reports: list[dict]) -> StoreTables:
        """From the Arrow tables (documents with _DOC_COLUMNS) and the per-domain report rows."""
        import pyarrow as pa
        import pyarrow.compute as pc

        docs = tables.pop("documents")
        # A document marked deleted must not be cited, nor its units shown.
        deleted = pc.fill_null(docs.column("deleted"), False)
        shown_docs = _rows("documents", docs.filter(pc.invert(deleted)))
        units = tables.pop("text_units")
        # Deleted documents' units too: an entity merged from one still carries its text, so an
        # access check must know that unit's domain. A unit of no known document has none.
        unit_docs = units.column("doc_id").combine_chunks()
        deleted_ids = docs.column("doc_id").filter(deleted).combine_chunks()
        hidden_mask = np.asarray(pc.is_in(unit_docs, value_set=deleted_ids).to_numpy(zero_copy_only=False), dtype=bool) \
            if len(deleted_ids) else np.zeros(units.num_rows, dtype=bool)
        of_doc = pc.index_in(unit_docs, value_set=docs.column("doc_id").combine_chunks())
        domain = pc.dictionary_encode(docs.column("access_domain").combine_chunks().take(of_doc))
        codes = np.asarray(pc.fill_null(domain.indices, -1).to_numpy(zero_copy_only=False), dtype=np.int32)
        names = domain.dictionary.to_pylist()
        hidden_ids = units.column("unit_id").filter(pa.array(hidden_mask)).to_pylist()
        kept = _rows("text_units", units.filter(pa.array(~hidden_mask)))
        unit_domain = UnitDomains(
            kept, codes[~hidden_mask], names,
            {u: (None if c < 0 else names[c]) for u, c in zip(hidden_ids, codes[hidden_mask].tolist())})
        del units, domain
        return cls(
            docs=shown_docs, units=kept, unit_domain=unit_domain,
            **{name: _rows(name, tables.pop(name)) for name in ("entities", "relationships", "claims", "communities")},
            reports=_rows("community_reports", _shown(tables.pop("community_reports"))),
            domain_reports={(r["community_id"], r["domain"]): r
                            for r in filled("community_domain_reports", domain_reports) if report_shown(r)})


class IndexStore:
    """The loaded query tables and vector indexes, with id lookups over them: data, nothing more.

    Tables are `Rows` (columns.py): Arrow columns read as mappings of id -> row dict, typed per
    table (rows.py): `docs`, `units`, `entities`, `relationships`, `claims`, `communities`,
    `reports`; and derived lookups `adjacency` (entity id -> rel ids), `entity_claims` (entity id
    -> claim ids), `entity_communities` (entity id -> community ids), each a `CsrMap` of integer
    positions, `reports_by_level` (level -> community ids) and `names` (normalised title or
    alias -> ids). `rel_ends` holds each relationship's two ends as entity positions (-1: not an
    entity of the store). `unit_domain` maps every unit, those of deleted documents too, to its
    document's access domain.

    `domains` is None: this store is the whole index; else it is a restricted view
    (access.restrict), an IndexStore like any other. What is derived from a store (the ranking
    structures, the views of each domain set) is owned by query/loaded.py's LoadedIndex.

    warehouse and index_dir are folders or URIs (corpusgraph.storage.locations); `s3` says how to reach
    those on S3 (None: the environment's settings, or a store not on S3). `tables` given: the store
    is made of them (from_rows, access.restrict) instead of the warehouse's.
    """

    def __init__(self, warehouse: str = "", index_dir: str = "", *, load_vectors: bool = True,
                 s3: S3Settings | None = None, tables: StoreTables | None = None):
        self.warehouse = warehouse
        self.index_dir = index_dir
        self.s3 = s3
        made = tables if tables is not None else StoreTables.read(warehouse, s3)
        self.docs, self.units, self.unit_domain = made.docs, made.units, made.unit_domain
        self.entities, self.relationships, self.claims = made.entities, made.relationships, made.claims
        self.communities, self.reports, self.domain_reports = made.communities, made.reports, made.domain_reports
        self.domains, self.base, self.partial_communities = made.domains, made.base, made.partial_communities
        self._vector_source = made.vectors
        self._vectors: dict[str, Any] = {}
        self._build_lookups()
        if load_vectors:
            for kind in _VECTOR_KINDS:
                self.vectors(kind)

    @classmethod
    def from_rows(cls, *, docs=(), units=(), entities=(), relationships=(), claims=(), communities=(),
                  reports=(), warehouse: str = "", index_dir: str = "") -> IndexStore:
        """A store from row dicts rather than a warehouse: each table a mapping of id -> row (the
        id column may be left out) or a list of rows, typed by the table contracts (a column a
        row leaves out is null). For tests and small tools; no vectors are loaded."""
        import pyarrow as pa

        def table(name: str, given) -> pa.Table:
            key = KEYS[name]
            rows = [{key: k, **r} for k, r in given.items()] if isinstance(given, Mapping) else list(given)
            return pa.Table.from_pylist(rows, schema=table_contract(name).schema)

        tables = StoreTables.from_arrow(
            {"documents": table("documents", docs).select(_DOC_COLUMNS), "text_units": table("text_units", units),
             "entities": table("entities", entities), "relationships": table("relationships", relationships),
             "claims": table("claims", claims), "communities": table("communities", communities),
             "community_reports": table("community_reports", reports)}, [])
        return cls(warehouse, index_dir, load_vectors=False, tables=tables)

    def _build_lookups(self) -> None:
        ents, rels = self.entities, self.relationships
        src = ents.positions_of(rels.column("source_id"))
        dst = ents.positions_of(rels.column("target_id"))
        self.rel_ends = (src, dst)
        # Each entity's relationships in table order: as source, and as target unless a loop.
        j = np.arange(len(rels), dtype=np.int64)
        loop = (src == dst) & (src >= 0) if len(rels) else np.zeros(0, dtype=bool)
        owners = np.concatenate([src, dst[~loop]])
        members = np.concatenate([j, j[~loop]])
        order = np.argsort(members, kind="stable")
        self.adjacency = CsrMap(ents, owners[order], members[order], rels)
        # degree() of every entity by position: the stored degree, else its edges here.
        stored = ents.numpy("degree", 0, np.int64)
        self.degrees = np.where(stored != 0, stored, np.diff(self.adjacency.indptr))

        claims = self.claims
        c = np.arange(len(claims), dtype=np.int64)
        ends = [ents.positions_of(claims.column(col)) for col in ("subject_id", "object_id")]
        order = np.argsort(np.concatenate([c, c]), kind="stable")  # a claim's subject, then its object
        self.entity_claims = CsrMap(ents, np.concatenate(ends)[order], np.concatenate([c, c])[order], claims)

        coms = self.communities
        parents, members = coms.list_positions("entity_ids", ents)
        self.entity_communities = CsrMap(ents, members, parents, coms)
        communities_by_level: dict[int, list[str]] = defaultdict(list)
        for cid, level in zip(coms.ids, coms.column("level").to_pylist()):
            communities_by_level[level].append(cid)
        self.communities_by_level = dict(communities_by_level)

        reports_by_level: dict[int, list[str]] = defaultdict(list)
        for cid, level in zip(self.reports.ids, self.reports.column("level").to_pylist()):
            reports_by_level[level].append(cid)
        self.reports_by_level = {lvl: sorted(ids) for lvl, ids in reports_by_level.items()}

        names: dict[str, list[str]] = defaultdict(list)
        titles = ents.column("title").to_pylist()
        aliases = ents.column("aliases").to_pylist()
        for eid, title, more in zip(ents.ids, titles, aliases):
            for name in [title or "", *(more or ())]:
                key = normalise_name(name)
                if key and eid not in names[key]:
                    names[key].append(eid)
        self.names = dict(names)

    def vectors(self, kind: str):
        """The vector index of one kind ("text_unit", "entity", "community_report"), loaded once:
        the FAISS files under index_dir, or what the store's tables name as its vectors (a view's
        filtered ones)."""
        if kind not in self._vectors:
            if self._vector_source is not None:
                self._vectors[kind] = self._vector_source(kind)
                return self._vectors[kind]
            from corpusgraph.storage.vectors import VectorIndex

            try:
                self._vectors[kind] = VectorIndex.load(self.index_dir, kind, self.s3)
            except (FileNotFoundError, OSError) as exc:
                raise IndexMissingError(
                    f"vector index {kind!r} not found under {self.index_dir}; run `corpusgraph index` first ({exc})"
                ) from exc
        return self._vectors[kind]

    # -- lookups ---------------------------------------------------------------------------

    def degree(self, entity_id: str) -> int:
        i = self.entities.position(entity_id)
        return 0 if i is None else int(self.degrees[i])

    def positions(self, entity_ids: Iterable[str]) -> np.ndarray:
        """Entity positions of those ids that are entities of the store, in order."""
        found = (self.entities.position(e) for e in entity_ids)
        return np.asarray([i for i in found if i is not None], dtype=np.int64)

    def edges(self, entity_id: str) -> tuple[np.ndarray, np.ndarray]:
        """An entity's relationships (positions) and the entity at the other end of each
        (positions, -1 where that end is not an entity of the store)."""
        rels = self.adjacency.positions(entity_id)
        src, dst = self.rel_ends
        return rels, np.where(src[rels] == self.entities.position(entity_id), dst[rels], src[rels])

    def other_end(self, rel_id: str, entity_id: str) -> str:
        rels = self.relationships
        source = rels.value(rel_id, "source_id")
        if source is None and rel_id not in rels:
            raise KeyError(rel_id)
        return rels.value(rel_id, "target_id") if source == entity_id else source

    def match_names(self, question: str) -> list[str]:
        """Entity ids whose title or alias appears in the question as whole words.

        In question order; a longer name wins over one inside it (a question naming "Port Keel
        Harbour" means that, not "Port Keel").
        Names under four characters must also match with their original case, so an entity
        called "US" or "It" is not found in every question that says "us" or "it".
        """
        words = normalise_name(question).split()
        found: list[tuple[int, str]] = []
        seen: set[str] = set()
        covered: set[int] = set()  # word positions inside a longer name already matched
        for n in range(min(_MAX_NAME_WORDS, len(words)), 0, -1):
            for start in range(len(words) - n + 1):
                span = range(start, start + n)
                if covered.intersection(span):
                    continue
                key = " ".join(words[start : start + n])
                hits = [
                    eid
                    for eid in self.names.get(key, ())
                    if eid not in seen and (len(key) >= 4 or self._case_match(eid, question))
                ]
                if hits:
                    covered.update(span)
                for eid in hits:
                    seen.add(eid)
                    found.append((start, eid))
        return [eid for _, eid in sorted(found, key=lambda f: f[0])]

    def _case_match(self, entity_id: str, question: str) -> bool:
        ents = self.entities
        for name in [ents.value(entity_id, "title") or "", *ents.value(entity_id, "aliases")]:
            if name and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", question):
                return True
        return False

    def report_levels(self) -> list[int]:
        return sorted(self.reports_by_level)

    def __repr__(self) -> str:
        what = (f"{len(self.docs)} docs, {len(self.units)} units, {len(self.entities)} entities, "
                f"{len(self.relationships)} relationships, {len(self.reports)} reports")
        if self.domains is not None:
            return f"IndexStore(view of {sorted(self.domains)}: {what})"
        return f"IndexStore({self.warehouse!r}: {what})"
