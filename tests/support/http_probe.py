"""What the tests that start `corpusgraph serve` as a process (the command line's, a container's)
need to talk to it: a free port, a JSON request, and the wait for /readyz."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, body: dict | None = None):
    """(status, headers (case-insensitive), JSON body) of a GET, or of a POST of `body`."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.headers, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read() or b"{}")


def wait_ready(base: str, proc: subprocess.Popen, log: Path, limit_s: float = 300) -> dict:
    """/readyz's body once it answers 200; fails with the log's tail if `proc` exits first or the
    service is not ready within limit_s (a wait for start-up, not a measurement)."""
    deadline = time.monotonic() + limit_s
    while True:
        assert proc.poll() is None, log.read_text()[-4000:]
        try:
            status, _, ready = http_json(f"{base}/readyz")
            if status == 200:
                return ready
        except (urllib.error.URLError, ConnectionError):
            pass
        assert time.monotonic() < deadline, "the service never became ready:\n" + log.read_text()[-4000:]
        time.sleep(0.5)
