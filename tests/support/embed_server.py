"""A small OpenAI-compatible /v1/embeddings server on 127.0.0.1 for tests.

Vectors are deterministic: each text's vector is drawn from a generator seeded by the text's
sha256, `dim` wide, scaled by 3 so that the client has to normalise it. Scripted failures:
- `fail_first`: that many requests answer 500 before any succeeds (counted over the server);
- a text starting "reject:" makes its request answer 400 with an OpenAI-style error body;
- `short_answer`: one embedding fewer than asked for (a malformed answer).
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

__all__ = ["EmbedServer", "vector_for"]


def vector_for(text: str, dim: int) -> np.ndarray:
    """The server's raw (unnormalised) vector for a text."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return (3.0 * np.random.default_rng(seed).standard_normal(dim)).astype(np.float32)


class EmbedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, dim: int = 8, fail_first: int = 0, model: str = "fake-embed"):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.dim, self.fail_first, self.model = dim, fail_first, model
        self.short_answer = False
        self.lock = threading.Lock()
        self.requests: list[dict] = []  # bodies of every request, in arrival order
        self.statuses: list[int] = []
        self.auth: list[str | None] = []
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> "EmbedServer":
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.server.statuses.append(status)

    def do_POST(self):  # noqa: N802 (http.server's name)
        srv: EmbedServer = self.server  # type: ignore[assignment]
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with srv.lock:
            srv.requests.append(body)
            srv.auth.append(self.headers.get("Authorization"))
            fail = srv.fail_first > 0
            if fail:
                srv.fail_first -= 1
        if self.path != "/v1/embeddings":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        if fail:
            return self._send(500, {"error": {"message": "scripted overload"}})
        texts = body["input"]
        if any(t.startswith("reject:") for t in texts):
            return self._send(400, {"error": {"message": "input is too long for this model"}})
        if srv.short_answer:
            texts = texts[:-1]
        data = [{"object": "embedding", "index": i, "embedding": vector_for(t, srv.dim).tolist()}
                for i, t in enumerate(texts)]
        data.reverse()  # servers may answer out of order; the client must sort by index
        tokens = sum(len(t.split()) for t in texts)
        self._send(200, {"object": "list", "model": body.get("model"), "data": data,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
