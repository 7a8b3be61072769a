"""OpenAIChatModel against a real, scripted OpenAI-compatible server on 127.0.0.1.

Each request's last user message names a script, e.g. "500,429,ok": the server plays one step
per call it gets for that script (the last step repeats) and answers "answer:<script>".
"""

import asyncio
import json
import pickle
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from corpusgraph.llm.base import ChatRequest
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.openai_http import OpenAIChatModel

pytestmark = pytest.mark.unit

SCHEMA = {"title": "Extraction result", "type": "object",
          "properties": {"names": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
          "required": ["names"]}


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True  # a "hang" step must not keep the test waiting at shutdown

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.headers_seen: list[dict] = []
        self.targets: list[str] = []  # each request line's target (absolute when sent through a proxy)
        self.inflight = 0
        self.max_inflight = 0

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def total_calls(self):
        return sum(self.calls.values())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, status, body, headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        srv: ScriptedServer = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        script = body["messages"][-1]["content"]
        with srv.lock:
            n = srv.calls.get(script, 0)
            srv.calls[script] = n + 1
            srv.bodies.append(body)
            srv.headers_seen.append(dict(self.headers))
            srv.targets.append(self.path)
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
        steps = script.split(",")
        step = steps[min(n, len(steps) - 1)]
        try:
            self._play(step, script)
        finally:
            with srv.lock:
                srv.inflight -= 1

    def _play(self, step, script):
        if step.startswith("sleep"):  # "sleep0.2": a slow but good answer
            time.sleep(float(step[5:]))
            step = "ok"
        if step == "ok":
            self._send(200, {
                "id": "x", "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": f"answer:{script}"}}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
            })
        elif step == "429":
            self._send(429, {"error": {"message": "rate limited"}})
        elif step == "429ra":
            self._send(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"})
        elif step == "500":
            self._send(500, b"Internal Server Error")
        elif step == "400":
            self._send(400, {"error": {"message": "schema is not supported", "type": "invalid_request_error"}})
        elif step == "hang":
            time.sleep(3)
        elif step == "garbage":
            self._send(200, b"<html>not json</html>")
        elif step == "nochoices":
            self._send(200, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0}})
        elif step == "nullcontent":
            self._send(200, {"choices": [{"finish_reason": "length", "message": {"content": None}}]})
        else:
            raise AssertionError(f"unknown step {step}")


@pytest.fixture
def server():
    srv = ScriptedServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def req(script, rid=None, schema=None, max_tokens=50):
    return ChatRequest(id=rid or script, messages=({"role": "user", "content": script},),
                       max_tokens=max_tokens, temperature=0.0, json_schema=schema)


def model(server, **kw):
    kw.setdefault("backoff_base_s", 0.01)
    kw.setdefault("backoff_max_s", 0.05)
    kw.setdefault("timeout_s", 5.0)
    return OpenAIChatModel("test-model", server.base_url, **kw)


def test_success_reads_text_tokens_and_finish_reason(server):
    [r] = model(server, api_key="sk-test").complete([req("ok")])
    assert (r.id, r.text, r.error) == ("ok", "answer:ok", None)
    assert (r.tokens_in, r.tokens_out, r.finish_reason, r.cached) == (11, 7, "stop", False)
    assert r.seconds > 0
    body = server.bodies[0]
    assert body == {"model": "test-model", "messages": [{"role": "user", "content": "ok"}],
                    "max_tokens": 50, "temperature": 0.0}
    assert server.headers_seen[0]["Authorization"] == "Bearer sk-test"


def test_retries_then_succeeds(server):
    [r] = model(server, max_retries=3).complete([req("500,429,500,ok")])
    assert r.error is None and r.text == "answer:500,429,500,ok"
    assert server.calls["500,429,500,ok"] == 4


def test_retry_after_is_honoured(server):
    t0 = time.monotonic()
    [r] = model(server, max_retries=2).complete([req("429ra,ok")])
    assert r.error is None
    assert time.monotonic() - t0 >= 0.95  # the server said 1 s; our own backoff is <= 0.05 s


def test_capped_retries_become_errors_without_losing_the_batch(server):
    batch = [req("500"), req("ok"), req("429"), req("hang"), req("sleep0.1", rid="slow-ok")]
    results = model(server, max_retries=2, timeout_s=0.5).complete(batch)
    assert [r.id for r in results] == ["500", "ok", "429", "hang", "slow-ok"]
    r500, rok, r429, rhang, rslow = results
    assert rok.text == "answer:ok" and rslow.text == "answer:sleep0.1"
    assert r500.text is None and "HTTP 500" in r500.error and "3 attempts" in r500.error
    assert "HTTP 429" in r429.error and "rate limited" in r429.error
    assert "timeout" in rhang.error
    assert server.calls["500"] == 3 and server.calls["429"] == 3 and server.calls["hang"] == 3
    assert sum(r.error is not None for r in results) == 3 and not any(r.cached for r in results)


def test_other_4xx_fail_at_once_with_the_servers_message(server):
    [r] = model(server, max_retries=3).complete([req("400")])
    assert r.error == "HTTP 400: schema is not supported"
    assert server.calls["400"] == 1


@pytest.mark.parametrize("step, words", [("garbage", "malformed response body"),
                                         ("nochoices", "no choices"),
                                         ("nullcontent", "no content (finish_reason=length)")])
def test_a_200_without_an_answer_is_an_error_result(server, step, words):
    [r] = model(server).complete([req(step)])
    assert r.text is None and words in r.error
    assert server.calls[step] == 1  # not retried: the server answered, just uselessly
    if step == "nochoices":
        assert r.tokens_in == 5  # the tokens were still paid for


def test_connection_refused_is_retried_then_reported(server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    m = OpenAIChatModel("m", f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_base_s=0.01)
    [r] = m.complete([req("ok")])
    assert "connection error" in r.error and "2 attempts" in r.error


def test_cache_hit_makes_no_http_call_and_errors_are_not_cached(server, tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    first = model(server, cache=cache).complete([req("ok"), req("400")])
    assert not first[0].cached and first[1].error
    calls = server.total_calls()
    # A fresh client over the same file, as another actor or the next run would be.
    again = model(server, cache=ResponseCache(tmp_path / "c.sqlite")).complete([req("ok"), req("400")])
    assert again[0].cached and again[0].text == "answer:ok"
    assert (again[0].tokens_in, again[0].tokens_out, again[0].finish_reason) == (11, 7, "stop")
    assert not again[1].cached and again[1].error  # the failure was asked again
    assert server.total_calls() == calls + 1
    assert server.calls["ok"] == 1


def test_cache_key_covers_the_request_parameters(server, tmp_path):
    m = model(server, cache=ResponseCache(tmp_path / "c.sqlite"))
    m.complete([req("ok")])
    [r] = m.complete([req("ok", max_tokens=51)])
    assert not r.cached and server.calls["ok"] == 2


def test_concurrency_limit_is_respected(server):
    batch = [req(f"sleep0.3,{i}", rid=str(i)) for i in range(9)]
    results = model(server, concurrency=3).complete(batch)
    assert all(r.error is None for r in results)
    assert server.max_inflight == 3  # parallel, but never beyond the limit


def test_results_keep_input_order(server):
    delays = [0.4, 0.0, 0.25, 0.05, 0.3, 0.1]
    batch = [req(f"sleep{d},{i}", rid=f"r{i}") for i, d in enumerate(delays)]
    results = model(server, concurrency=6).complete(batch)
    assert [r.id for r in results] == [f"r{i}" for i in range(len(delays))]
    assert [r.text for r in results] == [f"answer:sleep{d},{i}" for i, d in enumerate(delays)]


def test_openai_profile_sends_a_strict_schema_shaped_for_strict_mode(server):
    model(server, profile_name="openai").complete([req("ok", schema=SCHEMA)])
    body = server.bodies[0]
    shaped = {"title": "Extraction result", "type": "object",
              "properties": {"names": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
              "required": ["names"], "additionalProperties": False}
    assert body["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "Extraction_result", "schema": shaped, "strict": True}}
    assert body["max_completion_tokens"] == 50 and "max_tokens" not in body


def test_llama_cpp_profile_sends_json_object_with_the_schema_as_given(server):
    model(server, profile_name="llama_cpp").complete([req("ok", schema=SCHEMA)])
    assert server.bodies[0]["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert server.bodies[0]["max_tokens"] == 50


def test_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="unknown endpoint profile"):
        OpenAIChatModel("m", "http://127.0.0.1:1/v1", profile_name="vllm-ish")


def test_empty_batch(server):
    assert model(server).complete([]) == []
    assert server.total_calls() == 0


def test_acomplete_and_complete_inside_a_running_loop(server):
    m = model(server)

    async def main():
        direct = await m.acomplete([req("ok")])
        nested = m.complete([req("sleep0.01")])  # a loop runs here: complete must not fail
        return direct, nested

    direct, nested = asyncio.run(main())
    assert direct[0].text == "answer:ok" and nested[0].text == "answer:sleep0.01"


def test_each_answer_is_told_as_it_comes_cache_hits_included(server, tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    model(server, cache=cache).complete([req("ok")])  # "ok" is cached from here on
    told: list[tuple[int, str | None, bool]] = []

    async def each(i, res):
        told.append((i, res.text, res.cached))

    out = asyncio.run(model(server, cache=cache).acomplete([req("sleep0.2"), req("ok"), req("400")], each=each))
    # The hit first, then the fast failure, then the slow answer: as each was ready, not in order.
    assert [t[0] for t in told] == [1, 2, 0]
    assert told[0] == (1, "answer:ok", True) and told[2] == (0, "answer:sleep0.2", False)
    assert [r.text for r in out] == ["answer:sleep0.2", "answer:ok", None]


def test_an_each_that_raises_fails_the_batch(server):
    async def each(i, res):
        raise OSError("the shard could not be written")

    with pytest.raises(OSError, match="shard"):
        asyncio.run(model(server).acomplete([req("ok")], each=each))


def test_model_pickles_for_ray_actors(server, tmp_path):
    m = model(server, cache=ResponseCache(tmp_path / "c.sqlite"), api_key="sk-secret-123")
    m.complete([req("ok")])  # opens a cache connection in this process
    clone = pickle.loads(pickle.dumps(m))
    [r] = clone.complete([req("ok")])
    assert r.cached and r.text == "answer:ok"
    assert "sk-secret-123" not in repr(clone)  # reprs end up in logs


def test_a_passed_deadline_sends_nothing(server):
    from corpusgraph.llm.base import deadline

    with deadline(time.monotonic() - 1):
        [r] = model(server).complete([req("ok")])
    assert r.text is None and "deadline passed" in r.error and "not sent" in r.error
    assert "ok" not in server.calls


def test_a_deadline_stops_retrying_a_dead_endpoint(server):
    import socket

    from corpusgraph.llm.base import deadline

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the block ends
    # Without a deadline: 11 attempts with backoff windows up to 5 s, tens of seconds.
    m = OpenAIChatModel("m", f"http://127.0.0.1:{port}/v1", max_retries=10, backoff_base_s=1.0, backoff_max_s=5.0)
    t0 = time.monotonic()
    with deadline(time.monotonic() + 0.5):
        [r] = m.complete([req("ok")])
    assert time.monotonic() - t0 < 2.0
    assert "deadline passed" in r.error


def test_a_deadline_cuts_a_request_on_the_wire_and_returns_its_lease(server):
    from corpusgraph.llm.base import deadline

    m = model(server, timeout_s=10.0, concurrency=1)  # one slot: a lost lease would block the next call
    t0 = time.monotonic()
    with deadline(time.monotonic() + 0.3):
        [r] = m.complete([req("sleep2")])
    assert time.monotonic() - t0 < 1.5
    assert "deadline passed" in r.error and "on the wire" in r.error
    with deadline(time.monotonic() + 3.0):
        [again] = m.complete([req("ok")])  # the slot came back: the next call goes through
    assert again.text == "answer:ok"


class _SlowCache(ResponseCache):
    """A real SQLite cache whose commits take 50 ms and are recorded (one list of keys each)."""

    def __init__(self, path, fail: bool = False):
        super().__init__(path)
        self.commits: list[list[str]] = []
        self.fail = fail

    def put_many(self, values):
        time.sleep(0.05)
        if self.fail:
            raise OSError("disk full")
        super().put_many(values)
        self.commits.append(sorted(values))


def test_answers_go_into_the_cache_in_groups_and_are_durable_before_they_are_handed_on(tmp_path):
    from corpusgraph.llm.openai_http import _GroupPut

    cache = _SlowCache(tmp_path / "c.sqlite")
    seen: list[tuple[str, bool]] = []

    async def go():
        writer = _GroupPut(cache)

        async def one(k: str, delay: float):
            await asyncio.sleep(delay)
            await writer.put(k, {"text": k})
            seen.append((k, ResponseCache(tmp_path / "c.sqlite").get(k) is not None))  # committed when put returns

        await asyncio.gather(one("a", 0), *(one(k, 0.01) for k in "bcdef"), one("g", 0.2))

    asyncio.run(go())
    # "a" commits alone; b-f arrive during its commit and go in one transaction; "g" after both.
    assert cache.commits == [["a"], ["b", "c", "d", "e", "f"], ["g"]]
    assert all(durable for _, durable in seen) and len(seen) == 7


def test_a_failed_group_commit_fails_each_put_and_the_client_still_answers(server, tmp_path):
    from corpusgraph.llm.openai_http import _GroupPut

    async def go():
        writer = _GroupPut(_SlowCache(tmp_path / "c.sqlite", fail=True))
        return await asyncio.gather(*(writer.put(k, {}) for k in "ab"), return_exceptions=True)

    assert [type(e) for e in asyncio.run(go())] == [OSError, OSError]
    # Through the client: the answers come back uncached (to be paid again next run), not lost.
    out = model(server, cache=_SlowCache(tmp_path / "d.sqlite", fail=True)).complete([req("ok"), req("sleep0.01")])
    assert [r.text for r in out] == ["answer:ok", "answer:sleep0.01"] and not any(r.error for r in out)
    assert len(ResponseCache(tmp_path / "d.sqlite")) == 0


def test_a_cancelled_group_commit_leaves_no_put_waiting(tmp_path):
    from corpusgraph.llm.openai_http import _GroupPut

    async def go():
        writer = _GroupPut(_SlowCache(tmp_path / "c.sqlite"))
        puts = [asyncio.ensure_future(writer.put(k, {})) for k in "ab"]
        await asyncio.sleep(0.01)  # the first commit is under way
        writer.running.cancel()
        return await asyncio.wait_for(asyncio.gather(*puts, return_exceptions=True), timeout=5)

    assert [type(e) for e in asyncio.run(go())] == [RuntimeError, RuntimeError]


def test_the_environments_proxy_and_no_proxy_apply(server, monkeypatch):
    # The endpoint's host does not resolve: only the proxy from HTTP_PROXY can carry the call.
    hostport = server.base_url.split("//")[1].split("/")[0]
    monkeypatch.setenv("HTTP_PROXY", f"http://{hostport}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    far = OpenAIChatModel("m", "http://llm.invalid/v1", timeout_s=5.0, max_retries=0)
    first = far.complete([req("ok", rid="a"), req("ok", rid="b")])
    assert [(r.text, r.error) for r in first] == [("answer:ok", None)] * 2
    assert server.targets == ["http://llm.invalid/v1/chat/completions"] * 2
    # NO_PROXY names the host: the call goes direct, and fails to resolve it.
    monkeypatch.setenv("NO_PROXY", "llm.invalid")
    [r] = OpenAIChatModel("m", "http://llm.invalid/v1", timeout_s=5.0, max_retries=0).complete([req("ok", rid="c")])
    assert r.text is None and "connection error" in r.error
    assert len(server.targets) == 2


def test_a_netrc_login_is_sent_where_no_api_key_is(server, monkeypatch, tmp_path):
    host = server.base_url.split("//")[1].split(":")[0]
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine {host} login alice password s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert model(server).complete([req("ok", rid="a")])[0].error is None
    assert server.headers_seen[-1]["Authorization"] == "Basic YWxpY2U6czNjcmV0"  # alice:s3cret
    assert model(server, api_key="sk-test").complete([req("ok", rid="b")])[0].error is None
    assert server.headers_seen[-1]["Authorization"] == "Bearer sk-test"  # the key wins


def test_a_refusal_of_every_request_stops_the_client_sending_after_the_breaker(server):
    from corpusgraph.llm.openai_http import BREAKER_AFTER

    batch = [req(f"400,{i}", rid=str(i)) for i in range(BREAKER_AFTER + 12)]
    results = model(server, concurrency=1).complete(batch)
    assert server.total_calls() == BREAKER_AFTER  # the rest were never sent
    assert all(r.status == 400 and "schema is not supported" in r.error for r in results)
    assert sum(r.error.startswith("not sent: the endpoint refused the first") for r in results) == 12


def test_one_answer_keeps_the_breaker_closed(server):
    from corpusgraph.llm.openai_http import BREAKER_AFTER

    batch = [req("ok", rid="good")] + [req(f"400,{i}", rid=str(i)) for i in range(BREAKER_AFTER + 2)]
    results = model(server, concurrency=1).complete(batch)
    assert server.total_calls() == BREAKER_AFTER + 3 and results[0].error is None
