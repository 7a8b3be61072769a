"""Streaming one chat answer from an OpenAI-compatible endpoint (`OpenAIChatModel.stream`).

The request is the client's own body plus `stream: true`, sent under the same limits (the
EndpointPool lease, the tokens-per-minute charge), deadline and response cache as `complete`,
so a streamed and a plain call of one request share their cached answer. What differs:

- the body is read line by line (llm/sse_lines.py) and each piece of text is handed to
  `on_delta` as it comes;
- a failure is retried only before the first piece (a retry after it would repeat text the
  caller has already shown); after it, the pieces so far come back with `error` set;
- `stream_options.include_usage` asks for the usage chunk; a server that sends none
  (llama-cpp-python's never does) gets its tokens counted here and the result marked
  `usage_estimated`; one that refuses the option (400 naming it) is asked again without it, and
  the client stops sending it;
- the call races the caller's CancelToken (llm/streaming.py): once it fires, the connection is
  closed, which is how a streaming server learns to stop generating.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import aiohttp

from corpusgraph.llm.base import ChatRequest, ChatResult, seconds_left
from corpusgraph.llm.chat_cache import from_stored, lookup, stored
from corpusgraph.llm.endpoints import estimate_tokens
from corpusgraph.llm.http_common import Fatal, Reply, Retryable, retry_after, run_blocking, server_message
from corpusgraph.llm.shape import after_widening
from corpusgraph.llm.sse_lines import ChunkReader
from corpusgraph.llm.streaming import CANCELLED, Cancelled, StreamedResult, current_cancel, race_cancel
from corpusgraph.tokens import count_tokens

__all__ = ["stream_chat", "astream_chat", "open_stream"]

_PAST_DEADLINE = "the caller's deadline passed (llm.base.deadline)"

Delta = Callable[[str], None]


@asynccontextmanager
async def open_stream(client: aiohttp.ClientSession, url: str, body: dict[str, Any], timeout_s: float,
                      headers: dict[str, str] | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
    """POST `body` and yield the 200 response to read line by line; Retryable / Fatal as
    http_common.post classifies them (429, 5xx and transport failures retried, other 4xx not).
    Left early (an exception, a cancel), the connection is closed rather than reused."""
    try:
        resp = await client.post(url, json=body, allow_redirects=False, headers=headers)
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        raise _transport(exc, timeout_s) from exc
    finished = False
    try:
        if resp.status != 200:
            reply = Reply(resp.status, await resp.read(), resp.headers, resp.reason or "")
            if resp.status == 429 or resp.status >= 500:
                raise Retryable(f"HTTP {resp.status}: {server_message(reply)}", retry_after(reply))
            raise Fatal(f"HTTP {resp.status}: {server_message(reply)}")
        yield resp
        finished = True
    finally:
        if finished:
            resp.release()
        else:
            resp.close()


def _transport(exc: BaseException, timeout_s: float) -> Retryable:
    """A transport failure as http_common.post words it."""
    if isinstance(exc, (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError)):
        return Retryable(f"connection error: {type(exc).__name__}: {exc}", unreachable=True)
    if isinstance(exc, asyncio.TimeoutError):
        return Retryable(f"timeout after {timeout_s:g}s ({type(exc).__name__})", used_tokens=None)
    return Retryable(f"connection error: {type(exc).__name__}: {exc}", used_tokens=None)


@dataclass
class _Progress:
    """What the caller has been shown so far, across attempts."""

    on_delta: Delta
    began: float
    pieces: list[str] = field(default_factory=list)
    ttft_s: float | None = None

    def piece(self, text: str) -> None:
        if self.ttft_s is None:
            self.ttft_s = time.monotonic() - self.began
        self.pieces.append(text)
        try:
            self.on_delta(text)
        except Exception:  # a caller's sink must not cost the answer
            pass

    def result(self, req: ChatRequest, error: str) -> StreamedResult:
        text = "".join(self.pieces) or None
        return StreamedResult(id=req.id, text=text, error=error, ttft_s=self.ttft_s, usage_estimated=True,
                              tokens_in=_prompt_tokens(req) if text else 0, tokens_out=count_tokens(text or ""))


def _prompt_tokens(req: ChatRequest) -> int:
    return sum(count_tokens(m.get("content") or "") for m in req.messages)


def stream_chat(model, req: ChatRequest, on_delta: Delta) -> ChatResult:
    """Blocking `astream_chat`; runs its own event loop (on a thread of its own inside a running one)."""
    return run_blocking(lambda: astream_chat(model, req, on_delta), "corpusgraph-llm-stream")


async def astream_chat(model, req: ChatRequest, on_delta: Delta) -> ChatResult:
    """One request of `model` (an OpenAIChatModel) streamed: pieces to `on_delta`, the whole
    result returned. A cached answer is one piece and costs nothing."""
    key = model._key(req)
    if model.cache is not None:
        hits = await asyncio.to_thread(lookup, model.cache, [key])
        if key in hits:
            cached = from_stored(req, hits[key])
            if cached.text:
                on_delta(cached.text)
            return cached
    progress = _Progress(on_delta, time.monotonic())
    clients = model._http.enter(model._new_client)
    try:
        result = await race_cancel(_with_retries(model, clients, req, progress), current_cancel())
        shaper = getattr(model, "shaper", None)
        if shaper is not None and not progress.pieces and shaper.widens(result, req.max_tokens):
            # Nothing was shown: the hidden reasoning took the whole limit. Once more, wider.
            second = await race_cancel(_with_retries(model, clients, req, progress, widened=True), current_cancel())
            result = after_widening(result, second)
    except Cancelled:
        result = progress.result(req, CANCELLED)
    finally:
        await model._http.exit(clients)
    result.seconds = time.monotonic() - progress.began
    if result.error is None and model.cache is not None:
        try:
            await asyncio.to_thread(model.cache.put, key, stored(result))
        except Exception:
            pass  # the answer is still good; it is paid for again next time
    return result


async def _within(awaitable, left: float | None):
    return await (awaitable if left is None else asyncio.wait_for(awaitable, max(left, 0.0)))


def _chat_url(model, base_url: str) -> str:
    # A client that names its endpoints' chat URLs itself (Azure deployments) keeps them in _chat_urls.
    urls = getattr(model, "_chat_urls", None) or {}
    return urls.get(base_url) or f"{base_url}/chat/completions"


async def _request_headers(model) -> dict[str, str] | None:
    # A client with per-request credentials (an Entra ID token) gives them through _auth().
    auth = getattr(model, "_auth", None)
    return await auth() if auth is not None else None


async def _with_retries(model, clients, req: ChatRequest, progress: _Progress, widened: bool = False) -> ChatResult:
    body = {**model._body(req, widened), "stream": True}
    if getattr(model, "stream_usage", True):
        body["stream_options"] = {"include_usage": True}
    cost = estimate_tokens(req.messages, req.max_tokens, model._schema_chars(req.json_schema))
    attempts = model.max_retries + 1
    attempt = 0
    while True:
        left = seconds_left()
        if left is not None and left <= 0:
            return progress.result(req, _PAST_DEADLINE + (f" after {attempt} attempts" if attempt else "; not sent"))
        stage = "waiting for an endpoint"
        try:
            lease = await _within(model.pool.acquire(cost), seconds_left())
            stage = "with the request on the wire"
            client = clients.get(lease.url, lease.slot)
            return await _within(_attempt(model, client, lease, req, body, progress), seconds_left())
        except asyncio.TimeoutError:
            return progress.result(req, f"{_PAST_DEADLINE} {stage}")
        except Fatal as exc:
            if "stream_options" in body and not progress.pieces and "stream_options" in str(exc):
                model.stream_usage = False  # this server refuses the option: usage is counted here
                body.pop("stream_options")
                continue
            return progress.result(req, str(exc))
        except Retryable as exc:
            if progress.pieces:  # a retry would repeat what the caller has already shown
                return progress.result(req, f"{exc} (the stream broke after {len(progress.pieces)} pieces)")
            attempt += 1
            if attempt >= attempts:
                return progress.result(req, f"{exc} (gave up after {attempts} attempts)")
            if exc.unreachable and model.pool.any_healthy():
                continue
            delay = model._delay(attempt - 1, exc.wait_s)
            left = seconds_left()
            await asyncio.sleep(delay if left is None else max(0.0, min(delay, left)))


async def _attempt(model, client, lease, req: ChatRequest, body: dict[str, Any], progress: _Progress) -> ChatResult:
    """One streamed attempt on the leased endpoint; the lease goes back with what it cost."""
    used: int | None = None
    reachable = True
    try:
        reader = ChunkReader()
        async with open_stream(client, _chat_url(model, lease.url), body, model.timeout_s,
                               await _request_headers(model)) as resp:
            try:
                async for line in resp.content:
                    for piece in reader.feed(line):
                        progress.piece(piece)
                    if reader.done or reader.error:
                        break
                for piece in reader.close():
                    progress.piece(piece)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                raise _transport(exc, model.timeout_s) from exc
        result = _result(req, reader, progress)
        used = (result.tokens_in + result.tokens_out) or None
        return result
    except Retryable as exc:
        used, reachable = exc.used_tokens, not exc.unreachable
        raise
    except Fatal:
        used = 0  # refused before the model ran
        raise
    finally:
        model.pool.release(lease, used, reachable)


def _result(req: ChatRequest, reader: ChunkReader, progress: _Progress) -> StreamedResult:
    text = "".join(progress.pieces)
    error = reader.error
    if error is None and not reader.done and reader.finish_reason is None:
        error = "the stream ended before the answer did (no finish_reason, no [DONE])"
    code = None
    if error is None and not text:
        error, code = f"response has no content (finish_reason={reader.finish_reason})", "empty"
    if reader.usage is not None:
        tokens_in, tokens_out, estimated = reader.usage["prompt_tokens"], reader.usage["completion_tokens"], False
    else:
        tokens_in, tokens_out, estimated = _prompt_tokens(req), count_tokens(text), True
    return StreamedResult(id=req.id, text=text or None, tokens_in=tokens_in, tokens_out=tokens_out,
                          finish_reason=reader.finish_reason, error=error, error_code=code,
                          usage_estimated=estimated, ttft_s=progress.ttft_s)
