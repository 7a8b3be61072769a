"""The vllm backend: request -> engine parameters, engine outputs -> results, cache, failures.

vllm cannot be installed on this project's machines (no supported GPU, no model hub), so the
engine here is a fake with vllm.LLM's `chat` signature; the last test runs the real engine and
is skipped, saying why, where vllm, CUDA or a local model is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field

import pytest

from corpusgraph.config import LLMSection
from corpusgraph.llm.base import ChatRequest
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.vllm_engine import EngineParams, VLLMChatModel, VLLMUnavailable, engine_params

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@dataclass
class _Completion:
    text: str
    token_ids: list[int]
    finish_reason: str = "stop"


@dataclass
class _Output:
    prompt_token_ids: list[int]
    outputs: list[_Completion]


@dataclass
class FakeEngine:
    """vllm.LLM.chat's shape: one output per conversation, in order. Records every call."""

    calls: list[tuple[list, list]] = field(default_factory=list)
    fail: bool = False

    def chat(self, messages, sampling_params=None, use_tqdm=True):
        self.calls.append((messages, sampling_params))
        if self.fail:
            raise RuntimeError("CUDA out of memory")
        outs = []
        for conv, params in zip(messages, sampling_params):
            user = conv[-1]["content"]
            text = json.dumps({"name": user.upper()}) if params.json_schema else f"echo {user}"
            outs.append(_Output(prompt_token_ids=list(range(len(user))),
                                outputs=[_Completion(text, list(range(params.max_tokens // 10)))]))
        return outs


def _req(i: int, schema=SCHEMA, max_tokens=40, temperature=0.0) -> ChatRequest:
    return ChatRequest(id=f"r{i}", messages=({"role": "system", "content": "be brief"},
                                             {"role": "user", "content": f"unit {i}"}),
                       max_tokens=max_tokens, temperature=temperature, json_schema=schema)


def _model(tmp_path, engine) -> VLLMChatModel:
    # make_sampling=identity: the fake engine sees the EngineParams the real mapping would turn
    # into vllm.SamplingParams.
    return VLLMChatModel("qwen-test", ResponseCache(tmp_path / "cache.sqlite"), engine=engine,
                         make_sampling=lambda p: p)


def test_engine_params_carry_tokens_temperature_and_schema():
    assert engine_params(_req(1, max_tokens=123, temperature=0.7)) == EngineParams(123, 0.7, SCHEMA)
    assert engine_params(_req(2, schema=None)).json_schema is None


def test_one_engine_call_per_batch_with_each_requests_parameters(tmp_path):
    engine = FakeEngine()
    reqs = [_req(1), _req(2, schema=None, max_tokens=80, temperature=0.5)]
    results = _model(tmp_path, engine).complete(reqs)
    assert len(engine.calls) == 1
    messages, params = engine.calls[0]
    assert messages == [[dict(m) for m in r.messages] for r in reqs]
    assert params == [EngineParams(40, 0.0, SCHEMA), EngineParams(80, 0.5, None)]
    assert [r.id for r in results] == ["r1", "r2"]
    assert json.loads(results[0].text) == {"name": "UNIT 1"} and results[1].text == "echo unit 2"
    assert (results[0].tokens_in, results[0].tokens_out, results[0].finish_reason) == (6, 4, "stop")
    assert results[1].tokens_out == 8 and not any(r.cached or r.error for r in results)


def test_answers_are_cached_and_not_generated_again(tmp_path):
    engine = FakeEngine()
    first = _model(tmp_path, engine).complete([_req(1), _req(2)])
    again = _model(tmp_path, engine).complete([_req(2), _req(3), _req(1)])  # a new actor, same cache file
    assert len(engine.calls) == 2
    assert [[c[-1]["content"] for c in call[0]] for call in engine.calls] == [["unit 1", "unit 2"], ["unit 3"]]
    assert [r.cached for r in again] == [True, False, True]
    assert again[0].text == first[1].text and again[0].tokens_in == first[1].tokens_in


def test_a_failing_engine_gives_error_rows_and_caches_nothing(tmp_path):
    engine = FakeEngine(fail=True)
    results = _model(tmp_path, engine).complete([_req(1), _req(2)])
    assert [r.id for r in results] == ["r1", "r2"]
    assert all(r.text is None and "CUDA out of memory" in r.error for r in results)
    engine.fail = False
    retried = _model(tmp_path, engine).complete([_req(1)])
    assert not retried[0].cached and retried[0].error is None


def test_missing_vllm_is_a_clear_error(tmp_path):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here; this test checks the message where it is not")
    from corpusgraph.llm.factory import open_chat_model

    llm = LLMSection(backend="vllm", model="Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(VLLMUnavailable, match="needs the `vllm` package"):
        open_chat_model(llm, tmp_path)


@pytest.mark.slow
@pytest.mark.llm
def test_real_vllm_engine_answers_a_schema_request(tmp_path):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (it needs a GPU it supports): the vllm backend is exercised "
                    "only against a fake engine here")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vllm is installed but no CUDA device is visible")
    model = os.environ.get("CORPUSGRAPH_VLLM_MODEL")
    if not model:
        pytest.skip("set CORPUSGRAPH_VLLM_MODEL to a local model folder (no model hub is reachable here)")
    from corpusgraph.llm.factory import open_chat_model
    from corpusgraph.llm.parse import parse_json_answer

    llm = LLMSection(backend="vllm", model=model, vllm_engine_args={"max_model_len": 2048, "enforce_eager": True})
    chat = open_chat_model(llm, tmp_path)
    results = chat.complete([_req(1), _req(2)])
    for res in results:
        assert res.error is None, res.error
        obj, err = parse_json_answer(res.text)
        assert err is None and isinstance(obj.get("name"), str)
    chat.shutdown()
