"""EndpointPool: least-loaded choice, per-endpoint caps, the token bucket, failover.

Pool-level tests drive `acquire`/`release` directly (the bucket on a fake clock, so nothing
depends on wall time); the rest send real requests through OpenAIChatModel to small HTTP
servers on 127.0.0.1 that record how many requests they held at once.
"""

import asyncio
import json
import pickle
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from corpusgraph.config import ConfigError, LLMSection, load_config
from corpusgraph.llm.base import ChatRequest
from corpusgraph.llm.connections import SLOTS_PER_CLIENT
from corpusgraph.llm.endpoints import EndpointPool, TokenBucket, estimate_tokens
from corpusgraph.llm.factory import open_chat_model
from corpusgraph.llm.openai_http import OpenAIChatModel

pytestmark = pytest.mark.unit


# -- servers -------------------------------------------------------------------------------------
class SlowServer(ThreadingHTTPServer):
    """Answers every chat request after `delay_s`, counting calls and the most held at once."""

    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 would drop simultaneous connects (1 s SYN retry)

    def __init__(self, delay_s=0.15):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.calls = 0
        self.inflight = 0
        self.max_inflight = 0

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        srv: SlowServer = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.calls += 1
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
        try:
            time.sleep(srv.delay_s)
        finally:
            with srv.lock:
                srv.inflight -= 1
        data = json.dumps({
            "choices": [{"finish_reason": "stop",
                         "message": {"role": "assistant", "content": "re:" + body["messages"][-1]["content"]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def servers():
    made = []

    def make(n, delay_s=0.15):
        for _ in range(n):
            srv = SlowServer(delay_s)
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            made.append(srv)
        return made[-n:]

    yield make
    for srv in made:
        srv.shutdown()
        srv.server_close()


def dead_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    return f"http://127.0.0.1:{port}/v1"


def reqs(n, prefix="q"):
    return [ChatRequest(id=f"{prefix}{i}", messages=({"role": "user", "content": f"{prefix}{i}"},), max_tokens=8)
            for i in range(n)]


def model(urls, **kw):
    kw.setdefault("backoff_base_s", 0.01)
    kw.setdefault("backoff_max_s", 0.05)
    kw.setdefault("timeout_s", 5.0)
    return OpenAIChatModel("m", urls, **kw)


class FakeTime:
    """A clock that moves only when the pool sleeps on it."""

    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def clock(self):
        return self.now

    async def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


# -- choosing ------------------------------------------------------------------------------------
def test_least_loaded_endpoint_wins_and_ties_go_round_robin():
    async def main():
        pool = EndpointPool(["http://a/v1", "http://b/v1", "http://c/v1"], max_in_flight=10)
        first = [await pool.acquire() for _ in range(3)]
        assert [l.url for l in first] == ["http://a/v1", "http://b/v1", "http://c/v1"]
        pool.release(first[1])
        assert (await pool.acquire()).url == "http://b/v1"  # the only one with nothing in flight
        # All three hold one now: the tie goes on round the ring after b.
        assert (await pool.acquire()).url == "http://c/v1"
        assert pool.in_flight == 4

    asyncio.run(main())


def test_requests_spread_over_endpoints(servers):
    a, b = servers(2)
    results = model([a.base_url, b.base_url], concurrency=4).complete(reqs(12))
    assert all(r.error is None for r in results)
    assert [r.text for r in results] == [f"re:q{i}" for i in range(12)]
    assert a.calls + b.calls == 12 and a.calls >= 4 and b.calls >= 4


def test_per_endpoint_cap_is_respected(servers):
    a, b = servers(2)
    m = model([a.base_url, b.base_url], concurrency=8, max_in_flight_per_endpoint=2)
    results = m.complete(reqs(12))
    assert all(r.error is None for r in results)
    assert a.max_inflight == 2 and b.max_inflight == 2  # busy, but never beyond the cap


def test_overlapping_batches_and_threads_share_one_concurrency_limit(servers):
    [a] = servers(1)
    m = model(a.base_url, concurrency=3)

    async def two_batches():  # what the async Ray actor does: batches overlap on one loop
        return await asyncio.gather(m.acomplete(reqs(6, "x")), m.acomplete(reqs(6, "y")))

    first, second = asyncio.run(two_batches())
    threads = [threading.Thread(target=m.complete, args=(reqs(6, f"t{k}"),)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.error is None for r in first + second)
    assert a.calls == 12 + 18
    assert a.max_inflight == 3  # per instance, not per batch or per thread
    assert m.pool.in_flight == 0


def test_concurrency_above_one_client_shard_is_reached(servers):
    [a] = servers(1, delay_s=0.5)
    m = model(a.base_url, concurrency=2 * SLOTS_PER_CLIENT + 3)  # spans three httpx clients
    results = m.complete(reqs(2 * (2 * SLOTS_PER_CLIENT + 3)))
    assert all(r.error is None for r in results)
    assert a.max_inflight == 2 * SLOTS_PER_CLIENT + 3
    assert m._http._sets == {}  # the loop's clients were closed with its last batch


# -- tokens per minute ---------------------------------------------------------------------------
def test_token_bucket_holds_back_a_request_that_would_exceed_the_budget():
    t = FakeTime()
    order = []

    async def main():
        # 600 tokens a minute = 10 a second.
        pool = EndpointPool(["http://a/v1"], max_in_flight=10, tokens_per_minute=600, clock=t.clock, sleep=t.sleep)
        first = await pool.acquire(500)
        order.append(("first", t.now))

        async def second():
            lease = await pool.acquire(500)  # 100 left: 400 more take 40 s to refill
            order.append(("second", t.now))
            return lease

        await second()
        assert first.charged == 500

    asyncio.run(main())
    assert order == [("first", 0.0), ("second", pytest.approx(40.0))]
    assert t.sleeps == [pytest.approx(40.0)]


def test_reported_usage_refunds_the_estimate():
    t = FakeTime()

    async def main():
        pool = EndpointPool(["http://a/v1"], max_in_flight=10, tokens_per_minute=600, clock=t.clock, sleep=t.sleep)
        first = await pool.acquire(500)
        pool.release(first, used_tokens=100)  # the answer was short: 400 come back
        await pool.acquire(500)

    asyncio.run(main())
    assert t.sleeps == [] and t.now == 0.0  # no wait at all


def test_a_request_larger_than_the_budget_still_goes_once_the_bucket_is_full():
    bucket = TokenBucket(600, now=0.0)
    assert bucket.wait_s(5000, now=0.0) == 0.0
    assert bucket.take(5000, now=0.0) == 600
    assert bucket.wait_s(5000, now=0.0) == pytest.approx(60.0)


def test_estimate_counts_prompt_and_answer_budget():
    msgs = ({"role": "system", "content": "x" * 400}, {"role": "user", "content": "y" * 40})
    assert estimate_tokens(msgs, max_tokens=500) == 110 + 8 + 500


def test_model_charges_the_estimate_and_settles_on_reported_usage(servers):
    [a] = servers(1, delay_s=0.0)
    m = model(a.base_url, concurrency=4)
    # A clock that never moves: the bucket refills nothing, so its level is pure accounting.
    m.pool = EndpointPool([a.base_url], max_in_flight=4, tokens_per_minute=1000, clock=lambda: 0.0)
    assert all(r.error is None for r in m.complete(reqs(8)))
    assert m.pool.endpoints[0].bucket.level == 1000 - 8 * 5  # the server reported 3 + 2 each


# -- failover ------------------------------------------------------------------------------------
def test_dead_endpoint_is_avoided_and_no_result_is_lost(servers):
    [live] = servers(1, delay_s=0.05)
    m = model([dead_url(), live.base_url], concurrency=4, max_retries=2)
    results = m.complete(reqs(10))
    assert [r.id for r in results] == [f"q{i}" for i in range(10)]
    assert all(r.error is None for r in results)
    assert live.calls == 10
    dead, _ = m.pool.endpoints
    assert dead.failures >= 1 and dead.cool_until > 0  # cooling: traffic went to the live one
    assert m.pool.in_flight == 0


def test_every_endpoint_dead_gives_error_results_not_a_hang():
    m = model([dead_url(), dead_url()], concurrency=2, max_retries=1)
    results = m.complete(reqs(3))
    assert all(r.text is None and "connection error" in r.error for r in results)


def test_a_cancelled_waiter_passes_its_wake_up_on():
    async def main():
        pool = EndpointPool(["http://a/v1"], max_in_flight=1)
        held = await pool.acquire()
        b = asyncio.create_task(pool.acquire())
        c = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)  # both now wait
        pool.release(held)  # wakes b ...
        b.cancel()  # ... which leaves before it runs: c must get the slot instead
        lease = await asyncio.wait_for(c, timeout=5)  # a guard against hanging, not a speed check
        assert lease.url == "http://a/v1" and pool.in_flight == 1

    asyncio.run(main())


def test_pool_pickles_without_its_live_state():
    async def hold(pool):
        return await pool.acquire()

    pool = EndpointPool(["http://a/v1", "http://b/v1"], max_in_flight=2, max_in_flight_per_endpoint=1,
                        tokens_per_minute=1000)
    asyncio.run(hold(pool))
    clone = pickle.loads(pickle.dumps(pool))
    assert clone.in_flight == 0 and clone.urls == pool.urls
    assert clone.per_endpoint == 1 and clone.endpoints[0].bucket.capacity == 1000


# -- configuration -------------------------------------------------------------------------------
def test_api_bases_reach_the_client_and_api_base_stays_a_shorthand(tmp_path):
    llm = LLMSection(backend="openai", api_bases=["http://n1:8000/v1", "http://n2:8000/v1"],
                     max_in_flight_per_endpoint=32, tokens_per_minute=200_000)
    m = open_chat_model(llm, tmp_path)
    assert m.base_urls == ["http://n1:8000/v1", "http://n2:8000/v1"]
    assert m.pool.per_endpoint == 32 and m.pool.endpoints[1].bucket.capacity == 200_000
    one = open_chat_model(LLMSection(backend="openai", api_base="http://solo/v1"), tmp_path)
    assert one.base_urls == ["http://solo/v1"] and one.base_url == "http://solo/v1"
    override = open_chat_model(llm, tmp_path, base_url="http://other/v1")
    assert override.base_urls == ["http://other/v1"]


def test_api_base_and_api_bases_together_are_refused():
    with pytest.raises(ConfigError, match="not both"):
        load_config(overrides={"llm.api_base": "http://a/v1", "llm.api_bases": "[http://b/v1]"})
    with pytest.raises(ConfigError, match="distinct"):
        load_config(overrides={"llm.api_bases": "[http://b/v1, http://b/v1]"})
