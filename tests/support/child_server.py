"""The benchmarks' stand-alone HTTP servers as child processes, and the serving code they share.

Parent side: `ChildServer(script, *args)` runs `python script args...` in its own process (so
a server never competes with the measuring process for its GIL), reads the base URL the server
prints as its first stdout line, and stops the process. Child side: `serve_forever` binds an
aiohttp app on localhost, prints that URL and serves until the process is stopped, and
`run_server` runs it with Ctrl-C as a normal stop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Coroutine


class ChildServer:
    """A server script in a child process; `base_url` ends in /v1."""

    def __init__(self, script: Path | str, *args: str):
        self.proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True)
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http"):
            self.stop()
            raise RuntimeError(f"{Path(script).name} did not start (exit {self.proc.returncode})")

    def get_json(self, path: str, timeout: float = 30) -> Any:
        """GET `path` (e.g. "/stats") from the server root, outside /v1."""
        with urllib.request.urlopen(self.base_url.removesuffix("/v1") + path, timeout=timeout) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ChildServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


async def serve_forever(app, port: int, backlog: int = 128) -> None:
    """Serve `app` on 127.0.0.1:`port` (0: a free one), print its base URL, wait to be stopped."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=backlog)
    await site.start()
    print(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
    try:
        await asyncio.Event().wait()  # until the process is told to stop
    finally:
        await runner.cleanup()


def run_server(main: Coroutine) -> None:
    try:
        asyncio.run(main)
    except KeyboardInterrupt:
        pass


def slots_latency_args(description: str, extra=None) -> argparse.Namespace:
    """--slots, --latency-s and --port, as the fixed-latency servers take them (`extra(ap)` adds
    a server's own options)."""
    ap = argparse.ArgumentParser(description=description)
    if extra is not None:
        extra(ap)
    ap.add_argument("--slots", type=int, required=True, help="requests served at once; the rest queue")
    ap.add_argument("--latency-s", type=float, required=True, help="seconds each request takes once in a slot")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = ap.parse_args()
    if args.slots < 1 or args.latency_s <= 0:
        ap.error("--slots must be >= 1 and --latency-s > 0")
    return args
