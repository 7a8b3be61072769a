"""The service's streamed answers, a client leaving mid-answer and a follow-up question, against the
real bundled model (llama-cpp-python's server, which streams chat chunks and reports no usage on a
stream) on the Saltreach test world.

What is checked is the path, not the 135M model's quality: pieces of the answer arrive as token
events before `done`, they join into the answer, its usage is marked estimated; a client that
closes the connection makes the model server stop (its log says the client disconnected); a
follow-up is rewritten through the model or, when the small model's rewrite is unusable, asked as
it was, saying why.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from corpusgraph.config import Config, LLMSection, ServeSection
from corpusgraph.llm import EmbeddedServer, open_chat_model
from tests.support.access_world import sse_events
from tests.support.query_fixtures import build_tiny_index, make_engine
from tests.support.service_thread import serve_in_thread, wait_ready

pytestmark = pytest.mark.llm

QUESTION = "Who trained Tobin Hale?"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    from corpusgraph.query.store import IndexStore
    from serving import create_app

    tmp = tmp_path_factory.mktemp("llm-service")
    store = IndexStore(*build_tiny_index(tmp))
    log = tmp / "server.log"
    with EmbeddedServer(log_path=log) as server:
        # No response cache: each test's call must reach the model.
        chat = open_chat_model(LLMSection(backend="embedded", cache=False), tmp / "cache", base_url=server.base_url)
        app = create_app(Config(serve=ServeSection()),
                         engine_factory=lambda _c: make_engine(store, chat, max_tokens=48))
        with serve_in_thread(app) as url:
            wait_ready(url)
            yield url, log


def test_a_streamed_answer_from_the_real_model(service):
    url, _ = service
    with httpx.stream("POST", f"{url}/v1/query", json={"question": QUESTION, "method": "basic", "stream": True},
                      timeout=300) as r:
        events = sse_events("".join(r.iter_text()))
    kinds = [k for k, _ in events]
    assert kinds[:2] == ["start", "context"] and kinds[-1] == "done" and kinds.count("token") >= 2
    done = events[-1][1]
    assert done["error"] is None and done["details"]["usage_estimated"] is True
    assert "".join(d["text"] for k, d in events if k == "token").strip() == done["answer"]
    assert done["tokens_in"] > 0 and done["tokens_out"] > 0 and done["citations"]


def test_a_client_leaving_stops_the_model_server(service):
    url, log = service
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"question": "Tell me everything about the Lumen Guild and Port Keel.", "method": "local",
                       "stream": True}).encode()
    with socket.create_connection((host, int(port))) as conn:
        conn.sendall(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while b"event: token" not in got:
            chunk = conn.recv(65536)
            assert chunk, "the stream ended before the model wrote anything"
            got += chunk
    deadline = time.monotonic() + 120
    while "Disconnected from client" not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, "the model server never saw the client go"
        time.sleep(0.2)
    metrics = httpx.get(f"{url}/metrics").text
    assert 'corpusgraph_query_streams_total{method="local",outcome="disconnected"} 1.0' in metrics


def test_a_follow_up_with_the_real_model(service):
    url, _ = service
    history = [{"role": "user", "content": "Who is Tobin Hale?"},
               {"role": "assistant", "content": "Tobin Hale is a lantern maker of the Lumen Guild."}]
    r = httpx.post(f"{url}/v1/query", json={"question": "Who trained him?", "history": history, "method": "local"},
                   timeout=300)
    body = r.json()
    rewrite = body["details"]["rewrite"]
    assert r.status_code == 200 and rewrite["turns"] == 2 and body["question"] == "Who trained him?"
    if rewrite["used"]:
        assert body["standalone_question"] and body["standalone_question"] != "Who trained him?"
    else:
        assert rewrite["error"] and body["standalone_question"] is None
    assert body["llm_calls"] == 2 and body["answer"]
