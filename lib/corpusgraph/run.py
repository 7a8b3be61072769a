"""One run of a pipeline: its context (config, Spark, warehouse, chat endpoint, run id) and what
a stage returns (StageResult)."""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from . import progress
from .config import Config
from .delta_io import Warehouse
from .llm.base import Usage
from .llm.chat_endpoint import ChatEndpoint

__all__ = ["RunContext", "StageResult"]


@dataclass
class StageResult:
    rows: dict[str, int] = field(default_factory=dict)
    usage: Usage | None = None  # None for stages that make no LLM call
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Bytes this stage brought into the driver process (collected rows, Parquet read back for
    # accounting or for the FAISS build); small per-stage counts and aggregates are not counted.
    driver_collected_bytes: int = 0


class RunContext:
    """One run: config, Spark, the warehouse, the run's id and hand-off folders, the chat endpoint
    (its embedded server started on first use), and the results of the stages run so far."""

    def __init__(self, cfg: Config, spark, *, kind: str = "index", out: TextIO = sys.stderr):
        self.cfg, self.spark, self.kind, self.out = cfg, spark, kind, out
        self.wh = Warehouse(spark, cfg.storage.warehouse)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.run_id = f"{kind}-{stamp}-{secrets.token_hex(3)}"
        self.cache_dir = Path(cfg.storage.cache_dir).resolve()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.results: dict[str, StageResult] = {}
        self.collected_bytes = 0  # brought to the driver by the running stage (see note_collected)
        self.endpoint = ChatEndpoint(cfg.llm, self.cache_dir / "embedded-server.log", log=self.log)

    def note_collected(self, nbytes: int) -> None:
        """Count bytes a step brought into the driver process; the runner puts the stage's total
        in StageResult.driver_collected_bytes."""
        self.collected_bytes += int(nbytes)

    def handoff(self, stage: str, part: str) -> str:
        """A fresh folder for Spark <-> Ray exchange files of this run."""
        return str(self.cache_dir / "handoff" / self.run_id / stage / part)

    def llm_base_url(self) -> str | None:
        """The endpoint LLM workers call; a run with nothing to send never starts a server."""
        return self.endpoint.url()

    def log(self, msg: str) -> None:
        progress.write(f"[corpusgraph] {msg}", self.out)  # above a terminal's progress bar, if one is open

    def close(self) -> None:
        self.endpoint.close()
