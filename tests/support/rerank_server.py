"""A reranking server on 127.0.0.1 for tests: TEI's POST /rerank, vLLM's POST /score and the
Cohere-style POST /v1/rerank, each with its own request and answer shape.

Its scorer is the share of the question's words a passage contains (a stand-in for a
cross-encoder's relevance, deterministic), so a test knows which passage it must put first. A
passage containing "fail:" makes the request answer 500; `short` answers one score fewer.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["RerankServer", "overlap"]


def overlap(query: str, passage: str) -> float:
    q = set(re.findall(r"\w+", query.casefold()))
    return len(q & set(re.findall(r"\w+", passage.casefold()))) / max(len(q), 1)


class RerankServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict, str | None]] = []  # (path, body, Authorization)
        self.short = False
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> "RerankServer":
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

    def _send(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802 (http.server's name)
        srv: RerankServer = self.server  # type: ignore[assignment]
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        srv.requests.append((self.path, body, self.headers.get("Authorization")))
        if self.path == "/rerank":  # TEI
            query, texts = body["query"], body["texts"]
        elif self.path == "/score":  # vLLM
            query, texts = body["text_1"], body["text_2"]
        elif self.path == "/v1/rerank":  # Cohere-style
            query, texts = body["query"], body["documents"]
        else:
            return self._send(404, {"error": f"no route {self.path}"})
        if any("fail:" in t for t in texts):
            return self._send(500, {"error": "scripted failure"})
        scored = sorted(((overlap(query, t), i) for i, t in enumerate(texts)), reverse=True)
        if srv.short:
            scored = scored[:-1]
        if self.path == "/rerank":
            return self._send(200, [{"index": i, "score": s} for s, i in scored])
        if self.path == "/score":
            return self._send(200, {"id": "score-1", "object": "list", "model": body.get("model"),
                                    "data": [{"index": i, "object": "score", "score": s} for s, i in sorted(scored, key=lambda x: x[1])]})
        top = body.get("top_n") or len(scored)
        return self._send(200, {"id": "rr-1", "results": [{"index": i, "relevance_score": s} for s, i in scored[:top]]})
