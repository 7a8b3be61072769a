"""An OpenAI-compatible test server that answers any query-side request after a fixed latency.

A benchmark harness, never a product default. Like fixed_latency_server.py (which answers with
an extraction), at most `slots` requests are served at once and each takes exactly
`latency_s`; unlike it, the answer fits whatever the request asks for, so global search, DRIFT
and the service can be timed against it:
- a request with a `response_format` schema (either llama.cpp's {"type": "json_object",
  "schema": ...} or OpenAI's {"type": "json_schema", "json_schema": {"schema": ...}}) gets the
  smallest JSON value that satisfies the schema: objects with their required properties, one
  item per array (none when maxItems is 0), integers at their maximum (a rating of 5, a map
  point scored 100), strings "text";
- any other chat request gets a fixed one-sentence answer that cites [U1] and [P1].
- with --relevant-share F, a relevance rating (a schema whose one required property is
  "score") is 5 for a share F of the prompts and 0 for the rest, chosen by a hash of the prompt,
  so dynamic global selection prunes as it would on a real model instead of descending into
  every report (what a rating of 5 everywhere makes it do: every report of a 9,620-community
  index rated and mapped for one question).

    python tests/support/fixed_latency_answer_server.py --slots 64 --latency-s 0.5 [--port 0]

A request with `"stream": true` is answered as server-sent events after the same latency: a
role chunk, the answer in --stream-pieces content chunks one --piece-interval-s apart, a usage
chunk when the request asks for one (`stream_options.include_usage`) unless --no-stream-usage
(llama-cpp-python's server never sends one), then `data: [DONE]`. A client that closes the
connection mid-stream is counted in /stats as `disconnected`, and the rest is not sent.

The first stdout line is the base URL (".../v1"); GET /stats returns served, max_concurrent,
streams and disconnected.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

try:
    from tests.support.child_server import run_server, serve_forever, slots_latency_args
except ImportError:  # run as a script: its own folder is on sys.path
    from child_server import run_server, serve_forever, slots_latency_args

TEXT_ANSWER = "The reports and sources agree on the main point [U1] [P1]."


def instance(schema: dict[str, Any]) -> Any:
    """The smallest value satisfying the subset of JSON Schema corpusgraph's prompts use."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: instance(props.get(name) or {}) for name in schema.get("required", list(props))}
    if kind == "array":
        return [] if schema.get("maxItems") == 0 else [instance(schema.get("items") or {})]
    if kind == "integer":
        return int(schema.get("maximum", 1))
    if kind == "number":
        return float(schema.get("maximum", 1.0))
    if kind == "boolean":
        return True
    return "text"


def schema_of(body: dict) -> dict | None:
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        return (fmt.get("json_schema") or {}).get("schema")
    return fmt.get("schema")


def rating(body: dict, schema: dict, relevant_share: float) -> dict:
    """A deterministic 0-or-5 relevance rating: 5 for `relevant_share` of the prompts."""
    import hashlib

    text = json.dumps(body.get("messages", []), sort_keys=True).encode()
    draw = int.from_bytes(hashlib.sha256(text).digest()[:8], "big") / 2**64
    return {"score": int(_props_max(schema)) if draw < relevant_share else 0}


def _props_max(schema: dict) -> int:
    return int(((schema.get("properties") or {}).get("score") or {}).get("maximum", 5))


def is_rating(schema: dict | None) -> bool:
    return bool(schema) and schema.get("type") == "object" and schema.get("required") == ["score"]


def pieces(text: str, n: int) -> list[str]:
    """`text` cut into n pieces of about equal length (fewer when it is shorter), joined back whole."""
    n = max(1, min(n, len(text)))
    step = -(-len(text) // n)
    return [text[i: i + step] for i in range(0, len(text), step)]


async def stream_answer(request: web.Request, body: dict, text: str, usage: dict, stats: dict,
                        n_pieces: int, interval_s: float, send_usage: bool) -> web.StreamResponse:
    """The answer as chat completion chunks (OpenAI's streaming format), ended by [DONE]."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    base = {"id": f"chunk-{stats['served']}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body.get("model", "bench")}

    def event(choices: list, **extra) -> bytes:
        return f"data: {json.dumps({**base, 'choices': choices, **extra})}\n\n".encode()

    stats["streams"] += 1
    try:
        await resp.prepare(request)
        await resp.write(event([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]))
        parts = pieces(text, n_pieces)
        for i, part in enumerate(parts):
            if i:
                await asyncio.sleep(interval_s)
            finish = "stop" if i == len(parts) - 1 else None
            await resp.write(event([{"index": 0, "delta": {"content": part}, "finish_reason": finish}]))
        if send_usage and (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(event([], usage=usage))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionResetError:  # the client went away: stop writing
        stats["disconnected"] += 1
    except asyncio.CancelledError:
        stats["disconnected"] += 1
        raise
    return resp


def make_app(slots: int, latency_s: float, relevant_share: float | None = None, stream_pieces: int = 8,
             piece_interval_s: float = 0.01, stream_usage: bool = True) -> web.Application:
    gate = asyncio.Semaphore(slots)
    stats = {"served": 0, "in_service": 0, "max_concurrent": 0, "streams": 0, "disconnected": 0}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        async with gate:
            stats["in_service"] += 1
            stats["max_concurrent"] = max(stats["max_concurrent"], stats["in_service"])
            try:
                await asyncio.sleep(latency_s)
            finally:
                stats["in_service"] -= 1
        schema = schema_of(body)
        if relevant_share is not None and is_rating(schema):
            text = json.dumps(rating(body, schema, relevant_share))
        else:
            text = json.dumps(instance(schema)) if schema else TEXT_ANSWER
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        usage = {"prompt_tokens": prompt_chars // 4 + 1, "completion_tokens": len(text) // 4 + 1}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        stats["served"] += 1
        if body.get("stream"):
            return await stream_answer(request, body, text, usage, stats, stream_pieces, piece_interval_s,
                                       stream_usage)
        return web.json_response({
            "id": f"cmpl-{stats['served']}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "bench"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": usage,
        })

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response({**stats, "slots": slots, "latency_s": latency_s})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/stats", get_stats)
    return app


def main() -> None:
    def extra(ap) -> None:
        ap.add_argument("--relevant-share", type=float, default=None,
                        help="share of relevance ratings answered 5 (others 0)")
        ap.add_argument("--stream-pieces", type=int, default=8, help="content chunks of a streamed answer")
        ap.add_argument("--piece-interval-s", type=float, default=0.01, help="seconds between two content chunks")
        ap.add_argument("--no-stream-usage", action="store_true", help="never send a usage chunk (as llama.cpp)")

    args = slots_latency_args(__doc__.splitlines()[0], extra=extra)
    app = make_app(args.slots, args.latency_s, args.relevant_share, args.stream_pieces, args.piece_interval_s,
                   not args.no_stream_usage)
    run_server(serve_forever(app, args.port, backlog=max(1024, args.slots * 4)))


if __name__ == "__main__":
    main()
