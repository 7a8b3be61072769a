"""An OpenAI-compatible test server with a fixed latency and a fixed number of slots.

A benchmark harness, never a product default: it stands in for an inference server whose
throughput is exactly `slots / latency_s` requests per second, so a client can be scored as a
fraction of that capacity. At most `slots` requests are served at once (the rest queue, as in a
server's scheduler); each one then takes exactly `latency_s` and answers a valid extraction
JSON with usage counts.

    python tests/benchmarks/fixed_latency_server.py --slots 64 --latency-s 1.0 [--port 0]

The first stdout line is the base URL (".../v1"). GET /stats returns what was served:
served, max_concurrent (in service at once, never above slots), max_queued, busy_s (the time
from the first request's arrival to the last answer: the window the client kept it busy),
ramp_s (from the first arrival until every slot was busy; null if that never happened), and
first_arrival and last_done themselves as time.monotonic() readings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web

# A fixed answer that passes the extract stage's schema and parser; its size is near a real one.
ANSWER = json.dumps({
    "entities": [
        {"name": "Contoso Freight", "type": "ORGANIZATION", "description": "A carrier named in the text."},
        {"name": "Antwerp", "type": "LOCATION", "description": "The port where the delay happened."},
    ],
    "relationships": [
        {"source": "Contoso Freight", "target": "Antwerp", "description": "Contoso Freight operates at Antwerp.",
         "strength": 6},
    ],
})


class Stats:
    def __init__(self) -> None:
        self.served = 0
        self.in_service = 0
        self.max_concurrent = 0
        self.queued = 0
        self.max_queued = 0
        self.first_arrival: float | None = None
        self.first_full: float | None = None  # when every slot was first busy
        self.last_done: float | None = None

    def as_dict(self, slots: int, latency_s: float) -> dict:
        busy = (self.last_done - self.first_arrival) if self.served and self.first_arrival is not None else 0.0
        # first_arrival and last_done are time.monotonic() values: on Linux one clock for every
        # process, so a client on the same machine can place them on its own timeline.
        return {"slots": slots, "latency_s": latency_s, "served": self.served,
                "max_concurrent": self.max_concurrent, "max_queued": self.max_queued, "busy_s": busy,
                "first_arrival": self.first_arrival, "last_done": self.last_done,
                "ramp_s": (self.first_full - self.first_arrival) if self.first_full is not None else None}


def make_app(slots: int, latency_s: float) -> web.Application:
    stats = Stats()
    # Created here, inside the running loop's app set-up, so it binds to the server's loop.
    gate = asyncio.Semaphore(slots)

    async def chat(request: web.Request) -> web.Response:
        now = time.monotonic()
        if stats.first_arrival is None:
            stats.first_arrival = now
        body = await request.json()
        stats.queued += 1
        stats.max_queued = max(stats.max_queued, stats.queued)
        async with gate:
            stats.queued -= 1
            stats.in_service += 1
            stats.max_concurrent = max(stats.max_concurrent, stats.in_service)
            if stats.first_full is None and stats.in_service == slots:
                stats.first_full = time.monotonic()
            try:
                await asyncio.sleep(latency_s)
            finally:
                stats.in_service -= 1
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        # Roughly four characters a token: enough for accounting to have something to add up.
        usage = {"prompt_tokens": prompt_chars // 4 + 1, "completion_tokens": len(ANSWER) // 4}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        stats.served += 1
        stats.last_done = time.monotonic()
        return web.json_response({
            "id": f"cmpl-{stats.served}", "object": "chat.completion", "model": body.get("model", "bench"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}}],
            "usage": usage,
        })

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response(stats.as_dict(slots, latency_s))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/stats", get_stats)
    return app


async def serve(slots: int, latency_s: float, port: int) -> None:
    runner = web.AppRunner(make_app(slots, latency_s), access_log=None)
    await runner.setup()
    # A backlog above the slot count: queued clients wait in the app, not in the kernel.
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=max(1024, slots * 4))
    await site.start()
    bound = runner.addresses[0][1]
    print(f"http://127.0.0.1:{bound}/v1", flush=True)
    try:
        await asyncio.Event().wait()  # until the process is told to stop
    finally:
        await runner.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, required=True, help="requests served at once; the rest queue")
    ap.add_argument("--latency-s", type=float, required=True, help="seconds each request takes once in a slot")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = ap.parse_args()
    if args.slots < 1 or args.latency_s <= 0:
        ap.error("--slots must be >= 1 and --latency-s > 0")
    try:
        asyncio.run(serve(args.slots, args.latency_s, args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
