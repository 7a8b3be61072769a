"""Which index version a store holds, and loading a store that is exactly one version.

The store reads each Delta table at its latest version. An index or update run commits tables
one after another, so a store is only known to be one version when no table moved while it was
read: `load_consistent` reads the versions before and after loading and tries again when they
differ. The version a response names is `version_id(versions)`, the tables' Delta versions
(documents=3,entities=5,...) in one short string.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Callable, TypeVar

from corpusgraph.config import S3Section
from corpusgraph.storage.locations import open_delta
from corpusgraph.tables import table_path

__all__ = ["QUERY_TABLES", "table_versions", "version_id", "load_consistent", "IndexChanging"]

log = logging.getLogger(__name__)

# The tables the query store reads (corpusgraph.query.store); claims may be missing.
QUERY_TABLES = ("documents", "text_units", "entities", "relationships", "claims", "communities", "community_reports")

T = TypeVar("T")


class IndexChanging(RuntimeError):
    """The tables kept changing while the store was read, or a run holds the warehouse."""


def table_versions(warehouse: str, s3: S3Section | None = None) -> dict[str, int]:
    """The latest Delta version of each query table there is (read from the logs, not the data);
    s3: how to reach a warehouse on S3 (the store's settings)."""
    from deltalake.exceptions import TableNotFoundError

    versions = {}
    for name in QUERY_TABLES:
        try:
            versions[name] = open_delta(table_path(warehouse, name), s3).version()
        except TableNotFoundError:
            continue
    return versions


def version_id(versions: dict[str, int]) -> str:
    """A short name for a set of table versions: the same tables at the same versions, the same id."""
    text = ",".join(f"{name}={versions[name]}" for name in sorted(versions))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_consistent(warehouse: str, load: Callable[[], T], *, attempts: int = 3,
                    busy: Callable[[], str | None] = lambda: None,
                    s3: S3Section | None = None) -> tuple[T, dict[str, int]]:
    """`load()` and the table versions it read, retried while a table moves under it.

    busy() names a run writing the warehouse (corpusgraph.storage.runlock), or None: while one runs its
    tables are between versions of the index, so nothing is loaded.
    """
    for attempt in range(1, attempts + 1):
        holder = busy()
        if holder:
            raise IndexChanging(f"not reloading: {holder} is writing the index; retry when it has finished")
        before = table_versions(warehouse, s3)
        loaded = load()
        after = table_versions(warehouse, s3)
        # Checked in this order: a run releases its lock only after its last commit, so no
        # holder now and the versions still `after` mean no run wrote between `before` and now.
        if before == after and not busy() and table_versions(warehouse, s3) == after:
            return loaded, after
        log.warning("index tables changed while loading (attempt %d of %d): %s -> %s", attempt, attempts,
                    before, after)
        time.sleep(0.1 * attempt)
    raise IndexChanging(f"the index tables kept changing over {attempts} loads; retry when the run has finished")
