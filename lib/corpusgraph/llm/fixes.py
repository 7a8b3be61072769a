"""What to change when an endpoint refuses a request: the provider's error (status, code, parameter,
message) -> the setting that fixes it. `corpusgraph doctor`, the run's preflight and a stage's
failure summary all print this next to the provider's own message.

Matches key on the status and the provider's error code or parameter where those are documented
(llm/profiles.py names the sources), and on message words only where the text itself is what the
provider documents or users have quoted; never on a conformance server's stand-in texts.
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["fix_for"]

_Test = Callable[[int, str, str, str], bool]  # (status, code, param, message lower-cased)

_REASONING = ("this is a reasoning model: set llm.profile: openai_reasoning (azure_openai_reasoning on Azure), or "
              "llm.reasoning: true")
_FIXES: list[tuple[_Test, str]] = [
    (lambda s, c, p, m: s == 400 and (p == "max_tokens" or "'max_tokens' is not supported" in m),
     "this model refuses max_tokens; " + _REASONING),
    (lambda s, c, p, m: s == 400 and (p == "temperature" or "'temperature' does not support" in m
                                      or "'temperature' is not supported" in m),
     "this model takes only the default temperature; " + _REASONING),
    (lambda s, c, p, m: s == 400 and ("messages[0].role" in p or "does not support 'system'" in m),
     "this model refuses the system role: set llm.reasoning: true (the system prompt then joins the user message)"),
    (lambda s, c, p, m: s == 400 and "enabled only for api versions" in m,
     "this api-version has no structured outputs: set llm.azure.api_version: v1 (or 2024-10-21 or later)"),
    (lambda s, c, p, m: s == 400 and "unrecognized request argument supplied: max_completion_tokens" in m,
     "this api-version has no max_completion_tokens: set llm.azure.api_version: v1 (or 2024-10-21 or later)"),
    (lambda s, c, p, m: s == 400 and "invalid schema for response_format" in m and "is not permitted" in m,
     "the endpoint's strict mode refuses a schema keyword: set llm.profile to the provider's (openai, azure_openai), "
     "or name the keyword in llm.drop_schema_keywords"),
    (lambda s, c, p, m: s == 400 and "invalid schema for response_format" in m,
     "the endpoint's strict mode refuses the answer schema: set llm.profile: openai (azure_openai on Azure), which "
     "shapes schemas for strict mode"),
    (lambda s, c, p, m: s == 400 and (c == "unknown_parameter" or "unknown parameter" in m),
     "the endpoint refuses a field meant for another kind of server: set llm.profile to the endpoint's kind "
     "(openai for api.openai.com)"),
    (lambda s, c, p, m: s == 404 and c == "deploymentnotfound",
     "no such Azure deployment: set llm.azure.deployment (or llm.model) to a deployment name of this resource"),
    (lambda s, c, p, m: s == 404 and m.strip() == "resource not found",
     "Azure answers 'Resource not found' to a path or api-version it does not know: set llm.azure.api_version (v1, "
     "or a dated version such as 2024-10-21) and llm.api_base to https://NAME.openai.azure.com"),
    (lambda s, c, p, m: s == 401 and "access denied due to invalid subscription key" in m,
     "Azure refused the key: check llm.api_key (the resource's key, sent as the api-key header) and llm.api_base"),
    (lambda s, c, p, m: s == 401 and "access token is missing, invalid" in m,
     "Azure refused the bearer token: with a key set llm.profile: azure_openai and llm.azure.auth: api_key; with "
     "Entra ID check llm.azure.ad_token_command (scope https://cognitiveservices.azure.com/.default)"),
    (lambda s, c, p, m: s == 401,
     "the endpoint refused the key: set llm.api_key (write ${OPENAI_API_KEY} or similar in the config)"),
    (lambda s, c, p, m: s == 404 and (c in ("model_not_found", "notfounderror", "not_found_error", "404")
                                      or "does not exist" in m or "try pulling it first" in m),
     "the endpoint does not serve this model: set llm.model to one it lists at GET /v1/models (Ollama: ollama pull)"),
    (lambda s, c, p, m: s == 400 and "maximum context length" in m,
     "the request is over the model's context window: set llm.context_window to the model's, or lower "
     "extract.pack_tokens, reports.max_input_tokens, query.max_context_tokens"),
    (lambda s, c, p, m: s == 500 and "input should be 'text' or 'json_object'" in m,
     "this is llama-cpp-python's server: set llm.profile: llama_cpp"),
    (lambda s, c, p, m: s == 422 and "missing field `value`" in m,
     "this is Text Generation Inference: set llm.profile: tgi"),
    (lambda s, c, p, m: s == 413 and "maximum allowed batch size" in m,
     "the embeddings server takes fewer texts per request: set embeddings.profile: tei (32 per request) or lower "
     "embeddings.batch_size"),
    (lambda s, c, p, m: c == "empty",
     "the answer came back empty: on a reasoning model raise llm.reasoning_budget_tokens and "
     "llm.reasoning_retry_tokens (its limit covers its hidden reasoning), or set llm.reasoning_effort lower"),
]


def fix_for(status: int | None, code: str | None, param: str | None, message: str | None) -> str | None:
    """The setting to change for this refusal, or None when no known cause matches."""
    # The provider's words, without the client's "HTTP 400: " (or the breaker's "not sent: ...") in front.
    text = re.sub(r"^.*?http \d{3}: ", "", str(message or "").lower(), count=1)
    args = (int(status or 0), str(code or "").lower(), str(param or ""), text)
    for test, text in _FIXES:
        if test(*args):
            return text
    return None
