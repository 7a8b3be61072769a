"""A small closed-loop HTTP load generator for POST /v1/query (its own process, asyncio + httpx).

`concurrency` clients each send a question, wait for the answer, and send the next, for
`duration_s` seconds (after `warmup_s` not counted). Questions cycle through the given list,
each made unique with a request number so the service's LLM response cache never answers
for free. Prints one JSON object: requests, errors (non-200 or transport failures, by
status), rps (successful answers per second), p50_ms, p90_ms, p99_ms, max_ms, concurrency,
duration_s. With --events-out, every counted request is also written there as one JSON line
(start and end in seconds from the end of the warm-up, method, status), so a caller can split the
figures by method and by phase (before, during and after an outage it causes).

    python tests/support/load_tool.py --url http://127.0.0.1:8080 --key KEY \
        --concurrency 32 --duration-s 30 --questions-file qs.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter

import httpx
import numpy as np


async def run(url: str, key: str | None, questions: list[dict], concurrency: int, duration_s: float,
              warmup_s: float, timeout_s: float, events: list | None = None) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    counter = 0
    start = time.monotonic()
    measure_from = start + warmup_s
    stop_at = measure_from + duration_s
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client(client_id: int, http: httpx.AsyncClient) -> None:
        nonlocal counter
        while time.monotonic() < stop_at:
            counter += 1
            q = dict(questions[counter % len(questions)])
            q["question"] = f"{q['question']} (request {counter})"
            t0 = time.monotonic()
            try:
                r = await http.post(f"{url}/v1/query", json=q, headers=headers)
                status = str(r.status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            t1 = time.monotonic()
            if t0 < measure_from:
                continue  # warm-up: not counted
            if events is not None:
                events.append({"t0": round(t0 - measure_from, 4), "t1": round(t1 - measure_from, 4),
                               "method": q.get("method", "auto"), "status": status})
            if status == "200":
                latencies.append(t1 - t0)
            else:
                errors[status] += 1

    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as http:
        await asyncio.gather(*(client(i, http) for i in range(concurrency)))
    elapsed = time.monotonic() - measure_from
    ms = np.asarray(latencies) * 1000 if latencies else np.zeros(1)
    return {
        "concurrency": concurrency,
        "duration_s": round(elapsed, 2),
        "requests": len(latencies) + sum(errors.values()),
        "ok": len(latencies),
        "errors": sum(errors.values()),
        "errors_by_status": dict(errors),
        "rps": round(len(latencies) / elapsed, 2),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p90_ms": round(float(np.percentile(ms, 90)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
        "max_ms": round(float(ms.max()), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--key")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--duration-s", type=float, default=30.0)
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--questions-file", required=True, help='JSON list of request bodies ({"question": ..., "method": ...})')
    ap.add_argument("--events-out", help="write every counted request here as a JSON line")
    args = ap.parse_args()
    with open(args.questions_file, encoding="utf-8") as f:
        questions = json.load(f)
    if not questions:
        ap.error("no questions")
    events: list | None = [] if args.events_out else None
    figures = asyncio.run(run(args.url, args.key, questions, args.concurrency, args.duration_s,
                              args.warmup_s, args.timeout_s, events))
    if args.events_out:
        with open(args.events_out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e) + "\n" for e in events)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
