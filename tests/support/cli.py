"""`corpusgraph <command>` run as a user runs it: the installed console script in a subprocess,
with --conf and --set, its stdout and stderr kept in a logs/ folder beside the warehouse."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

CORPUSGRAPH = Path(sys.executable).with_name("corpusgraph")


class Cli:
    """`corpusgraph <command> --conf local.yaml --set ...` against one warehouse. Commands run in
    `root` (Spark's spark-warehouse/ and derby.log land there too)."""

    def __init__(self, root: Path, sets: dict[str, str]):
        self.root, self.sets = root, dict(sets)
        # Plain progress lines (stderr is not a terminal here) every second instead of every 15 s.
        self.env = {**os.environ, "CORPUSGRAPH_PROGRESS_INTERVAL_S": "1"}
        self.runs = 0

    def argv(self, command: str, *args: str, sets: dict[str, str] | None = None) -> list[str]:
        pairs = [a for k, v in {**self.sets, **(sets or {})}.items() for a in ("--set", f"{k}={v}")]
        return [str(CORPUSGRAPH), command, "--conf", str(REPO / "conf" / "local.yaml"), *pairs, *args]

    def start(self, command: str, *args: str, sets: dict[str, str] | None = None) -> "Running":
        """Start a command; its stdout and stderr go to <root>/logs."""
        self.runs += 1
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        out, err = logs / f"{self.runs:02d}-{command}.out", logs / f"{self.runs:02d}-{command}.err"
        argv = self.argv(command, *args, sets=sets)
        with open(out, "w") as o, open(err, "w") as e:
            proc = subprocess.Popen(argv, cwd=self.root, env=self.env, stdout=o, stderr=e)
        return Running(command, argv, proc, out, err)

    def __call__(self, command: str, *args: str, timeout: float = 1200,
                 sets: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run a command to its end (exit 0 or the test fails with its stderr)."""
        return self.start(command, *args, sets=sets).wait(timeout)

    def table(self, name: str):
        from deltalake import DeltaTable

        from corpusgraph.tables import table_path

        return DeltaTable(table_path(self.sets["storage.warehouse"], name)).to_pyarrow_table()


class Running:
    def __init__(self, command, argv, proc, out: Path, err: Path):
        self.command, self.argv, self.proc, self.out, self.err = command, argv, proc, out, err
        self.started = time.monotonic()

    def wait(self, timeout: float = 1200) -> subprocess.CompletedProcess:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        print(f"corpusgraph {self.command}: {time.monotonic() - self.started:.1f}s")  # with -s: where the time goes
        done = subprocess.CompletedProcess(self.argv, code, self.out.read_text(), self.err.read_text())
        assert code == 0, f"corpusgraph {self.command} exited {code}:\n{done.stderr[-4000:]}"
        return done
