"""One run at a time on a warehouse: a lock file with who holds it and a heartbeat.

`corpusgraph index` and `update` write many Delta tables one after another; two of them on one
warehouse would interleave their commits (each table stays valid, but the set would be a mix of
two runs). So a run first creates `<warehouse>/_run.lock` (O_EXCL: exactly one creator wins)
holding its run id, command, host, pid, the pid's start time, when it began and a heartbeat a
thread refreshes. A second run finds the file and refuses at once, naming the first.

A lock is stale, and is taken over (with a warning in the log), when its holder is on this host
and its process is gone (or the pid now belongs to a later process), or when its heartbeat is
older than `stale_after_s`, which is how a holder on another host that died is noticed. Taking
over happens under an flock on `_run.lock.guard`, re-reading the lock inside it, so two runs that
find one stale lock do not both take it. Released on exit, normal or by an exception; a process
killed outright leaves the file, which the next run finds stale.

The file lives beside the tables, so the warehouse must be a local or mounted folder; for a URI
(s3a://, abfss://) there is no lock, and the run says so.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import socket
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urlparse

__all__ = ["RunLocked", "run_lock", "running", "refuse_if_running", "holding_run_lock", "LOCK_NAME"]

log = logging.getLogger(__name__)

LOCK_NAME = "_run.lock"


class RunLocked(RuntimeError):
    """Another live run holds the warehouse."""


def _local_dir(warehouse: str) -> Path | None:
    if warehouse.startswith("file:"):
        return Path(urlparse(warehouse).path)
    return None if "://" in warehouse else Path(warehouse)


def _proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 counting from the pid; the name may hold spaces


def _alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return start is None or _proc_start(pid) in (None, start)


def describe(record: dict) -> str:
    return (f"run {record.get('run_id')} ({record.get('command')}, pid {record.get('pid')} on {record.get('host')}, "
            f"started {record.get('started_at')}, heartbeat {record.get('heartbeat_at')})")


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # half-written or damaged: judged by its age below


def stale_reason(record: dict, path: Path, stale_after_s: float, now: float | None = None) -> str | None:
    """Why the lock `record` (read from `path`) no longer holds, or None while its run lives."""
    now = time.time() if now is None else now
    beat = record.get("heartbeat") or 0.0
    if not beat:
        try:
            beat = path.stat().st_mtime  # unreadable contents: how long ago it was written
        except FileNotFoundError:
            return "gone"
    if now - beat > stale_after_s:
        return f"its heartbeat is {now - beat:.0f} s old (stale after {stale_after_s:g} s)"
    if record.get("host") == socket.gethostname() and isinstance(record.get("pid"), int):
        if not _alive(record["pid"], record.get("pid_start")):
            return f"its process {record['pid']} on this host is gone"
    return None


def running(warehouse: str, stale_after_s: float = 600.0) -> str | None:
    """The live run holding `warehouse`, described, or None (no lock, a stale one, or a URI)."""
    where = _local_dir(warehouse)
    if where is None:
        return None
    path = where / LOCK_NAME
    record = _read(path)
    if record is None or stale_reason(record, path, stale_after_s):
        return None
    return describe(record)


def refuse_if_running(warehouse: str, stale_after_s: float = 600.0) -> None:
    """RunLocked now if a live run holds `warehouse`: a command checks before it starts Spark,
    so a second run is refused in a second, not after the JVM is up. (The lock itself is taken
    later, in run_lock; this check only saves the wait.)"""
    holder = running(warehouse, stale_after_s)
    if holder:
        raise RunLocked(f"warehouse {warehouse} is in use by {holder}; wait for it to finish")


@contextmanager
def _guard(path: Path) -> Iterator[None]:
    with open(path.with_name(LOCK_NAME + ".guard"), "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)


def _write_new(path: Path, record: dict) -> bool:
    """Create the lock file with `record`; False if it exists already."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(record, out)
    return True


def _replace(path: Path, record: dict) -> None:
    tmp = path.with_name(f"{LOCK_NAME}.{record['run_id']}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)  # atomic: a reader sees the old record or the new one


def _acquire(path: Path, record: dict, stale_after_s: float, say: Callable[[str], None]) -> None:
    for _ in range(5):
        if _write_new(path, record):
            return
        with _guard(path):
            held = _read(path)
            if held is None:
                continue  # released meanwhile: try to create it again
            why = stale_reason(held, path, stale_after_s)
            if why is None:
                raise RunLocked(f"warehouse {path.parent} is in use by {describe(held)}; wait for it to finish, "
                                f"or remove {path} if you know that run is dead")
            # Under the guard nobody else takes it over meanwhile; a fresh creator cannot appear
            # either, since the file exists until we replace it.
            _replace(path, record)
            say(f"took over a stale run lock on {path.parent}: {describe(held)}; {why}")
            return
    raise RunLocked(f"could not take the run lock {path}: it kept changing hands")


@contextmanager
def run_lock(warehouse: str, run_id: str, command: str, *, stale_after_s: float = 600.0,
             heartbeat_s: float | None = None, say: Callable[[str], None] = log.warning) -> Iterator[dict | None]:
    """Hold the warehouse's run lock for the `with` block; RunLocked if a live run holds it.

    Yields the lock record, or None for a warehouse URI (no lock possible; `say` tells why).
    """
    where = _local_dir(warehouse)
    if where is None:
        say(f"no run lock on {warehouse}: only a local or mounted warehouse folder can hold one")
        yield None
        return
    where.mkdir(parents=True, exist_ok=True)
    path = where / LOCK_NAME
    now = time.time()
    record = {"run_id": run_id, "command": command, "host": socket.gethostname(), "pid": os.getpid(),
              "pid_start": _proc_start(os.getpid()), "started_at": datetime.now(timezone.utc).isoformat(),
              "heartbeat": now, "heartbeat_at": datetime.now(timezone.utc).isoformat()}
    _acquire(path, record, stale_after_s, say)
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(path, record, heartbeat_s or max(stale_after_s / 4, 0.05),
                                                     stop, say), name="corpusgraph-run-lock", daemon=True)
    beat.start()
    try:
        yield record
    finally:
        stop.set()
        beat.join()
        with _guard(path):
            if (_read(path) or {}).get("run_id") == run_id:
                path.unlink()


def _heartbeat(path: Path, record: dict, every_s: float, stop: threading.Event, say) -> None:
    while not stop.wait(every_s):
        with _guard(path):
            held = _read(path)
            if (held or {}).get("run_id") != record["run_id"]:
                say(f"the run lock on {path.parent} is no longer ours (now: {describe(held or {})}); "
                    "another run may be writing the same tables")
                return
            record["heartbeat"] = time.time()
            record["heartbeat_at"] = datetime.now(timezone.utc).isoformat()
            try:
                _replace(path, record)
            except OSError as exc:  # a full disk, say: the run goes on, and fails on its own writes
                say(f"could not refresh the run lock {path}: {exc}")


def holding_run_lock(fn):
    """Decorate a function of a RunContext (pipeline.run_steps) to run it holding the lock of
    the context's warehouse."""

    @functools.wraps(fn)
    def wrapper(ctx, *args, **kwargs):
        storage = ctx.cfg.storage
        with run_lock(storage.warehouse, ctx.run_id, ctx.kind, stale_after_s=storage.run_lock_stale_s, say=ctx.log):
            return fn(ctx, *args, **kwargs)

    return wrapper
