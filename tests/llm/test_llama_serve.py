"""The embedded server's greedy grammar sampler (llm/llama_serve.py) against llama-cpp-python's
own, on the bundled model in this process: the same extraction requests corpusgraph sends give
the same answer token for token, the check of the chosen token alone and the whole-vocabulary
grammar both run, and requests it does not cover keep the stock sampler."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpusgraph.llm import llama_serve
from corpusgraph.llm.server import find_bundled_gguf
from tests.support.extract_requests import sample_extraction_bodies, sample_glean_bodies

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


def _counting_evals(llm, monkeypatch) -> list[int]:
    """Tokens the model evaluates per call from now on (prompt and answer together)."""
    counts: list[int] = []
    stock = llm.eval

    def evaluate(tokens):
        counts[-1] += len(tokens)
        return stock(tokens)

    monkeypatch.setattr(llm, "eval", evaluate)
    return counts


def test_a_gleaning_call_resumes_from_its_units_saved_state_with_the_same_answer(llama, monkeypatch):
    firsts = sample_extraction_bodies(2, 120, 1500)
    counts = _counting_evals(llama, monkeypatch)

    def run() -> list[str]:
        # From an empty context both times: which state the model held before decides which part of
        # the first prompt it reuses, and a reused prefix's numbers are not bit for bit the same.
        llama.reset()
        texts = []
        for body in firsts:
            counts.append(0)
            texts.append(_answer(llama, body)["choices"][0]["message"]["content"])
        # The gleaning pass comes after every first call, as the stage sends it.
        for body in sample_glean_bodies(texts, 120, 1500):
            counts.append(0)
            texts.append(_answer(llama, body)["choices"][0]["message"]["content"])
        return texts

    llama_serve.uninstall()
    assert llama_serve.install()  # the greedy sampler both times; no cache: the server holds the last state only
    plain = run()
    plain_counts = counts[:]
    assert llama_serve.install() and llama_serve.install_states() and llama_serve.install_states()
    cache = llama_serve.state_cache(1 << 30)
    llama.set_cache(cache)
    try:
        counts.clear()
        cached = run()
    finally:
        llama.set_cache(None)
    assert cached == plain  # the same answers, token for token
    # Without saved states a gleaning call shares only the system prompt with what the server holds
    # (the call before it was another unit's); with them it resumes after its own unit's text.
    for i, body in enumerate(firsts):
        unit_tokens = len(llama.tokenize(body["messages"][-1]["content"].encode(), add_bos=False))
        assert plain_counts[2 + i] - counts[2 + i] >= unit_tokens - 8 > 100
    # Two states kept: the first calls'. The gleaning calls resumed from them and saved none.
    assert cache.resumed == 2 and len(cache.cache_state) == 2
    for state in cache.cache_state.values():
        assert state.scores.shape == (1, llama.n_vocab())  # no copy of llama-cpp-python's logits rows
        assert state.llama_state_size == len(state.llama_state)
    assert cache.cache_size < 64 << 20


class _Held:
    """Stands for the Llama whose cache it is: the tokens of the state it holds."""

    def __init__(self, tokens):
        import numpy as np

        self._input_ids = np.array(tokens, dtype=np.intc)


def test_a_saved_state_is_resumed_from_only_for_enough_more_of_the_prompt():
    from llama_cpp.llama import LlamaState

    def state(n):
        return LlamaState(input_ids=None, scores=None, n_tokens=n, llama_state=b"", llama_state_size=n, seed=0)

    system = list(range(200))
    unit_a, unit_b = system + [7] * 300 + [1] * 50, system + [7] * 4 + [8] * 296
    cache = llama_serve.state_cache(1 << 20)
    cache[unit_a] = state(1)
    held = _Held(unit_b)  # the model holds another unit's state, which shares the system prompt
    cache.held_by = lambda: held
    # A first call that shares one token too few more with unit_a's state than with the held one.
    with pytest.raises(KeyError):
        cache[system + [7] * (4 + llama_serve.MIN_RESUME_TOKENS - 1) + [9] * 300]
    assert cache.resumed == 0 and cache.skip_save is False
    # unit_a's gleaning call (its text, then more): resumed, and it saves no state of its own.
    assert cache[unit_a[:500] + [5] * 80].n_tokens == 1
    assert cache.resumed == 1 and cache.skip_save is True
    cache[unit_a[:500] + [5] * 90] = None  # what the lean save returns then: nothing is stored
    assert len(cache.cache_state) == 1
    # A call resumed for less than half of its prompt (a long shared opening) saves its state.
    assert cache[system + [7] * 300 + [3] * 600].n_tokens == 1
    assert cache.skip_save is False
    # Nothing saved shares the prompt: a miss.
    cache.held_by = None
    with pytest.raises(KeyError):
        cache[[9] * 300]


def test_prompt_states_keep_llama_cpp_pythons_own_saving_when_a_function_is_missing(monkeypatch):
    import llama_cpp
    from llama_cpp.llama import Llama

    llama_serve.uninstall()
    stock = Llama.save_state
    monkeypatch.delattr(llama_cpp, "llama_state_get_data")
    assert llama_serve.missing_states() == ["llama_cpp.llama_state_get_data"]
    assert llama_serve.install_states() is False
    assert Llama.save_state is stock


def test_the_embedded_server_runs_this_module(tmp_path):
    from corpusgraph.llm.server import EmbeddedServer

    cmd = EmbeddedServer(log_path=tmp_path / "s.log").command(1234, Path("m.gguf"))
    assert cmd[1:3] == ["-m", "corpusgraph.llm.llama_serve"]
    assert "--cache" not in cmd
    at = cmd.index("--logits_all")
    assert cmd[at:at + 2] == ["--logits_all", "false"]
    cmd = EmbeddedServer(log_path=tmp_path / "s.log", prompt_cache_mb=512).command(1234, Path("m.gguf"))
    at = cmd.index("--cache")
    assert cmd[at:at + 6] == ["--cache", "true", "--cache_type", "ram", "--cache_size", str(512 << 20)]
