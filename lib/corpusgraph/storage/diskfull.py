"""A full disk, said once and clearly: which folder of the run has no space left.

When the warehouse, cache or index folder fills up, the error surfaces as an OSError (ENOSPC)
from Python, or as a Py4JJavaError whose Java stack trace says "No space left on device" deep
in a chain of Spark causes, or as a second error from the clean-up that ran after it. A run
wrapped in `explain_disk_full` turns any of them into one DiskFullError naming the run's
folders that are full (by their free space now) and what to do. Delta commits are atomic, so
every table is still at its last committed version; rerunning on enough space resumes.
"""

from __future__ import annotations

import errno
import functools
import shutil
from pathlib import Path

__all__ = ["DiskFullError", "explain_disk_full", "is_disk_full"]

_MARKERS = ("No space left on device", "ENOSPC", "Disk quota exceeded")
_LOW_BYTES = 16 * 1024 * 1024  # a folder with less free than this counts as the full one


class DiskFullError(OSError):
    """A run stopped because a folder it writes to has no space left."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether exc, or anything in its cause/context chain, is a full disk."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(marker in str(exc) for marker in _MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _free(path: str) -> int | None:
    where = Path(path)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        return shutil.disk_usage(where).free
    except OSError:
        return None


def describe(folders: dict[str, str]) -> str:
    """The message: the folders that are (nearly) full first, with their free bytes."""
    free = {role: (path, _free(path)) for role, path in folders.items() if path and "://" not in path}
    full = {role: pf for role, pf in free.items() if pf[1] is not None and pf[1] < _LOW_BYTES}
    named = full or free
    listing = "; ".join(f"{role} {path} ({'?' if b is None else b // 1024} KiB free)" for role, (path, b) in named.items())
    return (f"no space left on device: {listing}. Every Delta table is at its last committed version; "
            "free some space (or move storage.* to a larger disk) and run again: finished work is kept")


def explain_disk_full(fn):
    """Decorate a function of a RunContext (pipeline.run_steps): a full disk becomes DiskFullError."""

    @functools.wraps(fn)
    def wrapper(ctx, *args, **kwargs):
        try:
            return fn(ctx, *args, **kwargs)
        except DiskFullError:
            raise
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            storage = ctx.cfg.storage
            folders = {"warehouse": storage.warehouse, "cache": storage.cache_dir, "index": storage.index_dir}
            raise DiskFullError(errno.ENOSPC, describe(folders)) from exc

    return wrapper
