"""Every rule of the provider conformance servers refuses one bad body with the provider's status and
error text, and lets the same body without the fault through; every ignore rule counts the field
a provider drops and nothing else. So a server that accepts everything cannot pass the profile
tests (tests/e2e/test_providers.py). The judge is the servers' own (provider_server.Conformance);
a few requests go over HTTP to show the routes apply the same rules.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request

import pytest

from tests.support.provider_rules import Call, Config
from tests.support.provider_rules_local import IGNORES, RULES
from tests.support.provider_server import Conformance, ProviderServer

OBJ = {"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string"}}},
       "required": ["names"], "additionalProperties": False}


def body(schema=OBJ, strict=True, **kw):
    b = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
         "max_completion_tokens": 50, "temperature": 0,
         "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": strict}}}
    b.update(kw)
    return b


def mt(b, n=5):
    """The body with max_tokens (the field local servers read) instead of max_completion_tokens."""
    return {**drop(b, "max_completion_tokens"), "max_tokens": n}


def with_schema(change):
    s = copy.deepcopy(OBJ)
    change(s)
    return body(s)


def drop(d, *keys):
    d = copy.deepcopy(d)
    for k in keys:
        d.pop(k)
    return d


OA = {"authorization": "Bearer k"}
AZ_PATH, AZ_Q = "/openai/deployments/m/chat/completions", {"api-version": "2024-10-21"}


def oa_call(b, kind="chat", headers=OA):
    return Call(kind, b, dict(headers))


def az_call(b, kind="chat", headers=None, query=AZ_Q, path=AZ_PATH, deployment="m"):
    return Call(kind, b, dict(headers if headers is not None else {"api-key": "k"}), path, dict(query), deployment)


def items(change):
    return with_schema(lambda s: change(s["properties"]["names"]["items"]))


MANY = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(101)},
        "required": [f"p{i}" for i in range(101)], "additionalProperties": False}
HUGE = {**MANY, "properties": {f"p{i}": {"type": "string"} for i in range(5001)}, "required": [f"p{i}" for i in range(5001)]}
EMB = {"model": "m", "input": ["a", "b"], "encoding_format": "float"}
BATCH = {"input_file_id": "file-1", "endpoint": "/v1/chat/completions", "completion_window": "24h"}

# rule id -> (profile, good call, bad call, status, words of the refusal)
CASES = {
    "openai.auth.key": ("openai", oa_call(body()), oa_call(body(), headers={"authorization": "Bearer sk-wrong-1234"}),
                        401, "Incorrect API key provided: sk-...1234"),
    "openai.model.unknown": ("openai", oa_call(body()), oa_call(body(model="gpt-nope")), 404, "`gpt-nope` does not exist"),
    "openai.param.unknown": ("openai", oa_call(body()), oa_call(body(guided_json={})), 400,
                             "Unknown parameter: 'guided_json'."),
    "openai.rf.type": ("openai", oa_call(body()), oa_call(body(response_format={"type": "json"})), 400,
                       "Invalid value: 'json'"),
    "openai.rf.name": ("openai", oa_call(body()), oa_call({**body(), "response_format": {"type": "json_schema",
                       "json_schema": {"name": "an answer", "schema": OBJ, "strict": True}}}), 400, "does not match pattern"),
    "openai.strict.shape": ("openai", oa_call(body()), oa_call(items(lambda i: i.update(type="array"))), 400,
                            "array schema missing items"),
    "openai.strict.additional": ("openai", oa_call(body()), oa_call(body(drop(OBJ, "additionalProperties"))), 400,
                                 "In context=(), 'additionalProperties' is required to be supplied and to be false."),
    "openai.strict.required": ("openai", oa_call(body()), oa_call(body({**OBJ, "required": []})), 400,
                               "including every key in properties. Missing 'names'."),
    "openai.strict.keyword": ("openai", oa_call(body()), oa_call(items(lambda i: i.update(maxLength=80))), 400,
                              "In context=('properties', 'names', 'items'), 'maxLength' is not permitted."),
    "openai.strict.format": ("openai", oa_call(items(lambda i: i.update(format="date"))),
                             oa_call(items(lambda i: i.update(format="uri"))), 400, "'uri' is not a valid format."),
    "openai.strict.limits": ("openai", oa_call(body(MANY)), oa_call(body(HUGE)), 400, "at most 5000 properties"),
    "openai.strict.fine_tuned": ("openai", oa_call(body(model="ft:m")),
                                 oa_call(with_schema(lambda s: s["properties"]["names"].update(maxItems=3))
                                         | {"model": "ft:m"}), 400, "'maxItems' is not permitted."),
    "openai.reason.max_tokens": ("openai", oa_call(drop(body(model="o3"), "temperature")),
                                 oa_call(drop(body(model="o3", max_tokens=50), "temperature", "max_completion_tokens")),
                                 400, "'max_tokens' is not supported with this model"),
    "openai.reason.temperature": ("openai", oa_call(drop(body(model="o3"), "temperature")),
                                  oa_call(body(model="o3", temperature=0.0)), 400,
                                  "'temperature' does not support 0.0 with this model"),
    "openai.reason.system": ("openai", oa_call(drop(body(model="o1-mini", messages=[{"role": "user", "content": "x"}]),
                                                    "temperature")),
                             oa_call(drop(body(model="o1-mini"), "temperature")), 400,
                             "'messages[0].role' does not support 'system'"),
    "openai.emb.count": ("openai", oa_call(EMB, "embeddings"), oa_call({**EMB, "input": ["x"] * 2049}, "embeddings"),
                         400, "2049 items"),
    "openai.emb.empty": ("openai", oa_call(EMB, "embeddings"), oa_call({**EMB, "input": ["a", ""]}, "embeddings"), 400,
                         "empty string"),
    "openai.batch.window": ("openai", oa_call(BATCH, "batch_create"),
                            oa_call({**BATCH, "completion_window": "48h"}, "batch_create"), 400, "'24h'"),
    "azure.url.version": ("azure_openai", az_call(body()), az_call(body(), query={}), 404, "Resource not found"),
    "azure.auth.key": ("azure_openai", az_call(body()), az_call(body(), headers={"api-key": "wrong"}), 401,
                       "Access denied due to invalid subscription key"),
    "azure.auth.bearer": ("azure_openai", az_call(body(), headers={"authorization": "Bearer tok-1"}),
                          az_call(body(), headers={"authorization": "Bearer k"}), 401,
                          "Access token is missing, invalid, audience is incorrect"),
    "azure.url.deployment": ("azure_openai", az_call(body()), az_call(body(), deployment="gpt-4o"), 404,
                             "DeploymentNotFound"),
    "azure.url.version_json_schema": ("azure_openai", az_call(body()),
                                      az_call(body(max_tokens=5), query={"api-version": "2024-06-01"}), 400,
                                      "enabled only for api versions 2024-08-01-preview and later"),
    "azure.reason.version": ("azure_openai", az_call(body(response_format=None), query={"api-version": "2024-10-21"}),
                             az_call(body(response_format=None), query={"api-version": "2024-08-01-preview"}), 400,
                             "max_completion_tokens"),
    "azure.strict.shape": ("azure_openai", az_call(body()), az_call(items(lambda i: i.update(type="object"))), 400,
                           "object schema missing properties"),
    "azure.strict.additional": ("azure_openai", az_call(body()), az_call(body(drop(OBJ, "additionalProperties"))), 400,
                                "'additionalProperties' is required"),
    "azure.strict.required": ("azure_openai", az_call(body()), az_call(body({**OBJ, "required": []})), 400,
                              "Missing 'names'"),
    "azure.strict.keyword": ("azure_openai", az_call(body()),
                             az_call(with_schema(lambda s: s["properties"]["names"].update(maxItems=5))), 400,
                             "'maxItems' is not permitted."),
    "azure.strict.limits": ("azure_openai", az_call(body({**MANY, "properties": dict(list(MANY["properties"].items())[:100]),
                                                          "required": MANY["required"][:100]})),
                            az_call(body(MANY)), 400, "at most 100 properties"),
    "azure.reason.max_tokens": ("azure_openai", az_call(drop(body(), "temperature"), deployment="reasoner"),
                                az_call(drop(body(max_tokens=9), "temperature", "max_completion_tokens"),
                                        deployment="reasoner"), 400, "Use 'max_completion_tokens' instead."),
    "azure.reason.temperature": ("azure_openai", az_call(drop(body(), "temperature"), deployment="reasoner"),
                                 az_call(body(temperature=0.2), deployment="reasoner"), 400, "does not support 0.2"),
    "azure.batch.endpoint": ("azure_openai", az_call({**BATCH, "endpoint": "/chat/completions"}, "batch_create",
                                                     path="/openai/batches"),
                             az_call(BATCH, "batch_create", path="/openai/batches"), 400, "/chat/completions"),
    "azure.batch.window": ("azure_openai", az_call({**BATCH, "endpoint": "/chat/completions"}, "batch_create",
                                                   path="/openai/batches"),
                           az_call({**BATCH, "endpoint": "/chat/completions", "completion_window": "1h"},
                                   "batch_create", path="/openai/batches"), 400, "'24h'"),
    "vllm.model.unknown": ("vllm", oa_call(body(strict=False)), oa_call(body(model="Qwen")), 404, "does not exist"),
    "vllm.rf.json_schema_missing": ("vllm", oa_call(body()), oa_call(body(response_format={"type": "json_schema",
                                    "schema": OBJ})), 400, "the 'json_schema' field must be provided"),
    "vllm.so.count": ("vllm", oa_call(body(structured_outputs={"json": OBJ})),
                      oa_call(body(structured_outputs={"json": OBJ, "regex": "a+"})), 400, "one kind of constraints"),
    "vllm.ctx.length": ("vllm", oa_call(body()), oa_call(body(max_completion_tokens=40_000)), 400,
                        "maximum context length is 32768 tokens"),
    "ollama.model.unknown": ("ollama", oa_call(body(max_tokens=5)), oa_call(body(model="llama3")), 404,
                             'model "llama3" not found, try pulling it first'),
    "ollama.msg.empty": ("ollama", oa_call(body()), oa_call(body(messages=[])), 400, "[] is too short - 'messages'"),
    "ollama.emb.format": ("ollama", oa_call(EMB, "embeddings"), oa_call({**EMB, "encoding_format": "int8"},
                          "embeddings"), 400, "Invalid value for 'encoding_format' = int8"),
    "llama_cpp.rf.type": ("llama_cpp", oa_call(body(response_format={"type": "json_object", "schema": OBJ})),
                          oa_call(body()), 500, "Input should be 'text' or 'json_object'"),
    "llama_cpp.grammar.pattern": ("llama_cpp", oa_call(body(response_format={"type": "json_object", "schema": {
                                  "type": "string", "pattern": "^a+$"}})),
                                  oa_call(body(response_format={"type": "json_object", "schema": {
                                      "type": "string", "pattern": "a+"}})), 500, "Pattern must start with '^'"),
    "llama_cpp.ctx.length": ("llama_cpp", oa_call(mt(body(response_format=None))),
                             oa_call(mt(body(response_format=None), 33_000)), 400, "context_length_exceeded"),
    "tgi.rf.value": ("tgi", oa_call(body(response_format={"type": "json", "value": OBJ})), oa_call(body()), 422,
                     "missing field `value`"),
    "tei.batch.size": ("tei", oa_call({**EMB, "input": ["x"] * 32}, "embeddings"),
                       oa_call({**EMB, "input": ["x"] * 33}, "embeddings"), 413,
                       "batch size 33 > maximum allowed batch size 32"),
    "tei.batch.empty": ("tei", oa_call(EMB, "embeddings"), oa_call({**EMB, "input": []}, "embeddings"), 400,
                        "Batch is empty"),
}

# ignore id -> (profile, good call, call with the dropped field)
IGNORE_CASES = {
    "vllm.ignored.guided": ("vllm", oa_call(body()), oa_call(body(guided_json=OBJ))),
    "ollama.ignored.max_completion_tokens": ("ollama", oa_call(mt(body(response_format=None))),
                                             oa_call(body(response_format=None))),
    "ollama.ignored.strict": ("ollama", oa_call(drop(body(max_tokens=5), "max_completion_tokens",
                                                     "response_format")), oa_call(body(max_tokens=5))),
    "ollama.ignored.num_ctx": ("ollama", oa_call(drop(body(max_tokens=5, response_format=None),
                                                      "max_completion_tokens")),
                               oa_call(drop(body(max_tokens=40_000, response_format=None), "max_completion_tokens"))),
    "llama_cpp.ignored.max_completion_tokens": ("llama_cpp", oa_call(drop(body(max_tokens=5, response_format=None),
                                                "max_completion_tokens")), oa_call(body(response_format=None))),
    "tgi.ignored.max_completion_tokens": ("tgi", oa_call(drop(body(max_tokens=5, response_format=None),
                                          "max_completion_tokens")), oa_call(body(response_format=None))),
    "compat.ignored.guided": ("openai_compatible", oa_call(mt(body())), oa_call(mt(body(guided_json=OBJ)))),
    "compat.ignored.max_completion_tokens": ("openai_compatible", oa_call(drop(body(max_tokens=5),
                                             "max_completion_tokens")), oa_call(body())),
    "compat.ignored.unwrapped_schema": ("openai_compatible", oa_call(mt(body())),
                                        oa_call(mt(body(response_format={"type": "json_schema", "schema": OBJ})))),
}


def cfg(profile):
    return Config(profile, key="k", models=("m", "o3", "o1-mini", "reasoner", "ft:m"),
                  reasoning_models=("o3", "o1-mini", "reasoner"), no_system_models=("o1-mini",),
                  fine_tuned_models=("ft:m",), tokens=("tok-1",))


def test_every_rule_and_ignore_has_a_case():
    assert sorted(r.id for rules in RULES.values() for r in rules) == sorted(CASES)
    assert sorted(i.id for ignores in IGNORES.values() for i in ignores) == sorted(IGNORE_CASES)
    assert all(r.doc for rules in RULES.values() for r in rules)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_the_server_refuses_the_bad_body_with_the_providers_answer(rule_id):
    profile, good, bad, status, words = CASES[rule_id]
    conf = Conformance(cfg(profile))
    assert conf.judge(good, "t") is None, conf.view()["refusals"]
    got = conf.judge(bad, "t")
    assert got is not None and got[0] == status, got
    assert words in json.dumps(got[1], ensure_ascii=False).replace('\\"', '"')
    assert conf.view()["by_rule"].get(rule_id) == 1, "another rule refused it first"
    assert conf.view()["refused"] == 1 and conf.view()["requests"] == 2


def test_azure_refuses_format_and_the_bounds_openai_now_takes():
    conf = Conformance(cfg("azure_openai"))
    for change, word in ((lambda i: i.update(format="date"), "format"), (lambda i: i.update(pattern="^a$"), "pattern"),
                         (lambda i: i.update(minimum=1, type="integer"), "minimum")):
        got = conf.judge(az_call(items(change)), "t")
        assert got is not None and f"'{word}' is not permitted." in got[1]["error"]["message"]
    assert Conformance(cfg("openai")).judge(oa_call(items(lambda i: i.update(minimum=1, type="integer"))), "t") is None


@pytest.mark.parametrize("ignore_id", sorted(IGNORE_CASES))
def test_a_dropped_field_is_counted_as_ignored(ignore_id):
    profile, good, bad = IGNORE_CASES[ignore_id]
    conf = Conformance(cfg(profile))
    assert conf.judge(good, "t") is None and conf.view()["ignored"] == 0, conf.view()
    assert conf.judge(bad, "t") is None
    assert conf.view()["ignored"] == 1 and conf.view()["by_rule"] == {ignore_id: 1}


def _post(url, payload, headers):
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_routes_apply_the_rules_over_http():
    with ProviderServer("openai", "--key", "k", "--models", "m") as srv:
        ok = _post(srv.base_url + "/chat/completions", body(), OA)
        refused = _post(srv.base_url + "/chat/completions", body(drop(OBJ, "additionalProperties")), OA)
        assert ok[0] == 200 and json.loads(ok[1]["choices"][0]["message"]["content"]) == {"names": []}
        assert refused[0] == 400 and refused[1]["error"]["param"] == "response_format"
        assert srv.stats()["by_rule"] == {"openai.strict.additional": 1}
    with ProviderServer("azure_openai", "--key", "k", "--models", "dep") as srv:
        url = srv.root + "/openai/deployments/dep/chat/completions?api-version=2024-10-21"
        assert _post(url, body(), {"api-key": "k"})[0] == 200
        assert _post(url, body(), {"Authorization": "Bearer k"}) == (401, {"statusCode": 401, "message": (
            "Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), "
            "or have expired.")})
        assert _post(srv.root + "/openai/v1/chat/completions", body(model="dep"), {"api-key": "k"})[0] == 200
