"""The embedding pass on Ray: items handed off by Spark as Parquet (kind, id, text, text_hash) ->
`embeddings` rows plus bookkeeping columns, written back as Parquet for the embed step.
"""

from __future__ import annotations

import asyncio

import pyarrow as pa

from corpusgraph.config import EmbeddingSection, RaySection, S3Section
from corpusgraph.runner import progress
from corpusgraph.runner.passes.base import (BATCHES_PER_BLOCK, BLOCKS_PER_ACTOR, EMBED_ACTOR_CPUS, IO_CPUS,
                                            LLM_ACTOR_CPUS, Tally, init_ray, num_blocks, parquet_rows, progress_feed)
from corpusgraph.storage import locations as storage

__all__ = ["EMBED_META", "run_embed_task"]


# Bookkeeping columns of the embed task's output, besides the `embeddings` table's own: the error
# that left an item without a vector (it stays pending for the next run), and what each HTTP
# request cost, on the first row it carried.
EMBED_META = [("error", pa.string()), ("emb_calls", pa.int64()), ("emb_failed_request", pa.bool_()),
              ("emb_tokens", pa.int64()), ("emb_cached", pa.bool_())]


class _EmbedWorker:
    """One actor: one embedder, loaded once (the bundled weights, or an HTTP client with its pool)."""

    def __init__(self, section: EmbeddingSection, cache_dir: str | None, progress_to=None):
        from corpusgraph.llm.embedders import open_embedder

        self.embedder = open_embedder(section, storage.node_path(cache_dir) if cache_dir else None)
        self.model = section.model
        self.tally = Tally(progress_to) if progress_to is not None else None

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
                   cache_dir: str | None, work: progress.Work | None = None,
                   s3: S3Section | None = None) -> None:
    """Rows (kind, id, text, text_hash) at in_path -> embeddings rows (plus EMBED_META) at out_path, on Ray.
    Either may be a URI (s3: how to reach an S3 store); cache_dir is each node's local cache.

    bundled: one actor computing on the CPU (ONNX Runtime, or the numpy reference). openai:
    `ray.actors` actors, each keeping
    `embedding.concurrency` requests in flight over overlapping batches.
    """
    import ray

    init_ray(ray_section)
    http = embedding.backend == "openai"
    batch = embedding.batch_size * (max(2, embedding.concurrency) if http else 4)
    fs, path = storage.arrow_filesystem(in_path, s3)
    ds = ray.data.read_parquet(path, filesystem=fs, num_cpus=IO_CPUS,
                               override_num_blocks=num_blocks(in_path, batch * BATCHES_PER_BLOCK, s3))
    out_fs, out_where = storage.arrow_filesystem(out_path, s3)
    with progress_feed(work, lambda: parquet_rows(out_path, s3)) as progress_to:
        ds = ds.map_batches(
            _EmbedWorker,
            fn_constructor_kwargs={"section": embedding, "cache_dir": cache_dir, "progress_to": progress_to},
            batch_size=batch,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=ray_section.actors if http else 1,
                                               max_concurrent_calls_per_actor=BLOCKS_PER_ACTOR if http else 1),
            # An HTTP embedder waits on the server; the bundled one computes in the actor.
            num_cpus=LLM_ACTOR_CPUS if http else EMBED_ACTOR_CPUS,
        )
        # Ray adds files next to any already there: outputs left by an earlier pass of the same
        # run would be read back (and counted) with this one's.
        storage.remove_tree(out_path, s3)
        ds.write_parquet(out_where, filesystem=out_fs, ray_remote_args={"num_cpus": IO_CPUS})
