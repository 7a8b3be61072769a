import pytest

from corpusgraph.config import ConfigError, load_config
from tests.conftest import REPO


def test_local_overlays_base_and_keeps_defaults():
    cfg = load_config(REPO / "conf" / "local.yaml")
    assert cfg.llm.backend == "embedded"
    assert cfg.chunk.size_tokens == 600  # local.yaml overrides the default
    assert load_config(REPO / "conf" / "base.yaml").chunk.size_tokens == 300  # the default, stated only in sections/
    assert cfg.estimate.prices["gpt-4o-mini"].usd_per_1m_in == 0.15  # from base.yaml, untouched by local.yaml
    assert cfg.communities.seed == 42  # a default stated only in sections/
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


def test_fingerprint_is_a_short_hash_that_skips_the_service_section():
    a = load_config(REPO / "conf" / "local.yaml")
    served_elsewhere = load_config(REPO / "conf" / "local.yaml", {"serve.port": "9999"})
    tuned = load_config(REPO / "conf" / "local.yaml", {"query.retrieval.damping": "0.7"})
    assert len(a.fingerprint()) == 16 and int(a.fingerprint(), 16) >= 0  # 16 hex digits: 64 bits of SHA-256
    assert a.fingerprint() == served_elsewhere.fingerprint() != tuned.fingerprint()


def test_query_section_is_nested_by_concern():
    cfg = load_config(REPO / "conf" / "base.yaml", {"query.global.level": "2", "query.drift.breadth": "4"})
    # Defaults as written in lib/corpusgraph/sections/query.py, prompts included.
    assert (cfg.query.retrieval.damping, cfg.query.retrieval.iterations, cfg.query.retrieval.keep_dense) == (0.5, 30, 5)
    assert cfg.query.global_.level == 2 and cfg.query.global_.prompt_map == "builtin:prompts/global_map.txt"
    assert cfg.query.drift.breadth == 4 and cfg.query.drift.prompt == "builtin:prompts/drift_primer.txt"
    assert cfg.query.top_k_units == 5 and cfg.query.max_context_tokens == 12000  # sized for real models


@pytest.mark.parametrize("old, new", [
    ("retrieval_damping", "query.retrieval.damping"),
    ("global_level", "query.global.level"),
    ("dynamic_max_level", "query.global.dynamic_max_level"),
    ("prompt_drift", "query.drift.prompt"),
    ("drift_breadth", "query.drift.breadth"),
])
def test_a_flat_query_key_names_its_new_place(tmp_path, old, new):
    p = tmp_path / "old.yaml"
    p.write_text(f"query:\n  {old}: 1\n")
    with pytest.raises(ConfigError, match=f"query.{old} is now {new}"):
        load_config(p)
    with pytest.raises(ConfigError, match=f"query.{old} is now {new}"):
        load_config(REPO / "conf" / "local.yaml", {f"query.{old}": "1"})


def test_base_yaml_states_no_default():
    # base.yaml holds a deployment's choices; a value equal to its section's default says nothing
    # and goes stale when the default changes.
    import yaml

    from corpusgraph.config import Config

    def same(node: dict, default: dict, path: str) -> list[str]:
        out = []
        for key, value in node.items():
            d = default.get(key) if isinstance(default, dict) else None
            if isinstance(value, dict) and isinstance(d, dict) and value and d:
                out += same(value, d, f"{path}{key}.")
            elif value == d:
                out.append(f"{path}{key}")
        return out

    raw = yaml.safe_load((REPO / "conf" / "base.yaml").read_text())
    assert same(raw, Config().model_dump(by_alias=True), "") == []
