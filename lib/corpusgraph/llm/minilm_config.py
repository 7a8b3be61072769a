"""The one architecture the bundled MiniLM embedder's runtimes implement (minilm.py's numpy
forward pass and minilm_onnx.py's graph), checked against a model folder before either loads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["checked_config"]


def checked_config(model_dir: Path, expected_dim: int) -> dict[str, Any]:
    """The model's config.json, after refusing any architecture but the one both runtimes
    implement (BERT, gelu, absolute positions, mean pooling, `expected_dim` wide): anything else
    would give wrong vectors without an error."""
    config = json.loads((model_dir / "config.json").read_text())
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
        raise ValueError(f"{model_dir}: expected a BERT model with gelu, got {config.get('model_type')}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{model_dir}: only absolute position embeddings are supported")
    if not pooling.get("pooling_mode_mean_tokens") or config["hidden_size"] != expected_dim:
        raise ValueError(f"{model_dir}: expected mean pooling and hidden size {expected_dim}")
    return config
