"""One run of a pipeline: its context (config, Spark, warehouse, chat endpoint, run id), what one
stage is handed (StageContext), and what a stage returns (StageResult)."""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, TextIO

from corpusgraph.config import Config
from corpusgraph.llm.base import Usage
from corpusgraph.llm.chat_endpoint import ChatEndpoint
from corpusgraph.runner import progress
from corpusgraph.storage import locations as storage
from corpusgraph.storage.warehouse import Warehouse

__all__ = ["RunContext", "StageContext", "StageResult", "StageTables", "new_run_id"]


@dataclass
class StageResult:
    rows: dict[str, int] = field(default_factory=dict)
    usage: Usage | None = None  # None for stages that make no LLM call
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Bytes this stage brought into the driver process (collected rows, Parquet read back for
    # accounting or for the FAISS build); small per-stage counts and aggregates are not counted.
    driver_collected_bytes: int = 0


def new_run_id(kind: str) -> str:
    """A run's id: its kind, the UTC start second and a random suffix."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{kind}-{stamp}-{secrets.token_hex(3)}"


class RunContext:
    """One run: config, Spark, the warehouse, the run's id and hand-off folders, the chat endpoint
    (its embedded server started on first use), and the results of the stages run so far.

    The runner hands each stage a StageContext cut from it (`stage`), not the run itself."""

    def __init__(self, cfg: Config, spark, *, kind: str = "index", out: TextIO = sys.stderr,
                 run_id: str | None = None, input_frames: dict | None = None):
        self.cfg, self.spark, self.kind, self.out = cfg, spark, kind, out
        self.wh = Warehouse(spark, cfg.storage.warehouse)
        self.run_id = run_id or new_run_id(kind)
        # This machine's local cache folder; the actors of other nodes open their own (node_path).
        self.cache_dir = Path(storage.node_path(cfg.storage.cache_dir))
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        # Where hand-off files and durable LLM progress go: a folder or URI every node reaches.
        shared = cfg.storage.shared_dir()
        self.shared_dir = storage.node_path(shared) if storage.is_local(shared) else shared
        self.s3 = cfg.storage.s3
        # Progress folders of the running stage, removed once it has committed (finish_stage).
        self.progress_dirs: list[str] = []
        self.results: dict[str, StageResult] = {}
        self.failure: dict | None = None  # why the run stopped, when a stage stopped it (runner/failures.py)
        # Send one request of each kind to the endpoints before the first stage (runner/doctor.py);
        # the command line turns it on for index and update.
        self.preflight = False
        self.collected_bytes = 0  # brought to the driver by the running stage (see note_collected)
        # DataFrames of documents handed to the Python API (corpusgraph.index(df, cfg), runner/api.py),
        # by input name: ingest reads them beside ingest.inputs.
        self.input_frames: dict[str, object] = dict(input_frames or {})
        self.endpoint = ChatEndpoint(cfg.llm, self.cache_dir / "embedded-server.log", log=self.log, prompt_states=True)

    def note_collected(self, nbytes: int) -> None:
        """Count bytes a step brought into the driver process; the runner puts the stage's total
        in StageResult.driver_collected_bytes."""
        self.collected_bytes += int(nbytes)

    def handoff(self, stage: str, part: str) -> str:
        """A fresh folder (or URI) for Spark <-> Ray exchange files of this run."""
        return storage.join(self.shared_dir, "handoff", self.run_id, stage, part)

    def progress_dir(self, stage: str, part: str, fingerprint: str) -> str:
        """The durable progress folder of one LLM pass: not the run's, so that a rerun after a
        crash finds what the crashed attempt finished (storage/shards.py)."""
        path = storage.join(self.shared_dir, "progress", stage, part, fingerprint)
        self.progress_dirs.append(path)
        return path

    def finish_stage(self) -> None:
        """The running stage has committed its output: its progress folders are no longer needed."""
        dirs, self.progress_dirs = self.progress_dirs, []
        for path in dict.fromkeys(dirs):
            storage.remove_tree(path, self.s3)

    def spark_location(self, location: str) -> str:
        """A hand-off location as Spark names it (s3a:// for S3)."""
        return storage.spark_uri(location)

    def llm_base_url(self, section=None) -> str | None:
        """The embedded server's URL where `section` (a stage's llm section; default llm) is the
        embedded backend, else None; a run with nothing to send never starts a server."""
        return self.endpoint.url(section)

    def log(self, msg: str) -> None:
        progress.write(f"[corpusgraph] {msg}", self.out)  # above a terminal's progress bar, if one is open

    def close(self) -> None:
        self.endpoint.close()

    def stage(self, name: str, *, reads=(), writes=()) -> "StageContext":
        """What the stage recorded as `name` is handed: the tables it declares, and the run."""
        return StageContext(self, name, StageTables(self.wh, name, reads, writes))


class StageTables:
    """The warehouse as one stage sees it: the tables its registry entry declares, no others.

    A read of an undeclared table, or a write to a table the stage does not declare as an
    output, is a registry bug and fails loudly before Spark runs anything."""

    _WRITERS = ("overwrite", "append", "merge", "delete_where_missing", "delete_matching")

    def __init__(self, wh: Warehouse, stage: str, reads, writes):
        self._wh, self._stage = wh, stage
        self.writes = frozenset(writes)
        self.reads = frozenset(reads) | self.writes  # a stage may read back what it wrote

    def _check(self, name: str, allowed: frozenset, what: str) -> None:
        if name not in allowed:
            raise PermissionError(f"stage {self._stage!r} {what} table {name!r}, which its registry entry "
                                  f"does not declare (declared: {sorted(allowed)})")

    def read(self, name: str):
        self._check(name, self.reads, "reads")
        return self._wh.read(name)

    def conform(self, name: str, df):
        return self._wh.conform(name, df)

    def __getattr__(self, attr: str):
        if attr not in self._WRITERS:
            raise AttributeError(attr)
        method = getattr(self._wh, attr)

        def checked(name: str, *args, **kwargs):
            self._check(name, self.writes, "writes")
            return method(name, *args, **kwargs)

        return checked


class StageContext:
    """What one stage gets from the run besides its config sections (passed as arguments): its
    tables, Spark, the run id, hand-off folders under its own name, the log, the chat endpoint,
    the driver-bytes counter, and the results of the stages before it."""

    def __init__(self, run: RunContext, name: str, tables: StageTables):
        self.name, self.tables, self._run = name, tables, run
        self.spark, self.run_id, self.cache_dir = run.spark, run.run_id, run.cache_dir
        self.log, self.note_collected, self.s3 = run.log, run.note_collected, run.s3
        # The cache folder as each node's actors open it ($VAR expanded there): the configured
        # form when it names a variable, else this machine's absolute path.
        configured = run.cfg.storage.cache_dir
        self.node_cache_dir = configured if "$" in configured else str(run.cache_dir)

    @property
    def earlier(self) -> Mapping[str, StageResult]:
        return self._run.results

    def handoff(self, part: str) -> str:
        return self._run.handoff(self.name, part)

    def progress_dir(self, part: str, fingerprint: str) -> str:
        return self._run.progress_dir(self.name, part, fingerprint)

    def spark_location(self, location: str) -> str:
        return self._run.spark_location(location)

    def llm_base_url(self, section=None) -> str | None:
        return self._run.llm_base_url(section)

    def prompt_path(self, relative: str) -> Path:
        return self._run.cfg.prompt_path(relative)

    @property
    def input_frames(self) -> Mapping[str, object]:
        """The run's DataFrame inputs by name (RunContext.input_frames); empty for runs over files."""
        return self._run.input_frames
