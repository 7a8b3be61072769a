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

Prompt states (`--cache true`, which llm/server.py passes when `llm.prompt_cache_mb` is above 0).
llama-cpp-python keeps the state of the last request, so a request reuses the part of its prompt
that the previous one shares (the system prompt); with its RAM cache it also keeps the states of
earlier requests and resumes from the one sharing the longest prefix. What that buys here is
gleaning: a gleaning call repeats its unit's first call up to the end of the unit's text and only
then adds what was found, but it comes in a later pass, after every other unit's first call, when
the server's own state is long gone. Three changes make the cache fit that use:
- A state is saved without llama-cpp-python's copy of the logits (`Llama.scores`: n_batch x the
  vocabulary, 100 MB for SmolLM2, held per state and not counted in the cache's size). Without
  logits_all nothing reads those rows (sampling reads the context's own logits, and a resumed
  prompt always evaluates at least its last token again), so a resumed answer is the same.
- A saved state is resumed from only when it shares MIN_RESUME_TOKENS more of the prompt than the
  state the model holds (llama-cpp-python resumes for a single token more).
- A call that resumed from a saved state for more than half of its prompt saves none: that state
  serves the unit's next round as well, and the cache's room stays with states no call has used.
"""

from __future__ import annotations

import ctypes
import math
import sys
import weakref
from typing import Any

__all__ = ["GreedyGrammarSampler", "install", "install_states", "main", "missing", "missing_states", "state_cache"]

# What the sampler below uses of llama-cpp-python (0.3.36, pinned in pyproject.toml).
_NEEDED = {
    "llama_cpp": ("llama_get_logits_ith", "llama_sampler_apply", "llama_sampler_accept", "llama_token_data",
                  "llama_token_data_p", "llama_token_data_array"),
    "llama_cpp._internals": ("LlamaSampler",),
    "llama_cpp.llama": ("Llama",),
}
# What install_states uses of it.
_NEEDED_STATES = {
    "llama_cpp": ("llama_state_get_size", "llama_state_get_data", "LlamaRAMCache"),
    "llama_cpp.llama": ("Llama", "LlamaState"),  # and Llama.longest_token_prefix, set_cache, _input_ids
    "llama_cpp.llama_cache": ("LlamaRAMCache",),
}


def _absent(needed: dict[str, tuple[str, ...]]) -> list[str]:
    """The modules of `needed` that do not import and the names they lack, as module.name."""
    import importlib

    gone: list[str] = []
    for module, names in needed.items():
        try:
            mod = importlib.import_module(module)
        except ImportError:
            gone.append(module)
            continue
        gone += [f"{module}.{n}" for n in names if not hasattr(mod, n)]
    return gone


def missing() -> list[str]:
    """What this module needs and the installed llama-cpp-python lacks (empty: everything is there)."""
    gone = _absent(_NEEDED)
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
_STOCK_STATE: Any = None  # Llama.save_state and Llama.set_cache as llama-cpp-python has them


# A saved state is resumed from only when it shares this many more tokens with the prompt than
# the state the model holds: loading one copies all of it, which costs about what evaluating 15
# prompt tokens does (SmolLM2 on 2 cores: 46 ms to load the state of a 1,053-token call, 3.1 ms
# a token to evaluate), so a resume for a few tokens more (units that open alike) does not pay.
MIN_RESUME_TOKENS = 32


def _lean_save_state(self):
    """Llama.save_state without the logits copy (module doc), or None when the cache says this
    call resumed from a state that serves its next round as well."""
    cache = self.cache
    if getattr(cache, "skip_save", False):
        cache.skip_save = False
        return None
    stock_save, _ = _STOCK_STATE
    if self._logits_all:
        return stock_save(self)
    import llama_cpp
    import numpy as np
    from llama_cpp.llama import LlamaState

    size = int(llama_cpp.llama_state_get_size(self._ctx.ctx))
    buf = bytearray(size)
    written = int(llama_cpp.llama_state_get_data(self._ctx.ctx, (ctypes.c_uint8 * size).from_buffer(buf), size))
    if written > size:
        raise RuntimeError("llama_state_get_data wrote more than llama_state_get_size said")
    if written < size:
        del buf[written:]
    # One row of zeros: load_state broadcasts it over the rows nothing reads without logits_all.
    return LlamaState(scores=np.zeros((1, self._n_vocab), dtype=np.single), input_ids=self.input_ids.copy(),
                      n_tokens=self.n_tokens, llama_state=buf, llama_state_size=written, seed=self._seed)


def _set_cache(self, cache) -> None:
    """Llama.set_cache, telling a state_cache which model's held state to compare with."""
    _, stock_set = _STOCK_STATE
    if hasattr(cache, "held_by"):
        cache.held_by = weakref.ref(self)
    stock_set(self, cache)


_STATE_CACHE: Any = None


def state_cache(capacity_bytes: int):
    """llama-cpp-python's RAM cache of prompt states, as this server keeps them (module doc): a
    saved state is resumed from only when it shares MIN_RESUME_TOKENS more of the prompt than the
    state the model holds, and a call that resumed from one for more than half of its prompt saves
    none. install_states() makes llama_cpp.server build this one for --cache true."""
    global _STATE_CACHE
    if _STATE_CACHE is None:
        from llama_cpp.llama import Llama
        from llama_cpp.llama_cache import LlamaRAMCache

        class StateCache(LlamaRAMCache):
            def __init__(self, capacity_bytes: int) -> None:
                super().__init__(capacity_bytes=capacity_bytes)
                self.held_by = None  # weakref to the Llama whose cache this is (Llama.set_cache)
                self.skip_save = False  # for the call under way; read and reset by its save
                self.resumed = 0  # calls that resumed from a saved state

            def __getitem__(self, key):
                self.skip_save = False
                key = tuple(key)
                best = self._find_longest_prefix_key(key)
                if best is None:
                    raise KeyError("no saved state shares a prefix with this prompt")
                shared = Llama.longest_token_prefix(best, key)
                model = self.held_by() if self.held_by is not None else None
                held = Llama.longest_token_prefix(model._input_ids.tolist(), key) if model is not None else 0
                if shared < held + MIN_RESUME_TOKENS:
                    raise KeyError("no saved state shares enough more of this prompt than the held one")
                self.skip_save = 2 * shared > len(key)
                self.resumed += 1
                self.cache_state.move_to_end(best)
                return self.cache_state[best]

            def __setitem__(self, key, value) -> None:
                if value is not None:
                    super().__setitem__(key, value)

        _STATE_CACHE = StateCache
    return _STATE_CACHE(capacity_bytes)


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


def missing_states() -> list[str]:
    """What install_states needs and the installed llama-cpp-python lacks (empty: everything)."""
    return _absent(_NEEDED_STATES)


def install_states() -> bool:
    """Save prompt states of every `Llama` in this process without the logits copy, let a call
    that resumed from a saved state for more than half of its prompt save none, and make
    llama_cpp.server's RAM cache the one of `state_cache` (module doc); False (and nothing changed)
    when llama-cpp-python lacks something this relies on. Installing twice changes nothing."""
    global _STOCK_STATE
    if missing_states():
        return False
    if _STOCK_STATE is None:
        import llama_cpp
        from llama_cpp.llama import Llama

        _STOCK_STATE = (Llama.save_state, Llama.set_cache)
        Llama.save_state, Llama.set_cache = _lean_save_state, _set_cache
        llama_cpp.LlamaRAMCache = state_cache  # what llama_cpp.server builds for --cache true --cache_type ram
    return True


def uninstall() -> None:
    """Put llama-cpp-python's own sampler and state saving back (for tests that compare them)."""
    global _STOCK, _STOCK_STATE
    if _STOCK is not None:
        from llama_cpp.llama import Llama

        Llama._init_sampler = _STOCK
        _STOCK = None
    if _STOCK_STATE is not None:
        import llama_cpp
        from llama_cpp.llama import Llama
        from llama_cpp.llama_cache import LlamaRAMCache

        Llama.save_state, Llama.set_cache = _STOCK_STATE
        llama_cpp.LlamaRAMCache = LlamaRAMCache
        _STOCK_STATE = None


def main() -> None:
    import os

    if os.environ.get("CORPUSGRAPH_LLAMA_SAMPLER") == "stock":
        said = "CORPUSGRAPH_LLAMA_SAMPLER=stock: running llama-cpp-python's own grammar sampler"
    elif install():
        said = "greedy grammar answers check the chosen token before the whole vocabulary (corpusgraph.llm.llama_serve)"
    else:
        said = f"llama-cpp-python lacks {', '.join(missing())}; running its own grammar sampler"
    print(f"corpusgraph: {said}", file=sys.stderr, flush=True)
    if "--cache" in sys.argv[1:]:
        if install_states():
            said = "prompt states are saved without the logits copy; a call that resumed from one saves none"
        else:
            said = f"llama-cpp-python lacks {', '.join(missing_states())}; its own prompt-state cache runs"
        print(f"corpusgraph: {said}", file=sys.stderr, flush=True)
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
