"""POST /v1/query with "stream": true: server-sent events over the tiny Saltreach index.

In-process (TestClient) for the events and their order, errors before and after the 200, the
timeout and the keep-alive; over real HTTP (uvicorn in a thread, the fixed-latency answer server
streaming as a model does) for a client that goes away mid-answer.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from corpusgraph.config import Config, ServeSection
from tests.support.access_world import sse_events
from tests.support.query_fixtures import ScriptedChat, make_engine

pytestmark = pytest.mark.unit

QUESTION = "Who trained Tobin Hale?"
POINTS = json.dumps({"points": [{"description": "Mara Voss founded the guild [P1]", "score": 80}]})


class SlowChat(ScriptedChat):
    def __init__(self, seconds: float, **kw):
        super().__init__(**kw)
        self.seconds = seconds

    def complete(self, requests):
        time.sleep(self.seconds)
        return super().complete(requests)


def _app(store, chat, **serve):
    from serving import create_app

    return create_app(Config(serve=ServeSection(**serve)), engine_factory=lambda _c: make_engine(store, chat))


def _ready(client):
    deadline = time.monotonic() + 30
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _stream(client, **body) -> tuple[int, str, list[tuple[str, dict]]]:
    with client.stream("POST", "/v1/query", json={"question": QUESTION, **body, "stream": True}) as r:
        text = "".join(r.iter_text())
        return r.status_code, r.headers.get("content-type", ""), sse_events(text) if r.status_code == 200 else text


@pytest.fixture(scope="module")
def service(store):
    chat = ScriptedChat("Mara Voss trained Tobin Hale [U1].", map_answer=lambda prompt: POINTS)
    with TestClient(_app(store, chat)) as client:
        _ready(client)
        yield client, chat


@pytest.mark.parametrize("method", ["basic", "local"])
def test_basic_and_local_send_the_context_before_the_model_then_its_pieces_then_the_answer(service, method):
    client, _ = service
    status, kind, events = _stream(client, method=method)
    assert status == 200 and kind.startswith("text/event-stream")
    kinds = [k for k, _ in events]
    assert kinds[:2] == ["start", "context"] and kinds[-1] == "done" and set(kinds[2:-1]) == {"token"}
    start, context, done = events[0][1], events[1][1], events[-1][1]
    assert start["method"] == method and start["question"] == QUESTION and "index_version" in start
    assert [c["tag"] for c in context["citations"]] == [f"U{i}" for i in range(1, len(context["citations"]) + 1)]
    assert context["coverage"]["method"] == method and context["context_tokens"] > 0
    tokens = "".join(d["text"] for k, d in events if k == "token")
    assert tokens.strip() == done["answer"] == "Mara Voss trained Tobin Hale [U1]."
    # The done event is the answer the JSON route gives for the same question.
    plain = client.post("/v1/query", json={"question": QUESTION, "method": method}).json()
    assert {k: v for k, v in done.items() if k != "usd"} == {k: v for k, v in plain.items() if k != "usd"}
    assert done["citations"][0]["unit_id"] == context["citations"][0]["unit_id"]


def test_global_sends_progress_while_it_maps_and_cites_before_the_reduce(service):
    client, _ = service
    status, _, events = _stream(client, method="global", level=1)
    kinds = [k for k, _ in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and "context" in kinds
    assert kinds.index("context") < kinds.index("token")
    done = events[-1][1]
    maps = [d for k, d in events if k == "progress" and d["stage"] == "map"]
    assert maps and maps[-1]["done"] == maps[-1]["total"] == done["details"]["map_calls"]
    assert [d["done"] for d in maps] == list(range(maps[0]["done"], maps[-1]["done"] + 1))


def test_refusals_before_the_stream_are_json_and_after_it_an_error_event(store):
    from serving import create_app

    class Refusing:
        store = None

        def ask(self, question, method="auto", level=None, top_k=None, domains=None, events=None):
            raise ValueError("level 7 is not a level of this index")

    keys = [{"name": "k", "key": "the-key", "domains": ["*"]}]
    app = create_app(Config(serve=ServeSection(api_keys=keys)), engine_factory=lambda _c: Refusing())
    with TestClient(app) as client:
        _ready(client)
        r = client.post("/v1/query", json={"question": QUESTION, "stream": True})
        assert r.status_code == 401 and r.headers["content-type"] == "application/json"
        r = client.post("/v1/query", json={"question": "", "stream": True}, headers={"X-API-Key": "the-key"})
        assert r.status_code == 422
        with client.stream("POST", "/v1/query", json={"question": QUESTION, "stream": True},
                           headers={"X-API-Key": "the-key"}) as r:
            events = sse_events("".join(r.iter_text()))
        assert r.status_code == 200 and events == [("error", {"status": 400,
                                                             "detail": "level 7 is not a level of this index"})]
        metrics = client.get("/metrics").text
        assert 'corpusgraph_query_streams_total{method="unknown",outcome="error"} 1.0' in metrics


def test_past_the_timeout_the_stream_ends_with_a_504_event_and_silence_sends_keep_alives(store):
    with TestClient(_app(store, SlowChat(1.0, answer="late"), request_timeout_s=0.5, stream_keepalive_s=0.1)) as client:
        _ready(client)
        with client.stream("POST", "/v1/query", json={"question": QUESTION, "method": "basic", "stream": True}) as r:
            text = "".join(r.iter_text())
    events = sse_events(text)
    assert [k for k, _ in events] == ["start", "context", "error"]
    assert events[-1][1]["status"] == 504 and "request_timeout_s" in events[-1][1]["detail"]
    assert ": keep-alive\n\n" in text


def test_metrics_time_streams_to_the_first_event_context_and_token(service):
    client, _ = service
    _stream(client, method="basic")
    metrics = client.get("/metrics").text
    for name in ("first_event", "first_context", "first_token"):
        assert f'corpusgraph_query_{name}_seconds_count{{method="basic"}}' in metrics, name
    assert 'corpusgraph_query_streams_total{method="basic",outcome="completed"}' in metrics
    assert 'corpusgraph_query_seconds_count{method="basic",outcome="ok"}' in metrics


# -- a client that goes away, over real HTTP ---------------------------------------------------------

def test_a_client_that_leaves_mid_answer_stops_the_model_and_frees_its_worker(store):
    from corpusgraph.llm.openai_http import OpenAIChatModel
    from serving import create_app
    from tests.support.aio_thread import AppThread
    from tests.support.fixed_latency_answer_server import make_app
    from tests.support.service_thread import serve_in_thread, wait_ready

    model_app = make_app(slots=8, latency_s=0.05, stream_pieces=200, piece_interval_s=0.05)
    with AppThread(model_app) as model_server:
        chat = OpenAIChatModel("bench", model_server.base_url, max_retries=0)
        app = create_app(Config(serve=ServeSection(max_concurrent_queries=1)),
                         engine_factory=lambda _c: make_engine(store, chat))
        with serve_in_thread(app) as url:
            wait_ready(url)
            host, port = url.removeprefix("http://").split(":")
            body = json.dumps({"question": QUESTION, "method": "basic", "stream": True}).encode()
            with socket.create_connection((host, int(port))) as conn:
                conn.sendall(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                got = b""
                while b"event: token" not in got:  # the model is writing the answer
                    got += conn.recv(65536)
            stats = _stats(model_server)
            deadline = time.monotonic() + 30
            while stats["disconnected"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
                stats = _stats(model_server)
            assert stats["streams"] == 1 and stats["disconnected"] == 1  # the model's stream was closed
            # The one worker is free again: the next question is answered whole.
            r = httpx.post(f"{url}/v1/query", json={"question": QUESTION, "method": "basic"}, timeout=60)
            assert r.status_code == 200 and r.json()["error"] is None and r.json()["answer"]
            metrics = httpx.get(f"{url}/metrics").text
            assert 'corpusgraph_query_streams_total{method="basic",outcome="disconnected"} 1.0' in metrics


def _stats(server) -> dict:
    return httpx.get(server.base_url.removesuffix("/v1") + "/stats", timeout=10).json()
