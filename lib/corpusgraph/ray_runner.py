"""Runs an LLM task over rows handed off by Spark through storage, on Ray actors.

Spark writes the pending rows as Parquet; `ray.data` reads them, a pool of actors each owning
one chat client (with its own requests in flight and the shared on-disk response cache) turns
batches into output rows, and the rows are written back as Parquet for Spark to merge into
Delta. Usage is counted from the output rows, so it is right however many actors ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Protocol, Sequence

import pyarrow as pa

from . import progress
from .config import EmbeddingSection, LLMSection, RaySection
from .llm.base import ChatRequest, ChatResult, Usage

__all__ = ["LLMTask", "init_ray", "run_llm_task", "output_usage", "usage_from_outputs", "run_embed_task",
           "EMBED_META"]

# Bookkeeping columns added to every output row and dropped before the Delta write (llm_batch:
# answered through the batch API, priced at llm.batch.price_factor).
_META = [("llm_cached", pa.bool_()), ("llm_failed", pa.bool_()), ("llm_seconds", pa.float64()),
         ("llm_tokens_in", pa.int64()), ("llm_tokens_out", pa.int64()), ("llm_batch", pa.bool_())]


class LLMTask(Protocol):
    output_schema: pa.Schema
    stage: str

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]: ...

    def outputs(self, rows: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]: ...


def init_ray(section: RaySection) -> None:
    import ray

    quiet = not progress.verbose()
    if not ray.is_initialized():
        # Ray's own INFO lines ("Started a local Ray instance") only with --verbose.
        level = logging.WARNING if quiet else logging.INFO
        if section.address:
            # host:port of a cluster this machine is a node of (a driver on the head, or under
            # `ray.util.spark.setup_ray_cluster`); ray://host:10001 from elsewhere needs ray[client].
            ray.init(address=section.address, ignore_reinit_error=True, log_to_driver=False, logging_level=level)
        else:
            ray.init(num_cpus=section.num_cpus, include_dashboard=False, ignore_reinit_error=True,
                     log_to_driver=False, logging_level=level)
    # Set on every call: a caller may have started Ray itself (the benchmark does).
    # Progress is corpusgraph's own (progress.py: one bar per stage in its units, fed from the
    # driver); Ray Data's operator bars and its operator-progress log lines ("MapBatches(...): 0/1",
    # "Queued blocks", "Resources") come back with --verbose.
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = not quiet
    ctx.verbose_stats_logs = False
    _ray_data_console(quiet)
    # Ray 2.60's default Parquet reader (DataSource V2) starts with a file-listing task that
    # always claims a whole CPU (no argument reaches it). The actor pool is created first and
    # holds its fraction, so on a 1-CPU Ray the listing never fits and the stage waits forever.
    # The V1 reader is one read operator that takes the num_cpus we give it (see _IO_CPUS).
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
    (one actor per driver process, claiming no CPU)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, key: str, n: int) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def get(self, key: str) -> int:
        return self.counts.get(key, 0)

    def drop(self, key: str) -> None:
        self.counts.pop(key, None)


def _progress_counter():
    import ray

    cls = ray.remote(num_cpus=0, max_restarts=0)(_ProgressCounter)
    return cls.options(name=f"corpusgraph-progress-{os.getpid()}", get_if_exists=True).remote()


class _Tally:
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
def _progress_feed(work: progress.Work | None, out_path: str):
    """(counter, key) for the workers of one task run, and its bar fed from the counter on the
    driver for the `with` block; (None) when the caller asked for no bar. When the block ends
    well, the bar's last count is the rows written to out_path (from the Parquet footers)."""
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
            import pyarrow.dataset as pads

            bar.set(pads.dataset(out_path, format="parquet").count_rows())
    finally:
        bar.close(failed=failed)
        with contextlib.suppress(Exception):
            counter.drop.remote(key)


# Logical CPUs claimed by each piece of a Ray Data pipeline. Ray Data gives a read or write task
# a whole CPU by default and will not start one that does not fit: on a 1-CPU Ray (ray.num_cpus: 1,
# or one small worker node) an actor holding its CPU then leaves the read waiting forever. The
# real work is elsewhere (the model server; Parquet reads and writes of a few MB), so every piece
# claims a fraction and any pipeline fits in one CPU: read + actor + write = 0.25 + 0.5 + 0.25.
_IO_CPUS = 0.25
_LLM_ACTOR_CPUS = 0.25
# The embedder computes in this process; its claim is logical (numpy threads use what is free),
# kept at half a CPU so that two embed actors never crowd out the reads on a small node.
_EMBED_ACTOR_CPUS = 0.5

# Rows per block, in batches: small enough that a hand-off of one Parquet file (Spark writes
# one when adaptive execution coalesces a small pending set, and Ray reads a file as one
# block) still spreads over every actor; two batches so a block is worth a Ray task.
_BATCHES_PER_BLOCK = 2
# Blocks an actor works on at once. With the async __call__ each block's batches overlap too;
# two blocks keep requests queued for the client while one block's last answers come in.
_BLOCKS_PER_ACTOR = 2


def _num_blocks(in_path: str, rows_per_block: int) -> int:
    """Blocks for the rows at in_path (counted from the Parquet footers, no data read)."""
    import pyarrow.dataset as pads

    rows = pads.dataset(in_path, format="parquet").count_rows()
    return max(1, -(-rows // rows_per_block))


class _LLMWorker:
    """One actor: one chat client, reused for every batch it gets.

    `__call__` is a coroutine, so Ray Data runs it on the actor's event loop and overlaps
    batches (up to 4 per block, and _BLOCKS_PER_ACTOR blocks): while one batch waits for its
    slowest answers the next one's requests are already queued. The client's own limits
    (llm.concurrency and the per-endpoint ones) hold across all of them, so the actor keeps
    `concurrency` requests in flight across batch boundaries, never more.
    """

    def __init__(self, task: LLMTask, llm: LLMSection, cache_dir: str, base_url: str | None, batch: bool = False,
                 progress_to=None):
        from .llm.factory import open_chat_model

        self.task, self.batch = task, batch
        self.chat = open_chat_model(llm, cache_dir, base_url=base_url, batch=batch)
        self.schema = pa.schema(list(task.output_schema) + [pa.field(n, t) for n, t in _META])
        # Progress: every answer (or cache hit) as it comes, where the client tells of each one
        # (on_result); else each batch when it is done.
        self.tally = _Tally(progress_to) if progress_to is not None else None
        self.per_request = self.tally is not None and hasattr(self.chat, "on_result")
        if self.per_request:
            self.chat.on_result = lambda: self.tally.add(1)

    async def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        requests = self.task.requests(rows)
        acomplete = getattr(self.chat, "acomplete", None)
        if acomplete is not None:
            results = await acomplete(requests)
        else:  # a client without an async API: keep the loop free for the other batches
            results = await asyncio.to_thread(self.chat.complete, requests)
        if self.tally is not None:
            if not self.per_request:
                self.tally.add(len(rows))
            await self.tally.settle()
        return self.table(rows, results)

    def table(self, rows: list[dict], results: Sequence[ChatResult]) -> pa.Table:
        out = self.task.outputs(rows, results)
        for row, res in zip(out, results):
            row.update(llm_cached=res.cached, llm_failed=res.error is not None, llm_seconds=res.seconds,
                       llm_tokens_in=res.tokens_in, llm_tokens_out=res.tokens_out, llm_batch=self.batch)
        return pa.Table.from_pylist(out, schema=self.schema)


def run_llm_task(
    task: LLMTask,
    in_path: str,
    out_path: str,
    *,
    llm: LLMSection,
    ray_section: RaySection,
    cache_dir: str,
    base_url: str | None,
    work: progress.Work | None = None,
) -> None:
    """Rows at in_path (Parquet) -> task outputs at out_path (Parquet), on Ray actors (or, for a
    stage llm.batch.stages names under llm.backend openai_batch, through the batch API).

    work: the bar to show (label, unit, total rows), fed from the driver as rows finish."""
    if llm.batched(task.stage):
        return _run_batched(task, in_path, out_path, llm=llm, cache_dir=cache_dir, base_url=base_url, work=work)
    import ray

    init_ray(ray_section)
    # A batch of `concurrency` rows fills the actor's slots once; the overlap of batches and
    # blocks (see _LLMWorker) queues the next ones behind it.
    batch = max(8, llm.concurrency)
    # The read cuts the rows into blocks of about two batches itself; a repartition operator
    # would add a task that claims a whole CPU (no argument reaches it).
    ds = ray.data.read_parquet(in_path, num_cpus=_IO_CPUS,
                               override_num_blocks=_num_blocks(in_path, batch * _BATCHES_PER_BLOCK))
    with _progress_feed(work, out_path) as progress_to:
        ds = ds.map_batches(
            _LLMWorker,
            fn_constructor_kwargs={"task": task, "llm": llm, "cache_dir": cache_dir, "base_url": base_url,
                                   "progress_to": progress_to},
            batch_size=batch,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=ray_section.actors,
                                               max_concurrent_calls_per_actor=_BLOCKS_PER_ACTOR),
            # The actors wait on HTTP; the model server, not Ray, owns the CPUs. An actor that owns
            # a vLLM engine (llm.backend 'vllm') needs its GPU reserved here.
            num_cpus=_LLM_ACTOR_CPUS,
            **({"num_gpus": ray_section.num_gpus_per_actor} if ray_section.num_gpus_per_actor else {}),
        )
        _clear(out_path)
        ds.write_parquet(out_path, ray_remote_args={"num_cpus": _IO_CPUS})


def _run_batched(task: LLMTask, in_path: str, out_path: str, *, llm: LLMSection, cache_dir: str,
                 base_url: str | None, work: progress.Work | None = None) -> None:
    """llm.backend openai_batch: the rows go to the batch API from this process, which only uploads
    and polls (the model runs on the server). Rows are read llm.batch.max_lines at a time, twice:
    every chunk is submitted first, so the batches run side by side, then each chunk's answers are
    awaited and its output rows written. Same outputs and bookkeeping as the actors write."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    worker = _LLMWorker(task, llm, cache_dir, base_url, batch=True)
    chunks = lambda: _row_chunks(pads.dataset(in_path, format="parquet"), llm.batch.max_lines)  # noqa: E731
    bar = progress.bar(work.label, work.unit, work.total) if work is not None else None
    failed = True
    try:
        for rows in chunks():
            worker.chat.submit(task.requests(rows))
        _clear(out_path)
        Path(out_path).mkdir(parents=True, exist_ok=True)
        for i, rows in enumerate(chunks()):
            pq.write_table(worker.table(rows, worker.chat.complete(task.requests(rows))),
                           str(Path(out_path) / f"part-{i:05d}.parquet"))
            if bar is not None:  # a chunk's answers are all collected: its rows are done
                bar.update(len(rows))
        failed = False
    finally:
        worker.chat.close()
        if bar is not None:
            bar.close(failed=failed)


def _row_chunks(ds, size: int):
    """The dataset's rows as lists of at most `size` dicts, in a fixed order."""
    buf: list[dict] = []
    for batch in ds.to_batches():
        buf.extend(batch.to_pylist())
        while len(buf) >= size:
            yield buf[:size]
            buf = buf[size:]
    if buf:
        yield buf


def _clear(out_path: str) -> None:
    """Remove a local output folder first: Ray adds files next to any already there, and outputs
    left by an earlier pass of the same run would be read back (and counted) with this one's."""
    if "://" not in str(out_path):
        shutil.rmtree(out_path, ignore_errors=True)


def output_usage(path: str | Path, llm: LLMSection) -> tuple[Usage, int]:
    """A task's accounting from its Parquet output, reading only the bookkeeping columns (the
    answers never come to the driver); also the bytes that were read."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    ds = pads.dataset(str(path), format="parquet")
    tbl = ds.to_table(columns=[n for n, _ in _META if n in ds.schema.names])
    if "llm_batch" not in tbl.column_names:  # written before the batch backend
        tbl = tbl.append_column("llm_batch", pa.array([False] * tbl.num_rows, pa.bool_()))
    paid = pc.invert(pc.fill_null(tbl.column("llm_cached"), False))

    def total(name: str, mask) -> int:
        return int(pc.sum(pc.fill_null(pc.filter(tbl.column(name), mask), 0)).as_py() or 0)

    tokens_in, tokens_out = total("llm_tokens_in", paid), total("llm_tokens_out", paid)
    failed = pc.and_(paid, pc.fill_null(tbl.column("llm_failed"), False))
    calls = int(pc.sum(pc.cast(paid, pa.int64())).as_py() or 0)
    batch = pc.and_(paid, pc.fill_null(tbl.column("llm_batch"), False))
    bin_, bout = total("llm_tokens_in", batch), total("llm_tokens_out", batch)
    usage = Usage(calls=calls, tokens_in=tokens_in, tokens_out=tokens_out, cache_hits=tbl.num_rows - calls,
                  errors=int(pc.sum(pc.cast(failed, pa.int64())).as_py() or 0),
                  usd=llm.usd(tokens_in - bin_, tokens_out - bout) + llm.usd(bin_, bout, batch=True))
    return usage, tbl.nbytes


def usage_from_outputs(path: str | Path, llm: LLMSection) -> tuple[Usage, pa.Table]:
    """A task's accounting and its output rows without bookkeeping columns (for tests and tools
    that look at the rows; the pipeline's steps use `output_usage`, which reads no answers)."""
    import pyarrow.dataset as pads

    usage, _ = output_usage(path, llm)
    tbl = pads.dataset(str(path), format="parquet").to_table()
    return usage, tbl.drop_columns([n for n, _ in _META if n in tbl.column_names])


# Bookkeeping columns of the embed task's output, besides the `embeddings` table's own: the error
# that left an item without a vector (it stays pending for the next run), and what each HTTP
# request cost, on the first row it carried.
EMBED_META = [("error", pa.string()), ("emb_calls", pa.int64()), ("emb_failed_request", pa.bool_()),
              ("emb_tokens", pa.int64()), ("emb_cached", pa.bool_())]


class _EmbedWorker:
    """One actor: one embedder, loaded once (the bundled weights, or an HTTP client with its pool)."""

    def __init__(self, section: EmbeddingSection, cache_dir: str | None, progress_to=None):
        from .llm.embedders import open_embedder

        self.embedder = open_embedder(section, cache_dir)
        self.model = section.model
        self.tally = _Tally(progress_to) if progress_to is not None else None

    async def __call__(self, batch: pa.Table) -> pa.Table:
        import numpy as np

        texts = batch.column("text").to_pylist()
        n = len(texts)
        errors: list = [None] * n
        calls = [0] * n
        failed = [False] * n
        tokens = [0] * n
        cached = [False] * n
        aembed = getattr(self.embedder, "aembed_many", None)
        if aembed is not None:
            out = await aembed(texts)
            vecs, errors = out.vectors, out.errors
            seen: set[int] = set()
            for i, r in enumerate(out.request_of):
                if r < 0:
                    cached[i] = errors[i] is None  # else a blank text, never sent
                elif r not in seen:
                    seen.add(r)
                    calls[i], failed[i], tokens[i] = out.request_calls[r], out.request_failed[r], out.request_tokens[r]
        else:  # the bundled model computes here; keep the actor's loop free meanwhile
            vecs = await asyncio.to_thread(self.embedder.embed, texts)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if self.tally is not None:
            self.tally.add(n)
            await self.tally.settle()
        dim = vecs.shape[1] if vecs.ndim == 2 else 0
        # A list column straight from the flat buffer: no Python list per vector.
        vector = pa.ListArray.from_arrays(pa.array(np.arange(0, n * dim + 1, dim, dtype=np.int32)),
                                          pa.array(vecs.reshape(-1)),
                                          mask=pa.array([e is not None for e in errors]))
        return pa.table({
            "kind": batch.column("kind"), "id": batch.column("id"),
            "model": pa.array([self.model] * n, pa.string()),
            "text_hash": batch.column("text_hash"), "vector": vector,
            "error": pa.array(errors, pa.string()), "emb_calls": pa.array(calls, pa.int64()),
            "emb_failed_request": pa.array(failed, pa.bool_()), "emb_tokens": pa.array(tokens, pa.int64()),
            "emb_cached": pa.array(cached, pa.bool_()),
        })


def run_embed_task(in_path: str, out_path: str, *, ray_section: RaySection, embedding: EmbeddingSection,
                   cache_dir: str | None, work: progress.Work | None = None) -> None:
    """Rows (kind, id, text, text_hash) at in_path -> embeddings rows (plus EMBED_META) at out_path, on Ray.

    bundled: one actor computing in numpy. openai: `ray.actors` actors, each keeping
    `embedding.concurrency` requests in flight over overlapping batches.
    """
    import ray

    init_ray(ray_section)
    http = embedding.backend == "openai"
    batch = embedding.batch_size * (max(2, embedding.concurrency) if http else 4)
    ds = ray.data.read_parquet(in_path, num_cpus=_IO_CPUS,
                               override_num_blocks=_num_blocks(in_path, batch * _BATCHES_PER_BLOCK))
    with _progress_feed(work, out_path) as progress_to:
        ds = ds.map_batches(
            _EmbedWorker,
            fn_constructor_kwargs={"section": embedding, "cache_dir": cache_dir, "progress_to": progress_to},
            batch_size=batch,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=ray_section.actors if http else 1,
                                               max_concurrent_calls_per_actor=_BLOCKS_PER_ACTOR if http else 1),
            # An HTTP embedder waits on the server; the bundled one computes in the actor.
            num_cpus=_LLM_ACTOR_CPUS if http else _EMBED_ACTOR_CPUS,
        )
        _clear(out_path)
        ds.write_parquet(out_path, ray_remote_args={"num_cpus": _IO_CPUS})
