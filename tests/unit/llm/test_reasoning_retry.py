"""A reasoning model whose hidden reasoning spends its whole answer limit answers with nothing and
finish_reason "length" (OpenAI's reasoning guide). The client sends such a request once more with
llm.reasoning_retry_tokens and counts both calls' tokens; a model that is not a reasoning one, or
a limit already that wide, is not sent again; the Batch API client sends such lines again in a
batch of their own, once. Against the conformance server (which refuses what OpenAI refuses and
spends --reasoning-tokens before each answer of a reasoning model, a Batch API line's too) and,
for streamed answers, a scripted SSE server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from corpusgraph.config import load_config
from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.llm.factory import open_chat_model
from corpusgraph.llm.profiles import profile
from corpusgraph.llm.shape import RequestShaper
from tests.conftest import REPO
from tests.support.aio_thread import AppThread
from tests.support.provider_server import ProviderServer

pytestmark = pytest.mark.unit

KEY = "sk-reasoning-1234"
HIDDEN = 3_000  # more than the first limit (answer tokens + the 2,048 budget), less than the retry's
REQ = ChatRequest(id="q1", messages=({"role": "user", "content": "Who founded the Lumen Guild?"},), max_tokens=64)


def _model(tmp_path, url, model="o3", **over):
    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.cache_dir": str(tmp_path / "cache"), "llm.backend": "openai", "llm.api_base": url,
        "llm.api_key": KEY, "llm.model": model, "llm.profile": "openai", "llm.max_retries": "0",
        **{k: str(v) for k, v in over.items()}})
    return open_chat_model(cfg.llm, tmp_path / "cache")


@pytest.fixture(scope="module")
def server():
    with ProviderServer("openai", "--key", KEY, "--models", "o3,gpt-test", "--reasoning-models", "o3",
                        "--reasoning-tokens", str(HIDDEN)) as srv:
        yield srv


def test_an_answer_cut_to_nothing_by_reasoning_is_sent_again_wider_and_both_calls_are_counted(tmp_path, server):
    before = server.stats()["requests"]
    (got,) = _model(tmp_path, server.base_url).complete([REQ])
    assert got.error is None and got.text and got.widened
    assert server.stats()["requests"] - before == 2 and server.stats()["refused"] == 0
    # The first call spent its whole limit (64 + 2,048) on reasoning; the second its reasoning and the answer.
    assert got.tokens_out > 64 + 2048 + HIDDEN


def test_without_a_retry_limit_the_cut_answer_is_an_error_naming_the_fix(tmp_path, server):
    from corpusgraph.llm.fixes import fix_for

    before = server.stats()["requests"]
    (got,) = _model(tmp_path, server.base_url, **{"llm.reasoning_retry_tokens": 0}).complete([REQ])
    assert got.text is None and got.error_code == "empty" and got.finish_reason == "length" and not got.widened
    assert server.stats()["requests"] - before == 1
    assert "reasoning_retry_tokens" in fix_for(None, got.error_code, None, got.error)


def test_a_wide_enough_first_limit_needs_one_call(tmp_path, server):
    before = server.stats()["requests"]
    (got,) = _model(tmp_path, server.base_url, **{"llm.reasoning_budget_tokens": HIDDEN + 500}).complete([REQ])
    assert got.error is None and got.text and not got.widened and server.stats()["requests"] - before == 1


def test_only_a_reasoning_models_empty_answer_cut_by_its_limit_is_widened():
    shaper = RequestShaper(profile("openai"), "o3", reasoning=True, reasoning_budget_tokens=100,
                           reasoning_retry_tokens=1000)
    cut = ChatResult(id="x", text=None, error="response has no content (finish_reason=length)", error_code="empty",
                     finish_reason="length")
    assert shaper.widens(cut, 50) and shaper.body(REQ, widened=True)["max_completion_tokens"] == 1000
    assert shaper.body(REQ)["max_completion_tokens"] == 64 + 100
    assert not shaper.widens(ChatResult(id="x", text=None, error="e", error_code="empty", finish_reason="stop"), 50)
    assert not shaper.widens(cut, 950)  # 950 + 100 already covers the retry's limit
    plain = RequestShaper(profile("openai"), "gpt-test", reasoning_budget_tokens=100, reasoning_retry_tokens=1000)
    assert not plain.widens(cut, 50) and plain.body(REQ, widened=True)["max_completion_tokens"] == 64


def _sse_app(limits: list[int]):
    """Streams an empty answer cut by its limit below HIDDEN tokens, else a short answer."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        limit = int(body.get("max_completion_tokens") or 0)
        limits.append(limit)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        def chunk(delta: dict, finish=None) -> bytes:
            return ("data: " + json.dumps({"object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n").encode()

        if limit < HIDDEN:
            await resp.write(chunk({"role": "assistant", "content": ""}) + chunk({}, "length"))
            usage = {"prompt_tokens": 10, "completion_tokens": limit, "total_tokens": 10 + limit}
        else:
            await resp.write(chunk({"role": "assistant", "content": "Mara"}) + chunk({"content": " Voss"}, "stop"))
            usage = {"prompt_tokens": 10, "completion_tokens": HIDDEN + 2, "total_tokens": HIDDEN + 12}
        await resp.write(("data: " + json.dumps({"choices": [], "usage": usage}) + "\n\ndata: [DONE]\n\n").encode())
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def test_a_streamed_answer_cut_before_its_first_piece_is_streamed_again_wider(tmp_path):
    limits: list[int] = []
    with AppThread(_sse_app(limits)) as server:
        chat = _model(tmp_path, server.base_url, **{"llm.cache": "false"})
        seen: list[str] = []
        got = chat.stream(REQ, seen.append)
    assert limits == [64 + 2048, 25_000] and "".join(seen) == got.text == "Mara Voss" and got.widened
    assert got.tokens_out == 64 + 2048 + HIDDEN + 2


def _batch_model(tmp_path, url, **over):
    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.cache_dir": str(tmp_path / "cache"), "llm.backend": "openai_batch", "llm.api_base": url,
        "llm.api_key": KEY, "llm.model": "o3", "llm.profile": "openai", "llm.max_retries": "0",
        "llm.batch.poll_s": "0.2", **{k: str(v) for k, v in over.items()}})
    return open_chat_model(cfg.llm, tmp_path / "cache", batch=True)


def _batch_records(tmp_path) -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in (tmp_path / "cache" / "batches").glob("batch-*.json")),
                  key=lambda r: r["created"])


def test_a_batch_line_cut_to_nothing_goes_again_in_a_wider_batch_and_both_lines_are_counted(tmp_path, server):
    before = server.stats()
    (got,) = _batch_model(tmp_path, server.base_url).complete([REQ])
    after = server.stats()
    assert got.error is None and got.text and got.widened
    assert got.tokens_out > 64 + 2048 + HIDDEN  # the cut line's limit, and the second's reasoning and answer
    assert after["requests"] - before["requests"] == 2 and after["refused"] == before["refused"]
    first, second = _batch_records(tmp_path)
    assert first["keys"] == second["keys"] and not first.get("widened") and second["widened"]


def test_a_batch_line_still_cut_when_wider_is_an_error_and_is_not_sent_a_third_time(tmp_path, server):
    # Wider than the first limit (64 + 2,048), still short of the hidden reasoning and the answer.
    (got,) = _batch_model(tmp_path, server.base_url, **{"llm.reasoning_retry_tokens": HIDDEN}).complete([REQ])
    assert got.text is None and got.error_code == "empty" and got.finish_reason == "length" and got.widened
    assert len(_batch_records(tmp_path)) == 2
