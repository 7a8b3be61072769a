"""The index as the query side sees it: Delta tables read once through delta-rs, plus FAISS.

Nothing here imports pyspark: the service reads the warehouse with the `deltalake` package.
Rows become dicts keyed by id, typed per table (rows.py), which answers the lookups the queries
make (a unit, an entity's edges, the communities an entity sits in) in constant time (load time
at 100k documents: tests/benchmarks/results/service_load.json). Larger corpora will want lazier
structures (a later issue).
"""

from __future__ import annotations

import logging
import re
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from corpusgraph.query.access import VisibleVectors, select_view
from corpusgraph.query.rows import (
    ClaimRow,
    CommunityRow,
    DocumentRow,
    DomainReportRow,
    EntityRow,
    RelationshipRow,
    ReportRow,
    UnitRow,
    filled,
    report_shown,
)
from corpusgraph.storage import S3Settings, open_delta
from corpusgraph.tables import table_path
from corpusgraph.text import normalise_name

__all__ = ["IndexStore", "RestrictedStore", "IndexMissingError", "report_shown"]

log = logging.getLogger(__name__)

# Document columns needed for citations; the text column is the bulk of the table and the
# query side never shows whole documents, so it is not read.
_DOC_COLUMNS = ["doc_id", "source_uri", "title", "access_domain", "deleted"]
_REQUIRED = ("documents", "text_units", "entities", "relationships", "communities", "community_reports")
# Claims extraction is optional in the pipeline; without the table local search has no claims.
_OPTIONAL = ("claims", "community_domain_reports")
_VECTOR_KINDS = ("text_unit", "entity")
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


def _read_rows(warehouse: str, name: str, columns: list[str] | None = None,
               s3: S3Settings | None = None) -> list:
    """The table's rows as dicts, nulls filled as its contract means them (rows.py)."""
    from deltalake.exceptions import TableNotFoundError

    path = table_path(warehouse, name)
    try:
        return filled(name, open_delta(path, s3).to_pyarrow_table(columns=columns).to_pylist())
    except TableNotFoundError as exc:
        raise IndexMissingError(
            f"table {name!r} not found at {path}; run `corpusgraph index` first"
        ) from exc


class IndexStore:
    """Loads the query tables and vector indexes once and keeps id lookups over them.

    Attributes are plain dicts of row dicts, typed per table (rows.py): `docs`, `units`,
    `entities`, `relationships`, `claims`, `communities`, `reports`; and derived maps `adjacency` (entity id -> rel ids),
    `entity_claims` (entity id -> claim ids), `entity_communities` (entity id -> community ids),
    `reports_by_level` (level -> community ids) and `names` (normalised title or alias -> ids).
    `unit_domain` maps every unit, those of deleted documents too, to its document's access domain.

    `domains` is None: this store is the whole index. `restricted(domains)` gives the part built
    only from documents in those domains (access.py), an IndexStore of its own.

    warehouse and index_dir are folders or URIs (corpusgraph.storage); `s3` says how to reach
    those on S3 (None: the environment's settings, or a store not on S3).
    """

    domains: frozenset[str] | None = None
    s3: S3Settings | None = None
    domain_reports: dict[tuple[str, str], DomainReportRow] = {}  # (community id, domain) -> report row

    def __init__(self, warehouse: str, index_dir: str, *, load_vectors: bool = True, s3: S3Settings | None = None):
        self.warehouse = warehouse
        self.index_dir = index_dir
        self.s3 = s3
        self._load_tables()
        self._vectors: dict[str, Any] = {}
        if load_vectors:
            for kind in _VECTOR_KINDS:
                self.vectors(kind)

    # -- loading ---------------------------------------------------------------------------

    def _read(self, name: str, columns: list[str] | None = None) -> list:
        return _read_rows(self.warehouse, name, columns, self.s3)

    def _load_tables(self) -> None:
        docs: list[DocumentRow] = self._read("documents", _DOC_COLUMNS)
        # A document marked deleted must not be cited, nor its units shown.
        deleted = {d["doc_id"] for d in docs if d["deleted"]}
        self.docs: dict[str, DocumentRow] = {d["doc_id"]: d for d in docs if d["doc_id"] not in deleted}
        units: list[UnitRow] = self._read("text_units")
        # Deleted documents' units too: an entity merged from one still carries its text, so an
        # access check must know that unit's domain. A unit of no known document has none.
        domain_of_doc = {d["doc_id"]: d["access_domain"] for d in docs}
        self.unit_domain: dict[str, str | None] = {u["unit_id"]: domain_of_doc.get(u["doc_id"]) for u in units}
        self.units: dict[str, UnitRow] = {u["unit_id"]: u for u in units if u["doc_id"] not in deleted}
        self.entities: dict[str, EntityRow] = {e["entity_id"]: e for e in self._read("entities")}
        self.relationships: dict[str, RelationshipRow] = {r["rel_id"]: r for r in self._read("relationships")}
        try:
            claims: list[ClaimRow] = self._read("claims")
        except IndexMissingError:
            claims = []
        self.claims: dict[str, ClaimRow] = {c["claim_id"]: c for c in claims}
        self.communities: dict[str, CommunityRow] = {c["community_id"]: c for c in self._read("communities")}
        self.reports: dict[str, ReportRow] = {
            r["community_id"]: r for r in self._read("community_reports") if report_shown(r)
        }
        # Per-domain reports of communities that mix domains (reports.per_domain); only
        # restricted views show them (access.py). An index built before them has none.
        try:
            domain_reports: list[DomainReportRow] = self._read("community_domain_reports")
        except IndexMissingError:
            domain_reports = []
        self.domain_reports: dict[tuple[str, str], DomainReportRow] = {
            (r["community_id"], r["domain"]): r for r in domain_reports if report_shown(r)
        }
        self._build_lookups()

    def _build_lookups(self) -> None:
        adjacency: dict[str, list[str]] = defaultdict(list)
        for rel_id, rel in self.relationships.items():
            adjacency[rel["source_id"]].append(rel_id)
            if rel["target_id"] != rel["source_id"]:
                adjacency[rel["target_id"]].append(rel_id)
        self.adjacency = dict(adjacency)

        entity_claims: dict[str, list[str]] = defaultdict(list)
        for claim_id, claim in self.claims.items():
            for end in (claim["subject_id"], claim["object_id"]):
                if end:
                    entity_claims[end].append(claim_id)
        self.entity_claims = dict(entity_claims)

        entity_communities: dict[str, list[str]] = defaultdict(list)
        communities_by_level: dict[int, list[str]] = defaultdict(list)
        for cid, com in self.communities.items():
            communities_by_level[com["level"]].append(cid)
            for eid in com["entity_ids"]:
                entity_communities[eid].append(cid)
        self.entity_communities = dict(entity_communities)
        self.communities_by_level = dict(communities_by_level)

        reports_by_level: dict[int, list[str]] = defaultdict(list)
        for cid, rep in self.reports.items():
            reports_by_level[rep["level"]].append(cid)
        self.reports_by_level = {lvl: sorted(ids) for lvl, ids in reports_by_level.items()}

        names: dict[str, list[str]] = defaultdict(list)
        for eid, ent in self.entities.items():
            for name in [ent["title"] or "", *ent["aliases"]]:
                key = normalise_name(name)
                if key and eid not in names[key]:
                    names[key].append(eid)
        self.names = dict(names)

    def vectors(self, kind: str):
        """The FAISS index of one kind ("text_unit", "entity", "community_report"), loaded once."""
        if kind not in self._vectors:
            from corpusgraph.query.vectors import VectorIndex

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
        ent = self.entities.get(entity_id) or {}
        return int(ent.get("degree") or len(self.adjacency.get(entity_id, ())))

    def other_end(self, rel_id: str, entity_id: str) -> str:
        rel = self.relationships[rel_id]
        return rel["target_id"] if rel["source_id"] == entity_id else rel["source_id"]

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
        ent = self.entities[entity_id]
        for name in [ent["title"] or "", *ent["aliases"]]:
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
