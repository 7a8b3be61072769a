"""A pass-through proxy in front of an OpenAI-compatible server that records each call's tokens.

A benchmark harness: two different clients (corpusgraph, Microsoft graphrag) are pointed at the
same model through it, and what each one paid is read from the same place, the server's own
`usage` counts, rather than from each client's bookkeeping.

    python tests/support/counting_proxy.py --upstream http://127.0.0.1:PORT/v1 [--port 0]

The first stdout line is the proxy's base URL (".../v1"). Every request under /v1/ is forwarded
unchanged; for each chat completion the proxy keeps prompt_tokens, completion_tokens,
finish_reason, the HTTP status, whether it asked for a response_format, seconds taken, the
text of the request's first user message (to tell which unit a call was about) and the
answer's text (to tell whether the client could parse it).
GET /calls returns them all; a request the upstream refused (context overflow, for instance)
is recorded with its status and error text, and its answer is passed back to the client as is.
"""

from __future__ import annotations

import argparse
import json
import time

import aiohttp
from aiohttp import web

try:
    from tests.support.child_server import run_server, serve_forever
except ImportError:  # run as a script: its own folder is on sys.path
    from child_server import run_server, serve_forever


def _first_user(request: dict) -> str | None:
    """The text of the first user message (a string, or the text parts of a list of parts)."""
    for msg in request.get("messages") or []:
        if isinstance(msg, dict) and msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else None
    return None


def usage_record(status: int, body: bytes, request: dict, seconds: float) -> dict:
    """What one chat call cost, from the upstream's answer (pure: easy to check on its own)."""
    rec = {"status": status, "seconds": round(seconds, 3), "messages": len(request.get("messages") or []),
           "response_format": request.get("response_format") is not None,
           "max_tokens": request.get("max_tokens"), "prompt_tokens": 0, "completion_tokens": 0,
           "finish_reason": None, "error": None, "first_user": _first_user(request), "answer": None}
    try:
        answer = json.loads(body)
    except ValueError:
        rec["error"] = body[:300].decode(errors="replace")
        return rec
    usage = answer.get("usage") or {}
    rec["prompt_tokens"] = int(usage.get("prompt_tokens") or 0)
    rec["completion_tokens"] = int(usage.get("completion_tokens") or 0)
    choices = answer.get("choices") or [{}]
    rec["finish_reason"] = choices[0].get("finish_reason")
    message = choices[0].get("message") or {}
    rec["answer"] = message.get("content") if isinstance(message, dict) else None
    if status >= 400:
        rec["error"] = json.dumps(answer.get("error", answer))[:300]
    return rec


def make_app(upstream: str) -> web.Application:
    calls: list[dict] = []
    upstream = upstream.rstrip("/")

    async def forward(request: web.Request) -> web.Response:
        raw = await request.read()
        tail = request.match_info["tail"]
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization")}
        t0 = time.monotonic()
        # No client-side timeout: the client being measured owns its own timeouts and retries.
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
            async with session.request(request.method, f"{upstream}/{tail}", data=raw or None,
                                       headers=headers) as resp:
                body = await resp.read()
                status, ctype = resp.status, resp.headers.get("Content-Type", "application/json")
        if request.method == "POST" and tail.endswith("chat/completions"):
            try:
                req = json.loads(raw or b"{}")
            except ValueError:
                req = {}
            calls.append(usage_record(status, body, req, time.monotonic() - t0))
        return web.Response(body=body, status=status, content_type=ctype.split(";")[0])

    async def get_calls(request: web.Request) -> web.Response:
        return web.json_response(calls)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/calls", get_calls)
    app.router.add_route("*", "/v1/{tail:.*}", forward)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, help="base URL of the real server, ending in /v1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = ap.parse_args()
    run_server(serve_forever(make_app(args.upstream), args.port))


if __name__ == "__main__":
    main()
