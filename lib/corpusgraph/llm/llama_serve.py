"""`python -m corpusgraph.llm.llama_serve`: llama-cpp-python's server with greedy grammar sampling
that checks the chosen token first. The embedded model server (llm/server.py) runs this module.

Every structured request corpusgraph sends the bundled model (extraction, gleaning, reports,
resolution verdicts, summaries) carries a JSON schema, which llama-cpp-python turns into a grammar,
and temperature 0. llama-cpp-python builds its sampler chain as penalties -> grammar -> greedy,
so for every generated token the grammar is matched against the whole vocabulary (49,152 tokens
for SmolLM2) before the greedy step keeps one of them. For the small model that work takes more
than half as long again as the forward passes of the answer.

Greedy decoding keeps the highest logit among the tokens the grammar allows. When the highest
logit of all tokens is one the grammar allows, that token is the answer, and the grammar needs to
see only that one; only when the grammar refuses it is the grammar applied to the whole vocabulary
and the highest remaining logit taken. The token is the same either way (ties go to the lowest
token id in both, as llama.cpp's greedy sampler breaks them); llama.cpp's own samplers in its
common library check the chosen token first the same way. The penalties run as before, before the
choice, and every accepted token advances the penalties' history and the grammar's state as the
stock chain does.

Only that case is changed: a request with a temperature above 0, a custom logits processor,
mirostat or no grammar gets llama-cpp-python's own sampler. If the installed llama-cpp-python lacks
any function this relies on, the server says so on its log and runs the stock sampler; so does a
server started with CORPUSGRAPH_LLAMA_SAMPLER=stock in its environment (for comparisons).
What the check saves is measured in tests/benchmarks/results/embedded.json (`grammar_sampler`).
"""

from __future__ import annotations

import ctypes
import math
import sys
from typing import Any

__all__ = ["GreedyGrammarSampler", "install", "main", "missing"]

# What the sampler below uses of llama-cpp-python (0.3.36, pinned in pyproject.toml).
_NEEDED = {
    "llama_cpp": ("llama_get_logits_ith", "llama_sampler_apply", "llama_sampler_accept", "llama_token_data",
                  "llama_token_data_p", "llama_token_data_array"),
    "llama_cpp._internals": ("LlamaSampler",),
    "llama_cpp.llama": ("Llama",),
}


def missing() -> list[str]:
    """What this module needs and the installed llama-cpp-python lacks (empty: everything is there)."""
    import importlib

    gone: list[str] = []
    for module, names in _NEEDED.items():
        try:
            mod = importlib.import_module(module)
        except ImportError:
            gone.append(module)
            continue
        gone += [f"{module}.{n}" for n in names if not hasattr(mod, n)]
    if not gone:
        from llama_cpp._internals import LlamaSampler
        from llama_cpp.llama import Llama

        gone += [f"LlamaSampler.{n}" for n in ("add_penalties", "add_grammar", "reset") if not hasattr(LlamaSampler, n)]
        gone += [f"Llama.{n}" for n in ("_init_sampler",) if not hasattr(Llama, n)]
    return gone


class GreedyGrammarSampler:
    """The sampler of one generation: penalties, then the highest logit the grammar allows.

    Stands where llama-cpp-python's chain stands (`Llama._sampler`): `sample(ctx, idx)` chooses a
    token and accepts it, as llama.cpp's llama_sampler_sample does with a chain."""

    def __init__(self, llama, grammar, repeat_penalty: float, frequency_penalty: float, presence_penalty: float):
        import llama_cpp
        import numpy as np
        from llama_cpp._internals import LlamaSampler

        self._lc, self._np = llama_cpp, np
        self.n_vocab = llama._n_vocab
        # The penalties exactly as Llama._init_sampler adds them to its chain.
        self.penalties = LlamaSampler()
        self.penalties.add_penalties(n_vocab=llama._n_vocab, penalty_last_n=llama.last_n_tokens_size,
                                     penalty_repeat=repeat_penalty, penalty_freq=frequency_penalty,
                                     penalty_present=presence_penalty)
        self.grammar = LlamaSampler()
        self.grammar.add_grammar(llama._model, grammar)
        # llama_token_data {int32 id; float logit; float p} as a numpy record array, reused per token.
        dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
        if dtype.itemsize != ctypes.sizeof(llama_cpp.llama_token_data):
            raise RuntimeError("llama_token_data is not (int32, float, float)")
        self._all = np.zeros(self.n_vocab, dtype=dtype)
        self._all["id"] = np.arange(self.n_vocab, dtype=np.int32)
        self._one = np.zeros(1, dtype=dtype)
        self._all_p = llama_cpp.llama_token_data_array(
            data=self._all.ctypes.data_as(llama_cpp.llama_token_data_p), size=self.n_vocab, selected=-1, sorted=False)
        self._one_p = llama_cpp.llama_token_data_array(
            data=self._one.ctypes.data_as(llama_cpp.llama_token_data_p), size=1, selected=-1, sorted=False)
        self.tokens = 0  # tokens chosen
        self.whole_vocab = 0  # of which the grammar refused the top logit and saw every token

    def _apply(self, sampler, arr, size: int) -> None:
        arr.size, arr.selected, arr.sorted = size, -1, False
        self._lc.llama_sampler_apply(sampler.sampler, ctypes.byref(arr))

    def sample(self, ctx, idx: int = -1) -> int:
        np = self._np
        logits = self._lc.llama_get_logits_ith(ctx.ctx, idx)
        # Only logits change: neither sampler writes `p`, which stays 0 from the constructor.
        self._all["logit"] = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
        self._apply(self.penalties, self._all_p, self.n_vocab)
        token = int(np.argmax(self._all["logit"]))
        self._one[0] = self._all[token]
        self._apply(self.grammar, self._one_p, 1)
        if not math.isfinite(float(self._one[0]["logit"])):
            self.whole_vocab += 1
            self._apply(self.grammar, self._all_p, self.n_vocab)
            token = int(np.argmax(self._all["logit"]))
        self.tokens += 1
        self.accept(token)
        return token

    def accept(self, token: int) -> None:
        self._lc.llama_sampler_accept(self.penalties.sampler, token)
        self._lc.llama_sampler_accept(self.grammar.sampler, token)

    def reset(self) -> None:
        self.penalties.reset()
        self.grammar.reset()


_STOCK: Any = None


def install() -> bool:
    """Route greedy grammar generations of every `Llama` in this process through
    GreedyGrammarSampler; False (and nothing changed) when the installed llama-cpp-python lacks
    something it needs. Installing twice changes nothing."""
    global _STOCK
    if missing():
        return False
    from llama_cpp.llama import Llama

    if _STOCK is not None:
        return True
    stock = _STOCK = Llama._init_sampler

    def _init_sampler(self, *args, **kwargs):
        grammar = kwargs.get("grammar")
        if (not args and grammar is not None and kwargs.get("temp") == 0.0 and kwargs.get("logits_processor") is None
                and not kwargs.get("mirostat_mode")):
            return GreedyGrammarSampler(self, grammar, kwargs.get("repeat_penalty", 1.0),
                                        kwargs.get("frequency_penalty", 0.0), kwargs.get("presence_penalty", 0.0))
        return stock(self, *args, **kwargs)

    Llama._init_sampler = _init_sampler
    return True


def uninstall() -> None:
    """Put llama-cpp-python's own sampler back (for tests that compare the two)."""
    global _STOCK
    if _STOCK is not None:
        from llama_cpp.llama import Llama

        Llama._init_sampler = _STOCK
        _STOCK = None


def main() -> None:
    import os

    if os.environ.get("CORPUSGRAPH_LLAMA_SAMPLER") == "stock":
        said = "CORPUSGRAPH_LLAMA_SAMPLER=stock: running llama-cpp-python's own grammar sampler"
    elif install():
        said = "greedy grammar answers check the chosen token before the whole vocabulary (corpusgraph.llm.llama_serve)"
    else:
        said = f"llama-cpp-python lacks {', '.join(missing())}; running its own grammar sampler"
    print(f"corpusgraph: {said}", file=sys.stderr, flush=True)
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
