"""The query service under a real uvicorn in a thread of the test process, on a socket bound to a
free port first (so no race for the port). Not a test module.

    with serve_in_thread(app) as base_url:   # "http://127.0.0.1:<port>"
        ...
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

__all__ = ["serve_in_thread", "wait_ready"]


@contextmanager
def serve_in_thread(app, **config) -> Iterator[str]:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def wait_ready(base_url: str, timeout_s: float = 30.0) -> None:
    """Until GET /readyz says 200 (the engine is loaded)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while httpx.get(f"{base_url}/readyz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "the service never became ready"
        time.sleep(0.02)
