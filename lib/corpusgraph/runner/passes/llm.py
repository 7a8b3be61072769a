"""Runs an LLM task over rows handed off by Spark through storage, on Ray actors.

Spark writes the pending rows as Parquet (a local folder or an object-store URI); `ray.data`
reads them, a pool of actors each owning one chat client (with its own requests in flight and
its node's response cache) turns batches into output rows, and each actor writes every answered
batch as one Parquet shard into the pass's progress folder (storage/shards.py) the moment it is done:
that folder is the pass's output and its durable record. Usage is counted from the output rows,
so it is right however many actors ran.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol, Sequence

import pyarrow as pa

from corpusgraph.config import LLMSection, RaySection, S3Section
from corpusgraph.llm.base import ChatRequest, ChatResult, Usage
from corpusgraph.runner import progress
from corpusgraph.runner.passes.base import (BATCHES_PER_BLOCK, BLOCKS_PER_ACTOR, IO_CPUS, LLM_ACTOR_CPUS, Tally,
                                            init_ray, num_blocks, progress_feed)
from corpusgraph.storage import locations as storage
from corpusgraph.storage.shards import ATTEMPT, UNIT, ShardSink, split_keys

__all__ = ["LLMTask", "init_ray", "run_llm_task", "output_usage", "usage_from_sums", "USAGE_SUMS",
           "output_schema", "META"]

# Bookkeeping columns added to every output row and dropped before the Delta write (llm_batch:
# answered through the batch API, priced at llm.batch.price_factor; llm_error_text and
# llm_error_status: a failed call's error and HTTP status, which runner/failures.py shows).
META = [("llm_cached", pa.bool_()), ("llm_failed", pa.bool_()), ("llm_seconds", pa.float64()),
        ("llm_tokens_in", pa.int64()), ("llm_tokens_out", pa.int64()), ("llm_batch", pa.bool_()),
        ("llm_error_text", pa.string()), ("llm_error_status", pa.int64())]


class LLMTask(Protocol):
    output_schema: pa.Schema
    stage: str

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]: ...

    def outputs(self, rows: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]: ...


def output_schema(task: LLMTask) -> pa.Schema:
    """The rows an LLM actor writes for `task`: its output columns, then the bookkeeping (META)."""
    return pa.schema(list(task.output_schema) + [pa.field(n, t) for n, t in META])


class _LLMWorker:
    """One actor: one chat client, reused for every batch it gets.

    `__call__` is a coroutine, so Ray Data runs it on the actor's event loop and overlaps
    batches (up to 4 per block, and BLOCKS_PER_ACTOR blocks): while one batch waits for its
    slowest answers the next one's requests are already queued. The client's own limits
    (llm.concurrency and the per-endpoint ones) hold across all of them, so the actor keeps
    `concurrency` requests in flight across batch boundaries, never more.
    """

    def __init__(self, task: LLMTask, llm: LLMSection, cache_dir: str, base_url: str | None, batch: bool = False,
                 progress_to=None, sink: ShardSink | None = None):
        """sink: where `__call__` makes answered rows durable (the batch path writes its own)."""
        from corpusgraph.llm.factory import open_chat_model

        self.task, self.batch, self.sink = task, batch, sink
        # Answered output rows (dicts, bookkeeping included) and their keys, for the next shard: one
        # Arrow table per shard, not one per answer.
        self.unwritten: list[tuple[list[dict], list[str]]] = []
        # The response cache is this node's own (a cluster's nodes share no folder): cache_dir
        # is expanded ($VAR) and made absolute here, on the node.
        self.chat = open_chat_model(llm, storage.node_path(cache_dir), base_url=base_url, batch=batch)
        self.schema = output_schema(task)
        # Progress: every answer (or cache hit) as it comes, where the client tells of each one
        # (on_result); else each batch when it is done.
        self.tally = Tally(progress_to) if progress_to is not None else None
        self.per_request = self.tally is not None and hasattr(self.chat, "on_result")
        if self.per_request:
            self.chat.on_result = lambda: self.tally.add(1)

    async def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        units = split_keys(rows)
        requests = self.task.requests(rows)
        acomplete = getattr(self.chat, "acomplete", None)
        if acomplete is not None:
            # Each answer joins the actor's unwritten rows as it comes, and they become a shard
            # once a batch's worth has gathered: a crash loses at most about one batch per actor
            # of answers (the node's response cache keeps those where the node survives).
            async def each(i: int, res: ChatResult) -> None:
                await self._answered(self.output_rows([rows[i]], [res]), [units[i]], flush_at=len(rows))

            results = await acomplete(requests, each=each)
        else:  # a client without an async API: keep the loop free for the other batches
            results = await asyncio.to_thread(self.chat.complete, requests)
            self.unwritten.append((self.output_rows(rows, results), units))
        await self._flush()  # this batch is durable before it counts as done
        if self.tally is not None:
            if not self.per_request:
                self.tally.add(len(rows))
            await self.tally.settle()
        return pa.table({"rows": pa.array([len(rows)], pa.int64())})

    async def _answered(self, rows: list[dict], units: list[str], flush_at: int) -> None:
        self.unwritten.append((rows, units))
        if sum(len(r) for r, _ in self.unwritten) >= flush_at:
            await self._flush()

    async def _flush(self) -> None:
        """Write the answered rows not yet in a shard as one shard (the event loop hands the list
        over at once, so two flushes never write the same row)."""
        taken, self.unwritten = self.unwritten, []
        if taken:
            table = pa.Table.from_pylist([row for rows, _ in taken for row in rows], schema=self.schema)
            await asyncio.to_thread(self.sink.write, table, [u for _, us in taken for u in us])

    def output_rows(self, rows: list[dict], results: Sequence[ChatResult]) -> list[dict]:
        """The task's output rows for `rows` and their answers, with the bookkeeping columns."""
        out = self.task.outputs(rows, results)
        for row, res in zip(out, results):
            row.update(llm_cached=res.cached, llm_failed=res.error is not None, llm_seconds=res.seconds,
                       llm_tokens_in=res.tokens_in, llm_tokens_out=res.tokens_out, llm_batch=self.batch,
                       llm_error_text=res.error, llm_error_status=res.status)
        return out

    def table(self, rows: list[dict], results: Sequence[ChatResult]) -> pa.Table:
        return pa.Table.from_pylist(self.output_rows(rows, results), schema=self.schema)


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
    s3: S3Section | None = None,
    attempt: str = "run",
) -> int:
    """Rows at in_path (Parquet) -> task outputs as shards in out_path (its progress folder), on
    Ray actors (or, for a stage llm.batch.stages names under llm.backend openai_batch, through the
    batch API). Both locations may be URIs (s3: how to reach an S3 store); cache_dir is each
    node's local response cache. Shards already in out_path (an earlier attempt's) stay; the
    caller decides which input rows still need sending. Returns the rows answered.

    work: the bar to show (label, unit, total rows), fed from the driver as rows finish.
    attempt: names this attempt's shards (the run id)."""
    sink = ShardSink(out_path, s3, attempt)
    if llm.batched(task.stage):
        return _run_batched(task, in_path, sink, llm=llm, cache_dir=cache_dir, base_url=base_url, work=work, s3=s3)
    import ray

    init_ray(ray_section)
    # A batch of `concurrency` rows fills the actor's slots once; the overlap of batches and
    # blocks (see _LLMWorker) queues the next ones behind it.
    batch = max(8, llm.concurrency)
    fs, path = storage.arrow_filesystem(in_path, s3)
    # The read cuts the rows into blocks of about two batches itself; a repartition operator
    # would add a task that claims a whole CPU (no argument reaches it).
    ds = ray.data.read_parquet(path, filesystem=fs, num_cpus=IO_CPUS,
                               override_num_blocks=num_blocks(in_path, batch * BATCHES_PER_BLOCK, s3))
    answered = [0]
    with progress_feed(work, lambda: answered[0]) as progress_to:
        ds = ds.map_batches(
            _LLMWorker,
            fn_constructor_kwargs={"task": task, "llm": llm, "cache_dir": cache_dir, "base_url": base_url,
                                   "progress_to": progress_to, "sink": sink},
            batch_size=batch,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=ray_section.actors,
                                               max_concurrent_calls_per_actor=BLOCKS_PER_ACTOR),
            # The actors wait on HTTP; the model server, not Ray, owns the CPUs. An actor that owns
            # a vLLM engine (llm.backend 'vllm') needs its GPU reserved here.
            num_cpus=LLM_ACTOR_CPUS,
            # A dead actor is not restarted with its block retried (that would send the block's
            # rows again, answered or not): the pass fails, and the caller resumes it from the
            # durable shards with only the rows that have no answer (handoff.to_model). (Ray 2.60
            # takes it only among the remote args, which it warns will move by Ray 2.64.)
            max_restarts=0,
            **({"num_gpus": ray_section.num_gpus_per_actor} if ray_section.num_gpus_per_actor else {}),
        )
        # The actors write the answers; what comes back is one count per batch.
        answered[0] = int(sum(b["rows"].sum() for b in ds.iter_batches(batch_format="numpy", batch_size=None)))
    return answered[0]


def _run_batched(task: LLMTask, in_path: str, sink: ShardSink, *, llm: LLMSection, cache_dir: str,
                 base_url: str | None, work: progress.Work | None = None, s3=None) -> int:
    """llm.backend openai_batch: the rows go to the batch API from this process, which only uploads
    and polls (the model runs on the server). Rows are read llm.batch.max_lines at a time, twice:
    every chunk is submitted first, so the batches run side by side, then each chunk's answers are
    awaited and written as one shard. Same outputs and bookkeeping as the actors write."""
    import pyarrow.dataset as pads

    worker = _LLMWorker(task, llm, cache_dir, base_url, batch=True)
    fs, path = storage.arrow_filesystem(in_path, s3)
    chunks = lambda: _row_chunks(pads.dataset(path, filesystem=fs, format="parquet"), llm.batch.max_lines)  # noqa: E731
    bar = progress.bar(work.label, work.unit, work.total) if work is not None else None
    failed, answered = True, 0
    try:
        for rows in chunks():
            worker.chat.submit(task.requests([{k: v for k, v in r.items() if k != UNIT} for r in rows]))
        for rows in chunks():
            units = split_keys(rows)
            sink.write(worker.table(rows, worker.chat.complete(task.requests(rows))), units)
            answered += len(rows)
            if bar is not None:  # a chunk's answers are all collected: its rows are done
                bar.update(len(rows))
        failed = False
    finally:
        worker.chat.close()
        if bar is not None:
            bar.close(failed=failed)
    return answered


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


# The sums that a pass's accounting is made of, over its output rows ("paid": not a cache hit and,
# with `attempt`, answered by this attempt; "batch": paid through the batch API). Computed where
# the rows are (Spark in the pipeline, pyarrow in tools and tests), so only these seven integers
# come to the driver, and turned into a Usage by one formula (usage_from_sums).
USAGE_SUMS = ("rows", "calls", "errors", "tokens_in", "tokens_out", "batch_tokens_in", "batch_tokens_out")


def usage_from_sums(sums: dict, llm: LLMSection) -> Usage:
    """A pass's Usage from its USAGE_SUMS (missing or null sums count 0): every row not paid is a
    cache hit; batch tokens are priced at the batch price."""
    n = {k: int(sums.get(k) or 0) for k in USAGE_SUMS}
    sync_in, sync_out = n["tokens_in"] - n["batch_tokens_in"], n["tokens_out"] - n["batch_tokens_out"]
    return Usage(calls=n["calls"], tokens_in=n["tokens_in"], tokens_out=n["tokens_out"],
                 cache_hits=n["rows"] - n["calls"], errors=n["errors"],
                 usd=llm.usd(sync_in, sync_out) + llm.usd(n["batch_tokens_in"], n["batch_tokens_out"], batch=True))


def output_usage(path: str | Path, llm: LLMSection, s3: S3Section | None = None,
                 attempt: str | None = None) -> tuple[Usage, int]:
    """A task's accounting from its Parquet output read with pyarrow (tools and tests; the pipeline
    sums the same columns in Spark, handoff.spark_usage_sums): only the bookkeeping columns are
    read, never the answers; also the bytes that were read.

    attempt: with shard rows (storage/shards.py), a row another attempt paid for counts as a cache hit
    of this one."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    fs, where = storage.arrow_filesystem(str(path), s3)
    ds = pads.dataset(where, filesystem=fs, format="parquet")
    wanted = [n for n, _ in META] + ([ATTEMPT] if attempt is not None else [])
    tbl = ds.to_table(columns=[n for n in wanted if n in ds.schema.names])

    def flag(name: str):
        return pc.fill_null(tbl.column(name), False) if name in tbl.column_names else \
            pa.array([False] * tbl.num_rows, pa.bool_())  # llm_batch: absent in outputs from before the batch backend

    paid = pc.invert(flag("llm_cached"))
    if attempt is not None:
        paid = pc.and_(paid, pc.equal(tbl.column(ATTEMPT), attempt))
    batch = pc.and_(paid, flag("llm_batch"))

    def total(name: str, mask) -> int:
        return int(pc.sum(pc.fill_null(pc.filter(tbl.column(name), mask), 0)).as_py() or 0)

    def count(mask) -> int:
        return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)

    sums = {"rows": tbl.num_rows, "calls": count(paid), "errors": count(pc.and_(paid, flag("llm_failed"))),
            "tokens_in": total("llm_tokens_in", paid), "tokens_out": total("llm_tokens_out", paid),
            "batch_tokens_in": total("llm_tokens_in", batch), "batch_tokens_out": total("llm_tokens_out", batch)}
    return usage_from_sums(sums, llm), tbl.nbytes
