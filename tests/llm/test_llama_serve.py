"""The embedded server's greedy grammar sampler (llm/llama_serve.py) against llama-cpp-python's
own, on the bundled model in this process: the same extraction requests corpusgraph sends give
the same answer token for token, the check of the chosen token alone and the whole-vocabulary
grammar both run, and requests it does not cover keep the stock sampler."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpusgraph.llm import llama_serve
from corpusgraph.llm.server import find_bundled_gguf
from tests.support.extract_requests import sample_extraction_bodies

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def llama():
    from llama_cpp import Llama

    llm = Llama(model_path=str(find_bundled_gguf()), n_ctx=4096, n_threads=2, n_threads_batch=2, verbose=False)
    yield llm
    llama_serve.uninstall()
    llm.close()


def _answer(llm, body: dict) -> dict:
    # repeat_penalty 1.1: llama-cpp-python's server's default, which every request to it gets.
    return llm.create_chat_completion(messages=body["messages"], response_format=body["response_format"],
                                      max_tokens=body["max_tokens"], temperature=body["temperature"],
                                      repeat_penalty=1.1)


def test_greedy_grammar_answers_equal_the_stock_samplers(llama):
    bodies = sample_extraction_bodies(2, 160, 2000)
    assert all(b["temperature"] == 0.0 and b["response_format"]["schema"] for b in bodies)
    llama_serve.uninstall()
    stock = [_answer(llama, b) for b in bodies]
    assert type(llama._sampler).__name__ == "LlamaSampler"
    assert llama_serve.install() and llama_serve.install()  # twice: still one wrapper
    ours, chosen, whole = [], 0, 0
    for b in bodies:
        ours.append(_answer(llama, b))
        sampler = llama._sampler
        assert isinstance(sampler, llama_serve.GreedyGrammarSampler)
        chosen += sampler.tokens
        whole += sampler.whole_vocab
    assert [a["choices"][0]["message"]["content"] for a in ours] == [a["choices"][0]["message"]["content"] for a in stock]
    assert [a["usage"] for a in ours] == [a["usage"] for a in stock]
    assert chosen == sum(a["usage"]["completion_tokens"] for a in ours)
    # Both paths ran: most tokens were the top logit, some needed the grammar over every token.
    assert 0 < whole < chosen


def test_other_requests_keep_the_stock_sampler(llama):
    assert llama_serve.install()
    body = sample_extraction_bodies(1, 32, 2000)[0]
    llama.create_chat_completion(messages=body["messages"], response_format=body["response_format"],
                                 max_tokens=24, temperature=0.7, seed=7)
    assert type(llama._sampler).__name__ == "LlamaSampler"  # sampling at a temperature
    llama.create_chat_completion(messages=body["messages"], max_tokens=8, temperature=0.0)
    assert type(llama._sampler).__name__ == "LlamaSampler"  # no grammar


def test_a_missing_function_leaves_the_stock_sampler(monkeypatch):
    import llama_cpp
    from llama_cpp.llama import Llama

    llama_serve.uninstall()
    stock = Llama._init_sampler
    monkeypatch.delattr(llama_cpp, "llama_sampler_apply")
    assert llama_serve.missing() == ["llama_cpp.llama_sampler_apply"]
    assert llama_serve.install() is False
    assert Llama._init_sampler is stock


def test_the_embedded_server_runs_this_module(tmp_path):
    from corpusgraph.llm.server import EmbeddedServer

    cmd = EmbeddedServer(log_path=tmp_path / "s.log").command(1234, Path("m.gguf"))
    assert cmd[1:3] == ["-m", "corpusgraph.llm.llama_serve"]
