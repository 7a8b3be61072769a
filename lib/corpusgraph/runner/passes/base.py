"""What every Ray Data pass of corpusgraph shares: starting (or joining) Ray, the CPUs each piece
of a pass claims, how rows are cut into blocks, output folders, and the progress feed from the
workers to the driver's bar. The LLM pass is runner/passes/llm.py, the embedding pass runner/passes/embed.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from typing import Callable

from corpusgraph.config import RaySection, S3Section
from corpusgraph.runner import progress
from corpusgraph.storage import locations as storage

__all__ = ["init_ray", "progress_feed", "Tally", "num_blocks", "parquet_rows", "IO_CPUS", "LLM_ACTOR_CPUS",
           "EMBED_ACTOR_CPUS", "BATCHES_PER_BLOCK", "BLOCKS_PER_ACTOR"]


def init_ray(section: RaySection) -> None:
    import ray

    from corpusgraph.runner.passes.cluster import address as cluster_address

    quiet = not progress.verbose()
    if not ray.is_initialized():
        # Ray's own INFO lines ("Started a local Ray instance") only with --verbose.
        level = logging.WARNING if quiet else logging.INFO
        # 'spark': the Ray-on-Spark cluster of this run (runner/passes/cluster.py), started on first use.
        address = cluster_address(section)
        if address:
            # host:port of a cluster this machine is a node of (a driver on the head, or under
            # `ray.util.spark.setup_ray_cluster`); ray://host:10001 from elsewhere needs ray[client].
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, logging_level=level)
        else:
            ray.init(num_cpus=section.num_cpus, include_dashboard=False, ignore_reinit_error=True,
                     log_to_driver=False, logging_level=level)
    # Set on every call: a caller may have started Ray itself (the benchmark does).
    # Progress is corpusgraph's own (runner/progress.py: one bar per stage in its units, fed from the
    # driver); Ray Data's operator bars and its operator-progress log lines ("MapBatches(...): 0/1",
    # "Queued blocks", "Resources") come back with --verbose.
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = not quiet
    ctx.verbose_stats_logs = False
    _ray_data_console(quiet)
    # Ray 2.60's default Parquet reader (DataSource V2) starts with a file-listing task that
    # always claims a whole CPU (no argument reaches it). The actor pool is created first and
    # holds its fraction, so on a 1-CPU Ray the listing never fits and the stage waits forever.
    # The V1 reader is one read operator that takes the num_cpus we give it (see IO_CPUS).
    ctx.use_datasource_v2 = False


class _QuietRayData(logging.Filter):
    """On Ray Data's console handler without --verbose: warnings and errors only, and not the one
    that says its progress bars are off (they are off on purpose). Ray's session log
    (/tmp/ray/session_*/logs/ray-data) keeps everything."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING and not record.getMessage().startswith("Progress bars disabled")


def _ray_data_console(quiet: bool) -> None:
    from ray.data._internal.logging import SessionFileHandler

    for handler in logging.getLogger("ray.data").handlers:
        if isinstance(handler, SessionFileHandler):
            continue
        for f in [f for f in handler.filters if isinstance(f, _QuietRayData)]:
            handler.removeFilter(f)
        if quiet:
            handler.addFilter(_QuietRayData())


class _ProgressCounter:
    """Rows finished per task run, told by the workers, read by the driver's progress poller
    (one actor per pass, claiming no CPU)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, key: str, n: int) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def get(self, key: str) -> int:
        return self.counts.get(key, 0)

    def drop(self, key: str) -> None:
        self.counts.pop(key, None)


def _progress_counter():
    """A new counter actor, owned by the handle returned. Not one named actor per driver, fetched
    by name for each pass: a handle got by name does not own the actor, so it died with the first
    pass's handle (Ray frees an actor when its owner's handles are gone), whenever the garbage
    collector took that one; the next pass's workers then told a dead actor and its bar stood
    silent (a long embed pass showed no line at all)."""
    import ray

    return ray.remote(num_cpus=0, max_restarts=0)(_ProgressCounter).remote()


class Tally:
    """A worker's finished rows, sent to the driver's counter at most every half second (and at
    the end of each batch); a lost message only makes the bar lag, never fails the work."""

    def __init__(self, target) -> None:
        self.counter, self.key = target
        self.pending, self.last = 0, 0.0
        self.lock = threading.Lock()

    def add(self, n: int = 1) -> None:
        with self.lock:
            self.pending += n
            due = time.monotonic() - self.last >= 0.5
        if due:
            self.flush()

    def flush(self):
        """Send what is pending; returns the call's ref (None when nothing was sent)."""
        with self.lock:
            n, self.pending, self.last = self.pending, 0, time.monotonic()
        if n:
            with contextlib.suppress(Exception):
                return self.counter.add.remote(self.key, n)
        return None

    async def settle(self) -> None:
        """At the end of a batch: send what is pending and wait until the counter has it (an
        actor that ends right after its last batch could otherwise lose the message)."""
        ref = self.flush()
        if ref is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout=10)


@contextlib.contextmanager
def progress_feed(work: progress.Work | None, finished: Callable[[], int]):
    """(counter, key) for the workers of one task run, and its bar fed from the counter on the
    driver for the `with` block; (None) when the caller asked for no bar. When the block ends
    well, the bar's last count is `finished()` (the rows the pass wrote)."""
    if work is None:
        yield None
        return
    import ray

    counter, key = _progress_counter(), uuid.uuid4().hex
    bar = progress.bar(work.label, work.unit, work.total)
    failed = True
    try:
        with progress.poll(lambda: ray.get(counter.get.remote(key), timeout=10), bar):
            yield (counter, key)
        failed = False
        with contextlib.suppress(Exception):
            bar.set(finished())
    finally:
        bar.close(failed=failed)
        with contextlib.suppress(Exception):
            counter.drop.remote(key)


# Logical CPUs claimed by each piece of a Ray Data pipeline. Ray Data gives a read or write task
# a whole CPU by default and will not start one that does not fit: on a 1-CPU Ray (ray.num_cpus: 1,
# or one small worker node) an actor holding its CPU then leaves the read waiting forever. The
# real work is elsewhere (the model server; Parquet reads and writes of a few MB), so every piece
# claims a fraction and any pipeline fits in one CPU: read + actor + write = 0.25 + 0.5 + 0.25.
IO_CPUS = 0.25
LLM_ACTOR_CPUS = 0.25
# The embedder computes in this process; its claim is logical (numpy threads use what is free),
# kept at half a CPU so that two embed actors never crowd out the reads on a small node.
EMBED_ACTOR_CPUS = 0.5

# Rows per block, in batches: small enough that a hand-off of one Parquet file (Spark writes
# one when adaptive execution coalesces a small pending set, and Ray reads a file as one
# block) still spreads over every actor; two batches so a block is worth a Ray task.
BATCHES_PER_BLOCK = 2
# Blocks an actor works on at once. With the async __call__ each block's batches overlap too;
# two blocks keep requests queued for the client while one block's last answers come in.
BLOCKS_PER_ACTOR = 2


def parquet_rows(location: str, s3: S3Section | None = None) -> int:
    """Rows of the Parquet files at location (from their footers, no data read)."""
    import pyarrow.dataset as pads

    fs, path = storage.arrow_filesystem(location, s3)
    return pads.dataset(path, filesystem=fs, format="parquet").count_rows()


def num_blocks(in_path: str, rows_per_block: int, s3: S3Section | None = None) -> int:
    """Blocks for the rows at in_path (counted from the Parquet footers, no data read)."""
    return max(1, -(-parquet_rows(in_path, s3) // rows_per_block))

