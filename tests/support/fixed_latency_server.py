"""An OpenAI-compatible test server with a fixed latency and a fixed number of slots.

A benchmark harness, never a product default: it stands in for an inference server whose
throughput is exactly `slots / latency_s` requests per second, so a client can be scored as a
fraction of that capacity. At most `slots` requests are served at once (the rest queue, as in a
server's scheduler); each one then takes exactly `latency_s` and answers in a form the client
parses, with usage counts:
- a request with `response_format` (corpusgraph's schema-constrained extraction): an
  extraction JSON that passes the extract stage's schema and parser;
- any other chat request (Microsoft graphrag's extraction and gleaning prompts): records in
  graphrag's tuple-delimited format ending in its completion delimiter, and "N" to its
  "answer Y or N" continuation question;
- POST /v1/embeddings: a small fixed vector per input (graphrag insists on an embedding model
  in its config and its start-up check calls it once; extraction never does). These requests
  take no slot and are not counted in /stats.

    python tests/support/fixed_latency_server.py --slots 64 --latency-s 1.0 [--port 0]

The first stdout line is the base URL (".../v1"). GET /stats returns what was served:
served, max_concurrent (in service at once, never above slots), max_queued, busy_s (the time
from the first request's arrival to the last answer: the window the client kept it busy),
ramp_s (from the first arrival until every slot was busy; null if that never happened), and
first_arrival and last_done themselves as time.monotonic() readings; "by_client" has served,
first_arrival, last_done and busy_s for each kind of client ("corpusgraph"; "graphrag" for its
extraction and gleaning; "graphrag_other" for anything else it sends), so two clients measured
against one server can still be told apart.
"""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

try:
    from tests.support.child_server import run_server, serve_forever, slots_latency_args
except ImportError:  # run as a script: its own folder is on sys.path
    from child_server import run_server, serve_forever, slots_latency_args

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

# The same facts in graphrag's own record format (graphrag/prompts/index/extract_graph.py in
# graphrag 3.x): tuples joined by "<|>", records by "##", ended by "<|COMPLETE|>". Fixed
# descriptions also keep graphrag's description summarisation from calling the model, so all
# its traffic is extraction.
GRAPHRAG_ANSWER = "##".join([
    '("entity"<|>CONTOSO FREIGHT<|>ORGANIZATION<|>A carrier named in the text)',
    '("entity"<|>ANTWERP<|>GEO<|>The port where the delay happened)',
    '("relationship"<|>CONTOSO FREIGHT<|>ANTWERP<|>Contoso Freight operates at Antwerp<|>6)',
]) + "<|COMPLETE|>"

EMBED_DIM = 8  # length of the fixed vectors /v1/embeddings answers

# graphrag's gleaning loop asks this after a continuation round when more rounds are allowed.
GRAPHRAG_LOOP_QUESTION = "Answer Y if there are still entities or relationships that need to be added"
GRAPHRAG_FORMAT_MARK = '("entity"<|>'


def answer_for(body: dict) -> tuple[str, str]:
    """(client kind, answer text) for one chat request, told apart by what the request asks for."""
    if body.get("response_format") is not None:
        return "corpusgraph", ANSWER
    messages = body.get("messages") or [{}]
    last = str(messages[-1].get("content", ""))
    if GRAPHRAG_LOOP_QUESTION in last:
        return "graphrag", "N"
    # graphrag's extraction conversation always opens with its prompt, which names the record
    # format; anything else (its start-up check that the model answers) is counted apart, so
    # the extraction pass is measured on its own.
    kind = "graphrag" if GRAPHRAG_FORMAT_MARK in str(messages[0].get("content", "")) else "graphrag_other"
    return kind, GRAPHRAG_ANSWER


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
        self.by_client: dict[str, dict] = {}

    def arrived(self, client: str, now: float) -> None:
        per = self.by_client.setdefault(client, {"served": 0, "first_arrival": now, "last_done": None})
        per["first_arrival"] = min(per["first_arrival"], now)

    def done(self, client: str, now: float) -> None:
        per = self.by_client[client]
        per["served"] += 1
        per["last_done"] = now

    def as_dict(self, slots: int, latency_s: float) -> dict:
        busy = (self.last_done - self.first_arrival) if self.served and self.first_arrival is not None else 0.0
        # first_arrival and last_done are time.monotonic() values: on Linux one clock for every
        # process, so a client on the same machine can place them on its own timeline.
        return {"slots": slots, "latency_s": latency_s, "served": self.served,
                "max_concurrent": self.max_concurrent, "max_queued": self.max_queued, "busy_s": busy,
                "first_arrival": self.first_arrival, "last_done": self.last_done,
                "ramp_s": (self.first_full - self.first_arrival) if self.first_full is not None else None,
                "by_client": {k: {**v, "busy_s": (v["last_done"] - v["first_arrival"]) if v["served"] else 0.0}
                              for k, v in self.by_client.items()}}


def make_app(slots: int, latency_s: float) -> web.Application:
    stats = Stats()
    # Created here, inside the running loop's app set-up, so it binds to the server's loop.
    gate = asyncio.Semaphore(slots)

    async def chat(request: web.Request) -> web.Response:
        now = time.monotonic()
        if stats.first_arrival is None:
            stats.first_arrival = now
        body = await request.json()
        client, content = answer_for(body)
        stats.arrived(client, now)
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
        usage = {"prompt_tokens": prompt_chars // 4 + 1, "completion_tokens": len(content) // 4 + 1}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        stats.served += 1
        stats.last_done = time.monotonic()
        stats.done(client, stats.last_done)
        return web.json_response({
            "id": f"cmpl-{stats.served}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "bench"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": usage,
        })

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        inputs = body.get("input", [])
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        data = [{"object": "embedding", "index": i, "embedding": [0.0] * (EMBED_DIM - 1) + [1.0]}
                for i in range(len(inputs))]
        tokens = sum(len(str(x)) for x in inputs) // 4 + 1
        return web.json_response({"object": "list", "data": data, "model": body.get("model", "bench"),
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response(stats.as_dict(slots, latency_s))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/stats", get_stats)
    return app


async def serve(slots: int, latency_s: float, port: int) -> None:
    # A backlog above the slot count: queued clients wait in the app, not in the kernel.
    await serve_forever(make_app(slots, latency_s), port, backlog=max(1024, slots * 4))


def main() -> None:
    args = slots_latency_args(__doc__.splitlines()[0])
    run_server(serve(args.slots, args.latency_s, args.port))


if __name__ == "__main__":
    main()
