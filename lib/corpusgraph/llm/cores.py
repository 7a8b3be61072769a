"""How many CPUs this process may use: its affinity, capped by a cgroup CPU quota.

A container started with `--cpus 2` on a 16-core host still has all 16 cores in its affinity
(os.sched_getaffinity) and in os.cpu_count(); only its cgroup's quota says it gets two CPUs' worth
of time. Runtimes whose threads spin while they wait for each other (llama.cpp, ONNX Runtime) crawl
when they start more threads than that, so both read it here.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cgroup_cpu_limit", "usable_cores", "quota_cap"]

_CGROUP = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path | None = None) -> float | None:
    """The CPUs this process's cgroup may use, or None where there is no limit or no cgroup file
    to read. cgroup v2 writes it as "<quota> <period>" in cpu.max ("max" when unlimited); v1 as
    cpu.cfs_quota_us (-1 when unlimited) over cpu.cfs_period_us."""
    root = root or _CGROUP
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 2


def usable_cores(cgroup_root: Path | None = None) -> int:
    """The cores this process may run on (taskset, cpuset), no more than its quota's whole CPUs,
    at least 1."""
    cap = quota_cap(cgroup_root)
    return cap if cap is not None else max(1, _affinity())


def quota_cap(cgroup_root: Path | None = None) -> int | None:
    """The quota's whole CPUs (at least 1) where a CPU quota holds this process to fewer cores than
    its affinity, else None (a runtime's own default then stands)."""
    limit = cgroup_cpu_limit(cgroup_root)
    if limit is None or int(limit) >= _affinity():
        return None
    return max(1, int(limit))
