"""What the OpenAI-compatible HTTP clients (chat, embeddings, Batch API) share: the retry rule
for a POST (429, 5xx, timeouts and dropped connections are retried, other 4xx are not), its
backoff, reading a server's error and Retry-After, building the asynchronous client, and running a
batch's event loop from blocking code.

Chat and embedding requests go through aiohttp: per request it costs a fraction of the CPU of
httpx's AsyncClient (tests/benchmarks/results/chat_client_cpu.json), and at millions of calls the
client's CPU is what an LLM actor spends. The Batch API's few requests stay on httpx's
synchronous client."""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import json
import random
import ssl
import threading
import time
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import aiohttp
import httpx

from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.connections import LoopClients
from corpusgraph.llm.endpoints import EndpointPool
from corpusgraph.llm.profiles import profile
from corpusgraph.llm.routes import Route, TokenSource

__all__ = ["EndpointClient", "RETRY_AFTER_CAP_S", "Reply", "Retryable", "Fatal", "post", "backoff_delay", "new_http_client", "env_route", "run_blocking",
           "server_message", "error_message", "error_details", "error_fields", "retry_after"]

_T = TypeVar("_T")

# Never sleep longer than this for one Retry-After, whatever the server asks; a server that
# wants minutes is better reported as an error than waited on by a whole stage.
RETRY_AFTER_CAP_S = 120.0


class Retryable(Exception):
    """A failure worth another try; `wait_s` is the server's Retry-After when it gave one.

    unreachable: the endpoint could not be connected to (the pool then steers traffic away).
    used_tokens: what the attempt cost on the server, as EndpointPool.release takes it.
    """

    def __init__(self, reason: str, wait_s: float | None = None, unreachable: bool = False,
                 used_tokens: int | None = 0) -> None:
        super().__init__(reason)
        self.wait_s = wait_s
        self.unreachable = unreachable
        self.used_tokens = used_tokens


class Fatal(Exception):
    """A failure another try will not fix (a 4xx other than 429). status, code, param: the HTTP
    status and the provider's error code and parameter, where it gave them (doctor reads them)."""

    def __init__(self, reason: str, status: int | None = None, code: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(reason)
        self.status, self.code, self.param = status, code, param


class Reply:
    """A response read whole: what the parsers and the error readers need of it (status_code,
    headers, text, json(), reason_phrase), as httpx.Response names them."""

    __slots__ = ("status_code", "headers", "content", "reason_phrase")

    def __init__(self, status_code: int, content: bytes = b"", headers: Any = None, reason_phrase: str = "") -> None:
        self.status_code = status_code
        self.content = content
        self.headers = headers if headers is not None else {}
        self.reason_phrase = reason_phrase

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body decoded; ValueError (json.JSONDecodeError, UnicodeDecodeError) when it is not JSON."""
        return json.loads(self.content)


async def post(client: aiohttp.ClientSession, url: str, body: dict[str, Any], timeout_s: float,
               headers: dict[str, str] | None = None) -> Reply:
    """POST `body` as JSON; the 200 response, or Retryable / Fatal saying why not. headers: this
    request's own (an Entra token), besides the session's."""
    try:
        async with client.post(url, json=body, allow_redirects=False, headers=headers) as resp:
            reply = Reply(resp.status, await resp.read(), resp.headers, resp.reason or "")
    except aiohttp.ConnectionTimeoutError as exc:
        # Only a failed connect marks the endpoint down: a dropped keep-alive connection
        # (ServerDisconnectedError, a reset) happens to healthy servers too.
        raise Retryable(f"connection error: {type(exc).__name__}: {exc}", unreachable=True) from exc
    except asyncio.TimeoutError as exc:  # aiohttp's read timeouts are TimeoutErrors too
        # The server may have run the model before we gave up: its cost is unknown.
        raise Retryable(f"timeout after {timeout_s:g}s ({type(exc).__name__})", used_tokens=None) from exc
    except aiohttp.ClientConnectorError as exc:
        raise Retryable(f"connection error: {type(exc).__name__}: {exc}", unreachable=True) from exc
    except (aiohttp.ClientError, OSError) as exc:  # reset, disconnected, protocol and payload errors
        # (OSError: a socket error aiohttp did not wrap, as httpx's TransportError covered)
        raise Retryable(f"connection error: {type(exc).__name__}: {exc}") from exc
    status = reply.status_code
    if status == 429 or status >= 500:
        raise Retryable(f"HTTP {status}: {server_message(reply)}", retry_after(reply))
    if status != 200:
        message, code, param = error_fields(reply)
        raise Fatal(f"HTTP {status}: {message}", status, code, param)
    return reply


def backoff_delay(attempt: int, retry_after_s: float | None, base_s: float, max_s: float) -> float:
    """Seconds to wait before attempt `attempt + 1`: the server's Retry-After (capped) when it gave one."""
    if retry_after_s is not None:
        return min(max(retry_after_s, 0.0), RETRY_AFTER_CAP_S)
    # Full jitter (uniform over the whole exponential window) spreads out the many
    # requests a rate limit rejected at the same moment.
    return random.uniform(0.0, min(max_s, base_s * 2**attempt))


def new_http_client(max_connections: int, tls: ssl.SSLContext, timeout_s: float,
                    headers: dict[str, str], url: str) -> aiohttp.ClientSession:
    """An aiohttp session for one endpoint shard (connections.LoopClients makes them, inside
    the event loop that uses it). headers: what every request carries (the credentials,
    routes.Route.static_headers). url: the endpoint it talks to, whose proxy and .netrc login
    from the environment are looked up once here (`env_route`)."""
    connector = aiohttp.TCPConnector(limit=max_connections, ssl=tls)
    # A total budget per attempt; connect gets less so a dead host fails fast.
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(10.0, timeout_s))
    proxy, proxy_auth, auth = env_route(url, with_login=not headers)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers, proxy=proxy,
                                 proxy_auth=proxy_auth, auth=auth)


def env_route(url: str, with_login: bool = True) -> tuple[Any, Any, Any]:
    """(proxy, proxy_auth, auth) that aiohttp's trust_env finds for `url`: HTTP(S)_PROXY and
    NO_PROXY, as under httpx before, and the host's .netrc login (with_login: only where no API
    key is sent). trust_env looks them up again for every request, reading .netrc twice in
    worker threads each time (a visible share of an extraction actor's CPU); a
    session talks to one endpoint, so once per session is enough. Environment changes reach
    the sessions made after them."""
    from aiohttp import helpers
    from yarl import URL

    target = URL(url)
    proxy = proxy_auth = auth = None
    try:
        proxy, proxy_auth = helpers.get_env_proxy_for_url(target)
    except LookupError:
        pass
    if with_login and target.host is not None:
        try:
            auth = helpers.basicauth_from_netrc(helpers.netrc_from_env(), target.host)
        except LookupError:
            pass
    return proxy, proxy_auth, auth


def run_blocking(make: Callable[[], Awaitable[_T]], thread_name: str) -> _T:
    """Run the coroutine `make()` returns to its end, from blocking code.

    Inside a thread that already runs a loop (an async Ray actor, a notebook) asyncio.run
    would refuse, so the coroutine then runs on a short-lived thread of its own, with the
    caller's context (its deadline).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    box: list[_T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            box.append(asyncio.run(make()))  # type: ignore[arg-type]
        except BaseException as exc:  # surfaced below, in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=contextvars.copy_context().run, args=(run,), name=thread_name)
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return box[0]


class EndpointClient:
    """What a client of OpenAI-compatible endpoints holds, chat or embeddings: the EndpointPool
    over `base_url` (one URL or several), whose limits hold per instance, i.e. per process or
    Ray actor; the key, timeout, retries and backoff of its requests; its response cache; and
    its HTTP sessions per event loop."""

    def __init__(self, model: str, base_url: str | Sequence[str], api_key: str | None, concurrency: int,
                 timeout_s: float, max_retries: int, cache: ResponseCache | None,
                 max_in_flight_per_endpoint: int | None, tokens_per_minute: int | None,
                 backoff_base_s: float, backoff_max_s: float, route: Route | None = None,
                 tokens: TokenSource | None = None, profile_name: str = "openai_compatible") -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self.route = route or Route(profile(profile_name))
        self.tokens = tokens  # an Entra ID token source: a bearer token per request
        self.headers = self.route.static_headers(api_key, entra=tokens is not None)
        self.model = model
        self.pool = EndpointPool(urls, max_in_flight=concurrency, max_in_flight_per_endpoint=max_in_flight_per_endpoint,
                                 tokens_per_minute=tokens_per_minute)
        self.api_key = api_key
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.cache = cache
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._http = LoopClients()

    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        return backoff_delay(attempt, retry_after_s, self.backoff_base_s, self.backoff_max_s)

    def _new_client(self, url: str, max_connections: int, tls: ssl.SSLContext) -> aiohttp.ClientSession:
        return new_http_client(max_connections, tls, self.timeout_s, self.headers, url)

    async def _auth(self) -> dict[str, str] | None:
        """This request's own headers: an Entra ID bearer token (fetched off the loop when the
        cached one is near its end), or None."""
        if self.tokens is None:
            return None
        token = self.tokens.fresh() or await asyncio.to_thread(self.tokens.get)
        return {"Authorization": f"Bearer {token}"}


def server_message(resp: Reply | httpx.Response) -> str:
    """The server's own words: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or raw text."""
    return error_fields(resp)[0]


def error_fields(resp: Reply | httpx.Response) -> tuple[str, str | None, str | None]:
    """(message, code, param) of an error response (see error_details)."""
    try:
        data = resp.json()
    except ValueError:
        return (resp.text.strip()[:_MESSAGE_CHARS] or resp.reason_phrase), None, None
    return error_details(data)


_MESSAGE_CHARS = 500


def error_message(data: Any) -> str:
    """The message of an error body already parsed (see error_details)."""
    return error_details(data)[0]


def error_details(data: Any) -> tuple[str, str | None, str | None]:
    """(message, code, param) of an error body already parsed, in the shapes servers answer:
    {"error": {"message", "code", "param"}} (OpenAI, Azure, vLLM, Ollama's /v1), {"error": "..."}
    (Ollama's and TEI's own APIs, TGI), a top-level {"message"} (TEI's /v1/embeddings, Azure's
    401 to a bearer token it refuses), FastAPI's {"detail"} (llama-cpp-python); else the body as
    text. The message is cut at 500 characters; code is the error code or else its type."""
    def text(v: Any) -> str | None:
        return None if v is None else str(v)

    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return (str(err["message"])[:_MESSAGE_CHARS], text(err.get("code") if err.get("code") is not None
                                                                else err.get("type")), text(err.get("param")))
        if isinstance(err, str):
            return err[:_MESSAGE_CHARS], text(data.get("error_type")), None
        if isinstance(data.get("message"), str):
            return data["message"][:_MESSAGE_CHARS], text(data.get("code") or data.get("type")), None
        if "detail" in data:
            return str(data["detail"])[:_MESSAGE_CHARS], None, None
    return str(data)[:_MESSAGE_CHARS], None, None


def retry_after(resp: Reply | httpx.Response) -> float | None:
    """Seconds from Retry-After (seconds or an HTTP date) or OpenAI's retry-after-ms."""
    ms = resp.headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = resp.headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
