"""CPU the product's chat client spends per call (issue 13's per-call cost), against a bare aiohttp
client as the reference measured in the same run.

At millions of extraction calls on a 2-core machine, an LLM actor's CPU per call sets the pace;
a py-spy profile at 1M documents (scale.json, reruns_2026_12_02_evening) gave httpx's request
path 31% of the actor's CPU. The client now sends through aiohttp (llm/http_common.py).

Measured: OpenAIChatModel.complete (no cache, 8 in flight, schema-constrained requests of about 300
words) and, as the reference, a bare aiohttp.ClientSession posting the same bodies with the same
concurrency, each against tests/support/fixed_latency_server.py (64 slots, 1 ms per answer) in
its own process; and the official `openai` package's AsyncOpenAI (max_retries 0, the same bodies,
8 in flight), which decides whether that package could carry the per-call path (issue 40); CPU seconds (resource.getrusage of this process) per call, CALLS calls per round,
ROUNDS rounds alternating the two. The product's figure includes what the bare client skips:
the endpoint pool, retries, the deadline, JSON answer parsing into ChatResult.
Writes tests/benchmarks/results/chat_client_cpu.json.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import platform
import resource
import statistics
import time

import aiohttp
import pytest

from corpusgraph.llm.base import ChatRequest
from corpusgraph.llm.openai_http import OpenAIChatModel, request_body
from tests.support.child_server import ChildServer
from tests.conftest import REPO

pytestmark = pytest.mark.slow

RESULTS = REPO / "tests" / "benchmarks" / "results" / "chat_client_cpu.json"
SERVER = REPO / "tests" / "support" / "fixed_latency_server.py"
CALLS, ROUNDS, IN_FLIGHT = 3000, 3, 8


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _requests(tag: str, n: int) -> list[ChatRequest]:
    return [ChatRequest(id=f"{tag}-{i}", messages=({"role": "user", "content": f"Text {i}: " + "word " * 300},),
                        max_tokens=400, json_schema={"type": "object"}) for i in range(n)]


def _product(model: OpenAIChatModel, tag: str) -> tuple[float, float]:
    reqs = _requests(tag, CALLS)
    c0, t0 = _cpu(), time.monotonic()
    results = model.complete(reqs)
    cpu, wall = _cpu() - c0, time.monotonic() - t0
    assert all(r.error is None and r.text for r in results), [r.error for r in results if r.error][:3]
    return cpu / CALLS, wall


async def _bare(url: str, tag: str) -> tuple[float, float]:
    bodies = [request_body("m", r) for r in _requests(tag, CALLS)]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=IN_FLIGHT)) as session:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(body: dict) -> dict:
            async with gate, session.post(url, json=body) as resp:
                assert resp.status == 200
                return await resp.json()

        await asyncio.gather(*(one(b) for b in bodies[:50]))  # connections open before timing
        c0, t0 = _cpu(), time.monotonic()
        answers = await asyncio.gather(*(one(b) for b in bodies))
        cpu, wall = _cpu() - c0, time.monotonic() - t0
    assert len(answers) == CALLS and all(a.get("choices") for a in answers)
    return cpu / CALLS, wall


async def _sdk(url: str, tag: str) -> tuple[float, float]:
    import openai

    bodies = [request_body("m", r) for r in _requests(tag, CALLS)]
    client = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(body: dict):
        async with gate:
            return await client.chat.completions.create(**body)

    try:
        await asyncio.gather(*(one(b) for b in bodies[:50]))  # connections open before timing
        c0, t0 = _cpu(), time.monotonic()
        answers = await asyncio.gather(*(one(b) for b in bodies))
        cpu, wall = _cpu() - c0, time.monotonic() - t0
    finally:
        await client.close()
    assert len(answers) == CALLS and all(a.choices for a in answers)
    return cpu / CALLS, wall


def test_chat_client_cpu_per_call():
    with ChildServer(str(SERVER), "--slots", "64", "--latency-s", "0.001", "--port", "0") as server:
        model = OpenAIChatModel(model="m", base_url=server.base_url, concurrency=IN_FLIGHT, cache=None)
        model.complete(_requests("warm", 50))
        product, bare, sdk = [], [], []
        for k in range(ROUNDS):
            product.append(_product(model, f"p{k}"))
            bare.append(asyncio.run(_bare(f"{server.base_url}/chat/completions", f"b{k}")))
            sdk.append(asyncio.run(_sdk(server.base_url, f"s{k}")))
    p_ms = statistics.median(c for c, _ in product) * 1000
    b_ms = statistics.median(c for c, _ in bare) * 1000
    s_ms = statistics.median(c for c, _ in sdk) * 1000
    report = {
        "what": "CPU ms per chat call: the product client (OpenAIChatModel.complete, 8 in flight, no cache) "
                "and a bare aiohttp session (the reference), fixed_latency_server.py at 1 ms, 64 slots",
        "calls_per_round": CALLS, "rounds": ROUNDS,
        "product_cpu_ms_per_call": round(p_ms, 3), "bare_aiohttp_cpu_ms_per_call": round(b_ms, 3),
        "product_over_bare": round(p_ms / b_ms, 2),
        "openai_sdk_cpu_ms_per_call": round(s_ms, 3), "openai_sdk_over_product": round(s_ms / p_ms, 2),
        "openai_sdk_version": __import__("openai").__version__,
        "openai_sdk_wall_s_per_round": [round(w, 2) for _, w in sdk],
        "product_wall_s_per_round": [round(w, 2) for _, w in product],
        "bare_wall_s_per_round": [round(w, 2) for _, w in bare],
        # Measured once on 2026-12-03 with the same script against commit 8d9a9fd's client
        # (httpx.AsyncClient), which is no longer in the code to be rerun here.
        "before_httpx_client": {"product_cpu_ms_per_call": [2.496, 2.556], "wall_s_per_3000_calls": [7.52, 7.69],
                                "bare_httpx_cpu_ms_per_post": [2.611, 2.162], "commit": "8d9a9fd"},
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
