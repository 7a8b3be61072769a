"""The response cache as every chat client uses it (HTTP, Batch API, in-process vLLM): the key of
a request, the stored form of an answer, and a lookup that a broken cache cannot fail."""

from __future__ import annotations

from typing import Iterable

from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.llm.cache import ResponseCache, cache_key

__all__ = ["request_key", "lookup", "stored", "from_stored"]


def request_key(model: str, req: ChatRequest) -> str:
    """The cache key of `req` sent to `model`."""
    return cache_key(model, req.messages, req.max_tokens, req.temperature, req.json_schema)


def lookup(cache: ResponseCache | None, keys: Iterable[str]) -> dict[str, dict]:
    """The stored values of those keys the cache holds; {} without a cache, or when reading it fails."""
    keys = list(keys)
    if cache is None or not keys:
        return {}
    try:
        return cache.get_many(keys)
    except Exception:  # a broken cache costs money, not correctness
        return {}


def stored(result: ChatResult) -> dict:
    """What the cache keeps of an answer."""
    return {"text": result.text, "tokens_in": result.tokens_in, "tokens_out": result.tokens_out,
            "finish_reason": result.finish_reason}


def from_stored(req: ChatRequest, value: dict) -> ChatResult:
    """The answer a stored value gives `req`, marked as cached."""
    return ChatResult(id=req.id, text=value.get("text"), tokens_in=int(value.get("tokens_in") or 0),
                      tokens_out=int(value.get("tokens_out") or 0), cached=True,
                      finish_reason=value.get("finish_reason"))
