"""The conformance rules of the self-hosted servers (vLLM, Ollama, llama.cpp, TGI, TEI) and of an
unknown OpenAI-compatible server, and every profile's rule set (`RULES`).

A test harness, never a product default; see provider_rules.py for how rules are written.
"""

from __future__ import annotations

import re

from tests.support.provider_rules import (AZURE_RULES, LLAMA_ERRORS, LLAMA_PY, OLLAMA_SRC, OPENAI_RULES, TEI_SRC,
                                          TGI_SRC, VLLM_SRC, Call, Config, Ignore, Rule, _answer_tokens, _emb_input,
                                          oa, prompt_tokens)

__all__ = ["RULES", "IGNORES"]


def _vllm_error(status: int, message: str, type_: str, param: str | None = None) -> tuple[int, dict]:
    # vLLM's ErrorResponse: the status repeated as an integer `code` (src)
    return status, {"error": {"message": message, "type": type_, "param": param, "code": status}}


def _vllm_model(c: Call, cfg: Config):
    model = c.body.get("model")
    return None if model in cfg.models else _vllm_error(404, f"The model `{model}` does not exist.", "NotFoundError",
                                                        "model")


def _vllm_rf(c: Call, cfg: Config):
    rf = c.body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema" and not isinstance(rf.get("json_schema"), dict):
        return _vllm_error(400, "When response_format type is 'json_schema', the 'json_schema' field must be "
                           "provided.", "BadRequestError", "response_format")
    return None


def _vllm_so(c: Call, cfg: Config):
    so = c.body.get("structured_outputs")
    if isinstance(so, dict) and sum(1 for k in ("json", "regex", "choice", "grammar") if so.get(k) is not None) > 1:
        return _vllm_error(400, "You can only use one kind of constraints for structured outputs ('json', 'regex' or "
                           "'choice').", "BadRequestError")
    return None


def _context(error):
    def check(c: Call, cfg: Config):
        p, a = prompt_tokens(c.body), _answer_tokens(c.body)
        return error(cfg.context, p + a, p, a) if p + a > cfg.context else None
    return check


def _ctx_text(limit: int, total: int, p: int, a: int) -> str:
    return (f"This model's maximum context length is {limit} tokens. However, you requested {total} tokens "
            f"({p} in the messages, {a} in the completion). Please reduce the length of the messages or completion.")


def _ollama_model(c: Call, cfg: Config):
    model = c.body.get("model")
    return None if model in cfg.models else oa(404, f'model "{model}" not found, try pulling it first',
                                               "not_found_error")


def _ollama_messages(c: Call, cfg: Config):
    return oa(400, "[] is too short - 'messages'") if c.body.get("messages") == [] else None


def _ollama_format(c: Call, cfg: Config):
    f = c.body.get("encoding_format")
    if f is not None and f not in ("float", "base64"):
        return oa(400, f"Invalid value for 'encoding_format' = {f}. Supported values: ['float', 'base64'].")
    return None


def _llama_rf(c: Call, cfg: Config):
    rf = c.body.get("response_format")
    t = rf.get("type") if isinstance(rf, dict) else None
    if isinstance(rf, dict) and t not in ("text", "json_object"):
        # a pydantic validation error, wrapped by the server's error handler as a 500
        return 500, {"error": {"message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                                          f"'response_format', 'type'), 'msg': \"Input should be 'text' or "
                                          f"'json_object'\", 'input': '{t}'}}", "type": "internal_server_error",
                               "param": None, "code": None}}
    return None


def _llama_pattern(c: Call, cfg: Config):
    rf = c.body.get("response_format")
    text = str(rf.get("schema")) if isinstance(rf, dict) else ""
    for pattern in re.findall(r"'pattern': '([^']*)'", text):
        if not (pattern.startswith("^") and pattern.endswith("$")):
            return 500, {"error": {"message": "Pattern must start with '^' and end with '$'",
                                   "type": "internal_server_error", "param": None, "code": None}}
    return None


def _tgi_rf(c: Call, cfg: Config):  # text is a stand-in in axum's Json rejection form
    rf = c.body.get("response_format")
    if isinstance(rf, dict) and (rf.get("type") not in ("json", "json_object", "regex", "json_schema")
                                 or "value" not in rf):
        return 422, {"error": "Failed to deserialize the JSON body into the target type: response_format: "
                              "missing field `value`", "error_type": "validation"}
    return None


def _tei_size(c: Call, cfg: Config):
    n = len(_emb_input(c))
    if n > cfg.max_client_batch:
        return 413, {"message": f"batch size {n} > maximum allowed batch size {cfg.max_client_batch}", "code": 413,
                     "type": "validation"}
    return None


def _tei_empty(c: Call, cfg: Config):
    return (400, {"message": "Batch is empty", "code": 400, "type": "empty"}) if _emb_input(c) == [] else None


def _guided(c: Call, cfg: Config) -> bool:
    return any(k.startswith("guided_") for k in c.body)


def _mct_only(c: Call, cfg: Config) -> bool:
    return "max_completion_tokens" in c.body and "max_tokens" not in c.body


def _unwrapped(c: Call, cfg: Config) -> bool:
    rf = c.body.get("response_format")
    return isinstance(rf, dict) and rf.get("type") == "json_schema" and "schema" in rf and "json_schema" not in rf


def _ollama_strict(c: Call, cfg: Config) -> bool:
    rf = c.body.get("response_format")
    return isinstance(rf, dict) and isinstance(rf.get("json_schema"), dict) and "strict" in rf["json_schema"]


def _over_num_ctx(c: Call, cfg: Config) -> bool:
    return prompt_tokens(c.body) + _answer_tokens(c.body) > cfg.context


VLLM_RULES = [
    Rule("vllm.model.unknown", VLLM_SRC, ("chat", "embeddings"), _vllm_model),
    Rule("vllm.rf.json_schema_missing", VLLM_SRC, ("chat",), _vllm_rf),
    Rule("vllm.so.count", VLLM_SRC, ("chat",), _vllm_so),
    Rule("vllm.ctx.length", "obs: vllm-project/vllm#20409", ("chat",),
         _context(lambda n, t, p, a: _vllm_error(400, _ctx_text(n, t, p, a), "BadRequestError"))),
]
OLLAMA_RULES = [
    Rule("ollama.model.unknown", OLLAMA_SRC, ("chat", "embeddings"), _ollama_model),
    Rule("ollama.msg.empty", OLLAMA_SRC, ("chat",), _ollama_messages),
    Rule("ollama.emb.format", OLLAMA_SRC, ("embeddings",), _ollama_format),
]
LLAMA_RULES = [
    Rule("llama_cpp.rf.type", LLAMA_PY, ("chat",), _llama_rf),
    Rule("llama_cpp.grammar.pattern", "llama-cpp-python llama_grammar.py (src: an unanchored pattern asserts)",
         ("chat",), _llama_pattern),
    Rule("llama_cpp.ctx.length", LLAMA_ERRORS, ("chat",),
         _context(lambda n, t, p, a: oa(400, _ctx_text(n, t, p, a), param="messages", code="context_length_exceeded"))),
]
TGI_RULES = [Rule("tgi.rf.value", TGI_SRC + " (text is a stand-in)", ("chat",), _tgi_rf)]
TEI_RULES = [Rule("tei.batch.size", TEI_SRC, ("embeddings",), _tei_size),
             Rule("tei.batch.empty", TEI_SRC, ("embeddings",), _tei_empty)]

RULES: dict[str, list[Rule]] = {
    "openai": OPENAI_RULES, "azure_openai": AZURE_RULES, "vllm": VLLM_RULES, "ollama": OLLAMA_RULES,
    "llama_cpp": LLAMA_RULES, "tgi": TGI_RULES, "tei": TEI_RULES, "openai_compatible": [],
}
IGNORES: dict[str, list[Ignore]] = {
    "openai": [], "azure_openai": [],
    "vllm": [Ignore("vllm.ignored.guided", VLLM_SRC + " (guided_* removed in 0.12, warning only)", ("chat",), _guided)],
    "ollama": [Ignore("ollama.ignored.max_completion_tokens", OLLAMA_SRC + " (no such field)", ("chat",), _mct_only),
               Ignore("ollama.ignored.strict", OLLAMA_SRC + " (json_schema.strict dropped)", ("chat",), _ollama_strict),
               Ignore("ollama.ignored.num_ctx", OLLAMA_SRC + " (prompts over num_ctx are cut, routes.go)", ("chat",),
                      _over_num_ctx)],
    "llama_cpp": [Ignore("llama_cpp.ignored.max_completion_tokens", LLAMA_PY + " (max_tokens only)", ("chat",),
                         _mct_only)],
    "tgi": [Ignore("tgi.ignored.max_completion_tokens", TGI_SRC + " (max_tokens only)", ("chat",), _mct_only)],
    "tei": [],
    # An unknown server: what any of the servers above would drop without a word.
    "openai_compatible": [
        Ignore("compat.ignored.guided", VLLM_SRC, ("chat",), _guided),
        Ignore("compat.ignored.max_completion_tokens", OLLAMA_SRC + "; " + LLAMA_PY, ("chat",), _mct_only),
        Ignore("compat.ignored.unwrapped_schema", "llama.cpp tools/server (a json_schema without its wrapper is "
               "not read; analysis of PR #12168)", ("chat",), _unwrapped)],
}
