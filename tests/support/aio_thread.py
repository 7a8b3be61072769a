"""An aiohttp app (a test server) served on 127.0.0.1 from a thread of the test process.

For unit tests that need a real HTTP server but not a process of its own (the benchmarks run
theirs as child processes: child_server.py). Not a test module.

    with AppThread(make_app(...)) as server:
        server.base_url  # "http://127.0.0.1:<port>/v1"
"""

from __future__ import annotations

import asyncio
import threading

__all__ = ["AppThread"]


class AppThread:
    def __init__(self, app) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="test-aiohttp")
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "AppThread":
        from aiohttp import web

        self._thread.start()

        async def start():
            self._runner = web.AppRunner(self.app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            return self._runner.addresses[0][1]

        self.port = asyncio.run_coroutine_threadsafe(start(), self.loop).result(30)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
