"""The scripted server's answers after a fixed latency, with a log of every answer it delivered.

A test harness for the fault suite (tests/ray/test_faults.py), never a product default. Each
chat request waits `--latency-s` (long enough that a kill lands mid-stage), then gets
scripted_server's deterministic answer, derived from the text, so two runs over the same inputs
make the same tables. The log (`--log`, appended, one line per answer) is the ground truth of
what was paid for: `<sha256 of the request body's canonical JSON>` for each answer written to a
connection that was still open. A request whose client had gone away by then is answered with
nothing and logged to `<log>.undelivered` instead.

SIGUSR1 kills the server: on its event loop, between two requests' steps, every connection is
cut (in-flight requests get no answer) and the process exits at once, without a graceful
shutdown. Because it runs on the loop, an answer is either logged and written to its socket, or
neither, so the log stays exact; a SIGKILL could land between the two. Restart it with the
same `--port` and `--log` and the log goes on.

    python tests/support/fault_server.py --latency-s 0.3 --log served.log [--port 0]

The first stdout line is the base URL (".../v1"). GET /stats returns {"served": n, "in_flight": n}
(this process's answers, and the requests it holds unanswered now); a kill writes the same
object to `<log>.killed` first.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal

from aiohttp import web

try:
    from tests.support.child_server import run_server
    from tests.support.scripted_server import answer_for
except ImportError:  # run as a script: its own folder is on sys.path
    from child_server import run_server
    from scripted_server import answer_for


def body_key(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def make_app(latency_s: float, log_path: str) -> web.Application:
    served = {"served": 0, "in_flight": 0}
    # O_APPEND writes of one short line each: whole lines, in order, visible to a reader at once.
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    lost = os.open(log_path + ".undelivered", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    open_transports: set = set()

    async def chat(request: web.Request) -> web.StreamResponse:
        tr = request.transport
        open_transports.add(tr)
        served["in_flight"] += 1
        try:
            body = await request.json()
            key = body_key(body)
            await asyncio.sleep(latency_s)
            if tr is None or tr.is_closing():
                os.write(lost, (key + "\n").encode())
                raise ConnectionResetError("client gone")
            content = answer_for(body)
            chars = sum(len(str(m.get("content") or "")) for m in body.get("messages") or [])
            usage = {"prompt_tokens": chars // 4 + 1, "completion_tokens": len(content) // 4 + 1}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            payload = json.dumps({
                "id": "cmpl-" + key[:12], "object": "chat.completion", "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
                "usage": usage,
            }).encode()
            # Logged and handed to the socket with no await between them (see the module doc).
            os.write(log, (key + "\n").encode())
            served["served"] += 1
            resp = web.Response(body=payload, content_type="application/json")
            await resp.prepare(request)
            await resp.write_eof()
            return resp
        finally:
            served["in_flight"] -= 1
            open_transports.discard(tr)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(served)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/stats", stats)
    app["open_transports"] = open_transports
    app["served"] = served
    return app


async def serve(latency_s: float, log_path: str, port: int) -> None:
    app = make_app(latency_s, log_path)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=True)
    await site.start()

    def die() -> None:
        with open(log_path + ".killed", "w") as f:  # what the kill cut, for the test's report
            json.dump(app["served"], f)
        for tr in list(app["open_transports"]):
            if tr is not None:
                tr.abort()
        os._exit(0)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, die)
    print(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latency-s", type=float, required=True)
    p.add_argument("--log", required=True, help="file to append one line per delivered answer to")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = p.parse_args()
    run_server(serve(args.latency_s, args.log, args.port))


if __name__ == "__main__":
    main()
