"""A ChatModel for any OpenAI-compatible chat endpoint (vllm serve, OpenAI, llama.cpp, Ollama).

The retry, backoff and caching policy of a chat request lives here and in http_common.py
(shared with the embeddings client), nowhere else; where each attempt goes and when it may go
(concurrency, per-endpoint limits, tokens per minute, failover) is the EndpointPool's
(endpoints.py). Every request of a batch ends as exactly one ChatResult,
in input order; nothing a single request does (a 400, a hang, a garbage body) raises out of
`complete`.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Awaitable, Callable, Sequence

import aiohttp

from corpusgraph.llm.base import ChatRequest, ChatResult, seconds_left
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.chat_cache import from_stored, lookup, request_key, stored
from corpusgraph.llm.connections import ClientSet
from corpusgraph.llm.endpoints import Lease, estimate_tokens
from corpusgraph.llm.http_common import EndpointClient, Fatal, Reply, Retryable, post, run_blocking
from corpusgraph.llm.profiles import Profile, profile
from corpusgraph.llm.routes import Route, TokenSource
from corpusgraph.llm.shape import RequestShaper, SchemaError, after_widening

__all__ = ["OpenAIChatModel", "request_body", "parse_completion_body", "BREAKER_AFTER"]

# A client whose first this-many finished requests were all refused (a 4xx other than 408 and 429)
# with one message, none answered, sends no more: the rest get that refusal as their error. A
# refusal of every request is a wrong setting, not bad luck, and each further call costs time and,
# on some providers, money.
BREAKER_AFTER = 8

_PAST_DEADLINE = "the caller's deadline passed (llm.base.deadline)"


async def _within(awaitable, left: float | None):
    """`awaitable`, bounded by `left` seconds when there is a deadline."""
    return await (awaitable if left is None else asyncio.wait_for(awaitable, max(left, 0.0)))


class OpenAIChatModel(EndpointClient):
    """A chat client over one endpoint or several (`base_url` a URL or a list of URLs).

    Limits hold per instance, i.e. per process or Ray actor, across every batch and thread
    that uses it: at most `concurrency` requests in flight in all, at most
    `max_in_flight_per_endpoint` on each endpoint, and at most `tokens_per_minute` (estimated
    prompt + max_tokens, corrected by the reported usage) sent to each endpoint a minute.
    A cluster-wide limit is these times the number of actors.
    """

    def __init__(
        self,
        model: str,
        base_url: str | Sequence[str],
        api_key: str | None = None,
        concurrency: int = 4,
        timeout_s: float = 180.0,
        max_retries: int = 3,
        cache: ResponseCache | None = None,
        profile_name: str = "openai_compatible",
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        max_in_flight_per_endpoint: int | None = None,
        tokens_per_minute: int | None = None,
        shaper: RequestShaper | None = None,
        route: Route | None = None,
        tokens: TokenSource | None = None,
    ) -> None:
        """profile_name: the endpoint's profile (llm/profiles.py), when no `shaper` and `route`
        (factory.py builds those from the config) say more."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        prof: Profile = shaper.profile if shaper is not None else profile(profile_name)
        super().__init__(model, base_url, api_key, concurrency, timeout_s, max_retries, cache,
                         max_in_flight_per_endpoint, tokens_per_minute, backoff_base_s, backoff_max_s,
                         route=route or Route(prof), tokens=tokens, profile_name=prof.name)
        self.base_urls = self.pool.urls
        self.base_url = self.base_urls[0]  # the only one, in the common single-endpoint case
        self.shaper = shaper or RequestShaper(prof, model)
        self.profile = prof.name
        self._chat_urls = {u: self.route.chat_url(u) for u in self.base_urls}
        # The refusal breaker (BREAKER_AFTER): refusals in a row since the last answer, their message.
        self._refused: tuple[int, str | None, ChatResult | None] = (0, None, None)
        self._answered = False
        # Told of every result as it comes (an answer, an error or a cache hit): the Ray runner's
        # progress count (passes.llm._LLMWorker). Never raises into the batch.
        self.on_result: Callable[[], None] | None = None
        self._schema_lengths: dict[int, tuple[dict, int]] = {}  # id(schema) -> (schema, its JSON length)

    def __repr__(self) -> str:  # no api_key: reprs end up in logs
        where = self.base_url if len(self.base_urls) == 1 else self.base_urls
        return f"OpenAIChatModel(model={self.model!r}, base_url={where!r}, profile={self.profile!r})"

    # -- public API ----------------------------------------------------------------------------
    def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Blocking batch call; runs its own event loop.

        Inside a thread that already runs a loop (an async Ray actor, a notebook) asyncio.run
        would refuse, so the batch then runs on a short-lived thread of its own.
        """
        return run_blocking(lambda: self.acomplete(requests), "corpusgraph-llm-batch")

    async def acomplete(self, requests: Sequence[ChatRequest],
                        each: Callable[[int, ChatResult], Awaitable[None]] | None = None) -> list[ChatResult]:
        """The batch on the caller's loop; overlapping calls share the instance's limits.

        each: awaited with (position, result) as each result is ready (cache hits first), before
        the batch returns; what it raises fails the batch."""
        requests = list(requests)
        keys = [self._key(r) for r in requests]
        # SQLite may wait on another process's lock; keep the loop free meanwhile.
        hits = await asyncio.to_thread(lookup, self.cache, keys) if self.cache is not None and keys else {}
        results: list[ChatResult | None] = [None] * len(requests)
        todo: list[int] = []
        for i, (req, key) in enumerate(zip(requests, keys)):
            if key in hits:
                results[i] = from_stored(req, hits[key])
                self._told()
                if each is not None:
                    await each(i, results[i])
            else:
                todo.append(i)

        writer = _GroupPut(self.cache) if self.cache is not None else None

        async def answered(i: int) -> ChatResult:
            res = await self._one(clients, requests[i], keys[i], writer)
            if each is not None:
                await each(i, res)
            return res

        if todo:
            clients = self._http.enter(self._new_client)
            try:
                done = await asyncio.gather(*(answered(i) for i in todo))
            finally:
                await self._http.exit(clients)
            for i, res in zip(todo, done):
                results[i] = res
        missing = [requests[i].id for i, r in enumerate(results) if r is None]
        if missing:  # a bug here, not a server problem: losing a row silently would be worse
            raise AssertionError(f"no result for requests {missing}")
        return results  # type: ignore[return-value]

    def stream(self, request: ChatRequest, on_delta: Callable[[str], None]) -> ChatResult:
        """One request streamed: its text to `on_delta` piece by piece, the whole result at the
        end (llm/openai_stream.py; llm/streaming.StreamingChatModel)."""
        from corpusgraph.llm.openai_stream import stream_chat

        return stream_chat(self, request, on_delta)

    def _told(self) -> None:
        if self.on_result is not None:
            try:
                self.on_result()
            except Exception:  # progress must never cost an answer
                pass

    # -- one request ---------------------------------------------------------------------------
    async def _one(self, clients: ClientSet, req: ChatRequest, key: str, writer: "_GroupPut | None" = None
                   ) -> ChatResult:
        start = time.monotonic()
        try:
            result = await self._with_retries(clients, req)
            if self.shaper.widens(result, req.max_tokens):  # its limit went on hidden reasoning
                result = after_widening(result, await self._with_retries(clients, req, widened=True))
        except Exception as exc:  # the contract: one bad request never loses the batch
            result = ChatResult(id=req.id, text=None, error=f"unexpected {type(exc).__name__}: {exc}")
        result.seconds = time.monotonic() - start
        self._told()
        if result.error is None and self.cache is not None:
            try:
                if writer is not None:
                    await writer.put(key, stored(result))
                else:
                    await asyncio.to_thread(self.cache.put, key, stored(result))
            except Exception:
                pass  # the answer is still good; it will just be paid for again next run
        return result

    async def _with_retries(self, clients: ClientSet, req: ChatRequest, widened: bool = False) -> ChatResult:
        tripped = self._tripped(req)
        if tripped is not None:
            return tripped
        try:
            body = self._body(req, widened)
        except SchemaError as exc:  # the same for every request of this schema: a setting to change
            return ChatResult(id=req.id, text=None, error=f"not sent: {exc}", error_code="schema_limits")
        cost = estimate_tokens(req.messages, self.shaper.answer_tokens(req.max_tokens, widened),
                               self._schema_chars(req.json_schema))
        attempts = self.max_retries + 1
        token_retried = False
        for attempt in range(attempts):
            left = seconds_left()
            if left is not None and left <= 0:
                return ChatResult(id=req.id, text=None, error=_PAST_DEADLINE + (
                    f" after {attempt} attempts" if attempt else "; not sent"))
            stage = "waiting for an endpoint"
            try:
                # The lease is held only while a request is on the wire, not while backing off;
                # each attempt may go to a different endpoint.
                lease = await _within(self.pool.acquire(cost), seconds_left())
                tripped = self._tripped(req)  # checked again: refusals may have come in while it waited
                if tripped is not None:
                    self.pool.release(lease, 0, True)
                    return tripped
                stage = "with the request on the wire"  # cancelled there, the lease still goes back
                return await _within(self._attempt(clients.get(lease.url, lease.slot), lease, req, body),
                                     seconds_left())
            except asyncio.TimeoutError:
                return ChatResult(id=req.id, text=None, error=f"{_PAST_DEADLINE} {stage}")
            except Fatal as exc:
                if exc.status == 401 and self.tokens is not None and not token_retried:
                    token_retried = True  # an Entra token that expired early: one more try with a new one
                    await asyncio.to_thread(self.tokens.invalidate)
                    continue
                return self._refusal(ChatResult(id=req.id, text=None, error=str(exc), status=exc.status,
                                                error_code=exc.code, error_param=exc.param))
            except Retryable as exc:
                if attempt == attempts - 1:
                    return ChatResult(id=req.id, text=None, error=f"{exc} (gave up after {attempts} attempts)")
                if exc.unreachable and self.pool.any_healthy():
                    continue  # that endpoint is cooling now; another one can take it at once
                delay = self._delay(attempt, exc.wait_s)
                left = seconds_left()
                await asyncio.sleep(delay if left is None else max(0.0, min(delay, left)))
        raise AssertionError("unreachable")

    def _tripped(self, req: ChatRequest) -> ChatResult | None:
        """The refusal the breaker answers with, when it is open."""
        n, message, first = self._refused
        if self._answered or n < BREAKER_AFTER or message is None or first is None:
            return None
        return ChatResult(id=req.id, text=None, status=first.status, error_code=first.error_code,
                          error_param=first.error_param,
                          error=f"not sent: the endpoint refused the first {n} requests: {message}")

    def _refusal(self, result: ChatResult) -> ChatResult:
        status = result.status or 0
        if 400 <= status < 500 and status not in (408, 429) and not self._answered:
            n, message, first = self._refused
            self._refused = (n + 1, result.error, first or result) if message in (None, result.error) else \
                (1, result.error, result)
        return result

    async def _attempt(self, client: aiohttp.ClientSession, lease: Lease, req: ChatRequest,
                       body: dict[str, Any]) -> ChatResult:
        """One attempt on the leased endpoint; the lease goes back with what it cost."""
        used: int | None = None
        reachable = True
        try:
            result = await self._post(client, lease.url, req, body)
            if result.error is None:
                self._answered = True
            # No usage in the answer: keep the estimate charged rather than guess zero.
            used = (result.tokens_in + result.tokens_out) or None
            return result
        except Retryable as exc:
            used, reachable = exc.used_tokens, not exc.unreachable
            raise
        except Fatal:
            used = 0  # refused before the model ran
            raise
        finally:
            self.pool.release(lease, used, reachable)

    async def _post(self, client: aiohttp.ClientSession, base_url: str, req: ChatRequest,
                    body: dict[str, Any]) -> ChatResult:
        resp = await post(client, self._chat_urls[base_url], body, self.timeout_s, await self._auth())
        return _parse_completion(req.id, resp)

    # -- building --------------------------------------------------------------------------------
    def _schema_chars(self, schema: dict[str, Any] | None) -> int:
        """The schema's length as JSON, for the cost estimate: kept per schema object (a stage
        sends one schema object with many requests). Only the estimate reads it, which the
        reported usage corrects, so a schema changed after its first request costs nothing worse
        than an estimate a little off."""
        if schema is None:
            return 0
        memo = self._schema_lengths
        held = memo.get(id(schema))
        if held is None or held[0] is not schema:
            if len(memo) >= 64:
                memo.clear()
            held = memo[id(schema)] = (schema, len(json.dumps(schema)))
        return held[1]

    def _key(self, req: ChatRequest) -> str:
        return request_key(self.model, req)

    def _body(self, req: ChatRequest, widened: bool = False) -> dict[str, Any]:
        return self.shaper.body(req, widened)



class _GroupPut:
    """A batch's answers into the response cache, committed in groups: the first answer's commit
    starts at once, and the answers that arrive while a commit runs go together in the next one
    (one transaction and one fsync for the lot, one thread hand-off, where each answer had its
    own). `put` returns once a transaction holding its answer has committed, as a single put
    did, so an answer is durable before it is handed on; a failed commit raises in each of its puts."""

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        self.pending: dict[str, dict] = {}
        self.waiting: list[asyncio.Future] = []
        self.running: asyncio.Task | None = None

    async def put(self, key: str, value: dict) -> None:
        done = asyncio.get_running_loop().create_future()
        self.pending[key] = value
        self.waiting.append(done)
        if self.running is None:
            self.running = asyncio.ensure_future(self._drain())
        await done

    async def _drain(self) -> None:
        waiting: list[asyncio.Future] = []
        try:
            while self.pending:
                values, waiting = self.pending, self.waiting
                self.pending, self.waiting = {}, []
                try:
                    await asyncio.to_thread(self.cache.put_many, values)
                    error = None
                except Exception as exc:  # each put raises it; its caller decides (the answer stays good)
                    error = exc
                for w in waiting:
                    if not w.done():
                        w.set_exception(error) if error is not None else w.set_result(None)
                waiting = []
        finally:
            self.running = None
            # Cancelled mid-commit (the loop shutting down): no put may wait for a commit that
            # will not come; theirs are answers left uncached, as a failed commit leaves them.
            left, self.pending, self.waiting = waiting + self.waiting, {}, []
            for w in left:
                if not w.done():
                    w.set_exception(RuntimeError("the response cache commit was cancelled"))


def request_body(model: str, req: ChatRequest, profile_name: str = "openai_compatible") -> dict[str, Any]:
    """The /chat/completions body for `req` on a `profile_name` endpoint serving `model`, with no
    settings beyond the profile's (tools and benchmarks; clients hold a RequestShaper)."""
    return RequestShaper(profile(profile_name), model).body(req)


def parse_completion_body(request_id: str, data: Any, text: str | None = None) -> ChatResult:
    """A 200's decoded JSON body as a result (a batch output line's response.body, or the body
    of a synchronous answer); a body without an answer is an error result, not an exception.
    text: the body as it came, for the error of a body that is not an object."""
    if not isinstance(data, dict):
        shown = text if text is not None else json.dumps(data)
        return ChatResult(id=request_id, text=None, error=f"malformed response body: {shown[:200]!r}")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    tokens_in = _int(usage.get("prompt_tokens"))
    tokens_out = _int(usage.get("completion_tokens"))
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    if choice is None:
        return ChatResult(id=request_id, text=None, tokens_in=tokens_in, tokens_out=tokens_out,
                          error="response has no choices")
    finish = choice.get("finish_reason")
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    content = message.get("content")
    if not isinstance(content, str) or not content:
        refusal = message.get("refusal")  # OpenAI Structured Outputs: the model declined, content null
        why = f"the model refused: {str(refusal)[:300]}" if isinstance(refusal, str) and refusal else \
            f"response has no content (finish_reason={finish})"
        return ChatResult(id=request_id, text=None, tokens_in=tokens_in, tokens_out=tokens_out,
                          finish_reason=finish, error=why, error_code="refusal" if refusal else "empty")
    return ChatResult(id=request_id, text=content, tokens_in=tokens_in, tokens_out=tokens_out, finish_reason=finish)


def _parse_completion(request_id: str, resp: Reply) -> ChatResult:
    """A 200 response as a result: its body decoded, then read as parse_completion_body reads it."""
    try:
        data = resp.json()
    except ValueError:
        return ChatResult(id=request_id, text=None, error=f"malformed response body: {resp.text[:200]!r}")
    # The body as text only for the error it would show (decoding it for every answer is waste).
    return parse_completion_body(request_id, data, None if isinstance(data, dict) else resp.text)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
