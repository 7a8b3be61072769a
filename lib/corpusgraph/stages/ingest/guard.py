"""The per-file time and memory guard: binary formats are parsed in a worker process.

One persistent worker (`python -m corpusgraph.stages.ingest.worker`) per Spark Python worker,
started on first use and reused across tasks (Spark reuses its Python workers), so its start
is paid once; a frame round trip costs microseconds. The parent waits at most
`ingest.parse_timeout_s` for an answer; past it the worker is killed (`parse_timeout`) and the
next file starts a fresh one. The worker caps its address space at `ingest.parse_memory_mb`
(`memory_limit`); a worker that dies by a signal is `parser_crash`. Either way only that file is
lost, never the task.

Started with `-m` rather than multiprocessing: under pyspark's daemon the fork of a threaded
process, and spawn's re-import of `__main__`, are both fragile.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import subprocess
import sys
import time

from corpusgraph.stages.ingest.worker import _HEAD, write_frame

__all__ = ["ParseGuard", "guard_for"]

WORKER = "corpusgraph.stages.ingest.worker"


class ParseGuard:
    """A worker process and the rules for waiting on it. module: the worker program (`-m`)."""

    def __init__(self, memory_mb: int, module: str = WORKER):
        self.memory_bytes, self.module = memory_mb * 2**20, module
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def _start(self) -> subprocess.Popen:
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, str(self.memory_bytes)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.starts += 1
        return self.proc

    def run(self, uri: str, data: bytes, section, timeout_s: float) -> tuple[str, object]:
        """("ok", records) or (reason, detail) with reason parse_timeout, memory_limit, parser_crash
        or ingest_error (the worker raised outside a parser)."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        try:
            write_frame(proc.stdin, pickle.dumps((uri, data, section), protocol=5))
        except (BrokenPipeError, OSError):
            return self._died()
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        buf = bytearray()
        need = None
        while need is None or len(buf) < _HEAD.size + need:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                return "parse_timeout", f"no answer within {timeout_s:g} s (ingest.parse_timeout_s)"
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return self._died()
            buf += chunk
            if need is None and len(buf) >= _HEAD.size:
                (need,) = _HEAD.unpack(bytes(buf[:_HEAD.size]))
        status, value = pickle.loads(bytes(buf[_HEAD.size:_HEAD.size + need]))
        if status == "ok":
            return "ok", value
        if status == "memory_limit":
            self.proc.wait(timeout=10)  # the worker exits after a MemoryError; a fresh one takes the next file
            self.proc = None
            return "memory_limit", f"{value} (ingest.parse_memory_mb)"
        return "ingest_error", str(value)

    def _died(self) -> tuple[str, str]:
        code = self.proc.wait() if self.proc is not None else None
        self.proc = None
        if code == -signal.SIGKILL:  # the kernel's OOM killer sends SIGKILL
            return "memory_limit", "the parse worker was killed (SIGKILL: out of memory?)"
        if code is not None and code < 0:
            return "parser_crash", f"the parse worker died by signal {-code} ({signal.Signals(-code).name})"
        return "parser_crash", f"the parse worker exited with code {code}"

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


_GUARDS: dict[tuple[int, str], ParseGuard] = {}


def guard_for(memory_mb: int, module: str = WORKER) -> ParseGuard:
    """This process's guard for a memory limit (one worker each), closed when the process exits."""
    key = (memory_mb, module)
    if key not in _GUARDS:
        if not _GUARDS:
            atexit.register(lambda: [g.close() for g in _GUARDS.values()])
        _GUARDS[key] = ParseGuard(memory_mb, module)
    return _GUARDS[key]
