"""A persistent LLM response cache in SQLite, shared by every process of a run.

Several Ray actors (separate processes, maybe several threads each) read and write the same
file, so: WAL mode (readers never block the one writer), a busy timeout plus our own retry on
"database is locked" (the busy handler is not consulted in every locking path, e.g. when a
read transaction has to be upgraded), and autocommit so every `put` is durable when it returns.
A run that crashes half-way then resumes paying only for the calls it had not finished.

Connections are opened lazily, one per (process, thread): a sqlite3 connection must not cross a
fork or be shared by threads, and the object itself is pickled into Ray actors, so its state is
only the path.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

__all__ = ["ResponseCache", "cache_key"]

_T = TypeVar("_T")

# Bump when the key's composition changes, so old entries are never read under a new meaning.
_KEY_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def cache_key(
    model: str,
    messages: Sequence[Mapping[str, str]],
    max_tokens: int,
    temperature: float,
    json_schema: Mapping[str, Any] | None,
) -> str:
    """sha256 of the canonical JSON of everything that decides an answer.

    Canonical: sorted keys, no whitespace, numbers normalised (0 and 0.0 are the same
    temperature), so equal requests built in different ways share one entry.
    """
    payload = {
        "v": _KEY_VERSION,
        "model": model,
        "messages": [dict(m) for m in messages],
        "max_tokens": int(max_tokens),
        "temperature": float(temperature),
        "json_schema": json_schema,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseCache:
    """Key -> JSON object store. Only successful answers should be put here (the caller decides)."""

    def __init__(
        self,
        path: str | Path,
        busy_timeout_s: float = 30.0,
        lock_retries: int = 8,
    ) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.lock_retries = lock_retries
        self._local = threading.local()
        self._foreign: list[sqlite3.Connection] = []

    # -- pickling: a connection cannot travel, the path can ------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "busy_timeout_s": self.busy_timeout_s, "lock_retries": self.lock_retries}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["busy_timeout_s"], state["lock_retries"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"

    # -- connection ----------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            if self._local.pid == os.getpid():
                return conn
            # Inherited through fork: it belongs to the parent. Closing it here could disturb
            # the parent's locks and WAL files (SQLite's "how to corrupt" page), so keep a
            # reference and never touch it; open our own.
            self._foreign.append(conn)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._retry(lambda: self._open())
        self._local.conn = conn
        self._local.pid = os.getpid()
        return conn

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: autocommit, so each INSERT is its own committed transaction.
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            # FULL: a committed answer survives an OS crash too; one fsync is cheap next to an LLM call.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def _retry(self, op: Callable[[], _T]) -> _T:
        for attempt in range(self.lock_retries + 1):
            try:
                return op()
            except sqlite3.OperationalError as exc:
                msg = str(exc).lower()
                if ("locked" not in msg and "busy" not in msg) or attempt == self.lock_retries:
                    raise
                # Jittered so that actors that collided do not collide again in step.
                time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
        raise AssertionError("unreachable")

    # -- API -----------------------------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        row = self._retry(lambda: self._conn().execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone())
        return None if row is None else json.loads(row[0])

    def get_many(self, keys: Iterable[str]) -> dict[str, dict]:
        """The stored values of those keys that are present (one query per 500 keys)."""
        keys = list(dict.fromkeys(keys))
        found: dict[str, dict] = {}
        for start in range(0, len(keys), 500):  # stay under SQLite's bound-parameter limit
            part = keys[start : start + 500]
            sql = f"SELECT key, value FROM responses WHERE key IN ({','.join('?' * len(part))})"
            rows = self._retry(lambda: self._conn().execute(sql, part).fetchall())
            found.update((k, json.loads(v)) for k, v in rows)
        return found

    def put(self, key: str, value: dict) -> None:
        """Store value under key; committed (durable) when this returns."""
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        self._retry(
            lambda: self._conn().execute(
                "INSERT OR REPLACE INTO responses (key, value, created) VALUES (?, ?, ?)",
                (key, text, time.time()),
            )
        )

    def put_many(self, values: Mapping[str, dict]) -> None:
        """Store several values in one transaction (one fsync for the lot); durable on return."""
        now = time.time()
        rows = [(k, json.dumps(v, ensure_ascii=False, separators=(",", ":")), now) for k, v in values.items()]

        def write() -> None:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("INSERT OR REPLACE INTO responses (key, value, created) VALUES (?, ?, ?)", rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        if rows:
            self._retry(write)

    def __len__(self) -> int:
        return self._retry(lambda: self._conn().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close this thread's connection (others close when their threads or process end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local = threading.local()
