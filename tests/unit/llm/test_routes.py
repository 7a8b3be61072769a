"""Endpoint URLs and credentials per profile (llm/routes.py): Azure's v1 and dated API paths, the
api-key header, and Entra ID tokens from a command or a provider, cached until five minutes before
they expire."""

from __future__ import annotations

import base64
import json
import pickle
import sys
import time

import pytest

from corpusgraph.llm.profiles import profile
from corpusgraph.llm.routes import Route, TokenError, TokenSource, azure_version_at_least


def jwt(exp: float) -> str:
    part = base64.urlsafe_b64encode(json.dumps({"exp": exp}).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJub25lIn0.{part}.sig"


def test_azure_urls_for_the_v1_and_the_dated_api():
    v1 = Route(profile("azure_openai"), api_version="v1", deployment="dep")
    for base in ("https://acme.openai.azure.com", "https://acme.openai.azure.com/openai/v1/"):
        assert v1.chat_url(base) == "https://acme.openai.azure.com/openai/v1/chat/completions"
    assert v1.api_url("https://acme.openai.azure.com", "/files") == "https://acme.openai.azure.com/openai/v1/files"
    dated = Route(profile("azure_openai"), api_version="2024-10-21", deployment="dep")
    assert dated.chat_url("https://acme.openai.azure.com/openai") == \
        "https://acme.openai.azure.com/openai/deployments/dep/chat/completions?api-version=2024-10-21"
    assert dated.embed_url("https://acme.openai.azure.com") == \
        "https://acme.openai.azure.com/openai/deployments/dep/embeddings?api-version=2024-10-21"
    assert dated.api_url("https://acme.openai.azure.com", "/batches/b1") == \
        "https://acme.openai.azure.com/openai/batches/b1?api-version=2024-10-21"
    assert Route(profile("vllm")).chat_url("http://gpu:8000/v1/") == "http://gpu:8000/v1/chat/completions"


def test_credentials_per_profile():
    assert Route(profile("openai")).static_headers("sk-1", entra=False) == {"Authorization": "Bearer sk-1"}
    assert Route(profile("azure_openai")).static_headers("k", entra=False) == {"api-key": "k"}
    assert Route(profile("azure_openai")).static_headers(None, entra=True) == {}
    assert Route(profile("vllm")).static_headers(None, entra=False) == {}
    assert azure_version_at_least("2024-10-21", "2024-09-01") and not azure_version_at_least("2024-08-01-preview",
                                                                                             "2024-09-01")
    assert azure_version_at_least("v1", "2024-09-01")


def test_a_token_command_is_run_once_until_the_token_nears_its_expiry(tmp_path):
    counter = tmp_path / "runs"
    later = jwt(time.time() + 3600)
    script = tmp_path / "token.py"
    script.write_text(f"import pathlib; p = pathlib.Path({str(counter)!r}); p.write_text(str(int(p.read_text() or 0) + 1)"
                      f" if p.exists() else '1'); print({later!r})")
    source = TokenSource(command=f"{sys.executable} {script}")
    assert source.get() == later and source.get() == later and counter.read_text() == "1"
    source.invalidate()
    assert source.get() == later and counter.read_text() == "2"
    # A token that expires within five minutes is fetched again.
    soon = TokenSource(token=jwt(time.time() + 60))
    assert soon.fresh() is None and soon.get()
    clone = pickle.loads(pickle.dumps(source))  # travels into Ray actors as its settings
    assert clone.command == source.command and clone.fresh() is None


def test_token_command_json_output_and_failures(tmp_path):
    script = tmp_path / "az.py"
    script.write_text("import json, time; print(json.dumps({'accessToken': 'abc', 'expires_on': int(time.time()) + 3600}))")
    src = TokenSource(command=f"{sys.executable} {script}")
    assert src.get() == "abc" and src.fresh() == "abc"
    failing = tmp_path / "fail.py"
    failing.write_text("import sys; sys.stderr.write('no login'); sys.exit(3)")
    with pytest.raises(TokenError, match="failed \\(exit 3\\): no login"):
        TokenSource(command=f"{sys.executable} {failing}").get()
    with pytest.raises(TokenError, match="could not be loaded"):
        TokenSource(provider="no_such_module_x:fn").get()
    with pytest.raises(ValueError, match="exactly one"):
        TokenSource(token="a", command="b")


def test_a_provider_callable_gives_the_token():
    got = TokenSource(provider="tests.unit.llm.test_routes:_provide").get()
    assert got == "from-provider"


class _Token:
    token = "from-provider"
    expires_on = time.time() + 3600


def _provide():
    return _Token()
