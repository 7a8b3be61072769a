"""all-MiniLM-L6-v2 on ONNX Runtime: the graph is written here from the shipped safetensors.

No exporter is needed (exporting from transformers would need torch, a multi-GB install): BERT is
six identical encoder layers, and ONNX Runtime's CPU provider has fused kernels for each part of
one, so the graph is built node by node with `onnx.helper` from the same weights minilm.py reads:

- `EmbedLayerNormalization`: word + position (+ token type 0, folded into the position table,
  since every input is a single sequence) embeddings and their LayerNorm; it also turns the 0/1
  attention mask into per-row lengths (`mask_index`), which is why batches are right-padded.
- `Attention`: the fused Q/K/V projection, scaled dot product, softmax over unmasked keys.
- `SkipLayerNormalization`: residual + bias + LayerNorm in one pass; `BiasGelu`: bias + exact
  (erf) GELU, BERT's activation.
- Mean pooling over the mask and L2 normalisation, as sentence-transformers does for this model.

The operators are ONNX Runtime's "com.microsoft" contrib operators, documented in its
docs/ContribOperators.md (github.com/microsoft/onnxruntime); their CPU kernels ship in the PyPI
wheel. With `int8` (off by default), `onnxruntime.quantization.quantize_dynamic` gives most
weight matrices int8 (see _quantize). How close either variant's vectors come to the numpy
forward pass, and how fast they are, is measured by tests/benchmarks/test_embedded.py
(results/embedded.json).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from corpusgraph.llm.cores import quota_cap

__all__ = ["build_graph", "graph_bytes", "OnnxMiniLM"]

# Part of a cached graph's file name: change it whenever build_graph or _quantize changes what
# they write, so an old cached graph is never run again.
GRAPH_VERSION = 2
_OPSET = 17  # ReduceSum takes axes as an input (13+), ReduceL2 as an attribute (before 18)
_MS = "com.microsoft"


def build_graph(model_dir: Path, expected_dim: int) -> Any:
    """The sentence-embedding graph (input_ids, attention_mask: int32 (B, S), right-padded) ->
    embeddings: float32 (B, dim), L2-normalised."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from safetensors.numpy import load_file

    from corpusgraph.llm.minilm_config import checked_config

    config = checked_config(model_dir, expected_dim)  # the graph encodes exactly that architecture
    eps = float(config["layer_norm_eps"])
    heads = int(config["num_attention_heads"])
    t = load_file(str(model_dir / "model.safetensors"))
    inits: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def f32(key: str) -> np.ndarray:
        return t[key].astype(np.float32)

    def lin(key: str) -> np.ndarray:  # torch Linear stores (out, in); the graph multiplies x @ W
        return t[key].astype(np.float32).T

    nodes = [
        helper.make_node(
            "EmbedLayerNormalization",
            ["input_ids", "", const("word", f32("embeddings.word_embeddings.weight")),
             const("position", f32("embeddings.position_embeddings.weight")
                   + f32("embeddings.token_type_embeddings.weight")[0]),
             "", const("emb_ln_g", f32("embeddings.LayerNorm.weight")),
             const("emb_ln_b", f32("embeddings.LayerNorm.bias")), "attention_mask"],
            ["h0", "mask_index"], domain=_MS, epsilon=eps),
    ]
    x = "h0"
    for i in range(int(config["num_hidden_layers"])):
        p, s = f"encoder.layer.{i}.", f"encoder.layer.{i}.attention.self."
        qkv_w = np.concatenate([lin(s + n + ".weight") for n in ("query", "key", "value")], axis=1)
        qkv_b = np.concatenate([f32(s + n + ".bias") for n in ("query", "key", "value")])
        nodes += [
            helper.make_node("Attention", [x, const(f"l{i}_qkv_w", qkv_w), const(f"l{i}_qkv_b", qkv_b), "mask_index"],
                             [f"l{i}_ctx"], domain=_MS, num_heads=heads),
            helper.make_node("MatMul", [f"l{i}_ctx", const(f"l{i}_out_w", lin(p + "attention.output.dense.weight"))],
                             [f"l{i}_attn"]),
            helper.make_node("SkipLayerNormalization",
                             [f"l{i}_attn", x, const(f"l{i}_ln1_g", f32(p + "attention.output.LayerNorm.weight")),
                              const(f"l{i}_ln1_b", f32(p + "attention.output.LayerNorm.bias")),
                              const(f"l{i}_out_b", f32(p + "attention.output.dense.bias"))],
                             [f"l{i}_mid"], domain=_MS, epsilon=eps),
            helper.make_node("MatMul", [f"l{i}_mid", const(f"l{i}_ff1_w", lin(p + "intermediate.dense.weight"))],
                             [f"l{i}_ff1"]),
            helper.make_node("BiasGelu", [f"l{i}_ff1", const(f"l{i}_ff1_b", f32(p + "intermediate.dense.bias"))],
                             [f"l{i}_act"], domain=_MS),
            helper.make_node("MatMul", [f"l{i}_act", const(f"l{i}_ff2_w", lin(p + "output.dense.weight"))],
                             [f"l{i}_ff2"]),
            helper.make_node("SkipLayerNormalization",
                             [f"l{i}_ff2", f"l{i}_mid", const(f"l{i}_ln2_g", f32(p + "output.LayerNorm.weight")),
                              const(f"l{i}_ln2_b", f32(p + "output.LayerNorm.bias")),
                              const(f"l{i}_ff2_b", f32(p + "output.dense.bias"))],
                             [f"l{i}_out"], domain=_MS, epsilon=eps),
        ]
        x = f"l{i}_out"
    # Mean over the unmasked tokens, then L2 normalisation (the floors mirror minilm.py's).
    nodes += [
        helper.make_node("Unsqueeze", ["attention_mask", const("axis2", np.array([2], dtype=np.int64))], ["mask3"]),
        helper.make_node("Cast", ["mask3"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", [x, "maskf"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", const("axis1", np.array([1], dtype=np.int64))], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["maskf", "axis1"], ["count"], keepdims=0),
        helper.make_node("Max", ["count", const("count_floor", np.array(1e-9, dtype=np.float32))], ["count_f"]),
        helper.make_node("Div", ["summed", "count_f"], ["pooled"]),
        helper.make_node("ReduceL2", ["pooled"], ["norm"], axes=[1], keepdims=1),
        helper.make_node("Max", ["norm", const("norm_floor", np.array(1e-12, dtype=np.float32))], ["norm_f"]),
        helper.make_node("Div", ["pooled", "norm_f"], ["embeddings"]),
    ]
    for node in nodes:  # named after their output, so a node can be picked out (quantisation, profiles)
        node.name = node.output[0]
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "seq"])
    out = helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", expected_dim])
    graph = helper.make_graph(nodes, "all_minilm_l6_v2", [ids, mask], [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET), helper.make_opsetid(_MS, 1)],
                              producer_name="corpusgraph",
                              # The IR version of opset 17 (onnx's VERSION_TABLE): the newest onnx
                              # writes a newer one by default, which older runtimes refuse.
                              ir_version=8)
    onnx.checker.check_model(model)
    return model


def _quantize(model: Any) -> bytes:
    """Dynamic int8 weights, per output channel, for every layer's attention (QKV, as
    QAttention), its output projection and its first feed-forward matmul; the second
    feed-forward matmul stays float32. Activations are quantised per tensor on each call.

    The second feed-forward matmul's inputs are GELU outputs whose few large values set the
    scale of the whole tensor; quantised too, the vectors moved much further from float32.
    Even so, short texts (a title, a name) move more than passages: which is why int8 is off
    by default, and what tests/benchmarks/test_embedded.py measures (results/embedded.json).
    Chosen on 300 documents and titles of the dev corpora by cosine to the numpy forward pass
    (no question played a part); 8-bit weights in blocks (MatMulNBits) were as close but
    slower than float32 on this CPU. quantize_dynamic reads and writes files, so it runs in a
    temp folder.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="corpusgraph-minilm-") as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, str(src))
        keep_fp32 = [n.name for n in model.graph.node if n.name.endswith("_ff2")]
        # onnx's shape inference gives no types for the outputs of contrib operators; every
        # activation in this graph is float32.
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=keep_fp32,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        return dst.read_bytes()


def graph_bytes(model_dir: Path, dim: int, int8: bool, cache_dir: Path | None) -> bytes:
    """The serialized graph, from cache_dir when it was built before for these exact weights (both
    runtimes read it: ONNX Runtime as is, OpenVINO through its ONNX frontend)."""
    if cache_dir is None:
        model = build_graph(model_dir, dim)
        return _quantize(model) if int8 else model.SerializeToString()
    digest = hashlib.sha256()
    with open(model_dir / "model.safetensors", "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    digest.update((model_dir / "config.json").read_bytes())
    path = cache_dir / f"minilm-v{GRAPH_VERSION}-{'int8' if int8 else 'fp32'}-{digest.hexdigest()[:16]}.onnx"
    if path.exists():
        return path.read_bytes()
    blob = graph_bytes(model_dir, dim, int8, None)
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Written beside and renamed: a process that reads the cache never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".partial")
    with os.fdopen(fd, "wb") as f:
        f.write(blob)
    os.replace(tmp, path)
    return blob


class OnnxMiniLM:
    """One ONNX Runtime session of the graph above; call it with one padded batch."""

    def __init__(self, model_dir: Path, dim: int, threads: int, int8: bool, cache_dir: Path | None = None):
        import onnxruntime as ort

        blob = graph_bytes(model_dir, dim, int8, cache_dir)
        opts = ort.SessionOptions()
        # Threads inside one operator: the machine's cores, or what the caller was given (a Ray
        # actor's num_cpus); 0 lets ONNX Runtime take its default (the physical cores), except
        # where a container's CPU quota allows fewer (llm/cores.py: its threads spin as they
        # wait). One operator at a time: the graph is a chain, so inter-op threads would only wait.
        if not threads:
            threads = quota_cap() or 0
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # warnings about unused initializers etc. are noise here
        self._session = ort.InferenceSession(blob, sess_options=opts, providers=["CPUExecutionProvider"])

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        (out,) = self._session.run(["embeddings"], {"input_ids": ids.astype(np.int32, copy=False),
                                                    "attention_mask": mask.astype(np.int32, copy=False)})
        return out
