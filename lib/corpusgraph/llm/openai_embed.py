"""An Embedder for any OpenAI-compatible `/v1/embeddings` endpoint (vLLM, TEI, Ollama, OpenAI).

It shares the chat client's machinery: the EndpointPool (least-loaded endpoint, concurrency,
per-endpoint and tokens-per-minute limits, cooldown of unreachable endpoints), the per-loop
aiohttp sessions, the SQLite response cache (one entry per (model, text)) and the same retry rule
(429, 5xx, timeouts and dropped connections are retried with full-jitter backoff; other 4xx
are not).

Two entry points:
- `embed_many(texts)` never raises for what a server does: it returns every text's vector or
  the error that stopped its request, plus what each request cost (the embed stage records
  failures as rows and leaves those items pending for the next run);
- `embed(texts)` (the `Embedder` protocol, used by queries) raises `EmbeddingError` with the
  server's reason when any text got no vector.

The dimension is what the endpoint answers (the first answer fixes it for this instance; a
later answer of another size is an error). Vectors are L2-normalised here, since some servers
(TEI with normalize off, Ollama) do not, and FAISS scores are cosines only for unit vectors.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import aiohttp
import numpy as np

from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.connections import ClientSet
from corpusgraph.llm.http_common import EndpointClient, Fatal, Reply, Retryable, post, run_blocking
from corpusgraph.llm.profiles import profile
from corpusgraph.llm.routes import Route, TokenSource

__all__ = ["OpenAIEmbedder", "EmbeddingError", "EmbedOutcome", "embedding_cache_key"]

_KEY_VERSION = 1


class EmbeddingError(RuntimeError):
    """Some texts got no vector; the message says why (the server's own words where it gave them)."""


def embedding_cache_key(model: str, text: str) -> str:
    payload = json.dumps({"v": _KEY_VERSION, "kind": "embedding", "model": model, "input": text},
                         sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass
class EmbedOutcome:
    """What `embed_many` did for a list of texts, position by position.

    vectors: (n, dim) float32, unit length; rows whose error is set are zeros.
    request_of: which request (0..requests-1) carried each text; -1 for a cache hit or a blank text.
    """

    vectors: np.ndarray
    errors: list[str | None]
    request_of: list[int]
    request_tokens: list[int] = field(default_factory=list)  # prompt tokens each request reported
    request_failed: list[bool] = field(default_factory=list)  # some text of the request got no vector
    request_calls: list[int] = field(default_factory=list)  # HTTP requests it took (more after a 4xx split)
    seconds: float = 0.0

    @property
    def cache_hits(self) -> int:
        return sum(1 for r, e in zip(self.request_of, self.errors) if r < 0 and e is None)

    @property
    def failed(self) -> int:
        return sum(1 for e in self.errors if e is not None)


class OpenAIEmbedder(EndpointClient):
    """`Embedder` over one or several OpenAI-compatible endpoints; limits hold per instance
    (per process or Ray actor), as for `OpenAIChatModel`."""

    def __init__(
        self,
        model: str,
        base_url: str | Sequence[str],
        api_key: str | None = None,
        batch_size: int = 32,
        concurrency: int = 4,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        cache: ResponseCache | None = None,
        max_input_chars: int = 8000,
        max_in_flight_per_endpoint: int | None = None,
        tokens_per_minute: int | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        profile_name: str = "openai_compatible",
        route: Route | None = None,
        tokens: TokenSource | None = None,
        body_model: str | None = None,
    ) -> None:
        """profile_name / route / tokens: the endpoint's profile, URLs and Entra ID token source
        (factory.embed_endpoint); body_model: the `model` sent (Azure: the deployment), by
        default `model`, which keys the cache and the index either way."""
        if batch_size < 1 or concurrency < 1:
            raise ValueError("batch_size and concurrency must be at least 1")
        route = route or Route(profile(profile_name))
        super().__init__(model, base_url, api_key, concurrency, timeout_s, max_retries, cache,
                         max_in_flight_per_endpoint, tokens_per_minute, backoff_base_s, backoff_max_s,
                         route=route, tokens=tokens, profile_name=route.profile.name)
        # The provider's own cap on inputs per request (TEI 32 by default, OpenAI 2,048) wins.
        self.batch_size = min(batch_size, route.profile.max_embed_inputs)
        self.body_model = body_model or model
        self._embed_urls = {u: route.embed_url(u) for u in self.pool.urls}
        self.max_input_chars = max_input_chars
        self.dim: int | None = None  # fixed by the first answer
        self._dim_lock = threading.Lock()

    def __repr__(self) -> str:  # no key: reprs end up in logs
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.pool.urls!r}, dim={self.dim})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_dim_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._dim_lock = threading.Lock()

    # -- the Embedder protocol -----------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        out = self.embed_many(texts)
        bad = [(i, e) for i, e in enumerate(out.errors) if e is not None]
        if bad:
            i, err = bad[0]
            raise EmbeddingError(f"{len(bad)} of {len(texts)} texts got no vector from {self.model!r} at "
                                 f"{self.pool.urls[0]}: text {i}: {err}")
        return out.vectors

    def embed_many(self, texts: Sequence[str]) -> EmbedOutcome:
        """Blocking; runs its own loop (on a thread of its own when the caller runs one)."""
        return run_blocking(lambda: self.aembed_many(texts), "corpusgraph-embed-batch")

    async def aembed_many(self, texts: Sequence[str]) -> EmbedOutcome:
        start = time.monotonic()
        texts = [t[: self.max_input_chars] if isinstance(t, str) else "" for t in texts]
        n = len(texts)
        vecs: list[np.ndarray | None] = [None] * n
        errors: list[str | None] = [None] * n
        request_of = [-1] * n
        keys = [embedding_cache_key(self.model, t) for t in texts]
        hits: dict[str, dict] = {}
        if self.cache is not None and n:
            try:
                hits = await asyncio.to_thread(self.cache.get_many, keys)
            except Exception:  # a broken cache costs money, not correctness
                hits = {}
        todo = []
        for i, key in enumerate(keys):
            cached = _decode(hits.get(key))
            if cached is not None and (self.dim is None or cached.shape[0] == self.dim):
                vecs[i] = cached
            else:
                todo.append(i)
        for i in todo:
            if not texts[i].strip():
                errors[i] = "empty text: nothing to embed"
        todo = [i for i in todo if errors[i] is None]
        batches = [todo[s : s + self.batch_size] for s in range(0, len(todo), self.batch_size)]
        tokens, failed, http_calls = [0] * len(batches), [False] * len(batches), [0] * len(batches)
        if batches:
            clients = self._http.enter(self._new_client)
            try:
                answers = await asyncio.gather(*(self._isolating(clients, [texts[i] for i in b]) for b in batches))
            finally:
                await self._http.exit(clients)
            puts: dict[str, dict] = {}
            for r, (batch, (got, used, errs, calls)) in enumerate(zip(batches, answers)):
                tokens[r], http_calls[r] = used, calls
                failed[r] = any(e is not None for e in errs)
                for i, v, e in zip(batch, got, errs):
                    request_of[i] = r
                    if e is not None:
                        errors[i] = e
                    else:
                        vecs[i] = v
                        puts[keys[i]] = _encode(v)
            if puts and self.cache is not None:
                try:
                    await asyncio.to_thread(self.cache.put_many, puts)
                except Exception:
                    pass  # the vectors are still good; they will be paid for again next time
        dim = self.dim or next((v.shape[0] for v in vecs if v is not None), 1)
        matrix = np.zeros((n, dim), dtype=np.float32)
        for i, v in enumerate(vecs):
            if v is not None and errors[i] is None:
                if v.shape[0] != dim:  # a cache entry of another size (checked above once dim is known)
                    errors[i] = f"cached vector has {v.shape[0]} dimensions, the endpoint answers {dim}"
                else:
                    matrix[i] = v
        return EmbedOutcome(matrix, errors, request_of, tokens, failed, http_calls, time.monotonic() - start)

    # -- one request ----------------------------------------------------------------------------
    async def _isolating(self, clients: ClientSet, texts: list[str]) -> tuple[list, int, list, int]:
        """(vector or None per text, prompt tokens, error or None per text, HTTP requests made).

        A request that the server refused (4xx) for one bad text must not cost the others their
        vectors, or they would fail again beside it on every rerun: a refused batch is split in
        halves until the refusal is down to the texts that cause it."""
        got, used, err = await self._request(clients, texts)
        if err is None:
            return list(got), used, [None] * len(texts), 1
        # Only a refusal of the body (400 bad input, 413 too large, 422 unreadable) can be one
        # text's fault; a bad key, an unknown model or a rate limit would fail every half again.
        if len(texts) == 1 or not err.startswith(("HTTP 400", "HTTP 413", "HTTP 422")):
            return [None] * len(texts), used, [err] * len(texts), 1
        half = len(texts) // 2
        a, b = await asyncio.gather(self._isolating(clients, texts[:half]), self._isolating(clients, texts[half:]))
        return a[0] + b[0], used + a[1] + b[1], a[2] + b[2], 1 + a[3] + b[3]

    async def _request(self, clients: ClientSet, texts: list[str]) -> tuple[list[np.ndarray] | None, int, str | None]:
        """(vectors, prompt tokens, None) or (None, tokens, reason); never raises."""
        body = {"model": self.body_model, "input": texts, "encoding_format": "float"}
        cost = sum(len(t) for t in texts) // 4 + len(texts)
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            lease = await self.pool.acquire(cost)
            used, reachable = None, True
            try:
                vectors, used = await self._post(clients.get(lease.url, lease.slot), lease.url, body, len(texts))
                return vectors, used, None
            except Fatal as exc:
                used = 0
                return None, 0, str(exc)
            except Retryable as exc:
                reachable = not exc.unreachable
                if attempt == attempts - 1:
                    return None, 0, f"{exc} (gave up after {attempts} attempts)"
                wait = exc.wait_s
            except Exception as exc:  # the contract: one bad answer never loses the batch
                return None, 0, f"unexpected {type(exc).__name__}: {exc}"
            finally:
                self.pool.release(lease, used, reachable)
            if not reachable and self.pool.any_healthy():
                continue
            await asyncio.sleep(self._delay(attempt, wait))
        raise AssertionError("unreachable")

    async def _post(self, client: aiohttp.ClientSession, url: str, body: dict, n: int) -> tuple[list[np.ndarray], int]:
        return self._parse(await post(client, self._embed_urls[url], body, self.timeout_s, await self._auth()), n)

    def _parse(self, resp: Reply, n: int) -> tuple[list[np.ndarray], int]:
        try:
            data = resp.json()
        except ValueError:
            raise Fatal(f"malformed response body: {resp.text[:200]!r}") from None
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list) or len(items) != n:
            got = len(items) if isinstance(items, list) else "no"
            raise Fatal(f"expected {n} embeddings in 'data', got {got}")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        try:
            tokens = int(usage.get("prompt_tokens") or usage.get("total_tokens") or 0)
        except (TypeError, ValueError):
            tokens = 0
        ordered: list[Any] = [None] * n
        for pos, item in enumerate(items):
            idx = item.get("index", pos) if isinstance(item, dict) else None
            if not isinstance(idx, int) or not 0 <= idx < n or ordered[idx] is not None:
                raise Fatal(f"embedding {pos} has a bad or repeated index {idx!r}")
            ordered[idx] = item.get("embedding")
        out = []
        for idx, raw in enumerate(ordered):
            vec = _as_vector(raw)
            if vec is None:
                raise Fatal(f"embedding {idx} is not a list of finite numbers")
            norm = float(np.linalg.norm(vec))
            if norm == 0.0:
                raise Fatal(f"embedding {idx} is the zero vector")
            out.append(vec / np.float32(norm))
        dims = {v.shape[0] for v in out}
        with self._dim_lock:
            if self.dim is None and len(dims) == 1:
                self.dim = dims.pop()
                dims = {self.dim}
        if dims != {self.dim}:
            raise Fatal(f"the endpoint answered {sorted(dims)}-dimensional vectors; earlier answers had {self.dim}")
        return out, tokens



def _as_vector(raw: Any) -> np.ndarray | None:
    if isinstance(raw, str):  # encoding_format base64, which some servers answer regardless
        try:
            vec = np.frombuffer(base64.b64decode(raw), dtype="<f4").astype(np.float32)
        except (ValueError, TypeError):
            return None
    elif isinstance(raw, list) and raw:
        try:
            vec = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError):
            return None
    else:
        return None
    return vec if vec.ndim == 1 and vec.size and np.all(np.isfinite(vec)) else None


def _encode(vec: np.ndarray) -> dict:
    return {"b64": base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii")}


def _decode(value: dict | None) -> np.ndarray | None:
    if not isinstance(value, dict) or not isinstance(value.get("b64"), str):
        return None
    return _as_vector(value["b64"])

