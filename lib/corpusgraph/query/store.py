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

import logging
import re
import threading
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from corpusgraph.config import S3Section
from corpusgraph.query.access import VisibleVectors, select_view
from corpusgraph.query.columns import CsrMap, Rows
from corpusgraph.query.rows import FILL, KEYS, DomainReportRow, filled, report_shown
from corpusgraph.storage.locations import open_delta
from corpusgraph.tables import table as table_contract
from corpusgraph.tables import table_path
from corpusgraph.text import normalise_name

__all__ = ["IndexStore", "RestrictedStore", "IndexMissingError", "UnitDomains"]

log = logging.getLogger(__name__)

# Document columns needed for citations; the text column is the bulk of the table and the
# query side never shows whole documents, so it is not read.
_DOC_COLUMNS = ["doc_id", "source_uri", "title", "access_domain", "deleted"]
_REQUIRED = ("documents", "text_units", "entities", "relationships", "communities", "community_reports")
# Claims extraction is optional in the pipeline; without the table local search has no claims.
_OPTIONAL = ("claims", "community_domain_reports")
_VECTOR_KINDS = ("text_unit", "entity")
# A restricted view's tables: (attribute, table name).
_VIEW_TABLES = (("docs", "documents"), ("units", "text_units"), ("entities", "entities"),
                ("relationships", "relationships"), ("claims", "claims"), ("communities", "communities"),
                ("reports", "community_reports"))
# Restricted views kept per store (one per distinct domain set asked for); the oldest is dropped
# beyond this, so callers inventing domain sets cannot grow memory without bound.
_MAX_VIEWS = 64
# Views are built rarely (once per domain set); one lock for all stores keeps it simple, and a
# store assembled without __init__ (a benchmark's synthetic one) can still make views.
_VIEWS_LOCK = threading.Lock()
# Ranking structures are built once per store, rarely; one lock for all stores, as for views.
_RETRIEVER_LOCK = threading.Lock()
# Entity names are matched as word n-grams of the question; longer names are rare and this
# bounds the work per question regardless of how many entities there are.
_MAX_NAME_WORDS = 8


class IndexMissingError(FileNotFoundError):
    """A table or vector index the queries need is not there (the index was not built)."""


def _read_table(warehouse: str, name: str, columns: list[str] | None = None, s3: S3Section | None = None):
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


class UnitDomains(Mapping):
    """unit id -> its document's access domain, for every unit (those of deleted documents too).

    The units the store shows answer through their position in `units` (a domain code each);
    the few of deleted documents are kept apart."""

    def __init__(self, units: Rows, codes: np.ndarray, names: list, hidden: dict[str, str | None]):
        self._units, self._codes, self._names, self._hidden = units, codes, names, hidden

    def __getitem__(self, unit_id: str) -> str | None:
        i = self._units.position(unit_id)
        if i is None:
            return self._hidden[unit_id]
        code = int(self._codes[i])
        return None if code < 0 else self._names[code]

    def __contains__(self, unit_id: object) -> bool:
        return unit_id in self._units or unit_id in self._hidden

    def __iter__(self):
        yield from self._units.ids
        yield from self._hidden

    def __len__(self) -> int:
        return len(self._units) + len(self._hidden)


class IndexStore:
    """Loads the query tables and vector indexes once and keeps id lookups over them.

    Tables are `Rows` (columns.py): Arrow columns read as mappings of id -> row dict, typed per
    table (rows.py): `docs`, `units`, `entities`, `relationships`, `claims`, `communities`,
    `reports`; and derived lookups `adjacency` (entity id -> rel ids), `entity_claims` (entity id
    -> claim ids), `entity_communities` (entity id -> community ids), each a `CsrMap` of integer
    positions, `reports_by_level` (level -> community ids) and `names` (normalised title or
    alias -> ids). `rel_ends` holds each relationship's two ends as entity positions (-1: not an
    entity of the store). `unit_domain` maps every unit, those of deleted documents too, to its
    document's access domain.

    `domains` is None: this store is the whole index. `restricted(domains)` gives the part built
    only from documents in those domains (access.py), an IndexStore of its own.

    warehouse and index_dir are folders or URIs (corpusgraph.storage.locations); `s3` says how to reach
    those on S3 (None: the environment's settings, or a store not on S3).
    """

    domains: frozenset[str] | None = None
    s3: S3Section | None = None
    domain_reports: dict[tuple[str, str], DomainReportRow] = {}  # (community id, domain) -> report row

    def __init__(self, warehouse: str, index_dir: str, *, load_vectors: bool = True, s3: S3Section | None = None):
        self.warehouse = warehouse
        self.index_dir = index_dir
        self.s3 = s3
        self._load_tables()
        self._vectors: dict[str, Any] = {}
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

        store = cls.__new__(cls)
        store.warehouse, store.index_dir, store.s3, store._vectors = warehouse, index_dir, None, {}
        doc_table = table("documents", docs)
        store._tables({"documents": doc_table.select(_DOC_COLUMNS), "text_units": table("text_units", units),
                       "entities": table("entities", entities), "relationships": table("relationships", relationships),
                       "claims": table("claims", claims), "communities": table("communities", communities),
                       "community_reports": table("community_reports", reports)}, [])
        return store

    # -- loading ---------------------------------------------------------------------------

    def _read(self, name: str, columns: list[str] | None = None):
        return _read_table(self.warehouse, name, columns, self.s3)

    def _load_tables(self) -> None:
        def optional(name: str):
            try:
                return self._read(name)
            except IndexMissingError:
                return None

        tables = {"documents": self._read("documents", _DOC_COLUMNS), "text_units": self._read("text_units"),
                  "entities": self._read("entities"), "relationships": self._read("relationships"),
                  "claims": optional("claims") or table_contract("claims").schema.empty_table(),
                  "communities": self._read("communities"), "community_reports": self._read("community_reports")}
        # Per-domain reports of communities that mix domains (reports.per_domain); only
        # restricted views show them (access.py). An index built before them has none.
        domain_reports = optional("community_domain_reports")
        self._tables(tables, domain_reports.to_pylist() if domain_reports is not None else [])

    def _tables(self, tables: dict, domain_reports: list[dict]) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        docs = tables.pop("documents")
        # A document marked deleted must not be cited, nor its units shown.
        deleted = pc.fill_null(docs.column("deleted"), False)
        self.docs = _rows("documents", docs.filter(pc.invert(deleted)))
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
        self.units = _rows("text_units", units.filter(pa.array(~hidden_mask)))
        self.unit_domain: Mapping[str, str | None] = UnitDomains(
            self.units, codes[~hidden_mask], names,
            {u: (None if c < 0 else names[c]) for u, c in zip(hidden_ids, codes[hidden_mask].tolist())})
        del units, domain
        for attr, name in (("entities", "entities"), ("relationships", "relationships"), ("claims", "claims"),
                           ("communities", "communities")):
            setattr(self, attr, _rows(name, tables.pop(name)))
        self.reports = _rows("community_reports", _shown(tables.pop("community_reports")))
        self.domain_reports: dict[tuple[str, str], DomainReportRow] = {
            (r["community_id"], r["domain"]): r for r in filled("community_domain_reports", domain_reports)
            if report_shown(r)
        }
        self._build_lookups()

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
        """The FAISS index of one kind ("text_unit", "entity", "community_report"), loaded once."""
        if kind not in self._vectors:
            from corpusgraph.storage.vectors import VectorIndex

            try:
                self._vectors[kind] = VectorIndex.load(self.index_dir, kind, self.s3)
            except (FileNotFoundError, OSError) as exc:
                raise IndexMissingError(
                    f"vector index {kind!r} not found under {self.index_dir}; run `corpusgraph index` first ({exc})"
                ) from exc
        return self._vectors[kind]

    def retriever(self):
        """This store's `GraphRetriever` (query/retrieval.py), built on first use and kept with it.

        Built once under a lock: the service asks from many threads at once, and unguarded, every
        concurrent first question built its own copy, each slowed by the others under the GIL, until
        all of them were past their timeout (tests/benchmarks/test_service_scale.py found it). The
        service builds it before it says ready (serving/engine.py)."""
        built = self.__dict__.get("_retriever")
        if built is None:
            with _RETRIEVER_LOCK:
                built = self.__dict__.get("_retriever")
                if built is None:
                    from corpusgraph.query.retrieval import GraphRetriever

                    built = self.__dict__["_retriever"] = GraphRetriever(self)
        return built

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

    def restricted(self, domains: Iterable[str] | None) -> IndexStore:
        """The part of this index built only from documents in `domains` (access.py); None: all.

        Built on first use and kept, one per domain set, so each set pays the pass over the
        tables once. A view of a view narrows to the domains both allow.
        """
        if domains is None:
            return self
        key = frozenset(domains)
        with _VIEWS_LOCK:  # one build per set even when several requests ask at once
            views: dict[frozenset[str], IndexStore] = self.__dict__.setdefault("_views", {})
            view = views.get(key)
            if view is None:
                view = RestrictedStore(self, key)
                if len(views) >= _MAX_VIEWS:
                    views.pop(next(iter(views)))
                views[key] = view
        return view

    def __repr__(self) -> str:
        return (
            f"IndexStore({self.warehouse!r}: {len(self.docs)} docs, {len(self.units)} units, "
            f"{len(self.entities)} entities, {len(self.relationships)} relationships, "
            f"{len(self.reports)} reports)"
        )


class RestrictedStore(IndexStore):
    """The rows of `base` that only `domains` contributed to (access.py's rules); built by
    `IndexStore.restricted`."""

    def __init__(self, base: IndexStore, domains: frozenset[str]):  # no super().__init__: it reads tables
        self.base = base
        self.domains = domains
        self.warehouse = base.warehouse
        self.index_dir = base.index_dir
        self.s3 = base.s3
        self._vectors = {}
        select_view(self, base, domains)
        # select_view leaves each table as a dict of the rows the view shows; kept as Rows typed
        # like the base's, so the view's lookups and column paths are the store's own.
        for attr, name in _VIEW_TABLES:
            rows = getattr(self, attr)
            setattr(self, attr, Rows.from_rows(list(rows.values()), KEYS[name], getattr(base, attr).table.schema,
                                               FILL.get(name)))
        self._build_lookups()

    def vectors(self, kind: str):
        if kind not in self._vectors:
            visible = {
                "text_unit": self.units,
                "entity": self.entities,
                "relationship": self.relationships,
                "claim": self.claims,
                "community": self.communities,
                "community_report": self.reports,
                "document": self.docs,
            }.get(kind)
            if visible is None:  # a kind without an access rule: show none of it
                log.warning("vector kind %r has no access rule; a restricted view returns no hits", kind)
                visible = {}
            self._vectors[kind] = VisibleVectors(self.base.vectors(kind), visible)
        return self._vectors[kind]

    def restricted(self, domains: Iterable[str] | None) -> IndexStore:
        # Narrow from the full store, so the cache holds one view per set however it was reached.
        return self if domains is None else self.base.restricted(self.domains & frozenset(domains))

    def __repr__(self) -> str:
        return f"RestrictedStore({sorted(self.domains)}: " + super().__repr__().split(": ", 1)[1]
