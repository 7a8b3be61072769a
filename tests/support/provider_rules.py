"""The rules of the provider conformance servers (provider_server.py): what each provider refuses,
with the status and error body it answers, and what it silently ignores.

A test harness, never a product default. Each rule names where it comes from: the provider's
documentation (doc), its source (src), or an error body a user pasted in a public issue (obs).
Where only the status and envelope are known and the message is not, the rule says "text is a
stand-in", and nothing in corpusgraph keys on that text. A rule refuses only what its source
says is refused; a field a provider silently drops is an `Ignore`, counted apart: a silent
ignore means unconstrained output or an unbounded answer, which is as bad as a refusal.
tests/unit/support/test_conformance_rules.py shows each rule refusing one bad body and accepting the
same body without the fault, so a server that accepts everything cannot pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

OPENAI_SO = "https://platform.openai.com/docs/guides/structured-outputs#supported-schemas"
OPENAI_REASONING = "https://platform.openai.com/docs/guides/reasoning#limitations"
OPENAI_CHAT = "https://platform.openai.com/docs/api-reference/chat/create"
OPENAI_EMB = "https://platform.openai.com/docs/api-reference/embeddings/create"
OPENAI_BATCH = "https://platform.openai.com/docs/guides/batch"
AZURE_SO = "https://learn.microsoft.com/azure/ai-foundry/openai/how-to/structured-outputs"
AZURE_VERSIONS = "https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle"
AZURE_AUTH = "https://learn.microsoft.com/azure/ai-foundry/openai/how-to/managed-identity"
AZURE_BATCH = "https://learn.microsoft.com/azure/ai-foundry/openai/how-to/batch"
VLLM_SRC = "vllm/entrypoints/openai/protocol.py (src); https://docs.vllm.ai/en/latest/features/structured_outputs/"
OLLAMA_SRC = "ollama openai/openai.go, middleware/openai.go (src); docs/openai-compatibility.mdx, docs/faq.mdx"
LLAMA_PY = "llama-cpp-python server/types.py ResponseFormat (src); answer observed from the bundled 0.3.36 server"
LLAMA_ERRORS = "llama-cpp-python server/errors.py (src)"
TGI_SRC = "text-generation-inference router/src/lib.rs GrammarType, ErrorResponse (src)"
TEI_SRC = "text-embeddings-inference router/src/http/server.rs, main.rs --max-client-batch-size (src)"

CHAT_FIELDS = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream", "stop",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "user", "response_format",
    "seed", "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort", "service_tier", "store", "metadata",
    "modalities", "prediction", "audio", "stream_options", "web_search_options", "verbosity", "prompt_cache_key",
    "safety_identifier", "functions", "function_call"})  # OPENAI_CHAT's request body
OPENAI_UNSUPPORTED = ("allOf", "not", "dependentRequired", "dependentSchemas", "if", "then", "else",
                      "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties", "maxProperties",
                      "unevaluatedItems", "contains", "minContains", "maxContains", "uniqueItems", "oneOf",
                      "minLength", "maxLength")
AZURE_UNSUPPORTED = OPENAI_UNSUPPORTED + ("pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                                          "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "default")
OPENAI_FORMATS = ("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid")


@dataclass
class Call:
    """One request as a rule sees it. kind: chat | embeddings | batch_create | batch_line."""

    kind: str
    body: dict
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    path: str = ""
    query: dict[str, str] = field(default_factory=dict)
    deployment: str | None = None  # Azure's dated API: the path's deployment


@dataclass
class Config:
    """What the server serves: its key, models and the rest (command-line options of provider_server)."""

    profile: str
    key: str | None = None
    models: tuple[str, ...] = ("m",)
    reasoning_models: tuple[str, ...] = ()
    no_system_models: tuple[str, ...] = ()
    fine_tuned_models: tuple[str, ...] = ()  # OpenAI: fine-tuned models refuse more schema keywords
    api_versions: tuple[str, ...] = ("2024-06-01", "2024-08-01-preview", "2024-10-21", "2025-04-01-preview")
    tokens: tuple[str, ...] = ()  # Azure: Entra ID tokens it takes
    context: int = 32_768  # vllm --max-model-len, llama.cpp n_ctx, Ollama num_ctx
    # Hidden reasoning tokens a reasoning model spends before its answer, inside its
    # max_completion_tokens; a limit they use up gives an empty answer, finish_reason "length"
    # (platform.openai.com/docs/guides/reasoning, "Allocating space for reasoning").
    reasoning_tokens: int = 0
    max_client_batch: int = 32  # TEI


@dataclass(frozen=True)
class Rule:
    id: str
    doc: str
    kinds: tuple[str, ...]
    check: Callable[[Call, Config], tuple[int, Any] | None]


@dataclass(frozen=True)
class Ignore:
    id: str
    doc: str
    kinds: tuple[str, ...]
    check: Callable[[Call, Config], bool]


def oa(status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
       code: Any = None) -> tuple[int, dict]:
    return status, {"error": {"message": message, "type": type_, "param": param, "code": code}}


def az(status: int, code: str, message: str) -> tuple[int, dict]:
    return status, {"error": {"code": code, "message": message}}


def _schema(body: dict) -> tuple[str, dict, bool] | None:
    """(name, schema, strict) of a json_schema response_format."""
    rf = body.get("response_format")
    if not isinstance(rf, dict) or rf.get("type") != "json_schema" or not isinstance(rf.get("json_schema"), dict):
        return None
    js = rf["json_schema"]
    return str(js.get("name")), js.get("schema") if isinstance(js.get("schema"), dict) else {}, bool(js.get("strict"))


def _walk(node: Any, ctx: tuple = ()):
    """(context, node) of every schema node, in OpenAI's context notation."""
    if isinstance(node, dict):
        yield ctx, node
        for key in ("properties", "$defs", "definitions"):
            for k, v in (node.get(key) or {}).items() if isinstance(node.get(key), dict) else ():
                yield from _walk(v, ctx + (key, k))
        if isinstance(node.get("items"), dict):
            yield from _walk(node["items"], ctx + ("items",))
        for key in ("anyOf", "oneOf", "allOf"):
            for i, v in enumerate(node.get(key) or []) if isinstance(node.get(key), list) else ():
                yield from _walk(v, ctx + (key, i))


def strict_problem(name: str, schema: dict, unsupported: tuple[str, ...], formats: tuple[str, ...] | None,
                   max_props: int, default_text: bool = False) -> tuple[str, str] | None:
    """(which, message) strict mode refuses `schema` with, or None; which: shape, additional,
    required, keyword, format or limits. Texts from OPENAI_SO's refusals as users quote them
    (dottxt-ai/outlines#844, vercel/ai#6484: additionalProperties and required; liam-hq/liam#1162:
    "'minimum' is not permitted"; RooCodeInc/Roo-Code#10198: formats; openai/openai-agents-python
    #449: missing items and properties; #4390: Azure's `default`)."""
    head = f"Invalid schema for response_format '{name}': "
    if schema.get("type") != "object" or "anyOf" in schema:  # the root text is a stand-in
        return "shape", head + f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{schema.get('type')}\"'."
    props = 0
    for ctx, node in _walk(schema):
        where = f"In context={ctx!r}, "
        t = node.get("type")
        types = t if isinstance(t, list) else [t]
        if "object" in types or "properties" in node:
            if not isinstance(node.get("properties"), dict):
                return "shape", head + where + "object schema missing properties."
            if node.get("additionalProperties") is not False:
                return "additional", head + where + "'additionalProperties' is required to be supplied and to be false."
            missing = [k for k in node["properties"] if k not in (node.get("required") or [])]
            if missing:
                return "required", head + where + ("'required' is required to be supplied and to be an array "
                                                   f"including every key in properties. Missing '{missing[0]}'.")
            props += len(node["properties"])
        if "array" in types and not isinstance(node.get("items"), dict):
            return "shape", head + where + "array schema missing items."
        for kw in unsupported:
            if kw in node:
                if kw == "default" and default_text:
                    return "keyword", head + where + "'default' is not permitted within a property definition."
                return "keyword", head + where + f"'{kw}' is not permitted."
        if "format" in node and formats is not None and node["format"] not in formats:
            return "format", head + where + f"'{node['format']}' is not a valid format."
    if props > max_props:  # text is a stand-in (the limit is documented, its message is not)
        return "limits", head + f"Expected at most {max_props} properties in total, got {props}."
    return None


def prompt_tokens(body: dict) -> int:
    """About four characters a token, as a server's tokenizer would roughly count."""
    return sum(len(str(m.get("content") or "")) for m in body.get("messages") or []) // 4 + 4


def _answer_tokens(body: dict) -> int:
    return int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)


def _system(body: dict) -> bool:
    return any(m.get("role") == "system" for m in body.get("messages") or [])


# -- openai ------------------------------------------------------------------------------------------

def _openai_key(c: Call, cfg: Config):
    auth = c.headers.get("authorization", "")
    if cfg.key and auth != f"Bearer {cfg.key}":
        got = auth.removeprefix("Bearer ")
        shown = f"{got[:3]}...{got[-4:]}" if got else "(none)"
        return oa(401, f"Incorrect API key provided: {shown}. You can find your API key at "
                  "https://platform.openai.com/account/api-keys.", code="invalid_api_key")
    return None


def _model_unknown(c: Call, cfg: Config):
    model = c.body.get("model")
    if model not in cfg.models:
        return oa(404, f"The model `{model}` does not exist or you do not have access to it.", code="model_not_found")
    return None


def _unknown_param(c: Call, cfg: Config):
    extra = [k for k in c.body if k not in CHAT_FIELDS]
    rf = c.body.get("response_format")
    if not extra and isinstance(rf, dict):
        extra = [f"response_format.{k}" for k in rf if k not in ("type", "json_schema")]
        if not extra and isinstance(rf.get("json_schema"), dict):
            extra = [f"response_format.json_schema.{k}" for k in rf["json_schema"]
                     if k not in ("name", "schema", "strict", "description")]
    if extra:
        return oa(400, f"Unknown parameter: '{extra[0]}'.", param=extra[0], code="unknown_parameter")
    return None


def _rf_type(c: Call, cfg: Config):
    rf = c.body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") not in ("text", "json_object", "json_schema"):
        return oa(400, f"Invalid value: '{rf.get('type')}'. Supported values are: 'text', 'json_object', and "
                  "'json_schema'.", param="response_format.type", code="invalid_value")
    return None


def _rf_name(c: Call, cfg: Config):  # text is a stand-in; the pattern is OPENAI_CHAT's
    got = _schema(c.body)
    if got is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", got[0]):
        return oa(400, "Invalid 'response_format.json_schema.name': string does not match pattern.",
                  param="response_format.json_schema.name", code="invalid_value")
    return None


def _strict(which, unsupported, formats, max_props, default_text=False):
    def check(c: Call, cfg: Config):
        got = _schema(c.body)
        if got is None or not got[2]:
            return None
        problem = strict_problem(got[0], got[1], unsupported, formats, max_props, default_text)
        return oa(400, problem[1], param="response_format") if problem and problem[0] == which else None
    return check


STRICT_PARTS = ("shape", "additional", "required", "keyword", "format", "limits")


def strict_rules(prefix: str, doc: str, unsupported, formats, max_props, default_text=False) -> list[Rule]:
    # Where `format` is itself an unsupported keyword (Azure), the keyword rule covers it.
    parts = [w for w in STRICT_PARTS if w != "format" or "format" not in unsupported]
    return [Rule(f"{prefix}.strict.{w}", doc, ("chat",), _strict(w, unsupported, formats, max_props, default_text))
            for w in parts]


def _target(c: Call) -> Any:
    """The model a request runs on: Azure's dated API names it (the deployment) in the path."""
    return c.deployment if c.deployment is not None else c.body.get("model")


# OPENAI_SO: "For fine-tuned models: ... not supported: minLength, maxLength, pattern, format, minimum,
# maximum, multipleOf, patternProperties, minItems, maxItems" (besides the general list).
FINE_TUNED_UNSUPPORTED = OPENAI_UNSUPPORTED + ("pattern", "format", "minimum", "maximum", "multipleOf", "minItems",
                                              "maxItems")


def _fine_tuned(c: Call, cfg: Config):
    got = _schema(c.body)
    if got is None or not got[2] or c.body.get("model") not in cfg.fine_tuned_models:
        return None
    problem = strict_problem(got[0], got[1], FINE_TUNED_UNSUPPORTED, None, 5000)
    return oa(400, problem[1], param="response_format") if problem else None


def _reason_max_tokens(c: Call, cfg: Config):
    if _target(c) in cfg.reasoning_models and "max_tokens" in c.body:
        return oa(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                  "'max_completion_tokens' instead.", param="max_tokens", code="unsupported_parameter")
    return None


def _reason_temperature(c: Call, cfg: Config):
    t = c.body.get("temperature")
    if _target(c) in cfg.reasoning_models and t is not None and t != 1:
        return oa(400, f"Unsupported value: 'temperature' does not support {t} with this model. Only the default "
                  "(1) value is supported.", param="temperature", code="unsupported_value")
    return None


def _reason_system(c: Call, cfg: Config):
    if _target(c) in cfg.no_system_models and _system(c.body):
        return oa(400, "Unsupported value: 'messages[0].role' does not support 'system' with this model.",
                  param="messages[0].role", code="unsupported_value")
    return None


def _emb_input(c: Call) -> list:
    x = c.body.get("input")
    return x if isinstance(x, list) else [x]


def _emb_count(c: Call, cfg: Config):  # text is a stand-in; the limit is OPENAI_EMB's
    n = len(_emb_input(c))
    return oa(400, f"'$.input' is too long: {n} items, at most 2048.", param="input") if n > 2048 else None


def _emb_empty(c: Call, cfg: Config):  # text is a stand-in; "cannot be an empty string" is OPENAI_EMB's
    return oa(400, "'$.input' is invalid: an input is an empty string.", param="input") \
        if any(x == "" for x in _emb_input(c)) else None


def _batch_window(c: Call, cfg: Config):  # text is a stand-in; only 24h is accepted (OPENAI_BATCH)
    w = c.body.get("completion_window")
    return oa(400, f"Invalid value for 'completion_window': {w!r}. Supported values are: '24h'.",
              param="completion_window", code="invalid_value") if w != "24h" else None


OPENAI_BODY_RULES = [
    Rule("openai.model.unknown", "obs: ai-genie/chatgpt-vscode#173 (404 model_not_found)", ("chat", "embeddings"),
         _model_unknown),
    Rule("openai.param.unknown", "obs: spring-projects/spring-ai#2969 (400 unknown_parameter); " + OPENAI_CHAT,
         ("chat",), _unknown_param),
    Rule("openai.rf.type", OPENAI_CHAT, ("chat",), _rf_type),
    Rule("openai.rf.name", OPENAI_CHAT + " (json_schema.name pattern; text is a stand-in)", ("chat",), _rf_name),
    *strict_rules("openai", OPENAI_SO, OPENAI_UNSUPPORTED, OPENAI_FORMATS, 5000),
    Rule("openai.strict.fine_tuned", OPENAI_SO + " (fine-tuned models)", ("chat",), _fine_tuned),
    Rule("openai.reason.max_tokens", OPENAI_REASONING + "; obs: griptape-ai/ComfyUI-Griptape#312", ("chat",),
         _reason_max_tokens),
    Rule("openai.reason.temperature", OPENAI_REASONING + "; obs: OpenHands#4131", ("chat",), _reason_temperature),
    Rule("openai.reason.system", "obs: BerriAI/litellm#5671 (o1-mini)", ("chat",), _reason_system),
    Rule("openai.emb.count", OPENAI_EMB + " (text is a stand-in)", ("embeddings",), _emb_count),
    Rule("openai.emb.empty", OPENAI_EMB + " (text is a stand-in)", ("embeddings",), _emb_empty),
]
OPENAI_RULES = [Rule("openai.auth.key", "obs: continuedev/continue#11442 (401 invalid_api_key)",
                     ("chat", "embeddings", "batch_create"), _openai_key),
                *OPENAI_BODY_RULES,
                Rule("openai.batch.window", OPENAI_BATCH + " (text is a stand-in)", ("batch_create",), _batch_window)]


# -- azure_openai ------------------------------------------------------------------------------------

def _version(c: Call) -> str | None:
    return c.query.get("api-version")


def _v1(c: Call) -> bool:
    return "/openai/v1/" in c.path + "/"


def _azure_version(c: Call, cfg: Config):
    if _v1(c):
        return None
    v = _version(c)
    if v is None or v not in cfg.api_versions:  # obs: MicrosoftDocs/azure-docs#114602 (the missing case)
        return az(404, "404", "Resource not found")
    return None


def _azure_json_schema_version(c: Call, cfg: Config):
    v = _version(c)
    if not _v1(c) and _schema(c.body) is not None and v is not None and v[:10] < "2024-08-01":
        return az(400, "BadRequest", "response_format value as json_schema is enabled only for api versions "
                  "2024-08-01-preview and later")
    return None


def _azure_mct_version(c: Call, cfg: Config):  # text is a stand-in in Azure's "Unrecognized request argument" form
    v = _version(c)
    if not _v1(c) and "max_completion_tokens" in c.body and v is not None and v[:10] < "2024-09-01":
        return az(400, "BadRequest", "Unrecognized request argument supplied: max_completion_tokens")
    return None


def _azure_deployment(c: Call, cfg: Config):
    name = c.body.get("model") if _v1(c) or c.kind == "batch_line" else c.deployment
    if name not in cfg.models:
        return az(404, "DeploymentNotFound", "The API deployment for this resource does not exist. If you created "
                  "the deployment within the last 5 minutes, please wait a moment and try again.")
    return None


_AZ_DENIED = ("Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for "
              "an active subscription and use a correct regional API endpoint for your resource.")
_AZ_TOKEN = ("Unauthorized. Access token is missing, invalid, audience is incorrect "
             "(https://cognitiveservices.azure.com), or have expired.")


def _azure_key(c: Call, cfg: Config):  # obs: SciSharp/BotSharp#386
    key = c.headers.get("api-key")
    if key is not None and key != cfg.key:
        return az(401, "401", _AZ_DENIED)
    if key is None and "authorization" not in c.headers:
        return az(401, "401", _AZ_DENIED)
    return None


def _azure_bearer(c: Call, cfg: Config):  # obs: Azure-Samples/azure-search-openai-demo#458, langchain#17373
    auth = c.headers.get("authorization")
    if "api-key" in c.headers or auth is None:
        return None
    token = auth.removeprefix("Bearer ")
    if token in cfg.tokens or (_v1(c) and cfg.key and token == cfg.key):  # v1 takes the key as a bearer (AZURE_VERSIONS)
        return None
    return 401, {"statusCode": 401, "message": _AZ_TOKEN}


def _azure_batch_endpoint(c: Call, cfg: Config):  # text is a stand-in; the endpoint is AZURE_BATCH's
    want = "/v1/chat/completions" if _v1(c) else "/chat/completions"
    if c.body.get("endpoint") != want:
        return az(400, "invalid_request", f"endpoint must be {want}")
    return None


AZURE_RULES = [
    Rule("azure.url.version", AZURE_VERSIONS + "; obs: MicrosoftDocs/azure-docs#114602",
         ("chat", "embeddings", "batch_create"), _azure_version),
    Rule("azure.auth.key", AZURE_AUTH + "; obs: SciSharp/BotSharp#386", ("chat", "embeddings", "batch_create"),
         _azure_key),
    Rule("azure.auth.bearer", AZURE_AUTH + "; obs: Azure-Samples/azure-search-openai-demo#458",
         ("chat", "embeddings", "batch_create"), _azure_bearer),
    Rule("azure.url.deployment", "obs: chatboxai/chatbox#646, semantic-kernel#5319 (404 DeploymentNotFound)",
         ("chat", "embeddings", "batch_line"), _azure_deployment),
    Rule("azure.url.version_json_schema", AZURE_SO + " (API support); obs: Microsoft Q&A 2278693", ("chat",),
         _azure_json_schema_version),
    Rule("azure.reason.version", AZURE_VERSIONS + " (max_completion_tokens from 2024-09-01-preview; text is a "
         "stand-in)", ("chat",), _azure_mct_version),
    *strict_rules("azure", AZURE_SO, AZURE_UNSUPPORTED, (), 100, default_text=True),
    Rule("azure.reason.max_tokens", OPENAI_REASONING + "; obs: anomalyco/opencode#37964 (gpt-5.1 on Azure)", ("chat",),
         _reason_max_tokens),
    Rule("azure.reason.temperature", OPENAI_REASONING + "; obs: holoviz/lumen#1087", ("chat",), _reason_temperature),
    Rule("azure.batch.endpoint", AZURE_BATCH + " (text is a stand-in)", ("batch_create",), _azure_batch_endpoint),
    Rule("azure.batch.window", AZURE_BATCH + " (text is a stand-in)", ("batch_create",), _batch_window),
]
