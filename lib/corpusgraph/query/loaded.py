"""A loaded index: the store (data) and what is derived from it, each built once.

The store (store.py) is the tables and their lookups; the ranking structures of local search (the
walk's graph, BM25, the title index: retrieval.py's GraphRetriever) and the restricted views of
each domain set (access.restrict) are derived from it and owned here, so the store never builds
an algorithm or a policy of its own. The query engine and the service hold a LoadedIndex.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Iterable

from corpusgraph.query.access import restrict
from corpusgraph.query.retrieval import GraphRetriever
from corpusgraph.query.store import IndexStore

__all__ = ["LoadedIndex"]

# Views kept per index (one per distinct domain set asked for); the oldest is dropped beyond this,
# so callers inventing domain sets cannot grow memory without bound.
MAX_VIEWS = 64


class LoadedIndex:
    """One store, its retriever (built on first use) and its views by domain set (each a
    LoadedIndex of its own, built on first use and kept)."""

    def __init__(self, store: IndexStore, *, root: LoadedIndex | None = None):
        self.store = store
        self._root = root  # the whole index's LoadedIndex, for a view: views narrow from it
        self._retriever: GraphRetriever | None = None
        self._retriever_lock = threading.Lock()
        self._views: OrderedDict[frozenset[str], LoadedIndex] = OrderedDict()
        self._views_lock = threading.Lock()

    @property
    def domains(self) -> frozenset[str] | None:
        return self.store.domains

    def retriever(self) -> GraphRetriever:
        """This store's `GraphRetriever`, built on first use and kept.

        Built once under a lock: the service asks from many threads at once, and unguarded, every
        concurrent first question built its own copy, each slowed by the others under the GIL, until
        all of them were past their timeout (tests/benchmarks/test_service_scale.py found it). The
        service builds it before it says ready (serving/engine.py)."""
        built = self._retriever
        if built is None:
            with self._retriever_lock:
                built = self._retriever
                if built is None:
                    built = self._retriever = GraphRetriever(self.store)
        return built

    def view(self, domains: Iterable[str] | None) -> LoadedIndex:
        """The part of this index built only from documents in `domains` (access.py); None: all.

        Built on first use and kept, one per domain set, so each set pays the pass over the tables
        once. A view of a view narrows to the domains both allow, from the whole index, so the cache
        holds one view per set however it was reached."""
        if domains is None:
            return self
        if self._root is not None:
            return self._root.view(self.store.domains & frozenset(domains))
        key = frozenset(domains)
        with self._views_lock:  # one build per set even when several requests ask at once
            view = self._views.get(key)
            if view is None:
                view = LoadedIndex(restrict(self.store, key), root=self)
                if len(self._views) >= MAX_VIEWS:
                    self._views.popitem(last=False)
                self._views[key] = view
        return view

    def cached_views(self) -> set[frozenset[str]]:
        """The domain sets whose views are built."""
        with self._views_lock:
            return set(self._views)

    def __repr__(self) -> str:
        return f"LoadedIndex({self.store!r})"
