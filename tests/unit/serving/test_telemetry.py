"""Traces (serving/telemetry.py): an HTTP server span, its `corpusgraph.query` child, and a
`chat <model>` span per model call under that, with the GenAI attributes; exported over OTLP/HTTP
to a real receiver when an endpoint is configured, nothing when not. Under a public key no span
holds a question, a vault string or a hidden id."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from corpusgraph.config import Config, ServeSection
from tests.support.access_world import KEYS, PUBLIC, QUESTIONS, auth, leaks
from tests.support.query_fixtures import EchoChat, ScriptedChat, build_two_domain_index, make_engine

pytestmark = pytest.mark.unit

QUESTION = "Who trained Tobin Hale?"
POINTS = json.dumps({"points": [{"description": "a point", "score": 60}]})


def _client(app):
    client = TestClient(app)
    client.__enter__()
    deadline = time.monotonic() + 30
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return client


def _tree(spans) -> dict[str, list]:
    by_id = {s.context.span_id: s for s in spans}
    return {s.name: [by_id[s.parent.span_id].name if s.parent and s.parent.span_id in by_id else None] for s in spans}


def test_a_question_is_a_span_under_the_http_span_with_a_span_per_model_call(store):
    from serving import create_app

    exporter = InMemorySpanExporter()
    chat = ScriptedChat("Mara Voss [U1].", map_answer=lambda p: POINTS)
    app = create_app(Config(serve=ServeSection()), engine_factory=lambda _c: make_engine(store, chat),
                     span_exporter=exporter)
    client = _client(app)
    try:
        exporter.clear()
        assert client.post("/v1/query", json={"question": QUESTION, "method": "global", "level": 1}).status_code == 200
        spans = exporter.get_finished_spans()
        query = next(s for s in spans if s.name == "corpusgraph.query")
        calls = [s for s in spans if s.name == "chat scripted"]
        http = next(s for s in spans if s.context.span_id == query.parent.span_id)
        assert http.kind.name == "SERVER" and "/v1/query" in http.name
        assert calls and all(c.parent.span_id == query.context.span_id for c in calls)
        assert {c.attributes["corpusgraph.stage"] for c in calls} == {"map", "reduce"}
        reduce = next(c for c in calls if c.attributes["corpusgraph.stage"] == "reduce")
        assert reduce.attributes["gen_ai.operation.name"] == "chat" and reduce.attributes["gen_ai.usage.input_tokens"] == 100
        assert reduce.attributes["corpusgraph.cache_hit"] is False and reduce.end_time >= reduce.start_time
        assert query.attributes["corpusgraph.method"] == "global" and query.attributes["corpusgraph.caller"] == "anonymous"
        assert query.attributes["corpusgraph.llm_calls"] == len(calls)
        assert "corpusgraph.question" not in query.attributes  # record_question is off by default
        exporter.clear()
        with client.stream("POST", "/v1/query", json={"question": QUESTION, "method": "basic", "stream": True}) as r:
            "".join(r.iter_text())
        streamed = exporter.get_finished_spans()
        query = next(s for s in streamed if s.name == "corpusgraph.query")
        assert query.attributes["corpusgraph.stream"] is True
        assert [s.name for s in streamed if s.parent and s.parent.span_id == query.context.span_id] == ["chat scripted"]
        exporter.clear()
        client.post("/v1/context", json={"question": QUESTION})
        assert "corpusgraph.context" in {s.name for s in exporter.get_finished_spans()}
    finally:
        client.__exit__(None, None, None)


def test_no_span_holds_the_question_or_anything_of_the_vault(tmp_path):
    from corpusgraph.query.store import IndexStore
    from serving import create_app

    world = IndexStore(*build_two_domain_index(tmp_path))
    exporter = InMemorySpanExporter()
    app = create_app(Config(serve=ServeSection(api_keys=KEYS)), engine_factory=lambda _c: make_engine(world, EchoChat()),
                     span_exporter=exporter)
    client = _client(app)
    try:
        for question in QUESTIONS:
            for method in ("basic", "local", "global", "drift"):
                assert client.post("/v1/query", json={"question": question, "method": method},
                                   headers=auth(PUBLIC)).status_code == 200
        spans = exporter.get_finished_spans()
        text = json.dumps([[s.name, dict(s.attributes), dict(s.resource.attributes)] for s in spans], default=str)
        assert len(spans) > 40 and leaks(text, ()) == []
        assert not [q for q in QUESTIONS if q in text]
        assert leaks(client.get("/metrics").text, ()) == []
    finally:
        client.__exit__(None, None, None)


def test_traces_go_to_an_otlp_endpoint_and_nowhere_without_one(store):
    from serving import create_app
    from tests.support.aio_thread import AppThread
    from tests.support.otlp_receiver import receiver_app

    received: list[dict] = []
    with AppThread(receiver_app(received)) as receiver:
        section = ServeSection(telemetry={"otlp_endpoint": receiver.base_url + "/traces", "service_name": "cg-test"})
        app = create_app(Config(serve=section), engine_factory=lambda _c: make_engine(store, ScriptedChat("A [U1].")))
        client = _client(app)
        client.post("/v1/query", json={"question": QUESTION, "method": "basic"})
        client.__exit__(None, None, None)  # the lifespan's end flushes the exporter
    names = {s["name"] for s in received}
    assert {"corpusgraph.query", "chat scripted"} <= names
    query = next(s for s in received if s["name"] == "corpusgraph.query")
    call = next(s for s in received if s["name"] == "chat scripted")
    assert call["parent_span_id"] == query["span_id"] and call["trace_id"] == query["trace_id"]
    assert call["attributes"]["gen_ai.request.model"] == "scripted" and query["resource"]["service.name"] == "cg-test"
    off = create_app(Config(serve=ServeSection()), engine_factory=lambda _c: make_engine(store, ScriptedChat("A.")))
    assert off.state.telemetry.enabled is False and off.state.telemetry.provider is None
