"""The parts of an LLM endpoint's configuration beyond its URL and model: Azure OpenAI's
deployment, api-version and credentials, and the per-stage overrides of `llm` (a cheap model for
extraction, a stronger one for reports and answers)."""

from __future__ import annotations

from typing import Any, Literal

import datetime as dt

from pydantic import Field, SecretStr, field_serializer, field_validator, model_validator

from corpusgraph.sections.base import Section

__all__ = ["AzureSection", "StageLLMSection", "PROFILE_NAMES", "EMBED_PROFILE_NAMES", "LLM_STAGES", "ProfileName",
           "EmbedProfileName", "StageName"]

# The profiles of corpusgraph.llm.profiles (this layer cannot import it; a unit test keeps the two equal).
PROFILE_NAMES = ("openai", "azure_openai", "vllm", "ollama", "llama_cpp", "tgi", "openai_compatible",
                 "openai_reasoning", "azure_openai_reasoning")
EMBED_PROFILE_NAMES = ("openai", "azure_openai", "vllm", "ollama", "llama_cpp", "tei", "openai_compatible")
ProfileName = Literal["openai", "azure_openai", "vllm", "ollama", "llama_cpp", "tgi", "openai_compatible",
                      "openai_reasoning", "azure_openai_reasoning"]
EmbedProfileName = Literal["openai", "azure_openai", "vllm", "ollama", "llama_cpp", "tei", "openai_compatible"]
# Stages that call a chat model, each of which may name its own endpoint and model. judge: the
# answer judge of `corpusgraph eval` (without its own entry, the query stage's).
LLM_STAGES = ("extract", "resolve", "reports", "query", "judge")
StageName = Literal["extract", "resolve", "reports", "query", "judge"]


class AzureSection(Section):
    """Azure OpenAI (profile azure_openai): llm.api_base is the resource endpoint,
    https://NAME.openai.azure.com."""

    deployment: str | None = Field(None, description="Deployment name; null: llm.model (Azure routes by deployment, "
                                   "so name the deployment there or here).")
    api_version: str = Field("v1", description="v1: the v1 API (/openai/v1/..., no monthly version); or a dated "
                             "version such as 2024-10-21 (deployment URLs with ?api-version=). Structured outputs need "
                             "2024-08-01-preview or later, max_completion_tokens (reasoning models) 2024-09-01-preview "
                             "or later (learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle).")
    auth: Literal["api_key", "entra"] = Field("api_key", description="api_key: llm.api_key sent as the api-key "
                                              "header. entra: a Microsoft Entra ID bearer token from ad_token, "
                                              "ad_token_command or ad_token_provider.")
    ad_token: SecretStr | None = Field(None, description="entra: a token (write ${AZURE_OPENAI_AD_TOKEN}); it is not "
                                       "refreshed, so prefer a command or provider for long runs.")
    ad_token_command: str | None = Field(None, description="entra: a command printing a token (or JSON with "
                                         "accessToken and expiresOn), run again five minutes before it expires, "
                                         "e.g. az account get-access-token --resource "
                                         "https://cognitiveservices.azure.com --query accessToken -o tsv")
    ad_token_provider: str | None = Field(None, description="entra: 'package.module:function' returning a token "
                                          "(or an object with .token and .expires_on), or 'azure-identity' for "
                                          "azure.identity's DefaultAzureCredential (pip install azure-identity).")

    @field_serializer("ad_token")
    def _hide(self, value: SecretStr | None) -> str | None:
        return None if value is None else "**********"

    @field_validator("api_version", mode="before")
    @classmethod
    def _yaml_date(cls, value: Any) -> Any:
        # YAML reads an unquoted 2024-10-21 as a date: it is the version string all the same.
        return value.isoformat() if isinstance(value, dt.date) else value

    @model_validator(mode="after")
    def _one_token_source(self) -> "AzureSection":
        given = [n for n in ("ad_token", "ad_token_command", "ad_token_provider") if getattr(self, n)]
        if len(given) > 1:
            raise ValueError(f"llm.azure: set one of ad_token, ad_token_command, ad_token_provider, not {given}")
        return self


class StageLLMSection(Section):
    """What one stage changes of `llm`; every field left out is llm's own."""

    backend: Literal["embedded", "openai", "openai_batch", "vllm"] | None = Field(None, description="llm.backend.")
    profile: ProfileName | None = Field(None, description="llm.profile.")
    model: str | None = Field(None, description="llm.model.")
    api_base: str | None = Field(None, description="llm.api_base (replaces llm.api_bases for this stage).")
    api_bases: list[str] | None = Field(None, description="llm.api_bases (replaces llm.api_base for this stage).")
    api_key: SecretStr | None = Field(None, description="llm.api_key; write ${VAR}, never a literal.")
    azure: AzureSection | None = Field(None, description="llm.azure, key by key.")
    reasoning: bool | None = Field(None, description="llm.reasoning.")
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = Field(None, description="llm.reasoning_effort.")
    reasoning_budget_tokens: int | None = Field(None, ge=0, description="llm.reasoning_budget_tokens.")
    reasoning_retry_tokens: int | None = Field(None, ge=0, description="llm.reasoning_retry_tokens.")
    context_window: int | None = Field(None, ge=512, description="llm.context_window.")
    drop_schema_keywords: list[str] | None = Field(None, description="llm.drop_schema_keywords.")
    concurrency: int | None = Field(None, ge=1, description="llm.concurrency.")
    max_in_flight_per_endpoint: int | None = Field(None, ge=1, description="llm.max_in_flight_per_endpoint.")
    tokens_per_minute: int | None = Field(None, ge=1, description="llm.tokens_per_minute.")
    timeout_s: float | None = Field(None, gt=0, description="llm.timeout_s.")
    temperature: float | None = Field(None, ge=0, description="llm.temperature.")
    usd_per_1k_in: float | None = Field(None, ge=0, description="llm.usd_per_1k_in: this stage's model's price.")
    usd_per_1k_out: float | None = Field(None, ge=0, description="llm.usd_per_1k_out.")

    @field_serializer("api_key")
    def _hide(self, value: SecretStr | None) -> str | None:
        return None if value is None else "**********"

    def updates(self) -> dict[str, Any]:
        """The fields this stage sets, as llm takes them (api_key as text)."""
        out: dict[str, Any] = {}
        for name in self.model_fields_set:
            value = getattr(self, name)
            if value is None:
                continue
            out[name] = value.get_secret_value() if isinstance(value, SecretStr) else value
        return out
