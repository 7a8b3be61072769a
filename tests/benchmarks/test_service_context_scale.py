"""POST /v1/context for local search on the 100k-document index the pipeline built (issue 44's
target: p50 <= 50 ms, no model call).

The index is work/scale/run-<n> as `make bench-scale` leaves it (CORPUSGRAPH_BENCH_SERVICE_DOCS,
default 100000, or CORPUSGRAPH_BENCH_SERVICE_RUN, as test_service_scale.py reads them); the
benchmark skips, saying so, when that run has not been made. Questions name one or two of the
index's own entities (test_service_scale.pick_entities); the service embeds them with the scripted
endpoint the embed stage used. `corpusgraph serve` runs in its own process; QUESTIONS requests go
one at a time, then with CLIENTS clients. The reference, in the same run and this process:
query/local.build_local_context's p50 over the same questions (the part of a request that is
context building) and the embedding call's mean.

Writes tests/benchmarks/results/service_context.json (service_context_<run>.json for another run).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import platform
import time

import httpx
import numpy as np
import pytest

from tests.benchmarks.test_scale import embedding_overrides
from tests.benchmarks.test_service_load import API_KEY, ONE_THREAD, free_port, start_service, stop_service, wait_ready
from tests.benchmarks.test_service_scale import DOCS, RUN, in_process_figures, local_questions, pick_entities, run_dir
from tests.conftest import REPO
from tests.support import scale_server

pytestmark = [pytest.mark.slow]

RESULTS = REPO / "tests" / "benchmarks" / "results" / (
    "service_context.json" if RUN == "run-100000" else f"service_context_{RUN}.json")
QUESTIONS = 300
CLIENTS = 8
TARGET_P50_MS = 50.0


async def _requests(url: str, questions: list[str], clients: int) -> list[float]:
    queue: asyncio.Queue = asyncio.Queue()
    for q in questions:
        queue.put_nowait(q)
    times: list[float] = []

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            q = queue.get_nowait()
            t0 = time.perf_counter()
            r = await http.post("/v1/context", json={"question": q, "method": "local"})
            times.append(time.perf_counter() - t0)
            assert r.status_code == 200 and r.json()["llm_calls"] == 0, r.text[:300]

    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return times


def _pct(seconds: list[float]) -> dict:
    ms = np.asarray(seconds) * 1000
    return {"n": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2), "max_ms": round(float(ms.max()), 2)}


def test_context_latency_on_the_scale_index(tmp_path):
    from corpusgraph.config import load_config
    from corpusgraph.query.store import IndexStore

    root = run_dir()
    if not (root / "idx" / "entity.faiss").is_file():
        pytest.skip(f"no index at {root}: build it first with CORPUSGRAPH_BENCH_SCALE_SIZES={DOCS} make bench-scale")
    corpus = root.parent / RUN.removesuffix("-exact").replace("run-", "corpus-", 1)
    with scale_server.running(corpus / "truth", "--dim", "64", "--embed-slots", "32") as embed_server:
        sets = {"storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
                "storage.cache_dir": str(tmp_path / "cache"), "llm.backend": "openai",
                "llm.api_base": "http://127.0.0.1:9/v1", **embedding_overrides(embed_server.base_url)}
        cfg = load_config(REPO / "conf" / "local.yaml", sets)
        in_process = in_process_figures(cfg)  # build_local_context over LOCAL_QUESTIONS of the same kind
        in_process.pop("_names")
        store = IndexStore(cfg.storage.warehouse, cfg.storage.index_dir)
        questions = local_questions(pick_entities(store, QUESTIONS, seed=11))
        del store
        service = None
        try:
            port = free_port()
            service = start_service(port, sets, tmp_path / "serve.log", "--max-concurrent", str(CLIENTS))
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, service, timeout_s=900)
            asyncio.run(_requests(url, questions[:10], 1))  # warm-up: first uses
            alone = _pct(asyncio.run(_requests(url, questions, 1)))
            busy = _pct(asyncio.run(_requests(url, questions, CLIENTS)))
        finally:
            if service is not None:
                stop_service(service)
    reference = in_process["local_context_p50_ms"]
    figures = {
        "index": {"documents": DOCS, "entities": in_process["entities"], "units": in_process["units"],
                  "built_by": f"make bench-scale, work/scale/{RUN}"},
        "context_local_one_client": alone, f"context_local_{CLIENTS}_clients": busy,
        "reference_in_process": {"build_local_context_p50_ms": reference,
                                 "build_local_context_p99_ms": in_process["local_context_p99_ms"],
                                 "embed_question_ms_mean": in_process["embed_question_ms_mean"]},
        "service_over_in_process_p50": round(alone["p50_ms"] / reference, 2),
        "target": {"p50_ms": TARGET_P50_MS, "met": bool(alone["p50_ms"] <= TARGET_P50_MS)},
        "service_env": ONE_THREAD, "service_workers": CLIENTS,
        "load_average_1m_after": round(os.getloadavg()[0], 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    assert alone["n"] == busy["n"] == QUESTIONS
