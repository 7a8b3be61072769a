"""The one QueryEngine a service process holds: how it is opened, and where its loading stands.

Opening an engine reads every query table, loads the FAISS files and, for the embedded
backend, starts the model server: seconds to a minute. The app therefore loads it on a worker
thread after start-up (see app.py), so /healthz answers at once and /readyz says 503 until
the engine is there, which is what a load balancer or Kubernetes probe needs to see.
"""

from __future__ import annotations

import logging
import re
import time
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Union

from corpusgraph.query.engine import QueryEngine
from serving.settings import ServiceSettings

__all__ = ["EngineFactory", "EngineHolder", "default_engine_factory", "scrub_paths"]

log = logging.getLogger(__name__)

# A factory returns the engine itself, or a context manager that yields it and releases what
# it holds (a model server) on exit. Tests pass `lambda settings: engine`.
EngineFactory = Callable[[ServiceSettings], Union[QueryEngine, AbstractContextManager]]


@contextmanager
def default_engine_factory(settings: ServiceSettings) -> Iterator[QueryEngine]:
    """Open the engine the config describes; start and later stop the embedded model server."""
    from corpusgraph.cli import open_query_engine

    cfg = settings.resolve_config()
    with ExitStack() as stack:
        base_url = cfg.llm.api_base
        if cfg.llm.backend == "embedded":
            from corpusgraph.llm.server import EmbeddedServer

            server = EmbeddedServer(
                log_path=Path(cfg.storage.cache_dir) / "embedded-server-serve.log",
                model_alias=cfg.llm.model,
                n_ctx=cfg.llm.n_ctx,
            )
            stack.enter_context(server)
            base_url = server.base_url
        engine = open_query_engine(cfg, base_url)
        # The embedder loads its weights on first use; do it now so "ready" means ready and
        # the first caller does not pay for it inside their timeout.
        engine.embedder.embed(["warm-up"])
        yield engine


# An absolute path in an exception's text: the service's callers need not learn its layout.
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[\\/][^\s'\"(),;:]+){2,}")


def scrub_paths(text: str) -> str:
    """`text` with absolute filesystem paths replaced by <path> (the log keeps the full text)."""
    return _PATH.sub("<path>", text)


class EngineHolder:
    """Holds the engine once loaded, or the reason loading failed; `status` says which."""

    def __init__(self) -> None:
        self.engine: QueryEngine | None = None
        self.error: str | None = None
        self.load_seconds: float | None = None
        self._stack = ExitStack()

    @property
    def status(self) -> str:
        if self.engine is not None:
            return "ready"
        return "failed" if self.error else "loading"

    def load(self, factory: EngineFactory, settings: ServiceSettings) -> None:
        """Blocking: call the factory once and keep what it gives. Runs on a worker thread."""
        begin = time.monotonic()
        try:
            made: Any = factory(settings)
            engine = self._stack.enter_context(made) if isinstance(made, AbstractContextManager) else made
            # Each key's view of the index is built now, so "ready" means every configured
            # caller's first question pays nothing extra.
            store = getattr(engine, "store", None)
            for domains in sorted(settings.domain_sets(), key=sorted) if store is not None else ():
                store.restricted(domains)
        except Exception as exc:  # the service stays up and says why on /readyz
            log.exception("could not open the query engine")
            self.error = scrub_paths(f"{type(exc).__name__}: {exc}")
        else:
            self.engine = engine
            self.load_seconds = time.monotonic() - begin
            log.info("query engine ready in %.1f s: %r", self.load_seconds, getattr(engine, "store", engine))

    def close(self) -> None:
        """Blocking: release what the factory opened (stops an embedded model server)."""
        self.engine = None
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
