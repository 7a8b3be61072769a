"""Retrieval only: POST /v1/context and QueryEngine.context() over the tiny Saltreach index.

The context is the one an answer would be written from: its text is, word for word, the context
the answer prompt held for the same question (the echoing model shows that prompt). Basic and
local make no model call; global ranks its level's reports with none, and maps only when asked.
"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from corpusgraph.config import Config, ServeSection
from tests.support.query_fixtures import EchoChat, make_engine

pytestmark = pytest.mark.unit

QUESTION = "Who trained Tobin Hale?"


@pytest.fixture(scope="module")
def service(store):
    from serving import create_app

    chat = EchoChat()
    app = create_app(Config(serve=ServeSection(max_context_tokens=4000)), engine_factory=lambda _c: make_engine(store, chat))
    with TestClient(app) as client:
        deadline = time.monotonic() + 30
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield client, chat


def _context(client, **body):
    r = client.post("/v1/context", json={"question": QUESTION, **body})
    assert r.status_code == 200, r.text
    return r.json()


def _prompt_context(chat) -> str:
    prompt = chat.batches[-1][-1].messages[-1]["content"]
    return prompt.split("Context:\n", 1)[1].rsplit("\n\nQuestion:", 1)[0]


@pytest.mark.parametrize("method", ["basic", "local"])
def test_the_context_is_the_answers_context_and_costs_no_model_call(service, method):
    client, chat = service
    before = len(chat.batches)
    ctx = _context(client, method=method, include_text=True)
    assert len(chat.batches) == before and ctx["llm_calls"] == 0 and ctx["usd"] == 0
    answer = client.post("/v1/query", json={"question": QUESTION, "method": method}).json()
    assert ctx["text"] == _prompt_context(chat)
    assert ctx["context_tokens"] == answer["context_tokens"]
    units = ctx["units"]
    assert [u["tag"] for u in units] == [f"U{i}" for i in range(1, len(units) + 1)]
    assert [u["rank"] for u in units] == list(range(1, len(units) + 1))
    for u in units:  # each unit's text is in the context under its tag
        assert f"[{u['tag']}] (from {u['title']})\n{u['text']}" in ctx["text"]
        assert u["doc_id"] and u["source_uri"] and -1.0 <= u["similarity"] <= 1.0
    assert ctx["units"][0]["unit_id"] == "u2"  # "Mara Voss trained Tobin Hale ..."
    assert ctx["coverage"]["method"] == method and ctx["coverage"]["view"]["restricted"] is False
    assert ctx["index_version"] and ctx["method"] == method


def test_local_context_names_its_entities_relationships_claims_and_reports(service):
    client, _ = service
    ctx = _context(client, method="local", include_text=True)
    tobin = next(e for e in ctx["entities"] if e["entity_id"] == "e_tobin")
    assert tobin["seed"] and tobin["found_by"] == "name" and tobin["title"] == "Tobin Hale"
    assert any(not e["seed"] and e["found_by"] == "neighbour" for e in ctx["entities"])
    r2 = next(r for r in ctx["relationships"] if r["rel_id"] == "r2")
    assert (r2["source"], r2["target"]) == ("Mara Voss", "Tobin Hale") and r2["unit_ids"] == ["u2"]
    for kind, letter in (("entities", "E"), ("relationships", "R"), ("reports", "P")):
        rows = ctx[kind]
        assert rows and [x["tag"] for x in rows] == [f"{letter}{i}" for i in range(1, len(rows) + 1)], kind
        assert all(f"[{x['tag']}]" in ctx["text"] for x in rows), kind
    assert ctx["reports"][0]["findings"] and ctx["details"]["section_tokens"]["units"] > 0


def test_the_budget_bounds_the_context(service):
    client, _ = service
    small = _context(client, method="local", max_tokens=200, include_text=True)
    large = _context(client, method="local", max_tokens=4000)
    assert small["context_tokens"] <= 200 < large["context_tokens"]
    assert client.post("/v1/context", json={"question": QUESTION, "max_tokens": 4001}).status_code == 422
    assert "text" in small and _context(client, method="local")["text"] is None  # only when asked for


def test_global_context_ranks_the_levels_reports_with_no_call_and_maps_only_when_asked(service):
    client, chat = service
    before = len(chat.batches)
    ctx = _context(client, method="global", level=1, include_text=True)
    assert len(chat.batches) == before and ctx["llm_calls"] == 0
    assert {r["community_id"] for r in ctx["reports"]} == {"c1a", "c1b", "c1c"}  # c1d has no report
    assert ctx["details"]["level"] == 1 and ctx["coverage"]["reports_mapped"] == 3
    assert all(f"Report {i}: " in ctx["text"] for i in (1, 2, 3)) and ctx["units"]
    mapped = _context(client, method="global", level=1, map=True)
    assert mapped["llm_calls"] >= 1 and len(chat.batches) > before
    assert mapped["points"] and all(p["score"] > 0 and p["community_ids"] for p in mapped["points"])
    assert mapped["coverage"]["map_calls"] == mapped["details"]["map_calls"]


def test_drift_has_no_context_and_auto_routes_it_to_local(service, store):
    client, _ = service
    r = client.post("/v1/context", json={"question": QUESTION, "method": "drift"})
    assert r.status_code == 422
    routed = _context(client, method="auto", question="How did Mara Voss shape the Lumen Guild?")
    assert routed["method"] == "local" and "DRIFT has no retrieval-only context" in routed["route_reason"]
    engine = make_engine(store, EchoChat())
    with pytest.raises(ValueError, match="DRIFT needs the model"):
        engine.context(QUESTION, method="drift")


def test_the_python_api_gives_what_the_route_gives(service, store):
    client, _ = service
    route = _context(client, method="local")
    api = make_engine(store, EchoChat()).context(QUESTION, method="local").to_dict()
    assert {k: v for k, v in api.items() if k != "text"} == {k: v for k, v in route.items()
                                                             if k not in ("text", "index_version", "conversation_id")}
    assert client.get("/metrics").text.count('corpusgraph_context_seconds_count{method="local"}') == 1
