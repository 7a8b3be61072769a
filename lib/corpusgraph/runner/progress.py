"""Progress a person can read: one bar per stage (or pass of a stage) in the stage's own units,
fed from the driver.

A bar has a stage, a unit (documents, text units, LLM calls, communities, vectors, Spark tasks)
and a total. On an interactive terminal it is a tqdm bar (done/total, rate, ETA); anywhere else
(a CI log, spark-submit, a file) it is one plain line every `interval_s` seconds (15 by default;
the CLI passes CORPUSGRAPH_PROGRESS_INTERVAL_S to `configure`) and one when the bar closes:

    [corpusgraph] extract: 120/400 text units (30%), 2.4 text units/s, ETA 1m57s
    [corpusgraph] extract: 400/400 text units (100%), 2.4 text units/s, done in 2m47s

The counts come from the driver: the Ray runner polls a counter actor that its workers tell
about every finished batch (runner/passes/llm.py), the batch backend counts the chunks it has
collected, the communities stage counts the levels of its Leiden hierarchy, and a Spark-only
pass that declares its unit (ingest: files, chunk: documents) counts the rows its scans have
produced so far (`spark_records`, from Spark's SQL metrics). Other Spark-only work is shown in the
tasks of the running Spark job (`spark_tasks`). Ray's and Spark's own progress output is off unless `configure(verbose=True)`
(the CLI's --verbose); `verbose()` tells the runners which.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, TextIO

from corpusgraph.runner.spark_metrics import SqlExecutions, scan_rows

__all__ = ["Bar", "Work", "configure", "verbose", "interval_s", "bar", "write", "spark_tasks", "spark_records",
           "format_duration", "poll", "ticking"]

_DEFAULT_INTERVAL_S = 15.0


@dataclass
class _Settings:
    verbose: bool = False
    stream: TextIO | None = None  # None: sys.stderr at the time of use
    interactive: bool | None = None  # None: the stream is a TTY
    interval_s: float = _DEFAULT_INTERVAL_S


@dataclass(frozen=True)
class Work:
    """What a runner's bar shows: a label (the stage, and its pass), the unit, the total."""

    label: str
    unit: str
    total: int | None


_settings = _Settings()
_lock = threading.Lock()
_open_bars = 0  # driver-fed bars open now; the Spark task bar stays quiet while one is
_tqdm_open = 0  # terminal bars open now: log lines go above them (write)


def configure(*, verbose: bool | None = None, stream: TextIO | None = None, interactive: bool | None = None,
              interval_s: float | None = None) -> None:
    """Process-wide settings (the CLI calls this once); arguments left None keep their value.
    interval_s: seconds between two plain lines of one bar; not above 0 means the default."""
    if verbose is not None:
        _settings.verbose = verbose
    if stream is not None:
        _settings.stream = stream
    if interactive is not None:
        _settings.interactive = interactive
    if interval_s is not None:
        _settings.interval_s = interval_s if interval_s > 0 else _DEFAULT_INTERVAL_S


def verbose() -> bool:
    """True when Ray's and Spark's own progress output should be shown (--verbose)."""
    return _settings.verbose


def interval_s() -> float:
    """Seconds between two plain progress lines of one bar in a non-interactive log."""
    return _settings.interval_s


def _stream() -> TextIO:
    return _settings.stream or sys.stderr


def _interactive(stream: TextIO) -> bool:
    if _settings.interactive is not None:
        return _settings.interactive
    try:
        # A terminal of no width (a pty nobody sized, as some CI runners give) draws empty bars.
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):
        return False


def format_duration(seconds: float) -> str:
    """42s, 3m05s, 2h07m."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _rate(value: float, unit: str) -> str:
    if value >= 10:
        return f"{value:,.0f} {unit}/s"
    if value >= 0.1:
        return f"{value:.1f} {unit}/s"
    if value > 0:
        return f"{value * 60:.1f} {unit}/min"
    return f"0 {unit}/s"


class Bar:
    """One stage's progress: `update(n)` or `set(done)` from any thread, `close()` once.

    Thread-safe; a poller thread may feed it while the stage's main thread waits on Ray.
    """

    def __init__(self, stage: str, unit: str, total: int | None, *, stream: TextIO | None = None,
                 interactive: bool | None = None, interval: float | None = None, transient: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        """transient: a bar that says nothing at its end unless it showed before (a short Spark
        job), and leaves no line on a terminal."""
        global _open_bars, _tqdm_open
        self.stage, self.unit, self.total = stage, unit, total
        self.transient = transient
        self.done = 0
        self._base = 0  # done before the clock started (see reset)
        self.lines = 0  # plain lines printed so far
        self._stream = stream or _stream()
        self._interactive = _interactive(self._stream) if interactive is None else interactive
        self._interval = interval_s() if interval is None else interval
        self._clock = clock
        self._t0 = clock()
        self._last_line = self._t0
        self._closed = False
        self._mutex = threading.Lock()
        self._tqdm = None
        if self._interactive:
            from tqdm import tqdm

            self._tqdm = tqdm(total=total, desc=stage, unit=f" {unit}", file=self._stream, dynamic_ncols=True,
                              leave=not transient, smoothing=0.1, mininterval=0.5)
        with _lock:
            _open_bars += 1
            _tqdm_open += self._tqdm is not None

    # -- feeding -------------------------------------------------------------------------------
    def update(self, n: int = 1) -> None:
        if n:
            self.set(self.done + n)

    def set(self, done: int) -> None:
        """Done so far (never goes down; a retried batch counted twice is capped at the total)."""
        with self._mutex:
            if self._closed:
                return
            done = max(self.done, int(done))
            if self.total is not None:
                done = min(done, self.total)
            step, self.done = done - self.done, done
            if self._tqdm is not None:
                if step:
                    self._tqdm.update(step)
                return
            if self._clock() - self._last_line >= self._interval:
                self._line()

    def reset(self, total: int | None, stage: str | None = None, done: int = 0) -> None:
        """Start counting again towards a new total (the next Spark job of a stage); `done` were
        finished before it was seen, so they count towards the total but not the rate."""
        with self._mutex:
            self.total, self.done, self._base = total, done, done
            if stage is not None:
                self.stage = stage
            self._t0 = self._clock()
            if self._tqdm is not None:
                self._tqdm.reset(total=total)
                self._tqdm.update(done)
                if stage is not None:
                    self._tqdm.set_description_str(stage)

    def set_total(self, total: int | None) -> None:
        """A new total, keeping the count and the rate (an upper bound that turned out lower:
        a hierarchy that needed fewer levels than allowed)."""
        with self._mutex:
            self.total = total
            if total is not None:
                self.done = min(self.done, total)
            if self._tqdm is not None:
                self._tqdm.total = total
                self._tqdm.refresh()

    def close(self, failed: bool = False) -> None:
        """The last line: done/total, rate and the time taken (or "stopped" when it failed)."""
        global _open_bars, _tqdm_open
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            if self._tqdm is not None:
                self._tqdm.close()
            elif not self.transient or self.lines:
                self._line(final="stopped after" if failed else "done in")
        with _lock:
            _open_bars -= 1
            _tqdm_open -= self._tqdm is not None

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the plain line ------------------------------------------------------------------------
    def status(self, *, final: str | None = None) -> str:
        """done/total, rate and ETA (or the time taken, once closed) as one line."""
        now = self._clock()
        elapsed = max(now - self._t0, 1e-9)
        rate = (self.done - self._base) / elapsed
        if self.total:
            head = f"{self.done:,}/{self.total:,} {self.unit} ({100 * self.done / self.total:.0f}%)"
        else:
            head = f"{self.done:,} {self.unit}"
        parts = [f"{self.stage}: {head}", _rate(rate, self.unit)]
        if final:
            parts.append(f"{final} {format_duration(elapsed)}")
        elif self.total:
            left = self.total - self.done
            parts.append(f"ETA {format_duration(left / rate)}" if rate > 0 else "ETA unknown")
        return ", ".join(parts)

    def _line(self, final: str | None = None) -> None:
        self._last_line = self._clock()
        self.lines += 1
        print(f"[corpusgraph] {self.status(final=final)}", file=self._stream, flush=True)


def write(line: str, stream: TextIO | None = None) -> None:
    """Print a log line; above any terminal bar that is open, not through it."""
    stream = stream or _stream()
    if _tqdm_open:
        from tqdm import tqdm

        tqdm.write(line, file=stream)
        stream.flush()
    else:
        print(line, file=stream, flush=True)


def bar(stage: str, unit: str, total: int | None) -> Bar:
    """A bar with the process's settings (configure())."""
    return Bar(stage, unit, total)


@contextlib.contextmanager
def poll(read: Callable[[], int | None], target: Bar, every_s: float = 1.0) -> Iterator[Bar]:
    """Feed `target` from `read()` (done so far, or None when unknown) on a daemon thread for the
    `with` block, then once more at its end. A failing read (a counter actor still starting, or
    gone) is skipped: progress never fails the run."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                done = read()
            except Exception:  # noqa: BLE001
                continue
            if done is not None:
                target.set(done)

    thread = threading.Thread(target=loop, name=f"progress-{target.stage}", daemon=True)
    thread.start()
    try:
        yield target
    finally:
        stop.set()
        thread.join(timeout=5)
        with contextlib.suppress(Exception):
            done = read()
            if done is not None:
                target.set(done)


@contextlib.contextmanager
def ticking(target: Bar, every_s: float = 1.0) -> Iterator[Bar]:
    """A bar fed by rare `set` calls (one per Leiden level), kept ticking so a non-interactive log
    still gets its line every interval while the count stands still; closed at the end of the
    block ("stopped after" if the block raised)."""
    try:
        with poll(lambda: target.done, target, every_s):
            yield target
    except BaseException:
        target.close(failed=True)
        raise
    target.close()


@contextlib.contextmanager
def spark_records(spark, stage: str, unit: str, total: int | None, source: str,
                  every_s: float = 2.0) -> Iterator[Bar | None]:
    """A bar of the stage in its own units for the Spark pass the `with` block runs: done = rows
    its scans named `source` have produced so far (`scan_rows`: files for ingest's "Scan
    binaryFile", documents for chunk's "Scan parquet" of the documents table), clamped to `total`. Those are
    rows handed to the pass's next step, which runs behind them by at most one batch per running
    task (what the socket to a Python worker holds, a few MB). Counts move with task ends and
    executor heartbeats; once the block has finished, the closing line counts the whole total
    ("stopped after" with the count reached if it raised). While it is open, `spark_tasks`
    keeps quiet. With no Spark, or no total, it shows nothing and yields None (the task bar stays).
    """
    if spark is None or not total:
        yield None
        return
    sc = spark.sparkContext
    description = f"corpusgraph {stage}: {unit}"
    previous = sc.getLocalProperty("spark.job.description")
    try:
        executions = SqlExecutions(spark)
    except Exception:  # noqa: BLE001 - no SQL status store: the task bar stays
        yield None
        return
    sc.setLocalProperty("spark.job.description", description)
    target = Bar(stage, unit, total)
    failed = False

    def read() -> int:
        return scan_rows(executions.read(description), description, source)

    try:
        # Read at least as often as lines are printed (a short interval in tests, CI logs set longer).
        with poll(read, target, min(every_s, interval_s())):
            yield target
        # The pass finished: every row of the total is done, read or known from the listing (an
        # empty file is never read; Spark aggregates a finished query's metrics asynchronously).
        target.set(total)
    except BaseException:
        failed = True
        raise
    finally:
        target.close(failed=failed)
        with contextlib.suppress(Exception):
            sc.setLocalProperty("spark.job.description", previous)


@contextlib.contextmanager
def spark_tasks(spark, stage: str, every_s: float = 1.0, show_after_s: float = 2.0) -> Iterator[None]:
    """Show the tasks of each Spark job the `with` block runs (done/total, rate, ETA of the job),
    labelled with the stage; quiet while a driver-fed bar of the stage (LLM calls, vectors) is
    open. Jobs are found by a job group set on this thread for the block. A job shows once it has
    run for `show_after_s` (a stage of many short jobs would otherwise flicker through them)."""
    if spark is None:
        yield
        return
    sc = spark.sparkContext
    group = f"corpusgraph-{stage}-{os.getpid()}-{time.monotonic_ns()}"
    sc.setJobGroup(group, f"corpusgraph {stage}", interruptOnCancel=False)
    tracker = sc.statusTracker()
    stop = threading.Event()
    state: dict = {"bar": None, "job": None}
    first_seen: dict[int, float] = {}
    ended: set[int] = set()  # jobs not to ask about again

    def job_tasks(job_id: int) -> tuple[int, int] | None:
        info = tracker.getJobInfo(job_id)
        if info is None:
            return None
        done = total = 0
        for sid in info.stageIds:
            st = tracker.getStageInfo(sid)
            if st is not None:
                done += st.numCompletedTasks
                total += st.numTasks
        return done, total

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                active = []
                for j in tracker.getJobIdsForGroup(group):
                    if j in ended:
                        continue
                    status = getattr(tracker.getJobInfo(j), "status", None)
                    if status == "RUNNING":
                        active.append(j)
                    elif status in ("SUCCEEDED", "FAILED"):
                        ended.add(j)
                if not active or _open_bars - (state["bar"] is not None) > 0:
                    continue
                now = time.monotonic()
                for j in active:
                    first_seen.setdefault(j, now)
                job = min(active)  # the oldest one running
                counts = job_tasks(job)
                if counts is None or counts[1] == 0 or (now - first_seen[job] < show_after_s and state["job"] != job):
                    continue
                done, total = counts
                label = f"{stage} (Spark job {job})"
                if state["bar"] is None:
                    state["bar"] = Bar(label, "Spark tasks", total, transient=True)
                    state["bar"].reset(total, label, done)
                elif state["job"] != job:
                    state["bar"].reset(total, label, done)
                state["job"] = job
                state["bar"].set(done)
            except Exception:  # noqa: BLE001 - progress must never fail the run
                return

    thread = threading.Thread(target=loop, name=f"spark-progress-{stage}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        if state["bar"] is not None:
            # The last job's own bar, with its final count; the stage's result line follows.
            with contextlib.suppress(Exception):
                counts = job_tasks(state["job"])
                if counts is not None:
                    state["bar"].set(counts[0])
            state["bar"].close()
        with contextlib.suppress(Exception):
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)

