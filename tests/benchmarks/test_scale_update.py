"""`corpusgraph update` at the largest whole-index size: +1% documents, then -1% (issue 13).

Runs on the warehouse that `make bench-scale` built under work/scale/run-<n>
(CORPUSGRAPH_BENCH_SCALE_UPDATE_DOCS, default 100000; skipped, saying so, when that run has not
finished every stage). The update's inputs are a folder of links to the corpus's shards:
1. add: one more shard of n/100 new documents drawn from the same seeded world
   (synthetic_corpus.shard_arrays with the next shard number, so ids and text are new), and
   `run_update`;
2. delete: the first n/100 documents of shard 0 left out of the inputs (a trimmed copy of that
   shard in place of its link), and `run_update` again.
The scripted scale server answers as in test_scale.py. Per update and stage: seconds, rows, LLM
calls and tokens, peak RSS (scale_measure.ProcessSampler), each set against the full build's
figures in scale.json. Written into tests/benchmarks/results/scale.json under "update".
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support import scale_server
from tests.support import synthetic_corpus as sc
from tests.support.scale_measure import ProcessSampler, StageLog
from tests.benchmarks.test_scale import ALL_STAGES, RESULTS, ROOT, SEED, config_for, start_spark

pytestmark = [pytest.mark.slow, pytest.mark.spark]

N = int(os.environ.get("CORPUSGRAPH_BENCH_SCALE_UPDATE_DOCS", "100000"))


def new_shard(corpus, manifest: dict, n_docs: int, out_file) -> int:
    """n_docs new documents from the corpus's own world, as the shard after its last one."""
    world = sc.build_world(manifest["entities"], manifest["seed"])
    inc = sc._Incidence(world)
    shard = manifest["shards"]
    s = sc.shard_arrays(world, inc, manifest["seed"], shard, n_docs, manifest["documents"], manifest["median_tokens"])
    ids, titles, texts = sc._texts(world, s, manifest["seed"])
    pq.write_table(pa.table({"id": ids, "title": titles, "text": texts,
                             "access_domain": [sc.DOMAINS[k] for k in s["domain"].tolist()]}), out_file,
                   compression="zstd")
    return len(ids)


def stage_figures(results: dict, sampler: ProcessSampler) -> dict:
    out = {}
    for name, r in results.items():
        u, peaks = r.usage, sampler.peaks.get(name, {})
        out[name] = {"seconds": round(r.seconds, 1), "rows": r.rows,
                     "llm_calls": u.calls if u else 0, "llm_cache_hits": u.cache_hits if u else 0,
                     "llm_tokens": (u.tokens_in + u.tokens_out) if u else 0,
                     "driver_peak_mb": round(peaks.get("driver", 0), 1), "jvm_peak_mb": round(peaks.get("jvm", 0), 1),
                     "ray_peak_mb": round(peaks.get("ray", 0), 1),
                     "driver_collected_mb": round(r.driver_collected_bytes / 2**20, 3)}
    return out


def test_update_plus_and_minus_one_percent():
    import ray

    from corpusgraph.runner.pipeline import run_update
    from corpusgraph.runner.run import RunContext

    scale = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    full = next((s for s in scale.get("sizes", []) if s["documents"] == N), None)
    if not full or [s for s in ALL_STAGES if s not in full["stages"]]:
        pytest.skip(f"the {N}-document whole index is not in {RESULTS}: run make bench-scale at that size first")
    corpus, run_dir = ROOT / f"corpus-{N}", ROOT / f"run-{N}"
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert manifest["seed"] == SEED
    inputs = ROOT / f"update-{N}"
    shutil.rmtree(inputs, ignore_errors=True)
    inputs.mkdir(parents=True)
    shards = sorted((corpus / "parquet").glob("docs-*.parquet"))
    for p in shards:
        (inputs / p.name).symlink_to(p)
    delta = max(1, N // 100)
    t0 = time.perf_counter()
    added = new_shard(corpus, manifest, delta, inputs / f"docs-{manifest['shards']:05d}.parquet")
    gen_s = time.perf_counter() - t0

    full_seconds = sum(st["seconds"] for st in full["stages"].values())
    full_calls = sum(st["llm_calls"] for st in full["stages"].values())
    out = {"documents_before": N, "added": added, "generator_seconds": round(gen_s, 1),
           "full_index_seconds": round(full_seconds, 1), "full_index_llm_calls": full_calls,
           "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    with scale_server.running(corpus / "truth", "--chat-latency-s", "0", "--chat-slots", "64", "--dim", "64",
                              "--adjudicate", "oracle") as server:
        cfg, _ = config_for(N, corpus, run_dir, server.base_url, inputs=inputs)
        spark = start_spark(cfg, run_dir)
        try:
            for kind in ("add", "delete"):
                if kind == "delete":
                    first = shards[0]
                    (inputs / first.name).unlink()
                    table = pq.read_table(first)
                    pq.write_table(table.slice(delta), inputs / first.name, compression="zstd")
                    out["deleted"] = delta
                sampler = ProcessSampler(server_pid=server.proc.pid)
                sampler.start()
                ctx = RunContext(cfg, spark, kind="update")
                ctx.out = StageLog(sampler)
                t_run = time.perf_counter()
                try:
                    results = run_update(ctx)
                finally:
                    sampler.stop()
                seconds = time.perf_counter() - t_run
                calls = sum(r.usage.calls for r in results.values() if r.usage)
                out[kind] = {"seconds": round(seconds, 1), "fraction_of_full_seconds": round(seconds / full_seconds, 4),
                             "llm_calls": calls, "fraction_of_full_llm_calls": round(calls / full_calls, 4),
                             "stages": stage_figures(results, sampler)}
                write(out)
        finally:
            spark.stop()
            ray.shutdown()
    out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    write(out)
    assert out["add"]["stages"]["extract"]["rows"].get("sent", 0) > 0
    assert out["delete"]["stages"]["extract"]["rows"].get("sent", 0) == 0  # a deletion sends no unit
    assert out["add"]["fraction_of_full_llm_calls"] < 0.5, out["add"]


def write(update: dict) -> None:
    scale = json.loads(RESULTS.read_text())
    scale["update"] = update
    RESULTS.write_text(json.dumps(scale, indent=2) + "\n")
