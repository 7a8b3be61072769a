"""Build the configured chat model (answers are read by llm/parse.py), and the pieces every client
of an endpoint takes from its config section: the profile, the request shaper, the URLs and the
credentials."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpusgraph.config import EmbeddingSection, LLMSection
from corpusgraph.llm.base import ChatModel
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.openai_http import OpenAIChatModel
from corpusgraph.llm.profiles import Profile, looks_like_reasoning_model, resolve_profile
from corpusgraph.llm.routes import Route, TokenSource, azure_version_at_least
from corpusgraph.llm.shape import RequestShaper

__all__ = ["open_chat_model", "client_limits", "Endpoint", "chat_endpoint", "endpoint_profile", "embed_endpoint",
           "CACHE_FILE", "context_window", "fit_context", "PROMPT_ALLOWANCE"]

# Tokens kept free in the window for a prompt's own text around its context (instructions, the
# question, the schema): the report and answer prompts are under 600 tokens (conf/prompts).
PROMPT_ALLOWANCE = 800

CACHE_FILE = "llm_cache.sqlite"


@dataclass
class Endpoint:
    """How to talk to one configured endpoint: what the clients' constructors take."""

    profile: Profile
    route: Route
    api_key: str | None  # sent as the profile says (bearer, or Azure's api-key header); None with Entra
    tokens: TokenSource | None  # Azure Entra ID
    model: str  # the body's `model`: for Azure the deployment
    reasoning: bool = False
    shaper: RequestShaper | None = None  # chat endpoints only


def _azure(section: LLMSection | EmbeddingSection, prof: Profile, model: str) -> tuple[Route, str, TokenSource | None]:
    az = section.azure
    deployment = az.deployment or model
    route = Route(prof, api_version=az.api_version, deployment=deployment)
    tokens = None
    if az.auth == "entra":
        tokens = TokenSource(token=az.ad_token.get_secret_value() if az.ad_token else None,
                             command=az.ad_token_command, provider=az.ad_token_provider)
    return route, deployment, tokens


def chat_endpoint(llm: LLMSection, urls: list[str] | None = None) -> Endpoint:
    """The endpoint `llm` (a stage's section) names. urls: where it will be reached, when not
    llm's own (the embedded server's)."""
    prof, forced = resolve_profile(llm.profile, llm.backend, urls if urls is not None else llm.endpoint_urls())
    reasoning = forced or (llm.reasoning if llm.reasoning is not None else
                           prof.name == "openai" and looks_like_reasoning_model(llm.model))
    route, model, tokens = Route(prof), llm.model, None
    token_field = None
    if prof.auth == "azure":
        route, model, tokens = _azure(llm, prof, llm.model)
        # max_completion_tokens arrived with api-version 2024-09-01-preview (api-version-lifecycle).
        if not azure_version_at_least(llm.azure.api_version, "2024-09-01"):
            if reasoning:
                raise ValueError(f"llm.azure.api_version {llm.azure.api_version!r} has no max_completion_tokens, which "
                                 "reasoning models need: set llm.azure.api_version: v1 (or 2024-10-21 or later)")
            token_field = "max_tokens"
    shaper = RequestShaper(prof, model, reasoning=reasoning, reasoning_effort=llm.reasoning_effort,
                           reasoning_budget_tokens=llm.reasoning_budget_tokens,
                           reasoning_retry_tokens=llm.reasoning_retry_tokens, drop=llm.drop_schema_keywords,
                           token_field=token_field)
    key = None if tokens is not None else llm.api_key
    return Endpoint(prof, route, key, tokens, model, reasoning, shaper)


def embed_endpoint(section: EmbeddingSection) -> Endpoint:
    prof, _ = resolve_profile(section.profile, section.backend, section.endpoint_urls())
    route, model, tokens = Route(prof), section.model, None
    if prof.auth == "azure":
        route, model, tokens = _azure(section, prof, section.model)
    key = section.api_key.get_secret_value() if section.api_key and tokens is None else None
    return Endpoint(prof, route, key, tokens, model)


def open_chat_model(llm: LLMSection, cache_dir: str | Path, base_url: str | None = None,
                    batch: bool = False) -> ChatModel:
    """The chat model for `llm` (a stage's section: llm.for_stage(name)), with its response cache
    at <cache_dir>/llm_cache.sqlite.

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
    Every request is shaped for the endpoint's profile (llm/shape.py). The concurrency,
    per-endpoint and tokens-per-minute limits hold per returned client, i.e. per process (per Ray actor).
    """
    cache = ResponseCache(Path(cache_dir) / CACHE_FILE) if llm.cache else None
    common = dict(model=llm.model, cache=cache, **client_limits(llm))
    if llm.backend == "embedded":
        if not base_url:
            raise ValueError("llm.backend 'embedded' needs the base_url of a running EmbeddedServer")
        ep = chat_endpoint(llm, [base_url])
        return OpenAIChatModel(base_url=base_url, api_key=None, shaper=ep.shaper, route=ep.route, **common)
    if llm.backend in ("openai", "openai_batch"):
        urls = [base_url] if base_url else llm.endpoint_urls()
        if not urls:
            raise ValueError(f"llm.backend {llm.backend!r} needs llm.api_base or llm.api_bases (endpoints ending in /v1)")
        ep = chat_endpoint(llm, urls)
        if batch and llm.backend == "openai_batch":
            from corpusgraph.llm.openai_batch import OpenAIBatchChatModel

            b = llm.batch
            return OpenAIBatchChatModel(
                llm.model, urls[0], state_dir=Path(b.state_dir) if b.state_dir else Path(cache_dir) / "batches",
                api_key=ep.api_key, cache=cache, poll_s=b.poll_s, completion_window=b.completion_window,
                max_lines=b.max_lines, max_bytes=b.max_bytes, max_retries=llm.max_retries, timeout_s=llm.timeout_s,
                max_wait_s=b.max_wait_s, shaper=ep.shaper, route=ep.route, tokens=ep.tokens)
        return OpenAIChatModel(base_url=urls, api_key=ep.api_key, shaper=ep.shaper, route=ep.route, tokens=ep.tokens,
                               **common)
    if llm.backend == "vllm":
        from corpusgraph.llm.vllm_engine import VLLMChatModel  # imports vllm only when chosen

        return VLLMChatModel(llm.model, cache, engine_args=llm.vllm_engine_args)
    raise ValueError(f"unknown llm.backend {llm.backend!r}")


def endpoint_profile(llm: LLMSection) -> Profile:
    """The profile of the endpoint `llm` names, judged from its settings alone: a section with no
    URL yet (the embedded server's, started later) is read with a placeholder one."""
    return chat_endpoint(llm, llm.endpoint_urls() or ["http://unknown/v1"]).profile


def context_window(llm: LLMSection) -> int:
    """The model's context window: llm.context_window, else the embedded server's n_ctx, else the
    profile's (llm/profiles.py states where each comes from)."""
    if llm.context_window:
        return llm.context_window
    if llm.backend == "embedded":
        return llm.n_ctx
    return endpoint_profile(llm).context_window


def fit_context(budget: int, llm: LLMSection, answer_tokens: int) -> int:
    """A context budget cut to what fits the window beside the answer and the prompt's own text
    (never below 200 tokens: a model that small is refused by the server, and doctor says so)."""
    room = context_window(llm) - answer_tokens - PROMPT_ALLOWANCE
    return max(200, min(budget, room))


def client_limits(section: LLMSection | EmbeddingSection) -> dict[str, Any]:
    """The limits and retries an OpenAI-compatible client (chat or embeddings) takes from its
    config section, as keyword arguments."""
    return dict(concurrency=section.concurrency, timeout_s=section.timeout_s, max_retries=section.max_retries,
                max_in_flight_per_endpoint=section.max_in_flight_per_endpoint,
                tokens_per_minute=section.tokens_per_minute)
