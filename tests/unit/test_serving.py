"""The query service over the tiny Saltreach index with a scripted model (query_fixtures.py).

Most tests drive the app in-process with TestClient, which runs the lifespan; one runs it
under uvicorn on a free localhost port and talks real HTTP to it with httpx.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient

from corpusgraph.config import Config
from corpusgraph.query.engine import METHODS
from tests.unit.query_fixtures import DOCS, ENTITIES, REPO, ScriptedChat, make_engine

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
    from serving import ServiceSettings

    return ServiceSettings(config=Config(), **kw)


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
        assert ready["report_levels"] == [0, 1]
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
    from serving import ServiceSettings, create_app
    from tests.unit.embed_server import EmbedServer
    from tests.unit.query_fixtures import DIM

    wh, index_dir = built
    overrides = {"storage.warehouse": wh, "storage.index_dir": index_dir, "storage.cache_dir": str(tmp_path),
                 "llm.backend": "openai", "llm.api_base": "http://127.0.0.1:9/v1"}
    refused = create_app(ServiceSettings(config_path=str(REPO / "conf" / "local.yaml"), config_overrides=overrides))
    with TestClient(refused) as client:  # the bundled MiniLM did not build this index
        deadline = time.monotonic() + 120
        while (failed := client.get("/readyz")).json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert failed.status_code == 503 and "built with embedding model 'fake-bow-64'" in failed.json()["error"]
    with EmbedServer(dim=DIM, model="fake-bow-64") as emb, TestClient(create_app(ServiceSettings(
            config_path=str(REPO / "conf" / "local.yaml"),
            config_overrides={**overrides, **_fake_embedding_endpoint(emb)}))) as client:
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
        assert set(body["citations"][0]) == {"unit_id", "doc_id", "source_uri", "title"}
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

    class SlowViews:  # the store, but building any view takes two seconds
        def __getattr__(self, name):
            return getattr(store, name)

        def restricted(self, domains):
            time.sleep(2.0)
            return store

    class Engine:
        store = SlowViews()

    keys = [{"name": "a", "key": "k1", "domains": ["*"]}]
    app = create_app(settings(api_keys=keys, request_timeout_s=0.1), engine_factory=lambda _s: Engine())
    with TestClient(app) as client:
        assert wait_ready(client).status_code == 200
        r = client.get("/v1/communities", headers={"X-API-Key": "k1", "X-Access-Domains": "default"})
        assert r.status_code == 504 and "request_timeout_s" in r.json()["detail"]


# -- the graph endpoints ---------------------------------------------------------------------------


def test_an_entity_with_its_neighbourhood_units_and_documents(store):
    with running(store) as (client, _):
        body = client.get("/v1/entities/e_tobin").json()
        assert body["entity"] == {"entity_id": "e_tobin", "title": "Tobin Hale", "type": "PERSON",
                                  "description": ENTITIES["e_tobin"][2], "aliases": [], "frequency": 2, "degree": 2}
        assert [r["rel_id"] for r in body["relationships"]] == ["r2", "r10"]  # heaviest first
        assert [(n["entity_id"], n["rel_ids"]) for n in body["neighbours"]] == [("e_mara", ["r2"]), ("e_lumen", ["r10"])]
        assert [u["unit_id"] for u in body["units"]] == ["u2"]  # u9's document is deleted
        assert body["units"][0]["text"] == DOCS["d2"][1]
        assert body["documents"] == [{"doc_id": "d2", "title": "An apprentice", "source_uri": "file:///corpus/d2.txt",
                                      "access_domain": "default"}]
        assert [(c["community_id"], c["title"]) for c in body["communities"]] == [
            ("c0a", "Lantern makers of Port Keel"), ("c1a", "The Lumen Guild workshop")]
        assert body["claims"] == [] and body["truncated"] is False

        grey = client.get("/v1/entities/e_grey", params={"limit": 1}).json()
        assert grey["truncated"] and len(grey["relationships"]) == 1 and grey["claims"][0]["claim_id"] == "k1"
        missing = client.get("/v1/entities/e_nobody")
        assert missing.status_code == 404 and missing.json() == {"detail": "no such entity in this index"}
        assert client.get("/v1/entities/e_mara", params={"limit": 0}).status_code == 422
        assert client.get("/v1/entities/" + "x" * 300).status_code == 422


def test_communities_by_level_and_one_with_its_report(store):
    with running(store) as (client, _):
        every = client.get("/v1/communities").json()
        assert every["levels"] == [0, 1] and every["total"] == 6
        assert [c["community_id"] for c in every["communities"]] == ["c0a", "c0b", "c1a", "c1b", "c1c", "c1d"]
        level1 = client.get("/v1/communities", params={"level": 1, "limit": 2, "offset": 1}).json()
        assert level1["total"] == 4 and [c["community_id"] for c in level1["communities"]] == ["c1b", "c1c"]
        assert level1["communities"][0] == {"community_id": "c1b", "level": 1, "parent_id": "c0a", "size": 2,
                                            "title": "Treaty town", "rating": 6.0}
        empty = client.get("/v1/communities", params={"level": 5}).json()
        assert empty == {"levels": [0, 1], "total": 0, "communities": [], "index_version": empty["index_version"]}
        for bad in ({"level": -1}, {"level": 16}, {"limit": 0}, {"limit": 201}, {"offset": -1}, {"level": "x"}):
            r = client.get("/v1/communities", params=bad)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", next(iter(bad))]

        c0a = client.get("/v1/communities/c0a").json()
        assert c0a["children"] == ["c1a", "c1b"] and c0a["report"]["rating"] == 8.0
        assert len(c0a["entities"]) == 5 and c0a["report"]["findings"][0]["summary"] == "The members share one trade"
        assert client.get("/v1/communities/c1d").json()["report"] is None  # too small for a report
        assert client.get("/v1/communities/nope").status_code == 404


def test_every_v1_route_needs_a_key_when_keys_are_set(store):
    with running(store, api_keys=["k1"]) as (client, _):
        for path in ("/v1/entities/e_mara", "/v1/communities", "/v1/communities/c0a"):
            r = client.get(path)
            assert r.status_code == 401 and "X-API-Key" in r.json()["detail"]
            assert client.get(path, headers={"X-API-Key": "k1"}).status_code == 200


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


@contextmanager
def serve_in_thread(app):
    """The app under uvicorn on a socket we bound to a free port (so no race for the port)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
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


def test_under_uvicorn_over_real_http(store):
    from serving import create_app

    closed = []

    @contextmanager
    def factory(_settings):
        yield make_engine(store, SlowChat(1.5, answer="Mara Voss [R1]."))
        closed.append(True)

    app = create_app(settings(api_keys=["secret"]), engine_factory=factory)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert wait_ready(http).status_code == 200
        assert http.post("/v1/query", json={"question": QUESTION}).status_code == 401

        # A question in flight holds a worker thread, not the event loop: /healthz answers meanwhile.
        results = {}

        def ask_one():
            results["r"] = http.post("/v1/query", json={"question": QUESTION, "method": "local"},
                                     headers={"Authorization": "Bearer secret"})
            results["answered"] = time.monotonic()

        ask = threading.Thread(target=ask_one)
        ask.start()
        time.sleep(0.2)
        assert http.get("/healthz").status_code == 200
        healthy = time.monotonic()
        ask.join(30)
        assert healthy < results["answered"] - 0.5  # not held up behind the 1.5 s answer

        r = results["r"]
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert {c["doc_id"] for c in r.json()["citations"]} <= LIVE_DOCS and r.json()["citations"]
    assert closed == [True]  # the lifespan released the engine when uvicorn stopped


# A `corpusgraph serve` process that refuses to import Spark: any attempt prints a marker and fails.
_NO_JVM_SERVE = """
import sys

class NoSpark:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "py4j"):
            print("JVM-IMPORT-ATTEMPT " + name, file=sys.stderr, flush=True)
            raise ImportError("the service must not import " + name)
        return None

sys.meta_path.insert(0, NoSpark())
from corpusgraph.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_corpusgraph_serve_in_a_subprocess_over_http_without_a_jvm(tmp_path):
    """The real command: config from conf/local.yaml with `serve.api_keys` from the environment,
    the default engine factory (delta-rs, FAISS, MiniLM), uvicorn on a port the OS picks. No model
    server listens (the openai backend points at a closed port): global search reports the failed
    map calls in `error` and still answers 200, with nothing from the vault domain."""
    import os
    import re

    import psutil

    from tests.unit.query_fixtures import build_two_domain_index

    from tests.unit.embed_server import EmbedServer
    from tests.unit.query_fixtures import DIM

    wh, index_dir = build_two_domain_index(tmp_path)
    keys = '[{name: public-app, key: "${CG_TEST_PUBLIC_KEY}", domains: [public]}]'
    emb = EmbedServer(dim=DIM, model="fake-bow-64").__enter__()
    sets = {"storage.warehouse": wh, "storage.index_dir": index_dir, "storage.cache_dir": str(tmp_path / "cache"),
            "llm.backend": "openai", "llm.api_base": "http://127.0.0.1:9/v1", "llm.max_retries": "0",
            "serve.api_keys": keys, **_fake_embedding_endpoint(emb)}
    argv = ["serve", "--conf", str(REPO / "conf" / "local.yaml"), "--port", "0", "--log-level", "info"]
    argv += [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]
    env = {**os.environ, "CG_TEST_PUBLIC_KEY": "public-secret-1"}
    proc = subprocess.Popen([sys.executable, "-c", _NO_JVM_SERVE, *argv], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    port: list[int] = []
    started = threading.Event()

    def read_log():  # drain stderr (a full pipe would stall the server) and find the port
        for line in proc.stderr:
            log.append(line)
            found = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            if found:
                port.append(int(found.group(1)))
                started.set()

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    try:
        assert started.wait(120), "server did not start:\n" + "".join(log)
        headers = {"Authorization": "Bearer public-secret-1"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port[0]}", timeout=60) as http:
            ready = wait_ready(http, timeout_s=120)
            assert ready.status_code == 200, ready.text
            assert ready.json()["tables"]["documents"] == 11
            assert http.get("/v1/communities").status_code == 401
            assert http.get("/v1/entities/e_mara", headers=headers).status_code == 200
            assert http.get("/v1/entities/ev_vault", headers=headers).status_code == 404
            ask = {"question": "What are the main themes?", "method": "global", "level": 0}
            answer = http.post("/v1/query", json=ask, headers=headers)
            assert answer.status_code == 200 and answer.json()["error"].startswith("all ")
            assert answer.json()["details"]["reports"] == 1  # level 0 for this key: c0b (c0a mixes domains)
            assert "corpusgraph_index_load_seconds" in http.get("/metrics").text
            children = psutil.Process(proc.pid).children(recursive=True)
            assert not [c for c in children if "java" in " ".join(c.cmdline()).lower()]
    finally:
        proc.terminate()  # SIGTERM: uvicorn shuts down gracefully
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        reader.join(10)
        emb.__exit__(None, None, None)
    text = "".join(log)
    assert "JVM-IMPORT-ATTEMPT" not in text and "public-secret-1" not in text, text


# -- packaging and the command -------------------------------------------------------------------------


def test_serving_never_imports_pyspark_and_imports_lazily():
    code = (
        "import sys, serving, serving.cli_serve; "
        "assert 'fastapi' not in sys.modules and 'uvicorn' not in sys.modules; "
        "from corpusgraph.config import Config; "
        "serving.create_app(serving.ServiceSettings(config=Config())); "
        "assert 'pyspark' not in sys.modules, 'serving imported pyspark'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)


def test_serve_command_builds_settings_from_the_serve_section_and_options(monkeypatch, tmp_path, capsys):
    import argparse

    import uvicorn
    from fastapi import FastAPI

    from corpusgraph.config import load_config
    from serving.cli_serve import add_serve_command

    keys = tmp_path / "keys"
    keys.write_text("# KEY DOMAIN[,DOMAIN...]\nfrom-file ops,legal\n\nadmin-file *\n")
    keys.chmod(0o600)  # a key file others may read is refused (test_serving_limits.py)
    conf = load_config(REPO / "conf" / "local.yaml", {
        "serve.request_timeout_s": "30", "serve.port": "7000",
        "serve.api_keys": '[{name: ops-app, key: "${OPS_KEY}", domains: [ops]}]'}, env={"OPS_KEY": "from-env"})
    parser = argparse.ArgumentParser(prog="corpusgraph")
    add_serve_command(parser.add_subparsers(dest="command"), config_loader=lambda args: conf)
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(app=app, **kw))

    args = parser.parse_args(["serve", "--host", "0.0.0.0", "--api-key", "a", "--api-key-file", str(keys),
                              "--timeout", "5"])
    assert args.func(args) == 0
    assert isinstance(seen["app"], FastAPI) and (seen["host"], seen["port"]) == ("0.0.0.0", 7000)
    chosen = seen["app"].state.settings
    assert [(k.name, k.key.get_secret_value(), k.domains) for k in chosen.api_keys] == [
        ("ops-app", "from-env", ["ops"]), ("cli-1", "a", ["*"]), ("keys:2", "from-file", ["ops", "legal"]),
        ("keys:4", "admin-file", ["*"])]
    assert chosen.request_timeout_s == 5 and chosen.max_concurrent_queries == 4  # option wins; default kept
    assert chosen.domain_sets() == {frozenset({"ops"}), frozenset({"ops", "legal"})}
    assert "from-env" not in repr(conf) and "from-env" not in repr(chosen)

    args = parser.parse_args(["serve"])
    args.func(args)
    assert seen["app"].state.settings.request_timeout_s == 30 and seen["host"] == "127.0.0.1"

    keyless = argparse.ArgumentParser(prog="corpusgraph")
    add_serve_command(keyless.add_subparsers(dest="command"), config_loader=lambda args: Config())
    args = keyless.parse_args(["serve", "--host", "0.0.0.0"])
    args.func(args)
    assert "no API key" in capsys.readouterr().err


def test_a_key_file_line_without_domains_is_refused_naming_the_line_not_the_key(tmp_path):
    from serving.settings import read_key_file

    keys = tmp_path / "keys"
    keys.write_text("good-key ops\nbare-secret-key\n")
    keys.chmod(0o600)
    with pytest.raises(ValueError) as err:
        read_key_file(str(keys))
    assert f"{keys}:2" in str(err.value) and "bare-secret-key" not in str(err.value)
    with pytest.raises(ValueError, match="same API key"):
        settings(api_keys=[{"name": "a", "key": "k", "domains": ["x"]}, {"name": "b", "key": "k", "domains": ["y"]}])
