"""Streamed chat answers: the chunk reader on recorded bodies, and OpenAIChatModel.stream against
real HTTP servers on 127.0.0.1 (the fixed-latency answer server's streaming mode, and a small
scripted one for failures)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from aiohttp import web

from corpusgraph.llm.base import ChatRequest, deadline
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.openai_http import OpenAIChatModel
from corpusgraph.llm.sse_lines import ChunkReader
from corpusgraph.llm.streaming import CANCELLED, CancelToken, StreamingChatModel, cancellable
from tests.support.aio_thread import AppThread
from tests.support.fixed_latency_answer_server import TEXT_ANSWER, make_app

pytestmark = pytest.mark.unit


def chunk(content=None, finish=None, **extra) -> str:
    delta = {} if content is None else {"content": content}
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": delta, "finish_reason": finish}], **extra}) + "\n"


def read(lines) -> tuple[ChunkReader, list[str]]:
    reader, seen = ChunkReader(), []
    for line in lines:
        seen.extend(reader.feed(line))
    seen.extend(reader.close())
    return reader, seen


# -- the chunk reader, on bodies written here in each server's style ---------------------------------

def test_llama_cpp_style_body_with_pings_and_no_usage():
    body = [": ping - 2026-12-06 01:00:00\n", "\n",
            "data: " + json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}),
            "\n", chunk("Mara"), "\n", ": ping\n", chunk(" Voss"), "\n", chunk(None, "stop"), "\n",
            "data: [DONE]\n", "\n"]
    reader, seen = read(body)
    assert seen == ["Mara", " Voss"] and reader.text == "Mara Voss"
    assert reader.done and reader.finish_reason == "stop" and reader.usage is None and reader.error is None


def test_openai_style_body_with_a_usage_chunk_before_done_and_crlf_endings():
    usage = {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}
    body = [chunk("A", usage=None).replace("\n", "\r\n"), "\r\n", chunk("B", "stop").replace("\n", "\r\n"), "\r\n",
            "data: " + json.dumps({"choices": [], "usage": usage}) + "\r\n", "\r\n", "data: [DONE]\r\n"]
    reader, seen = read(body)
    assert seen == ["A", "B"] and reader.usage == {"prompt_tokens": 12, "completion_tokens": 2} and reader.done


def test_an_error_object_mid_stream_is_the_results_error_and_text_so_far_is_kept():
    reader, seen = read([chunk("half"), "\n", 'data: {"error": {"message": "model overloaded", "code": 503}}\n'])
    assert seen == ["half"] and reader.error == "the server reported an error mid-stream: model overloaded"


def test_data_split_over_lines_joins_and_garbage_is_an_error():
    payload = json.dumps({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]})
    cut = payload.index('"delta"')
    reader, seen = read([f"data: {payload[:cut]}\n", f"data: {payload[cut:]}\n", "\n", "data: [DONE]\n"])
    assert seen == ["x"] and reader.done
    bad, _ = read(["data: {not json\n", "\n"])
    assert bad.error.startswith("malformed stream chunk") and bad.text == ""


def test_nothing_after_done_counts():
    reader, seen = read([chunk("a", "stop"), "data: [DONE]\n", chunk("b")])
    assert seen == ["a"] and reader.text == "a"


# -- the client against the fixed-latency server's streaming mode ----------------------------------

REQ = ChatRequest(id="q", messages=({"role": "user", "content": "Who founded the guild?"},), max_tokens=64)


def model(url: str, **kw) -> OpenAIChatModel:
    return OpenAIChatModel("bench", url, max_retries=2, backoff_base_s=0.01, backoff_max_s=0.02, **kw)


def test_pieces_arrive_in_order_before_the_result_and_usage_is_the_servers():
    with AppThread(make_app(slots=4, latency_s=0.01, stream_pieces=6, piece_interval_s=0.005)) as server:
        chat = model(server.base_url)
        assert isinstance(chat, StreamingChatModel)
        seen: list[str] = []
        result = chat.stream(REQ, seen.append)
    assert len(seen) == 6 and "".join(seen) == result.text == TEXT_ANSWER
    assert result.error is None and result.finish_reason == "stop" and not result.usage_estimated
    assert result.tokens_in == len(REQ.messages[0]["content"]) // 4 + 1 and result.ttft_s is not None


def test_without_a_usage_chunk_tokens_are_counted_here_and_marked_estimated():
    from corpusgraph.tokens import count_tokens

    with AppThread(make_app(slots=4, latency_s=0.01, stream_usage=False)) as server:
        result = model(server.base_url).stream(REQ, lambda piece: None)
    assert result.usage_estimated and result.tokens_out == count_tokens(TEXT_ANSWER)
    assert result.tokens_in == count_tokens(REQ.messages[0]["content"])


def test_a_cached_answer_is_one_piece_and_streamed_and_plain_calls_share_the_cache(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    with AppThread(make_app(slots=4, latency_s=0.01)) as server:
        chat = model(server.base_url, cache=cache)
        first = chat.stream(REQ, lambda piece: None)
        seen: list[str] = []
        again = chat.stream(REQ, seen.append)
        plain = chat.complete([REQ])[0]
    assert not first.cached and again.cached and plain.cached
    assert seen == [TEXT_ANSWER] and again.text == plain.text == TEXT_ANSWER


def test_cancelling_mid_stream_closes_the_connection_and_caches_nothing(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    app = make_app(slots=4, latency_s=0.01, stream_pieces=50, piece_interval_s=0.02)
    with AppThread(app) as server:
        chat = model(server.base_url, cache=cache)
        token = CancelToken()
        seen: list[str] = []

        def on_delta(piece: str) -> None:
            seen.append(piece)
            if len(seen) == 2:
                token.cancel()

        with cancellable(token):
            result = chat.stream(REQ, on_delta)
        stats = _stats(server)
        for _ in range(100):  # the server notices the closed socket at its next write
            if stats["disconnected"]:
                break
            threading.Event().wait(0.02)
            stats = _stats(server)
    assert result.error == CANCELLED and result.text == "".join(seen) and len(seen) == 2
    assert stats["disconnected"] == 1 and stats["streams"] == 1
    assert cache.get_many([chat._key(REQ)]) == {}


def test_an_already_cancelled_token_sends_nothing():
    app, bodies = scripted_app(["ok"])
    token = CancelToken()
    token.cancel()
    with AppThread(app) as server, cancellable(token):
        result = model(server.base_url).stream(REQ, lambda p: None)
    assert bodies == [] and result.error == CANCELLED and result.text is None


def _stats(server: AppThread) -> dict:
    import urllib.request

    with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/stats", timeout=10) as r:
        return json.loads(r.read())


# -- failures, from a scripted server ----------------------------------------------------------------

def scripted_app(plan: list[str]) -> tuple[web.Application, list[dict]]:
    """Each call plays the next step: "503", "400-options" (refuses stream_options), "break" (two
    pieces, then the connection drops), "ok"; the last step repeats."""
    bodies: list[dict] = []

    async def chat(request: web.Request):
        body = await request.json()
        bodies.append(body)
        step = plan[min(len(bodies) - 1, len(plan) - 1)]
        if step == "503":
            return web.json_response({"error": {"message": "busy"}}, status=503)
        if step == "400-options":
            if "stream_options" in body:
                return web.json_response({"error": {"message": "Unrecognized request argument: stream_options"}},
                                         status=400)
            step = "ok"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in ("one ", "two"):
            await resp.write(chunk(piece).encode() + b"\n")
        if step == "break":
            request.transport.close()
            return resp
        await resp.write(chunk(None, "stop").encode() + b"\ndata: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app, bodies


def test_a_503_before_the_first_piece_is_retried():
    app, bodies = scripted_app(["503", "ok"])
    with AppThread(app) as server:
        result = model(server.base_url).stream(REQ, lambda p: None)
    assert result.error is None and result.text == "one two" and len(bodies) == 2


def test_a_stream_broken_after_pieces_is_not_retried_and_keeps_its_text():
    app, bodies = scripted_app(["break", "ok"])
    with AppThread(app) as server:
        seen: list[str] = []
        result = model(server.base_url).stream(REQ, seen.append)
    assert len(bodies) == 1 and seen == ["one ", "two"] and result.text == "one two"
    assert result.error and "stream" in result.error


def test_a_server_refusing_stream_options_is_asked_again_without_them():
    app, bodies = scripted_app(["400-options"])
    with AppThread(app) as server:
        chat = model(server.base_url)
        result = chat.stream(REQ, lambda p: None)
        chat.stream(ChatRequest(id="2", messages=REQ.messages, max_tokens=8), lambda p: None)
    assert result.error is None and result.usage_estimated
    assert ["stream_options" in b for b in bodies] == [True, False, False]


def test_a_passed_deadline_sends_nothing():
    app, bodies = scripted_app(["ok"])
    import time

    with AppThread(app) as server, deadline(time.monotonic() - 1):
        result = model(server.base_url).stream(REQ, lambda p: None)
    assert bodies == [] and result.error.startswith("the caller's deadline passed")


def test_stream_inside_a_running_loop():
    with AppThread(make_app(slots=2, latency_s=0.01)) as server:
        chat = model(server.base_url)

        async def inside():
            return chat.stream(REQ, lambda p: None)

        assert asyncio.run(inside()).text == TEXT_ANSWER
