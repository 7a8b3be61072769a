"""Which config a command reads when --conf is not given, and the project's .env beside it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from corpusgraph.cli.common import add_config_options, config_from_args, read_env_file
from corpusgraph.config import ConfigError, defaults_dir


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_config_options(p)
    return p.parse_args(argv)


def _write(path, text, mode=0o600):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def test_settings_yaml_first_then_a_checkouts_conf(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="corpusgraph init"):
        config_from_args(_args(), environ={})
    _write(tmp_path / "conf" / "local.yaml", "chunk: {size_tokens: 111}\n")
    assert config_from_args(_args(), environ={}).chunk.size_tokens == 111
    _write(tmp_path / "settings.yaml", "chunk: {size_tokens: 222}\n")
    assert config_from_args(_args(), environ={}).chunk.size_tokens == 222
    assert config_from_args(_args("--conf", "conf/local.yaml"), environ={}).chunk.size_tokens == 111


def test_env_file_beside_the_config_fills_variables_and_the_environment_wins(tmp_path):
    _write(tmp_path / "settings.yaml", "llm: {api_key: '${LLM_API_KEY}', model: '${LLM_MODEL}'}\n")
    _write(tmp_path / ".env", "# keys\nLLM_API_KEY='sk-from-file'\nexport LLM_MODEL=from-file\n\n")
    cfg = config_from_args(_args("--conf", str(tmp_path / "settings.yaml")), environ={"LLM_MODEL": "from-env"})
    assert (cfg.llm.api_key, cfg.llm.model) == ("sk-from-file", "from-env")


def test_env_file_readable_by_others_or_malformed_is_refused(tmp_path):
    _write(tmp_path / ".env", "LLM_API_KEY=x\n", mode=0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_env_file(tmp_path / ".env")
    _write(tmp_path / ".env", "LLM_API_KEY x\n")
    with pytest.raises(ConfigError, match=":1: expected KEY=VALUE"):
        read_env_file(tmp_path / ".env")


def test_env_file_another_user_cannot_read_is_a_clear_error(tmp_path, monkeypatch):
    # What a container running as another uid than the project's owner meets (a 0600 .env of
    # someone else's); root reads any file, so the refusal the kernel would give is raised here.
    _write(tmp_path / ".env", "LLM_API_KEY=x\n")
    real = Path.read_text

    def refused(self, *args, **kwargs):
        if self.name == ".env":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refused)
    with pytest.raises(ConfigError, match=rf"readable by its owner only \(uid {os.getuid()}\).*CORPUSGRAPH_UID={os.getuid()}"):
        read_env_file(tmp_path / ".env")


def test_builtin_prompts_are_the_shipped_ones_and_a_typo_fails(tmp_path):
    _write(tmp_path / "settings.yaml", "extract: {prompt: prompts/mine.txt}\n")
    cfg = config_from_args(_args("--conf", str(tmp_path / "settings.yaml")), environ={})
    assert cfg.prompt_path(cfg.reports.prompt) == defaults_dir() / "prompts" / "report.txt"
    assert cfg.prompt_path(cfg.reports.prompt).is_file()
    # A project prompt is read beside the config, never replaced by the shipped one when it is missing.
    assert cfg.prompt_path(cfg.extract.prompt) == tmp_path / "prompts" / "mine.txt"
    assert not cfg.prompt_path(cfg.extract.prompt).exists()
