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

The first stdout line is the base URL (".../v1"); GET /stats returns served and
max_concurrent.
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


def make_app(slots: int, latency_s: float, relevant_share: float | None = None) -> web.Application:
    gate = asyncio.Semaphore(slots)
    stats = {"served": 0, "in_service": 0, "max_concurrent": 0}

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
    args = slots_latency_args(__doc__.splitlines()[0], extra=lambda ap: ap.add_argument(
        "--relevant-share", type=float, default=None, help="share of relevance ratings answered 5 (others 0)"))
    app = make_app(args.slots, args.latency_s, args.relevant_share)
    run_server(serve_forever(app, args.port, backlog=max(1024, args.slots * 4)))


if __name__ == "__main__":
    main()
