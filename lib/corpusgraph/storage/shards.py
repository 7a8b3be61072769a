"""The durable record of an LLM pass's progress: Parquet shards of finished answers.

An actor writes each batch's output rows, as soon as the batch is answered, to one Parquet file
in the pass's progress folder under `storage.run_dir` (a local folder or an object-store URI that
every node reaches). Each row carries the key of the input row it answers (`_unit`: a hash of
the input row, computed by Spark when the rows are handed off), the run attempt that paid for it
and when it was written. A later attempt of the same pass (after any crash: the driver, an actor,
a whole node) sends only the input rows with no successful row in the shards, and the pass's
output is read from the shards of every attempt. What a crash loses is the batches in flight.

The progress folder is keyed by the pass's fingerprint (the task's settings and prompts, the
model and temperature), so answers are never reused under a different meaning; it is removed
once the stage that owns it has merged its output into Delta. The per-node SQLite response cache
stays as an accelerator for the requests of an unfinished batch, never as the only record.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid

import pyarrow as pa

from corpusgraph.config import S3Section
from corpusgraph.storage import locations as storage

__all__ = ["UNIT", "ATTEMPT", "WRITTEN", "COLUMNS", "ShardSink", "fingerprint", "split_keys"]

UNIT, ATTEMPT, WRITTEN = "_unit", "_attempt", "_written"
COLUMNS = [(UNIT, pa.string()), (ATTEMPT, pa.string()), (WRITTEN, pa.float64())]
# Task attributes that name the run, not the answer: left out of the fingerprint, so a rerun
# under a new run id finds its earlier attempt's shards.
_RUN_ATTRIBUTES = {"run_id"}


def _canonical(value) -> str:
    """A stable text for a task attribute: JSON for plain data and pydantic models, repr for the
    rest (dataclasses of strings), refusing reprs that hold a memory address."""
    if hasattr(value, "model_dump"):
        return json.dumps(value.model_dump(mode="json"), sort_keys=True, default=str)
    try:
        return json.dumps(value, sort_keys=True)
    except TypeError:
        text = repr(value)
        if " at 0x" in text:
            raise ValueError(f"no stable fingerprint for {type(value).__name__}: {text[:120]}") from None
        return text


def split_keys(rows: list[dict]) -> list[str]:
    """Each row's key, taken out of the row: Spark's `_unit` where the hand-off carries it, else
    (rows handed in directly, as tests do) a hash of the row's JSON."""
    if rows and UNIT in rows[0]:
        return [r.pop(UNIT) for r in rows]
    return [hashlib.sha256(json.dumps(r, sort_keys=True, default=str).encode()).hexdigest() for r in rows]


def fingerprint(task, model: str, temperature: float) -> str:
    """What decides the answers of an LLM pass, hashed: the task's class and attributes (its
    settings, prompts and round; not the run id, nor a private `_` attribute: a cache the task
    fills as it builds requests, which must not make the key depend on what it was asked
    before), the model and the temperature. The class counts by its name, not its module, so
    moving a module between packages does not orphan the progress of a pass under way."""
    parts = {"task": type(task).__qualname__, "model": model,
             "temperature": float(temperature)}
    for name, value in sorted(vars(task).items()):
        if name not in _RUN_ATTRIBUTES and name != "output_schema" and not name.startswith("_"):
            parts[name] = _canonical(value)
    parts["output_schema"] = str(getattr(task, "output_schema", ""))
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


class ShardSink:
    """Writes an actor's finished batches to the progress folder, one file per batch.

    Picklable (a location, settings and the attempt), so it travels into Ray actors; the
    filesystem is opened on first use in the actor's own process. On object storage a file
    appears whole when its upload completes; on a local disk it is written under a temporary
    name and renamed, so a reader never sees half a shard.

    Thread-safe: an actor flushes several batches at once, each from its own thread
    (ray_runner's asyncio.to_thread), so the first use's set-up (the folder made before any
    thread writes into it) and each shard's sequence number are taken under a lock.
    """

    def __init__(self, folder: str, s3: S3Section | None, attempt: str):
        self.folder, self.s3, self.attempt = folder, s3, attempt
        self._fs = None
        self._prefix = uuid.uuid4().hex[:12]  # this actor's (a new one per process, see __setstate__)
        self._seq = 0
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"folder": self.folder, "s3": self.s3, "attempt": self.attempt}

    def __setstate__(self, state):
        self.__init__(state["folder"], state["s3"], state["attempt"])

    def write(self, table: pa.Table, units: list[str]) -> str:
        """Output rows made durable as one shard, with their input keys, this attempt and the
        time; returns the shard's location."""
        import pyarrow.parquet as pq

        n = table.num_rows
        table = (table.append_column(UNIT, pa.array(units, pa.string()))
                 .append_column(ATTEMPT, pa.array([self.attempt] * n, pa.string()))
                 .append_column(WRITTEN, pa.array([time.time()] * n, pa.float64())))
        with self._lock:
            if self._fs is None:
                fs, self._path = storage.arrow_filesystem(self.folder, self.s3)
                if storage.is_local(self.folder):  # an object store needs no folders
                    fs.create_dir(self._path, recursive=True)
                self._fs = fs  # only once its folder exists
            self._seq += 1
            name = f"{self.attempt}-{self._prefix}-{self._seq:06d}.parquet"
        final = f"{self._path}/{name}"
        if storage.is_local(self.folder):
            tmp = f"{self._path}/.{name}.tmp"
            pq.write_table(table, tmp, filesystem=self._fs)
            os.replace(tmp, final)
        else:
            pq.write_table(table, final, filesystem=self._fs)
        return storage.join(self.folder, name)
