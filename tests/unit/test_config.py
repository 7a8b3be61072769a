import pytest

from corpusgraph.config import ConfigError, load_config
from tests.conftest import REPO


def test_local_overlays_base_and_keeps_defaults():
    cfg = load_config(REPO / "conf" / "local.yaml")
    assert cfg.llm.backend == "embedded"
    assert cfg.chunk.size_tokens == 600  # local.yaml overrides base.yaml's 300
    assert load_config(REPO / "conf" / "base.yaml").chunk.size_tokens == 300
    assert cfg.storage.warehouse == "work/warehouse"  # from base.yaml, untouched by local.yaml
    assert cfg.communities.seed == 42  # a default stated only in config.py
    assert cfg.prompt_path(cfg.extract.prompt).is_file()


def test_cluster_example_substitutes_variables():
    cfg = load_config(REPO / "conf" / "cluster.yaml", env={"LLM_API_KEY": "sk-test", "LLM_MODEL": "m"})
    assert cfg.llm.backend == "openai"
    assert cfg.llm.api_key == "sk-test" and cfg.llm.model == "m"
    assert cfg.llm.api_base == "http://vllm-head:8000/v1"  # the ${VAR:-default} fallback


def test_missing_variable_without_default_is_an_error(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("llm:\n  api_key: ${NOPE}\n")
    with pytest.raises(ConfigError, match="NOPE"):
        load_config(p, env={})


def test_overrides_and_unknown_keys(tmp_path):
    cfg = load_config(REPO / "conf" / "local.yaml", {"chunk.size_tokens": "128"})
    assert cfg.chunk.size_tokens == 128
    p = tmp_path / "bad.yaml"
    p.write_text("chunk:\n  size_tokns: 5\n")
    with pytest.raises(ConfigError, match="size_tokns"):
        load_config(p)


def test_fingerprint_ignores_secret_but_not_settings():
    a = load_config(REPO / "conf" / "local.yaml")
    b = load_config(REPO / "conf" / "local.yaml", {"llm.api_key": "secret"})
    c = load_config(REPO / "conf" / "local.yaml", {"chunk.size_tokens": "100"})
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
