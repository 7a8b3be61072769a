"""The service's limits: body size, error bodies that reflect nothing, rate limits, CORS, slow
clients and key-file permissions, over the tiny Saltreach index (query_fixtures.py)."""

from __future__ import annotations

import logging
import socket
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.support.query_fixtures import ScriptedChat, make_engine
from tests.unit.serving.test_serving import (QUESTION, running, settings, wait_ready)

pytestmark = pytest.mark.unit


# -- body size -----------------------------------------------------------------------------------


def test_a_body_over_the_limit_is_a_413_before_it_is_parsed(store):
    chat = ScriptedChat("Mara Voss [R1].")
    with running(store, chat=chat, max_body_bytes=1000) as (client, _):
        huge = "x" * 1_000_000
        r = client.post("/v1/query", json={"question": huge})
        assert r.status_code == 413 and "max_body_bytes" in r.json()["detail"]
        assert "xxxx" not in r.text

        # No Content-Length (chunked): the bytes are counted as they come, and reading stops.
        sent = []

        def chunks():
            for _ in range(100):
                sent.append(1)
                yield b'{"question": "' + b"y" * 100

        r = client.post("/v1/query", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "yyyy" not in r.text
        assert chat.batches == []  # nothing reached the engine

        # Just under the limit is parsed and answered as usual, chunked or not.
        fits = b'{"question": "' + QUESTION.encode() + b'", "method": "basic"}'
        assert client.post("/v1/query", content=fits, headers={"Content-Type": "application/json"}).status_code == 200
        r = client.post("/v1/query", content=iter([fits[:10], fits[10:]]),
                        headers={"Content-Type": "application/json"})
        assert r.status_code == 200 and r.json()["method"] == "basic"


def test_the_default_body_limit_is_64_kib(store):
    with running(store) as (client, _):
        assert client.app.state.settings.max_body_bytes == 65_536
        assert client.post("/v1/query", json={"question": "q" * 70_000}).status_code == 413
        r = client.post("/v1/query", json={"question": "q" * 60_000})  # fits the body, not the question limit
        assert r.status_code == 422


def test_a_bad_content_length_is_a_400(store):
    with running(store) as (client, _):
        r = client.post("/v1/query", content=b"{}", headers={"Content-Length": "lots", "Content-Type": "application/json"})
        assert r.status_code == 400


# -- error bodies reflect nothing ------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    {"question": "SECRET-" + "z" * 5000},  # too long
    {"question": QUESTION, "mehtod": "SECRET-VALUE"},  # unknown field
    {"question": QUESTION, "method": "SECRET-METHOD"},  # not a method
    {"question": QUESTION, "top_k": "SECRET-K"},  # wrong type
    ["SECRET-LIST"],  # not an object
])
def test_a_422_names_the_field_and_the_problem_but_never_echoes_the_input(store, body):
    with running(store) as (client, _):
        r = client.post("/v1/query", json=body)
        assert r.status_code == 422
        assert "SECRET" not in r.text
        for error in r.json()["detail"]:
            assert set(error) == {"loc", "msg", "type"} and error["loc"][0] == "body" and error["msg"]


def test_invalid_json_is_a_422_without_the_text(store):
    with running(store) as (client, _):
        r = client.post("/v1/query", content=b'{"question": "SECRET-TEXT', headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "SECRET" not in r.text
        assert r.json()["detail"][0]["type"] == "json_invalid"


def test_a_long_unknown_field_name_is_cut_short_in_loc(store):
    with running(store) as (client, _):
        r = client.post("/v1/query", json={"question": QUESTION, "k" * 5000: 1})
        loc = r.json()["detail"][0]["loc"]
        assert r.status_code == 422 and len(loc[1]) < 100 and loc[1].startswith("kkk")


def test_a_404_does_not_repeat_the_id_asked_for(store):
    with running(store) as (client, _):
        for path in ("/v1/entities/SECRET-ID", "/v1/communities/SECRET-ID"):
            r = client.get(path)
            assert r.status_code == 404 and "SECRET" not in r.text


def test_a_500_carries_a_request_id_and_no_trace_or_path(store, caplog):
    from serving import create_app

    class Broken:
        store = None

        def ask(self, question, method="auto", level=None, top_k=None, domains=None):
            raise RuntimeError("cannot read /srv/corpus/private/ledger.txt: the text of a private document")

    app = create_app(settings(), engine_factory=lambda _s: Broken())
    with caplog.at_level(logging.ERROR, logger="serving.limits"), \
            TestClient(app, raise_server_exceptions=False) as client:
        assert wait_ready(client).status_code == 200
        r = client.post("/v1/query", json={"question": QUESTION})
    assert r.status_code == 500
    body = r.json()
    assert set(body) == {"detail", "request_id"} and body["request_id"] == r.headers["x-request-id"]
    for leak in ("/srv", "ledger", "private", "Traceback", "RuntimeError", ".py"):
        assert leak not in r.text
    # The server's log has what the caller does not, under the same id.
    logged = [rec for rec in caplog.records if body["request_id"] in rec.getMessage()]
    assert logged and logged[0].exc_info and "ledger.txt" in str(logged[0].exc_info[1])


def test_a_failed_load_does_not_show_paths_on_readyz_or_in_503s(tmp_path):
    from corpusgraph.query.store import IndexStore
    from serving import create_app

    where = tmp_path / "secret-warehouse-dir"

    def factory(_settings):
        return IndexStore(str(where), str(tmp_path / "faiss"))  # raises IndexMissingError naming the path

    with TestClient(create_app(settings(), engine_factory=factory)) as client:
        deadline = time.monotonic() + 30
        while (ready := client.get("/readyz")).json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.02)
        answer = client.post("/v1/query", json={"question": QUESTION})
    assert ready.json()["status"] == "failed" and "corpusgraph index" in ready.json()["error"]
    assert answer.status_code == 503
    for text in (ready.text, answer.text):
        assert "secret-warehouse-dir" not in text and str(tmp_path) not in text


# -- rate limits -------------------------------------------------------------------------------------


def test_the_token_bucket_refills_at_its_rate():
    from serving.limits import RateLimiter

    now = [100.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)  # empty: one token comes in half a second
    assert limiter.take("b") == 0.0  # another caller has a bucket of its own
    now[0] += 0.5
    assert limiter.take("a") == 0.0 and limiter.take("a") == pytest.approx(0.5)
    now[0] += 100  # a long pause saves up no more than the burst
    assert [limiter.take("a") for _ in range(4)][-1] > 0
    assert RateLimiter(rate=0, burst=1).take("a") == 0.0  # 0: no limit
    assert RateLimiter.retry_after(0.01) == "1" and RateLimiter.retry_after(2.2) == "3"


def test_a_key_over_its_rate_gets_429_with_retry_after_and_other_keys_do_not(store):
    with running(store, api_keys=["k1", "k2"], rate_limit_per_s=0.1, rate_limit_burst=2) as (client, _):
        k1, k2 = {"X-API-Key": "k1"}, {"X-API-Key": "k2"}
        assert [client.get("/v1/communities", headers=k1).status_code for _ in range(2)] == [200, 200]
        r = client.post("/v1/query", json={"question": QUESTION}, headers=k1)
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 10
        assert "rate_limit_per_s" in r.json()["detail"]
        assert client.get("/v1/communities", headers=k2).status_code == 200
        assert client.get("/readyz").status_code == 200 and client.get("/healthz").status_code == 200
        assert client.get("/v1/communities", headers={"X-API-Key": "wrong"}).status_code == 401


def test_no_rate_limit_by_default(store):
    with running(store) as (client, _):
        assert {client.get("/v1/communities").status_code for _ in range(60)} == {200}


# -- CORS ----------------------------------------------------------------------------------------------


def _preflight(client, origin):
    return client.options("/v1/query", headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                "Access-Control-Request-Headers": "authorization,content-type"})


def test_cors_is_closed_unless_configured(store):
    with running(store) as (client, _):
        assert "access-control-allow-origin" not in _preflight(client, "https://evil.example").headers
        r = client.get("/v1/communities", headers={"Origin": "https://evil.example"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_cors_allows_only_the_configured_origins(store):
    with running(store, cors_origins=["https://app.example"]) as (client, _):
        ok = _preflight(client, "https://app.example")
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://app.example"
        assert "authorization" in ok.headers["access-control-allow-headers"].lower()
        assert "access-control-allow-origin" not in _preflight(client, "https://evil.example").headers
        r = client.get("/v1/communities", headers={"Origin": "https://app.example"})
        assert r.headers["access-control-allow-origin"] == "https://app.example"


# -- slow clients, under uvicorn ---------------------------------------------------------------------


def _closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    """What the server sent before closing the connection, or None if it was still open after `seconds`."""
    sock.settimeout(seconds)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except socket.timeout:
        return None
    return got


@pytest.fixture
def slow_limits_server(store):
    """The app under uvicorn with the serve command's protocol and tight client deadlines."""
    import uvicorn

    from corpusgraph.cli.serve import uvicorn_limits
    from corpusgraph.config import ServeSection
    from serving import create_app

    limits = uvicorn_limits(ServeSection(header_timeout_s=0.5, keep_alive_s=1, max_header_bytes=2048))
    app = create_app(settings(body_timeout_s=0.5), engine_factory=lambda _s: make_engine(store, ScriptedChat("A.")))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", **limits))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = sock.getsockname()[1]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        assert wait_ready(http).status_code == 200
    yield port
    server.should_exit = True
    thread.join(30)
    sock.close()


def test_headers_sent_too_slowly_close_the_connection(slow_limits_server):
    with socket.create_connection(("127.0.0.1", slow_limits_server)) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        begin = time.monotonic()
        assert _closed_within(conn, 5.0) == b""
        assert time.monotonic() - begin < 3.0
    with socket.create_connection(("127.0.0.1", slow_limits_server)) as conn:  # a prompt client is served
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (_closed_within(conn, 5.0) or b"").startswith(b"HTTP/1.1 200")


def test_a_body_sent_too_slowly_is_a_408(slow_limits_server):
    with socket.create_connection(("127.0.0.1", slow_limits_server)) as conn:
        conn.sendall(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"question\":")
        reply = _closed_within(conn, 5.0)
        assert reply is not None and reply.startswith(b"HTTP/1.1 408") and b"body_timeout_s" in reply


def test_an_idle_keep_alive_connection_is_closed(slow_limits_server):
    with socket.create_connection(("127.0.0.1", slow_limits_server)) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        begin = time.monotonic()
        reply = _closed_within(conn, 6.0)
        assert reply is not None and reply.startswith(b"HTTP/1.1 200") and time.monotonic() - begin < 4.0


def test_oversized_headers_are_refused(slow_limits_server):
    # Headers still coming past max_header_bytes (2048 here): refused, not buffered further.
    with socket.create_connection(("127.0.0.1", slow_limits_server)) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4000)
        reply = _closed_within(conn, 5.0)
        assert reply is not None and reply.startswith(b"HTTP/1.1 400")


# -- the key file -----------------------------------------------------------------------------------


def test_a_key_file_others_can_read_is_refused_naming_the_path_and_the_fix(tmp_path, capsys):
    from corpusgraph.cli.main import main
    from serving.keys import read_key_file

    keys = tmp_path / "keys"
    keys.write_text("the-secret-key *\n")
    for mode in (0o644, 0o640, 0o604, 0o660):
        keys.chmod(mode)
        with pytest.raises(ValueError) as err:
            read_key_file(str(keys))
        assert str(keys) in str(err.value) and f"chmod 600 {keys}" in str(err.value)
        assert "the-secret-key" not in str(err.value)
    keys.chmod(0o644)
    # The real command stops at start-up, before listening.
    assert main(["serve", "--api-key-file", str(keys), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"chmod 600 {keys}" in err and "the-secret-key" not in err
    keys.chmod(0o600)
    assert [k.key.get_secret_value() for k in read_key_file(str(keys))] == ["the-secret-key"]
    keys.chmod(0o400)
    assert len(read_key_file(str(keys))) == 1


_ARENA_PROBE = r"""
import ctypes, os, sys, tempfile, threading
from corpusgraph.cli.serve import limit_malloc_arenas

arenas = int(sys.argv[1])
print("set", limit_malloc_arenas(arenas))
go = threading.Barrier(8)

def work():
    go.wait()  # all eight allocate at once, each on its first malloc in a new thread
    keep = [bytearray(50_000) for _ in range(20)]
    go.wait()

threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL(None)
libc.fdopen.restype = ctypes.c_void_p
fd, path = tempfile.mkstemp()
out = libc.fdopen(fd, b"w")
libc.malloc_info(0, ctypes.c_void_p(out))
libc.fclose(ctypes.c_void_p(out))
print("heaps", open(path).read().count("<heap nr="))
os.unlink(path)
"""


def _heaps(arenas: int) -> tuple[str, int]:
    import subprocess
    import sys

    from tests.conftest import REPO

    done = subprocess.run([sys.executable, "-c", _ARENA_PROBE, str(arenas)], capture_output=True, text=True,
                          cwd=REPO, timeout=60, check=True)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    return lines["set"], int(lines["heaps"])


def test_the_service_caps_malloc_arenas_so_threads_share_them():
    """serve.malloc_arenas goes to glibc: eight threads allocating at once make eight or more
    arenas by default and share one when capped at one (counted by glibc's malloc_info)."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt(M_ARENA_MAX) is glibc's; this libc has no such setting")
    unset, default_heaps = _heaps(0)
    assert unset == "False" and default_heaps >= 8
    assert _heaps(1) == ("True", 1)


def test_malloc_arenas_default_to_two():
    from corpusgraph.config import ServeSection

    assert ServeSection().malloc_arenas == 2
    with pytest.raises(ValueError):
        ServeSection(malloc_arenas=-1)
