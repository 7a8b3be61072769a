"""What each kind of endpoint accepts: one `Profile` per provider, read by llm/shape.py.

A profile says how a structured answer is asked for (the `response_format` shape), which JSON
Schema keywords the provider refuses or ignores, which field bounds the answer's length, how a
request authenticates, where the Batch API's lines point, and the context window to assume.
Each rule cites the documentation it comes from; where a rule rests on an error body seen in a
public issue rather than on documentation, the comment says so.

Profiles by name (`llm.profile`, `embeddings.profile`):
- openai: api.openai.com. Structured Outputs in strict mode; reasoning models (o-series, gpt-5)
  take max_completion_tokens and only the default temperature.
- azure_openai: Azure OpenAI. The same strict mode with Azure's smaller keyword subset, deployment
  URLs with an api-version (or the v1 API), an `api-key` header or an Entra ID bearer token.
- vllm: `vllm serve`. OpenAI's nested json_schema shape, read by its structured-output backends.
- ollama: Ollama's OpenAI-compatible /v1 API (json_schema becomes its native `format`).
- llama_cpp: llama.cpp's llama-server and llama-cpp-python's server (the bundled model).
- tgi: Hugging Face Text Generation Inference's Messages API (its grammar shape).
- tei: Text Embeddings Inference (embeddings only).
- openai_compatible: an unknown server: the shape every server above reads, no strict mode.
`openai_reasoning` and `azure_openai_reasoning` are the first two with `llm.reasoning: true`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["Profile", "PROFILES", "CHAT_PROFILES", "EMBED_PROFILES", "PROFILE_NAMES", "profile", "resolve_profile",
           "guess_profile", "looks_like_reasoning_model", "refuses_system_role"]

# https://platform.openai.com/docs/guides/structured-outputs#supported-schemas ("Some type-specific
# keywords are not yet supported"): composition, object and array keywords strict mode refuses.
_OPENAI_UNSUPPORTED = frozenset({
    "allOf", "not", "dependentRequired", "dependentSchemas", "if", "then", "else",
    "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties", "maxProperties",
    "unevaluatedItems", "contains", "minContains", "maxContains", "uniqueItems",
    # String lengths are not in the guide's supported list; refused as "'minLength' is not permitted"
    # (error bodies quoted in coder/mux#1220 and other projects' provider doubles; not in the guide).
    "minLength", "maxLength",
    # Not schema constraints; Azure refuses `default` ("'default' is not permitted within a property
    # definition", openai/openai-agents-python#4390), OpenAI tolerates it: dropped for both.
    "default", "examples", "$comment",
})
# The same guide's supported string formats.
_OPENAI_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})

# https://learn.microsoft.com/azure/ai-foundry/openai/how-to/structured-outputs ("Unsupported
# type-specific keywords", ms.date 2025-12-06): Azure still lists the numeric, array and string
# bounds that OpenAI has since accepted, so they go too.
_AZURE_UNSUPPORTED = _OPENAI_UNSUPPORTED | frozenset({
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minItems", "maxItems",
})


@dataclass(frozen=True)
class SchemaLimits:
    """Limits a provider puts on a strict schema (its guide's "Objects have limitations")."""

    properties: int  # object properties in all (a shared sub-schema counts each time it appears)
    depth: int  # nesting levels of objects
    enum_values: int  # enum values in all
    chars: int  # property names, enum values and const values, in characters, in all


@dataclass(frozen=True)
class Profile:
    name: str
    # response_format shape: json_schema_strict | json_schema (no strict, nested) | json_object_schema
    # (llama.cpp's {"type": "json_object", "schema"}) | tgi_grammar ({"type": "json", "value"})
    rf_style: Literal["json_schema_strict", "json_schema", "json_schema_loose", "json_object_schema", "tgi_grammar"]
    strict_shape: bool  # every object gets additionalProperties false and lists every property as required
    drop_keywords: frozenset[str]  # schema keywords removed before sending
    formats: frozenset[str] | None  # string formats kept (None: all; an empty set: none)
    limits: SchemaLimits | None
    token_field: Literal["max_tokens", "max_completion_tokens"]
    auth: Literal["bearer", "azure"]
    batch_url: str | None  # the `url` of a Batch API line; None: the provider has no Batch API
    context_window: int  # tokens assumed when llm.context_window is not set
    max_embed_inputs: int  # texts one embeddings request may carry
    chat: bool = True  # serves chat completions (tei does not)
    cuts_silently: bool = False  # a prompt over its window is cut without an error, not refused


_OPENAI_LIMITS = SchemaLimits(properties=5000, depth=5, enum_values=1000, chars=120_000)
# Azure's page: "up to 100 object properties total, with up to five levels of nesting".
_AZURE_LIMITS = SchemaLimits(properties=100, depth=5, enum_values=1000, chars=120_000)

PROFILES: dict[str, Profile] = {
    # max_completion_tokens: "max_tokens ... is now deprecated in favor of max_completion_tokens, and is
    # not compatible with o-series models" (platform.openai.com/docs/api-reference/chat/create).
    # Batch lines: platform.openai.com/docs/guides/batch. 128k: the gpt-4o/4.1 family's window.
    # Embeddings: "any array must be 2048 dimensions or less" (api-reference/embeddings/create).
    "openai": Profile("openai", "json_schema_strict", True, _OPENAI_UNSUPPORTED, _OPENAI_FORMATS, _OPENAI_LIMITS,
                      "max_completion_tokens", "bearer", "/v1/chat/completions", 128_000, 2048),
    # Token field per api-version: shape.py (max_completion_tokens arrived in 2024-09-01-preview).
    # Batch lines: learn.microsoft.com/azure/ai-foundry/openai/how-to/batch ("url": "/chat/completions").
    "azure_openai": Profile("azure_openai", "json_schema_strict", True, _AZURE_UNSUPPORTED, frozenset(), _AZURE_LIMITS,
                            "max_completion_tokens", "azure", "/chat/completions", 128_000, 2048),
    # vLLM reads response_format.json_schema.schema into its structured-output backends and ignores
    # `strict` (vllm/entrypoints/openai protocol.py); max_tokens is read by every vLLM release
    # (max_completion_tokens only by newer ones). `vllm run-batch` reads /v1/chat/completions lines.
    # 8,192: a conservative window; set llm.context_window to the server's --max-model-len.
    "vllm": Profile("vllm", "json_schema", True, frozenset(), None, None, "max_tokens", "bearer",
                    "/v1/chat/completions", 8192, 2048),
    # Ollama's /v1 takes max_tokens (-> num_predict) and no max_completion_tokens, and turns
    # json_schema.schema into its native `format`, ignoring `strict` (ollama openai/openai.go).
    # 4,096: its documented default num_ctx (docs/faq.mdx); longer prompts are cut silently.
    "ollama": Profile("ollama", "json_schema", True, frozenset(), None, None, "max_tokens", "bearer", None, 4096, 2048,
                      cuts_silently=True),
    # llama-cpp-python's server turns {"type": "json_object", "schema"} into a grammar
    # (llama_chat_format._grammar_for_response_format) and has no "json_schema" type; llama.cpp's
    # llama-server reads the same shape (tools/server/README.md). Its request is kept exactly as
    # before profiles existed: the bundled model's answers do not change. Only max_tokens exists.
    "llama_cpp": Profile("llama_cpp", "json_object_schema", False, frozenset(), None, None, "max_tokens", "bearer",
                         None, 4096, 2048),
    # TGI's Messages API: response_format is its GrammarType {"type": "json", "value": schema}
    # (router/src/lib.rs); max_tokens only.
    "tgi": Profile("tgi", "tgi_grammar", True, frozenset(), None, None, "max_tokens", "bearer", None, 4096, 2048),
    # TEI: --max-client-batch-size defaults to 32 (router/src/main.rs); more inputs get a 413.
    "tei": Profile("tei", "json_schema", True, frozenset(), None, None, "max_tokens", "bearer", None, 512, 32,
                   chat=False),
    # Any other server: the nested json_schema shape that vLLM, Ollama, llama-server, LM Studio and
    # OpenAI-forwarding gateways all read, with strict false (a gateway to OpenAI then checks no
    # keyword), every bound kept for local grammar engines, and max_tokens, which all of them read.
    "openai_compatible": Profile("openai_compatible", "json_schema_loose", True, frozenset(), None, None,
                                 "max_tokens", "bearer", "/v1/chat/completions", 8192, 2048),
}
CHAT_PROFILES = tuple(n for n, p in PROFILES.items() if p.chat)
EMBED_PROFILES = tuple(PROFILES)
_ALIASES = {"openai_reasoning": "openai", "azure_openai_reasoning": "azure_openai"}
PROFILE_NAMES = tuple(PROFILES) + tuple(_ALIASES)


def profile(name: str) -> Profile:
    try:
        return PROFILES[_ALIASES.get(name, name)]
    except KeyError:
        raise ValueError(f"unknown endpoint profile {name!r}; known: {', '.join(PROFILE_NAMES)}") from None


def resolve_profile(name: str | None, backend: str, urls: list[str]) -> tuple[Profile, bool]:
    """(profile, reasoning forced by the name) for a configured profile name, or the guess."""
    if name:
        return profile(name), name in _ALIASES
    return profile(guess_profile(backend, urls)), False


def guess_profile(backend: str, urls: list[str]) -> str:
    """The profile a URL names without doubt; else openai_compatible (doctor then suggests one).

    Only host names that belong to one provider are read: a vLLM, Ollama or TGI server can sit at
    any address, so those are never guessed from a port or a path."""
    if backend == "embedded":
        return "llama_cpp"
    hosts = {(urlsplit(u).hostname or "").lower() for u in urls}
    if hosts and all(h == "api.openai.com" for h in hosts):
        return "openai"
    azure = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")
    if hosts and all(h.endswith(azure) for h in hosts):
        return "azure_openai"
    return "openai_compatible"


# OpenAI's reasoning models: the o-series and the gpt-5 family, except the gpt-5-chat models
# (platform.openai.com/docs/guides/reasoning). A naming convention, not an API: `llm.reasoning`
# overrides it, and doctor tells a refusal of max_tokens or temperature apart either way.
_REASONING = re.compile(r"^(?:o\d|gpt-5)(?!.*-chat)")
# o1-mini and o1-preview refuse a system message ("Unsupported value: 'messages[0].role' does not
# support 'system' with this model", seen in BerriAI/litellm#5671); later reasoning models take it.
_NO_SYSTEM = re.compile(r"^o1-(?:mini|preview)")


def looks_like_reasoning_model(model: str) -> bool:
    return bool(_REASONING.match(model.rsplit("/", 1)[-1].lower()))


def refuses_system_role(model: str) -> bool:
    return bool(_NO_SYSTEM.match(model.rsplit("/", 1)[-1].lower()))
