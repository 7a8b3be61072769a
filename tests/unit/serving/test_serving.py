"""The query service over the tiny Saltreach index with a scripted model (query_fixtures.py).

The tests here drive the app in-process with TestClient, which runs the lifespan; over real
HTTP (uvicorn, the `serve` command) see test_serving_command.py, the graph routes
test_serving_graph.py.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from corpusgraph.config import Config
from corpusgraph.query.engine import METHODS
from tests.support.query_fixtures import DOCS, REPO, ScriptedChat, make_engine

pytestmark = pytest.mark.unit

LIVE_DOCS = set(DOCS) - {"d9"}  # d9 is marked deleted in the fixture and must never be cited
QUESTION = "Who taught Tobin Hale?"


class SlowChat(ScriptedChat):
    def __init__(self, seconds: float, **kw):
        super().__init__(**kw)
        self.seconds = seconds

    def complete(self, requests):
        time.sleep(self.seconds)
        return super().complete(requests)


class CountingFactory:
    """An engine factory that counts its calls; optionally waits for `gate` before returning."""

    def __init__(self, engine, gate: threading.Event | None = None):
        self.engine = engine
        self.gate = gate
        self.calls = 0

    def __call__(self, settings):
        self.calls += 1
        if self.gate is not None:
            assert self.gate.wait(30), "test never opened the gate"
        return self.engine


def settings(**kw):
    """A default config whose serve section holds `kw`; a plain string in api_keys is a key for
    every domain."""
    from corpusgraph.config import ServeSection

    keys = [{"name": f"key-{i}", "key": k, "domains": ["*"]} if isinstance(k, str) else k
            for i, k in enumerate(kw.pop("api_keys", []), 1)]
    return Config(serve=ServeSection(api_keys=keys, **kw))


def wait_ready(client, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        r = client.get("/readyz")
        if r.status_code == 200 or time.monotonic() > deadline:
            return r
        time.sleep(0.02)


@contextmanager
def running(store, chat=None, engine_factory=None, **kw):
    """A TestClient over a started app whose engine is loaded; yields (client, factory)."""
    from serving import create_app

    factory = engine_factory or CountingFactory(make_engine(store, chat or ScriptedChat("Mara Voss [R1].")))
    with TestClient(create_app(settings(**kw), engine_factory=factory)) as client:
        assert wait_ready(client).status_code == 200
        yield client, factory


# -- start-up and readiness --------------------------------------------------------------------


def test_ready_after_start_up_and_the_engine_is_built_once(store):
    with running(store) as (client, factory):
        ready = client.get("/readyz").json()
        assert ready["status"] == "ready" and ready["error"] is None
        assert ready["tables"] == {"documents": 8, "text_units": 8, "entities": 8, "relationships": 10,
                                   "claims": 1, "communities": 6, "community_reports": 5}
        assert ready["report_levels"] == [0, 1] and ready["basic"] == "hybrid"  # which basic search runs
        for method in ("basic", "local", "global", "auto"):
            assert client.post("/v1/query", json={"question": QUESTION, "method": method}).status_code == 200
        assert factory.calls == 1


def test_not_ready_while_the_engine_loads(store):
    from serving import create_app

    gate = threading.Event()
    factory = CountingFactory(make_engine(store, ScriptedChat()), gate=gate)
    with TestClient(create_app(settings(), engine_factory=factory)) as client:
        try:
            assert client.get("/healthz").json() == {"status": "ok"}  # the process answers meanwhile
            loading = client.get("/readyz")
            assert loading.status_code == 503 and loading.json()["status"] == "loading"
            assert loading.headers["retry-after"] == "5"
            early = client.post("/v1/query", json={"question": QUESTION})
            assert early.status_code == 503 and "still loading" in early.json()["detail"]
        finally:
            gate.set()
        assert wait_ready(client).status_code == 200


def test_a_failed_load_is_reported_not_hidden(tmp_path):
    from corpusgraph.query.store import IndexStore
    from serving import create_app

    def factory(_settings):
        return IndexStore(str(tmp_path / "nowhere"), str(tmp_path / "faiss"))  # raises IndexMissingError

    with TestClient(create_app(settings(), engine_factory=factory)) as client:
        deadline = time.monotonic() + 30
        while (body := client.get("/readyz").json())["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert body["status"] == "failed" and "corpusgraph index" in body["error"]
        answer = client.post("/v1/query", json={"question": QUESTION})
        assert answer.status_code == 503 and "failed to load" in answer.json()["detail"]


def test_a_context_manager_factory_is_released_at_shutdown(store):
    from serving import create_app

    events = []

    @contextmanager
    def factory(_settings):
        events.append("open")
        yield make_engine(store, ScriptedChat())
        events.append("close")

    with TestClient(create_app(settings(), engine_factory=factory)) as client:
        assert wait_ready(client).status_code == 200
        assert events == ["open"]
    assert events == ["open", "close"]


def _fake_embedding_endpoint(server) -> dict[str, str]:
    """Config keys that embed questions with the model the fixture index was built with
    (query_fixtures.FakeEmbedder's name and dimension), served over /v1/embeddings: the query
    side refuses an index built by another model than the configured one."""
    return {"embeddings.backend": "openai", "embeddings.model": "fake-bow-64", "embeddings.api_base": server.base_url}


def test_default_factory_opens_the_configured_index(built, tmp_path):
    """The real factory (config file, IndexStore, HTTP embedder, HTTP chat model), with no model
    server: the chat backend is pointed at a port nothing listens on and is never called."""
    from corpusgraph.config import load_config
    from serving import create_app
    from tests.support.embed_server import EmbedServer
    from tests.support.query_fixtures import DIM

    wh, index_dir = built
    overrides = {"storage.warehouse": wh, "storage.index_dir": index_dir, "storage.cache_dir": str(tmp_path),
                 "llm.backend": "openai", "llm.api_base": "http://127.0.0.1:9/v1"}
    refused = create_app(load_config(REPO / "conf" / "local.yaml", overrides, env={}))
    with TestClient(refused) as client:  # the bundled MiniLM did not build this index
        deadline = time.monotonic() + 120
        while (failed := client.get("/readyz")).json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert failed.status_code == 503 and "built with embedding model 'fake-bow-64'" in failed.json()["error"]
    with EmbedServer(dim=DIM, model="fake-bow-64") as emb, TestClient(create_app(load_config(
            REPO / "conf" / "local.yaml", {**overrides, **_fake_embedding_endpoint(emb)}, env={}))) as client:
        ready = wait_ready(client, timeout_s=120)
        assert ready.status_code == 200, ready.text
        assert ready.json()["tables"]["documents"] == 8
        assert client.app.state.engine.engine.chat.base_url == "http://127.0.0.1:9/v1"


# -- answers -------------------------------------------------------------------------------------


def test_query_returns_the_answer_with_citations_from_the_index(store):
    with running(store) as (client, _):
        r = client.post("/v1/query", json={"question": QUESTION, "method": "local"})
        assert r.status_code == 200
        body = r.json()
        assert body["answer"] == "Mara Voss [R1]." and body["method"] == "local" and body["error"] is None
        assert body["citations"] and {c["doc_id"] for c in body["citations"]} <= LIVE_DOCS
        assert set(body["citations"][0]) == {"unit_id", "doc_id", "source_uri", "title", "page_start", "page_end", "section",
                                                 "locator"}
        assert body["citations"][0]["source_uri"].startswith("file:///corpus/")
        assert (body["llm_calls"], body["tokens_in"], body["tokens_out"]) == (1, 100, 10)
        assert body["usd"] == pytest.approx(0.12) and body["route_reason"] is None

        routed = client.post("/v1/query", json={"question": "Who founded the Lumen Guild?"}).json()
        assert routed["method"] == "local" and "Lumen Guild" in routed["route_reason"]


def test_top_k_applies_to_one_request_only(store):
    with running(store) as (client, factory):
        one = client.post("/v1/query", json={"question": "copper mines", "method": "basic", "top_k": 1}).json()
        default = client.post("/v1/query", json={"question": "copper mines", "method": "basic"}).json()
        assert len(one["citations"]) == 1 and len(default["citations"]) == 5  # QuerySection's top_k_units
        assert factory.engine.section.top_k_units == 5


def test_the_engine_refusing_a_question_is_a_400(store):
    class Refusing:
        store = None

        def ask(self, question, method="auto", level=None, top_k=None, domains=None):
            raise ValueError("level 7 is not a level of this index")

    with running(store, engine_factory=lambda _settings: Refusing()) as (client, _):
        r = client.post("/v1/query", json={"question": QUESTION, "level": 7})
        assert r.status_code == 400 and r.json() == {"detail": "level 7 is not a level of this index"}


# -- validation, auth, timeout ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, field",
    [
        ({"question": ""}, "question"),
        ({"question": "   "}, "question"),
        ({"question": "x" * 3000}, "question"),
        ({}, "question"),
        ({"question": QUESTION, "method": "telepathy"}, "method"),
        ({"question": QUESTION, "level": -1}, "level"),
        ({"question": QUESTION, "level": 16}, "level"),
        ({"question": QUESTION, "top_k": 51}, "top_k"),
        ({"question": QUESTION, "mehtod": "local"}, "mehtod"),
    ],
)
def test_bad_requests_are_422_naming_the_field(store, body, field):
    with running(store) as (client, _):
        r = client.post("/v1/query", json=body)
        assert r.status_code == 422
        assert [e["loc"] for e in r.json()["detail"]] == [["body", field]]


def test_the_question_limit_comes_from_the_settings(store):
    with running(store, max_question_chars=20) as (client, _):
        r = client.post("/v1/query", json={"question": "x" * 21})
        assert r.status_code == 422 and "at most 20 characters" in r.json()["detail"][0]["msg"]
        assert client.get("/openapi.json").json()["components"]["schemas"]["QueryRequest"]["properties"][
            "question"]["maxLength"] == 20


@pytest.mark.parametrize(
    "headers, status",
    [
        ({}, 401),
        ({"Authorization": "Bearer nope"}, 401),
        ({"X-API-Key": "nope"}, 401),
        ({"Authorization": "Basic k1"}, 401),
        ({"Authorization": "Bearer k2"}, 200),
        ({"X-API-Key": "k1"}, 200),
    ],
)
def test_api_keys(store, headers, status):
    with running(store, api_keys=["k1", "k2"]) as (client, _):
        r = client.post("/v1/query", json={"question": QUESTION}, headers=headers)
        assert r.status_code == status
        if status == 401:
            assert "Authorization: Bearer" in r.json()["detail"] and r.headers["www-authenticate"] == "Bearer"
        assert client.get("/readyz").status_code == 200  # probes carry no key
    assert "k1" not in repr(settings(api_keys=["k1"]))  # keys stay out of logs


def test_a_slow_answer_is_a_504_and_the_service_stays_responsive(store):
    with running(store, chat=SlowChat(2.0), request_timeout_s=0.1) as (client, _):
        begin = time.monotonic()
        r = client.post("/v1/query", json={"question": QUESTION, "method": "basic"})
        assert r.status_code == 504 and "request_timeout_s" in r.json()["detail"]
        assert time.monotonic() - begin < 1.5  # answered at the timeout, not when the model finished
        assert client.get("/healthz").status_code == 200


class DeadlineChat(ScriptedChat):
    """Records the deadline its calls run under (corpusgraph.llm.base.seconds_left)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.left: list = []

    def complete(self, requests):
        from corpusgraph.llm.base import seconds_left

        self.left.append(seconds_left())
        return super().complete(requests)


def test_a_question_s_model_calls_run_under_the_request_deadline(store):
    from corpusgraph.llm.base import seconds_left

    chat = DeadlineChat("Mara Voss [R1].")
    with running(store, chat=chat, request_timeout_s=7.0) as (client, _):
        assert client.post("/v1/query", json={"question": QUESTION, "method": "basic"}).status_code == 200
    assert chat.left and all(x is not None and 0 < x <= 7.0 for x in chat.left), chat.left
    assert seconds_left() is None  # the worker thread's deadline does not leak out of the request


def test_docs_and_openapi_are_served(store):
    with running(store) as (client, _):
        docs = client.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        spec = client.get("/openapi.json").json()
        assert {"/v1/query", "/v1/entities/{entity_id}", "/v1/communities", "/v1/communities/{community_id}",
                "/healthz", "/readyz", "/metrics"} <= set(spec["paths"])
        assert "Access domains" in spec["info"]["description"]
        assert spec["components"]["schemas"]["QueryRequest"]["properties"]["method"]["enum"] == list(METHODS)
        assert {"unit_id", "doc_id", "source_uri", "title"} <= set(spec["components"]["schemas"]["Citation"]["properties"])


def test_a_view_that_takes_too_long_to_build_is_a_504(store):
    from serving import create_app

    from corpusgraph.query.loaded import LoadedIndex

    class SlowViews(LoadedIndex):  # the index, but building any view takes two seconds
        def view(self, domains):
            time.sleep(2.0)
            return self

    class Engine:
        index = SlowViews(store)

    keys = [{"name": "a", "key": "k1", "domains": ["*"]}]
    app = create_app(settings(api_keys=keys, request_timeout_s=0.1), engine_factory=lambda _s: Engine())
    with TestClient(app) as client:
        assert wait_ready(client).status_code == 200
        r = client.get("/v1/communities", headers={"X-API-Key": "k1", "X-Access-Domains": "default"})
        assert r.status_code == 504 and "request_timeout_s" in r.json()["detail"]


def test_metrics_count_requests_by_route_and_answers_by_method(store):
    from prometheus_client.parser import text_string_to_metric_families

    with running(store) as (client, _):
        client.post("/v1/query", json={"question": QUESTION, "method": "local"})
        client.post("/v1/query", json={"question": QUESTION, "method": "local"})
        client.post("/v1/query", json={"question": ""})
        client.get("/v1/entities/e_mara")
        client.get("/v1/entities/e_nobody")
        text = client.get("/metrics")
        assert text.headers["content-type"].startswith("text/plain")
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(text.text) for s in family.samples}

    def value(name, **labels):
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("corpusgraph_http_requests_total", route="/v1/query", method="POST", status="200") == 2
    assert value("corpusgraph_http_requests_total", route="/v1/query", method="POST", status="422") == 1
    # Routes by template: an id a caller invents does not become a series of its own.
    assert value("corpusgraph_http_requests_total", route="/v1/entities/{entity_id}", method="GET", status="404") == 1
    assert value("corpusgraph_http_request_seconds_count", route="/v1/query", method="POST") == 3
    assert value("corpusgraph_query_tokens_total", method="local", direction="in") == 200
    assert value("corpusgraph_query_tokens_total", method="local", direction="out") == 20
    assert value("corpusgraph_query_usd_total", method="local") == pytest.approx(0.24)
    assert value("corpusgraph_query_answers_total", method="local", outcome="ok") == 2
    assert value("corpusgraph_query_llm_calls_total", method="local") == 2
    assert value("corpusgraph_index_load_seconds") >= 0


def test_an_unexpected_error_is_a_json_500_that_quotes_nothing(store):
    from serving import create_app

    class Broken:
        store = None

        def ask(self, question, method="auto", level=None, top_k=None, domains=None):
            raise RuntimeError("the text of a private document")

    with TestClient(create_app(settings(), engine_factory=lambda _s: Broken()), raise_server_exceptions=False) as client:
        assert wait_ready(client).status_code == 200
        r = client.post("/v1/query", json={"question": QUESTION})
        assert r.status_code == 500 and r.json() == {"detail": "internal error; the service log has the details",
                                                     "request_id": r.headers["x-request-id"]}


# -- real HTTP ---------------------------------------------------------------------------------------


