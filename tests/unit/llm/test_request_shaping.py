"""Request shaping per provider profile (llm/shape.py): every schema a stage or query sends, shaped
for each profile, is accepted by that profile's conformance rules, with no field the provider
would drop; the transform keeps what the schema meant; dropped bounds are enforced by the parsers.
"""

from __future__ import annotations

import copy
import json

import pytest

from corpusgraph.config import ExtractSection, ReportsSection, ResolveSection
from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.llm.profiles import PROFILES, guess_profile, looks_like_reasoning_model, profile
from corpusgraph.llm.shape import RequestShaper, SchemaError, shape_schema
from corpusgraph.query.drift import drift_schema
from corpusgraph.query.global_map import map_schema, rate_schema
from corpusgraph.stages.extract.llm import pack_schema
from corpusgraph.stages.extract.parse import parse_unit
from corpusgraph.stages.reports import report_schema
from corpusgraph.stages.resolve.llm import adjudication_schema, summary_schema
from corpusgraph.evaluate.score import judge_schema
from tests.support.provider_rules import Call, Config
from tests.support.provider_server import Conformance

CHAT = [n for n, p in PROFILES.items() if p.chat]


def schemas():
    claims = ExtractSection(claims=True)
    return {"pack1": pack_schema(ExtractSection(), 1), "pack6": pack_schema(ExtractSection(), 6),
            "pack3_claims": pack_schema(claims, 3), "report": report_schema(ReportsSection()),
            "summary": summary_schema(ResolveSection()), "adjudication": adjudication_schema(), "map": map_schema(),
            "rate": rate_schema(), "drift": drift_schema(3), "judge": judge_schema()}


def _call(profile_name: str, body: dict) -> Call:
    if profile_name == "azure_openai":
        return Call("chat", body, {"api-key": "k"}, "/openai/v1/chat/completions")
    return Call("chat", body, {"authorization": "Bearer k"}, "/v1/chat/completions")


@pytest.mark.parametrize("profile_name", CHAT)
def test_every_schema_shaped_for_a_profile_is_accepted_by_its_rules(profile_name):
    shaper = RequestShaper(profile(profile_name), "m")
    conf = Conformance(Config(profile_name, key="k", models=("m",)))
    for name, schema in schemas().items():
        req = ChatRequest(id=name, messages=({"role": "system", "content": "s"}, {"role": "user", "content": "u"}),
                          max_tokens=400, json_schema=schema)
        assert conf.judge(_call(profile_name, shaper.body(req)), name) is None, (name, conf.view()["refusals"])
    assert conf.view()["ignored"] == 0, conf.view()["by_rule"]


def test_the_unshaped_schemas_are_what_strict_providers_refuse():
    # The reason shaping exists: the stages' schemas as written (the issue's first defect).
    conf = Conformance(Config("openai", key="k", models=("m",)))
    body = {"model": "m", "messages": [{"role": "user", "content": "u"}], "max_completion_tokens": 10,
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "strict": True,
                                                                       "schema": pack_schema(ExtractSection(), 1)}}}
    assert conf.judge(_call("openai", body), "extraction")[0] == 400


def test_strict_shaping_closes_objects_requires_all_and_makes_the_optional_nullable():
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}, "b": {"type": "integer"},
                                               "c": {"enum": ["x", "y"]}}, "required": ["a"]}
    out = shape_schema(schema, profile("openai"))
    assert out == {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": ["integer", "null"]},
                                                    "c": {"anyOf": [{"enum": ["x", "y"]}, {"type": "null"}]}},
                   "required": ["a", "b", "c"], "additionalProperties": False}
    assert schema["required"] == ["a"] and "maxLength" in schema["properties"]["a"]  # the input is not changed


def test_a_shared_sub_schema_is_shaped_once_and_stays_shared():
    out = shape_schema(pack_schema(ExtractSection(), 3), profile("azure_openai"))
    assert out["properties"]["1"] is out["properties"]["3"]
    unit = out["properties"]["1"]
    assert unit["additionalProperties"] is False and "maxItems" not in unit["properties"]["entities"]


def test_azure_limits_refuse_a_pack_over_100_properties_with_the_setting_to_change():
    shaper = RequestShaper(profile("azure_openai"), "dep")
    req = ChatRequest(id="p", messages=({"role": "user", "content": "u"},), max_tokens=10,
                      json_schema=pack_schema(ExtractSection(claims=True), 6))
    with pytest.raises(SchemaError, match=r"108 object properties \(at most 100\).*extract.units_per_call"):
        shaper.body(req)


def test_llama_cpp_gets_the_schema_exactly_as_before_profiles():
    schema = pack_schema(ExtractSection(), 1)
    body = RequestShaper(profile("llama_cpp"), "smollm2").body(
        ChatRequest(id="x", messages=({"role": "user", "content": "u"},), max_tokens=7, json_schema=schema))
    assert body == {"model": "smollm2", "messages": [{"role": "user", "content": "u"}], "max_tokens": 7,
                    "temperature": 0.0, "response_format": {"type": "json_object", "schema": schema}}


def test_a_reasoning_model_gets_its_budget_and_no_temperature():
    conf = Conformance(Config("openai", key="k", models=("o3", "o1-mini"), reasoning_models=("o3", "o1-mini"),
                              no_system_models=("o1-mini",)))
    req = ChatRequest(id="x", messages=({"role": "system", "content": "sys"}, {"role": "user", "content": "u"}),
                      max_tokens=16, json_schema=rate_schema())
    for model in ("o3", "o1-mini"):
        body = RequestShaper(profile("openai"), model, reasoning=True, reasoning_budget_tokens=2048,
                             reasoning_effort="low").body(req)
        assert "temperature" not in body and body["max_completion_tokens"] == 16 + 2048
        assert body["reasoning_effort"] == "low"
        assert conf.judge(_call("openai", body), "rate") is None, conf.view()["refusals"]
    merged = RequestShaper(profile("openai"), "o1-mini", reasoning=True).body(req)["messages"]
    assert merged == [{"role": "user", "content": "sys\n\nu"}]
    plain = RequestShaper(profile("openai"), "o3").body(req)  # not flagged: the refusal doctor explains
    assert conf.judge(_call("openai", plain), "rate")[1]["error"]["param"] == "temperature"


def test_reasoning_models_are_told_apart_by_name_and_profiles_guessed_only_from_sure_hosts():
    assert [looks_like_reasoning_model(m) for m in ("o3-mini", "o1", "gpt-5", "gpt-5-mini", "gpt-5-chat-latest",
                                                     "gpt-4.1", "openai/o4-mini")] == [True, True, True, True, False,
                                                                                       False, True]
    assert guess_profile("openai", ["https://api.openai.com/v1"]) == "openai"
    assert guess_profile("openai", ["https://acme.openai.azure.com"]) == "azure_openai"
    assert guess_profile("openai", ["http://gpu-1:8000/v1"]) == "openai_compatible"
    assert guess_profile("embedded", ["http://127.0.0.1:5000/v1"]) == "llama_cpp"


def test_per_call_schemas_are_shaped_once_per_content():
    shaper = RequestShaper(profile("openai"), "m")
    req = lambda: ChatRequest(id="r", messages=({"role": "user", "content": "u"},), max_tokens=9,  # noqa: E731
                              json_schema=map_schema())
    first, second = shaper.body(req())["response_format"], shaper.body(req())["response_format"]
    assert first is second  # a new dict per call, one shaped copy


def test_parsers_enforce_the_bounds_a_profile_drops():
    section = ExtractSection(max_entities=2, max_relationships=1)
    text = "Alpha Corp met Beta Ltd and Gamma Inc in Delta City."
    answer = {"entities": [{"name": n + " " * 3 + "x" * 200, "type": "ORGANIZATION", "description": "d"}
                           for n in ("Alpha Corp", "Beta Ltd", "Gamma Inc")],
              "relationships": [{"source": "Alpha Corp", "target": "Beta Ltd", "description": "", "strength": 99},
                                {"source": "Beta Ltd", "target": "Gamma Inc", "description": "", "strength": 2}]}
    entities, rels, _, _ = parse_unit(copy.deepcopy(answer), section)
    assert len(entities) == 2 and all(len(e["name"]) <= 80 for e in entities)
    assert rels == [{"source": "Alpha Corp", "target": "Beta Ltd", "description": "", "strength": 10}]
    from corpusgraph.stages.reports import parse_report
    long = {"title": "T" * 500, "summary": "s", "findings": [{"summary": "f", "explanation": "e"}] * 9, "rating": 70}
    rep = parse_report(ChatResult(id="r", text=json.dumps(long)), ReportsSection(max_findings=3))
    assert len(rep["title"]) == 120 and len(rep["findings"]) == 3 and rep["rating"] <= 10
