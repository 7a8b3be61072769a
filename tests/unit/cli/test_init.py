"""`corpusgraph init`: the settings it writes list every key, load to the preset's config, and
their commented lines state the true defaults; prompts, .env and input/ as documented."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
import yaml

import corpusgraph

from corpusgraph.cli.init import PRESETS, init_project
from corpusgraph.cli.main import main
from corpusgraph.config import Config, ConfigError, defaults_dir, load_config
from corpusgraph.sections.catalog import entries

# Stand-ins for the ${VAR}s the presets read (the cluster preset has defaults for all but these).
ENV = {"LLM_API_KEY": "sk-test"}
_LINE = re.compile(r"^( *)(# )?([A-Za-z_][A-Za-z0-9_]*):(?: (.*))?$")


def _setting_lines(text: str) -> dict[int, bool]:
    """Line number -> live? for every key of the catalog, found in catalog order (depth and name)."""
    lines = text.splitlines()
    found, i = {}, 0
    for entry in (e for e in entries(Config) if not e.item):
        depth, name = entry.depth, entry.key.rsplit(".", 1)[-1]
        while i < len(lines):
            m = _LINE.match(lines[i])
            i += 1
            if m and len(m.group(1)) == 2 * depth and m.group(3) == name:
                found[i - 1] = m.group(2) is None
                break
        else:
            pytest.fail(f"{entry.key} is not in the settings (in catalog order)")
    return found


def _comparable(cfg: Config) -> dict:
    """The config with what init changes on purpose taken out: where the prompts live (their text is
    compared instead), the inputs (init's input/ folder) and the config's own folder."""
    data = cfg.model_dump(mode="json", exclude={"conf_dir": True, "ingest": {"inputs"}})
    prompts = {}
    for section, field in (("extract", "prompt"), ("reports", "prompt"), ("resolve", "prompt_summarise")):
        prompts[f"{section}.{field}"] = cfg.prompt_path(data[section].pop(field)).read_text()
    for section in ("extract", "resolve", "query"):
        for key in [k for k in data[section] if k.startswith("prompt")]:
            data[section].pop(key)
    for sub in ("global_", "drift"):
        data["query"][sub] = {k: v for k, v in data["query"][sub].items() if not k.startswith("prompt")}
    return data | {"prompt_texts": prompts}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_settings_list_every_key_and_load_to_the_preset(preset, tmp_path):
    init_project(tmp_path / "p", preset)
    text = (tmp_path / "p" / "settings.yaml").read_text()
    assert not re.search(r"^#? ?base:", text, re.M)  # stands alone: an upgrade of the package changes nothing under it
    found = _setting_lines(text)
    assert any(found.values()) and not all(found.values())
    written = load_config(tmp_path / "p" / "settings.yaml", env=ENV)
    shipped = load_config(defaults_dir() / PRESETS[preset][0], env=ENV)
    assert _comparable(written) == _comparable(shipped)
    # The prompts it uses are the editable copies beside the settings, same text as the shipped ones.
    assert written.prompt_path(written.extract.prompt) == tmp_path / "p" / "prompts" / "extract.txt"
    if preset != "cluster":
        assert written.ingest.inputs == ["input"] and (tmp_path / "p" / "input").is_dir()


def test_commented_lines_state_the_defaults(tmp_path):
    """Uncommenting every key line changes nothing: each commented value is the real default."""
    init_project(tmp_path / "p", "embedded")
    path = tmp_path / "p" / "settings.yaml"
    text = path.read_text()
    lines = text.splitlines()
    for n, live in _setting_lines(text).items():
        if not live:
            lines[n] = lines[n].replace("# ", "", 1)
    uncommented = tmp_path / "p" / "all.yaml"
    uncommented.write_text("\n".join(lines) + "\n")
    assert yaml.safe_load(uncommented.read_text())["update"]["redetect_drift"] == Config().update.redetect_drift
    assert load_config(uncommented).model_dump(exclude={"conf_dir"}) == load_config(path).model_dump(exclude={"conf_dir"})


def test_env_file_names_the_variables_and_is_private(tmp_path):
    init_project(tmp_path / "p", "openai")
    env = tmp_path / "p" / ".env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    lines = env.read_text().splitlines()
    assert "LLM_API_KEY=" in lines  # required: no default, so a live empty line to fill
    assert "# LLM_MODEL=" in lines and "# default: gpt-4o-mini" in lines
    # Until the key is given the settings say which variable is missing.
    with pytest.raises(ConfigError, match="LLM_API_KEY"):
        load_config(tmp_path / "p" / "settings.yaml", env={})


def test_existing_project_is_kept_unless_forced(tmp_path):
    init_project(tmp_path / "p", "embedded")
    mine = tmp_path / "p" / "prompts" / "extract.txt"
    mine.write_text("my own prompt {text}")
    with pytest.raises(ConfigError, match="--force"):
        init_project(tmp_path / "p", "openai")
    assert "backend: embedded" in (tmp_path / "p" / "settings.yaml").read_text()
    init_project(tmp_path / "p", "openai", force=True)
    assert "backend: openai" in (tmp_path / "p" / "settings.yaml").read_text()
    assert mine.read_text() == (defaults_dir() / "prompts" / "extract.txt").read_text()


def test_from_file_keeps_its_choices_and_refuses_unknown_keys(tmp_path):
    own = tmp_path / "own.yaml"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "report.txt").write_text("report {context}")
    own.write_text("chunk: {size_tokens: 123}\nreports: {prompt: mine/report.txt}\n")
    init_project(tmp_path / "p", source=own)
    cfg = load_config(tmp_path / "p" / "settings.yaml")
    assert cfg.chunk.size_tokens == 123
    assert cfg.prompt_path(cfg.reports.prompt).read_text() == "report {context}"
    own.write_text("chunk: {size_tokenz: 123}\n")
    with pytest.raises(ConfigError, match="size_tokenz"):
        init_project(tmp_path / "q", source=own)
    assert not (tmp_path / "q").exists()


def test_command_with_the_sample(tmp_path, capsys):
    assert main(["init", str(tmp_path / "p"), "--sample"]) == 0
    copied = sorted(p.name for p in (tmp_path / "p" / "input").iterdir())
    shipped = sorted(p.name for p in (Path(corpusgraph.__file__).parent / "samples" / "freight" / "docs").iterdir()
                     if p.is_file())
    assert copied == shipped and len(copied) > 10
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'p' / 'settings.yaml'}" in out and f"cd {tmp_path / 'p'} && corpusgraph index" in out
