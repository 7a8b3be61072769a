"""Runs an LLM task over rows handed off by Spark through storage, on Ray actors.

Spark writes the pending rows as Parquet; `ray.data` reads them, a pool of actors each owning
one chat client (with its own requests in flight and the shared on-disk response cache) turns
batches into output rows, and the rows are written back as Parquet for Spark to merge into
Delta. Usage is counted from the output rows, so it is right however many actors ran.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Protocol, Sequence

import pyarrow as pa

from .config import LLMSection, RaySection
from .llm.base import ChatRequest, ChatResult, Usage

__all__ = ["LLMTask", "init_ray", "run_llm_task", "usage_from_outputs"]

# Bookkeeping columns added to every output row and dropped before the Delta write.
_META = [("llm_cached", pa.bool_()), ("llm_failed", pa.bool_()), ("llm_seconds", pa.float64()),
         ("llm_tokens_in", pa.int64()), ("llm_tokens_out", pa.int64())]


class LLMTask(Protocol):
    output_schema: pa.Schema
    stage: str

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]: ...

    def outputs(self, rows: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]: ...


def init_ray(section: RaySection) -> None:
    import ray

    if ray.is_initialized():
        return
    if section.address:
        ray.init(address=section.address, ignore_reinit_error=True, log_to_driver=False)
    else:
        ray.init(num_cpus=section.num_cpus, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    # Progress bars per operator with rate and ETA are Ray Data's own; keep them, drop the noise.
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = True
    ctx.verbose_stats_logs = False


# Rows per block, in batches: small enough that a hand-off of one Parquet file (Spark writes
# one when adaptive execution coalesces a small pending set, and Ray reads a file as one
# block) still spreads over every actor; two batches so a block is worth a Ray task.
_BATCHES_PER_BLOCK = 2
# Blocks an actor works on at once. With the async __call__ each block's batches overlap too;
# two blocks keep requests queued for the client while one block's last answers come in.
_BLOCKS_PER_ACTOR = 2


class _LLMWorker:
    """One actor: one chat client, reused for every batch it gets.

    `__call__` is a coroutine, so Ray Data runs it on the actor's event loop and overlaps
    batches (up to 4 per block, and _BLOCKS_PER_ACTOR blocks): while one batch waits for its
    slowest answers the next one's requests are already queued. The client's own limits
    (llm.concurrency and the per-endpoint ones) hold across all of them, so the actor keeps
    `concurrency` requests in flight across batch boundaries, never more.
    """

    def __init__(self, task: LLMTask, llm: LLMSection, cache_dir: str, base_url: str | None):
        from .llm.factory import open_chat_model

        self.task = task
        self.chat = open_chat_model(llm, cache_dir, base_url=base_url)
        self.schema = pa.schema(list(task.output_schema) + [pa.field(n, t) for n, t in _META])

    async def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        requests = self.task.requests(rows)
        acomplete = getattr(self.chat, "acomplete", None)
        if acomplete is not None:
            results = await acomplete(requests)
        else:  # a client without an async API: keep the loop free for the other batches
            results = await asyncio.to_thread(self.chat.complete, requests)
        out = self.task.outputs(rows, results)
        for row, res in zip(out, results):
            row.update(llm_cached=res.cached, llm_failed=res.error is not None, llm_seconds=res.seconds,
                       llm_tokens_in=res.tokens_in, llm_tokens_out=res.tokens_out)
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
) -> None:
    """Rows at in_path (Parquet) -> task outputs at out_path (Parquet), on Ray actors."""
    import ray

    init_ray(ray_section)
    # A batch of `concurrency` rows fills the actor's slots once; the overlap of batches and
    # blocks (see _LLMWorker) queues the next ones behind it.
    batch = max(8, llm.concurrency)
    ds = ray.data.read_parquet(in_path)
    # Streaming (no barrier): only blocks larger than this are cut.
    ds = ds.repartition(target_num_rows_per_block=batch * _BATCHES_PER_BLOCK)
    ds = ds.map_batches(
        _LLMWorker,
        fn_constructor_kwargs={"task": task, "llm": llm, "cache_dir": cache_dir, "base_url": base_url},
        batch_size=batch,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=ray_section.actors,
                                           max_concurrent_calls_per_actor=_BLOCKS_PER_ACTOR),
        # The actors wait on HTTP; the model server, not Ray, owns the CPUs.
        num_cpus=0.25,
    )
    ds.write_parquet(out_path)


def usage_from_outputs(path: str | Path, llm: LLMSection) -> tuple[Usage, pa.Table]:
    """Read a task's Parquet output: its accounting, and the rows without bookkeeping columns."""
    import pyarrow.dataset as pads

    tbl = pads.dataset(str(path), format="parquet").to_table()
    usage = Usage()
    cols: dict[str, Any] = {n: tbl.column(n).to_pylist() for n, _ in _META}
    for cached, failed, secs, tin, tout in zip(*(cols[n] for n, _ in _META)):
        usage.add_result(
            ChatResult(id="", text=None, tokens_in=tin or 0, tokens_out=tout or 0, cached=bool(cached),
                       error="failed" if failed else None, seconds=secs or 0.0),
            llm.usd_per_1k_in, llm.usd_per_1k_out,
        )
    return usage, tbl.drop_columns([n for n, _ in _META])


class _EmbedWorker:
    """One actor: one embedder, loaded once (the weights are the expensive part)."""

    def __init__(self, batch_size: int, max_tokens: int):
        from .llm.minilm import MiniLMEmbedder

        self.embedder = MiniLMEmbedder(batch_size=batch_size, max_tokens=max_tokens)

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column("text").to_pylist()
        vecs = self.embedder.embed(texts)
        vector = pa.array(list(vecs), type=pa.list_(pa.float32()))
        return pa.table({
            "kind": batch.column("kind"), "id": batch.column("id"),
            "model": pa.array([self.embedder.model] * len(texts), pa.string()),
            "text_hash": batch.column("text_hash"), "vector": vector,
        })


def run_embed_task(in_path: str, out_path: str, *, ray_section: RaySection, batch_size: int, max_tokens: int) -> None:
    """Rows (kind, id, text, text_hash) at in_path -> embeddings rows at out_path, on Ray."""
    import ray

    init_ray(ray_section)
    ds = ray.data.read_parquet(in_path).map_batches(
        _EmbedWorker,
        fn_constructor_kwargs={"batch_size": batch_size, "max_tokens": max_tokens},
        batch_size=batch_size * 4,
        batch_format="pyarrow",
        concurrency=1,
        num_cpus=1,
    )
    ds.write_parquet(out_path)
