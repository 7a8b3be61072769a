"""The one QueryEngine a service process holds: how it is opened, and where its loading stands.

Opening an engine reads every query table, loads the FAISS files and, for the embedded
backend, starts the model server: seconds to a minute. The app therefore loads it on a worker
thread after start-up (see app.py), so /healthz answers at once and /readyz says 503 until
the engine is there, which is what a load balancer or Kubernetes probe needs to see.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Union

from corpusgraph.config import Config
from corpusgraph.query.engine import QueryEngine
from corpusgraph.storage.locations import S3Settings, open_delta
from corpusgraph.tables import table_path

__all__ = ["EngineFactory", "EngineHolder", "Loaded", "default_engine_factory", "scrub_paths"]

log = logging.getLogger(__name__)

# A factory returns the engine itself, or a context manager that yields it and releases what
# it holds (a model server) on exit. Tests pass `lambda config: engine`.
EngineFactory = Callable[[Config], Union[QueryEngine, AbstractContextManager]]


@contextmanager
def default_engine_factory(cfg: Config) -> Iterator[QueryEngine]:
    """Open the engine the config describes; start and later stop the embedded model server."""
    from corpusgraph.llm.chat_endpoint import ChatEndpoint
    from corpusgraph.query.open import open_query_engine

    with ChatEndpoint(cfg.llm, Path(cfg.storage.cache_dir) / "embedded-server-serve.log") as endpoint:
        engine = open_query_engine(cfg, endpoint.url())
        # The embedder loads its weights on first use; do it now so "ready" means ready and
        # the first caller does not pay for it inside their timeout.
        engine.embedder.embed(["warm-up"])
        yield engine


# An absolute path in an exception's text: the service's callers need not learn its layout.
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[\\/][^\s'\"(),;:]+){2,}")


def scrub_paths(text: str) -> str:
    """`text` with absolute filesystem paths replaced by <path> (the log keeps the full text)."""
    return _PATH.sub("<path>", text)


@dataclass(frozen=True)
class Loaded:
    """An engine and the index version its store holds. A request takes one Loaded at its
    start and answers from it throughout, so a reload swapping in the next one never gives a
    request parts of two versions."""

    engine: QueryEngine
    version: str | None  # versions.version_id; None for an engine without a Delta store (tests)
    versions: dict[str, int] = field(default_factory=dict)


def _reopen(store):
    """A fresh store over the same warehouse and vector indexes: what a reload loads."""
    return type(store)(store.warehouse, store.index_dir, s3=getattr(store, "s3", None))


def _committed_since(warehouse: str, since_s: float, s3: S3Settings | None = None) -> bool:
    """Whether any query table has a commit at or after `since_s` (epoch seconds)."""
    from serving.versions import table_versions

    for name in table_versions(warehouse, s3):
        last = open_delta(table_path(warehouse, name), s3).history(1)
        # Commit timestamps are whole ms; one in the same ms as `since_s` counts as after it.
        if last and last[0].get("timestamp", 0) >= int(since_s * 1000):
            return True
    return False


class EngineHolder:
    """Holds the engine once loaded, or the reason loading failed; `status` says which.

    `current` is replaced whole by `reload`, in one assignment, never changed in place. `views`:
    the domain sets whose view of the index is built with each load (ApiKeys.domain_sets).
    """

    def __init__(self, busy: Callable[[str], str | None] = lambda warehouse: None,
                 store_loader: Callable[[Any], Any] = _reopen, views: Iterable[frozenset[str]] = ()) -> None:
        self.current: Loaded | None = None
        self.error: str | None = None
        self.load_seconds: float | None = None
        self.busy = busy  # warehouse -> the run writing it, or None (corpusgraph.storage.runlock)
        self.store_loader = store_loader
        self.views = sorted(views, key=sorted)
        self._stack = ExitStack()
        self._reload_lock = threading.Lock()

    @property
    def engine(self) -> QueryEngine | None:
        current = self.current
        return None if current is None else current.engine

    @property
    def status(self) -> str:
        if self.current is not None:
            return "ready"
        return "failed" if self.error else "loading"

    def load(self, factory: EngineFactory, config: Config) -> None:
        """Blocking: call the factory once and keep what it gives. Runs on a worker thread."""
        begin, wall = time.monotonic(), time.time()
        try:
            made: Any = factory(config)
            engine = self._stack.enter_context(made) if isinstance(made, AbstractContextManager) else made
            store = getattr(engine, "store", None)
            warehouse = getattr(store, "warehouse", None)
            s3 = getattr(store, "s3", None)  # how to reach a warehouse on S3
            loaded = Loaded(engine, None)
            if warehouse is not None:
                from serving.versions import load_consistent, table_versions, version_id

                if _committed_since(warehouse, wall, s3):  # a run committed while the factory read: read again
                    store, versions = load_consistent(warehouse, lambda: self.store_loader(store),
                                                      busy=lambda: self.busy(warehouse), s3=s3)
                    engine = engine.with_store(store)
                else:
                    versions = table_versions(warehouse, s3)
                loaded = Loaded(engine, version_id(versions), versions)
            self._build_views(engine)
        except Exception as exc:  # the service stays up and says why on /readyz
            log.exception("could not open the query engine")
            self.error = scrub_paths(f"{type(exc).__name__}: {exc}")
        else:
            self.current = loaded
            self.load_seconds = time.monotonic() - begin
            log.info("query engine ready in %.1f s, index version %s: %r", self.load_seconds, loaded.version,
                     getattr(engine, "store", engine))

    def _build_views(self, engine) -> None:
        # Each key's view of the index is built now, so "ready" means every configured
        # caller's first question pays nothing extra.
        index = getattr(engine, "index", None)
        if index is None:
            return
        # The ranking structures (BM25 postings, the walk's graph) too: a build takes a while at
        # scale, and a question must not pay for it inside its timeout.
        index.retriever()
        for domains in self.views:
            index.view(domains).retriever()

    def reload(self) -> tuple[Loaded, bool]:
        """Blocking: load the index's latest version beside the one served, then swap it in.

        Returns the Loaded now served and whether it changed. Raises versions.IndexChanging while
        a run writes the warehouse or its tables move during the load; the old version is kept.
        """
        from serving.versions import IndexChanging, load_consistent, table_versions, version_id

        with self._reload_lock:  # one reload at a time; readers never wait on it
            current = self.current
            store = getattr(getattr(current, "engine", None), "store", None)
            if current is None or getattr(store, "warehouse", None) is None:
                raise IndexChanging("no index is loaded to reload; GET /readyz says when it is")
            warehouse, s3 = store.warehouse, getattr(store, "s3", None)
            if table_versions(warehouse, s3) == current.versions:
                return current, False
            begin = time.monotonic()
            fresh, versions = load_consistent(warehouse, lambda: self.store_loader(store),
                                              busy=lambda: self.busy(warehouse), s3=s3)
            engine = current.engine.with_store(fresh)
            self._build_views(engine)
            self.current = Loaded(engine, version_id(versions), versions)
            log.info("index version %s -> %s in %.1f s", current.version, self.current.version,
                     time.monotonic() - begin)
            return self.current, True

    def close(self) -> None:
        """Blocking: release what the factory opened (stops an embedded model server)."""
        self.current = None
        self._stack.close()

    def not_ready_message(self) -> str:
        if self.error:
            return f"the query engine failed to load: {self.error}"
        return "the query engine is still loading; retry shortly (GET /readyz says when it is ready)"

    def table_counts(self) -> dict[str, int]:
        """Rows the loaded store holds, by Delta table name (deleted documents excluded)."""
        store = getattr(self.engine, "store", None)
        if store is None:
            return {}
        return {
            "documents": len(store.docs),
            "text_units": len(store.units),
            "entities": len(store.entities),
            "relationships": len(store.relationships),
            "claims": len(store.claims),
            "communities": len(store.communities),
            "community_reports": len(store.reports),
        }
