"""all-MiniLM-L6-v2 on OpenVINO: the graph minilm_onnx.py writes, with int8 weights, run in bfloat16.

OpenVINO's ONNX frontend reads the same graph ONNX Runtime runs (its com.microsoft operators
included), so both runtimes share one builder and one cached file. Two things make this runtime
faster on CPU than ONNX Runtime's float32 graph, both documented features of OpenVINO's CPU plugin:

- **bfloat16 inference** (`INFERENCE_PRECISION_HINT`), asked for only where the CPU reports BF16
  among its optimization capabilities (AVX512-BF16 or AMX); elsewhere the plugin runs float32.
- **int8 weights with dynamic quantization of activations.** Each matmul's weight matrix is stored
  as unsigned 8-bit values with a scale and zero point per output column (the decompression
  pattern Convert -> Subtract -> Multiply that the plugin recognises as compressed weights), and
  `DYNAMIC_QUANTIZATION_GROUP_SIZE` lets the plugin quantise each token's activations to 8 bits in
  groups of that many input channels on the fly, so the matmul itself runs on 8-bit integer
  instructions (VNNI where the CPU has them).

Neither is exact: how close the vectors come to the numpy forward pass, and how fast they are, is
measured on the dev corpora by tests/benchmarks/test_embedded.py (results/embedded.json), and the
unit tests hold this runtime to the reference by cosine. The embedding table, the layer norms,
attention's softmax and the pooling are left as the frontend builds them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from corpusgraph.llm.cores import quota_cap
from corpusgraph.llm.minilm_onnx import graph_bytes

__all__ = ["OpenVinoMiniLM", "compress_weights", "GROUP_SIZE"]

# Input channels per activation scale in the dynamic quantization: 128 divides the model's hidden
# (384) and intermediate (1536) widths. Chosen on 600 dev documents and their titles, by cosine to
# the numpy pass and by the plugin's own per-node timings against groups of 32, 64 and a whole row
# (the figures: results/embedded.json, `embed.note`); no question took part.
GROUP_SIZE = 128


def compress_weights(model: Any) -> int:
    """Rewrite every matmul with a constant 2-D float weight (K, N) so that its weight is u8 with a
    per-column scale and zero point; returns how many were rewritten."""
    import openvino.opset13 as ops

    rewritten = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul":
            continue
        source = op.input_value(1).get_node()
        if source.get_type_name() != "Constant" or op.get_attributes().get("transpose_b", False):
            continue
        w = source.get_data().astype(np.float32)
        if w.ndim != 2:
            continue
        lo = np.minimum(w.min(axis=0, keepdims=True), 0.0)  # zero stays exactly representable
        hi = np.maximum(w.max(axis=0, keepdims=True), 0.0)
        scale = np.maximum((hi - lo) / 255.0, np.float32(1e-12)).astype(np.float32)
        zero = np.clip(np.round(-lo / scale), 0, 255).astype(np.uint8)
        q = np.clip(np.round(w / scale) + zero, 0, 255).astype(np.uint8)
        weight = ops.multiply(
            ops.subtract(ops.convert(ops.constant(q), "f32"), ops.convert(ops.constant(zero), "f32")),
            ops.constant(scale))
        op.input(1).replace_source_output(weight.output(0))
        rewritten += 1
    return rewritten


class OpenVinoMiniLM:
    """One compiled OpenVINO model of the graph; call it with one right-padded batch."""

    def __init__(self, model_dir: Path, dim: int, threads: int, cache_dir: Path | None = None):
        try:
            import openvino as ov
        except ImportError as e:  # a core dependency, but an install may have left it out (--no-deps)
            raise RuntimeError(
                "embeddings.runtime 'openvino' needs the openvino package (pinned in corpusgraph's "
                "dependencies: pip install corpusgraph, or pip install openvino); or set embeddings.runtime "
                f"to 'onnxruntime' (the same model in float32) ({e})") from e

        blob = graph_bytes(model_dir, dim, False, cache_dir)
        core = ov.Core()
        model = core.read_model(model=blob, weights=ov.Tensor(np.empty(0, dtype=np.uint8)))
        self.compressed = compress_weights(model)
        if not threads:  # as minilm_onnx: the container's CPU quota, else the plugin's own default
            threads = quota_cap() or 0
        capabilities = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        self.precision = "bf16" if "BF16" in capabilities else "f32"
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": self.precision,
                  "DYNAMIC_QUANTIZATION_GROUP_SIZE": str(GROUP_SIZE)}
        if threads:
            config["INFERENCE_NUM_THREADS"] = str(threads)
        self._compiled = core.compile_model(model, "CPU", config)
        self._request = self._compiled.create_infer_request()
        self._output = self._compiled.output("embeddings")
        # One infer request, so one batch at a time (the service embeds questions from threads).
        self._lock = threading.Lock()

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        inputs = {"input_ids": ids.astype(np.int32, copy=False), "attention_mask": mask.astype(np.int32, copy=False)}
        with self._lock:
            result = self._request.infer(inputs)
            return np.array(result[self._output], dtype=np.float32, copy=True)
