"""Build the configured chat model (answers are read by llm/parse.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpusgraph.config import EmbeddingSection, LLMSection
from corpusgraph.llm.base import ChatModel
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.openai_http import OpenAIChatModel

__all__ = ["open_chat_model", "client_limits"]

CACHE_FILE = "llm_cache.sqlite"


def open_chat_model(llm: LLMSection, cache_dir: str | Path, base_url: str | None = None,
                    batch: bool = False) -> ChatModel:
    """The chat model for `llm`, with its response cache at <cache_dir>/llm_cache.sqlite.

    embedded: `base_url` is the running EmbeddedServer's; the server is started by the driver,
    not here, so every Ray actor talks to the one process over HTTP.
    openai: the endpoints (api_base or api_bases) and key come from the config section;
    `base_url` overrides them with that one endpoint.
    openai_batch: with `batch` (the stage runner, for the stages in llm.batch.stages) the Batch
    API client of openai_batch.py on the first endpoint, its records under llm.batch.state_dir
    (default <cache_dir>/batches); without it (queries, other stages) the synchronous client on
    the same endpoints, sharing the response cache.
    vllm: an in-process engine for llm.model, built here, i.e. inside the Ray actor that calls
    this; a clear ImportError where vllm is not installed.
    The concurrency, per-endpoint and tokens-per-minute limits hold per returned client, i.e.
    per process (per Ray actor).
    """
    cache = ResponseCache(Path(cache_dir) / CACHE_FILE) if llm.cache else None
    common = dict(model=llm.model, cache=cache, **client_limits(llm))
    if llm.backend == "embedded":
        if not base_url:
            raise ValueError("llm.backend 'embedded' needs the base_url of a running EmbeddedServer")
        return OpenAIChatModel(base_url=base_url, api_key=None, schema_style="llama_cpp", **common)
    if llm.backend in ("openai", "openai_batch"):
        urls = [base_url] if base_url else llm.endpoint_urls()
        if not urls:
            raise ValueError(f"llm.backend {llm.backend!r} needs llm.api_base or llm.api_bases (endpoints ending in /v1)")
        if batch and llm.backend == "openai_batch":
            from corpusgraph.llm.openai_batch import OpenAIBatchChatModel

            b = llm.batch
            return OpenAIBatchChatModel(
                llm.model, urls[0], state_dir=Path(b.state_dir) if b.state_dir else Path(cache_dir) / "batches",
                api_key=llm.api_key, cache=cache, poll_s=b.poll_s, completion_window=b.completion_window,
                max_lines=b.max_lines, max_bytes=b.max_bytes, max_retries=llm.max_retries, timeout_s=llm.timeout_s,
                max_wait_s=b.max_wait_s)
        return OpenAIChatModel(base_url=urls, api_key=llm.api_key, schema_style="openai", **common)
    if llm.backend == "vllm":
        from corpusgraph.llm.vllm_engine import VLLMChatModel  # imports vllm only when chosen

        return VLLMChatModel(llm.model, cache, engine_args=llm.vllm_engine_args)
    raise ValueError(f"unknown llm.backend {llm.backend!r}")


def client_limits(section: LLMSection | EmbeddingSection) -> dict[str, Any]:
    """The limits and retries an OpenAI-compatible client (chat or embeddings) takes from its
    config section, as keyword arguments."""
    return dict(concurrency=section.concurrency, timeout_s=section.timeout_s, max_retries=section.max_retries,
                max_in_flight_per_endpoint=section.max_in_flight_per_endpoint,
                tokens_per_minute=section.tokens_per_minute)
