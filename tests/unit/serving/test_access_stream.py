"""Access domains on the surfaces apps use beside the JSON answer: streamed answers (every event),
retrieval-only contexts, and conversations. The attack of test_access_domains.py again, with the
public key, against the model that echoes its whole prompt: no event, context or rewrite prompt
may hold a vault string or the id of anything vault text went into. The vault key's same requests
do find the secrets (the control: the search can fail).
"""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from corpusgraph.config import Config, ServeSection
from corpusgraph.query.engine import CONTEXT_METHODS, METHODS
from tests.support.access_world import ADMIN, KEYS, PUBLIC, QUESTIONS, VAULT, auth, leaks, said, sse_events
from tests.support.query_fixtures import EchoChat, build_two_domain_index, make_engine

pytestmark = pytest.mark.unit

SECRETS_FOUND = {"qx-7731", "zephyrine", "corvin"}


@pytest.fixture(scope="module", params=[False, True], ids=["hidden-whole", "per-domain-reports"])
def service(request, tmp_path_factory):
    from corpusgraph.query.store import IndexStore
    from serving import create_app

    world = IndexStore(*build_two_domain_index(tmp_path_factory.mktemp("world"), per_domain=request.param))
    chat = EchoChat()
    app = create_app(Config(serve=ServeSection(api_keys=KEYS)), engine_factory=lambda _c: make_engine(world, chat))
    with TestClient(app) as client:
        deadline = time.monotonic() + 30
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield client, chat


def _streams(client, key: str) -> list[tuple[str, str]]:
    """Every method x question x level / top_k, streamed: (label, what the stream said)."""
    out = []
    for method in METHODS:
        for question in QUESTIONS:
            for extra in ({}, {"level": 0}, {"level": 1}, {"top_k": 50}):
                body = {"question": question, "method": method, "stream": True, **extra}
                with client.stream("POST", "/v1/query", json=body, headers=auth(key)) as r:
                    text = "".join(r.iter_text())
                assert r.status_code == 200
                events = sse_events(text)
                assert events[-1][0] == "done", (method, extra, events[-1])
                out.append((f"{method} {extra} {question}", said(text)))
    return out


def test_no_event_of_any_stream_holds_the_vault(service):
    client, chat = service
    before = len(chat.batches)
    said_ = _streams(client, PUBLIC)
    found = {label: leaks(text) for label, text in said_ if leaks(text)}
    assert found == {}
    prompts = [r.messages[-1]["content"] for batch in chat.batches[before:] for r in batch]
    assert prompts and [p for p in prompts if leaks(p)] == []
    assert any("Lumen Guild" in text for label, text in said_ if label.startswith("local"))


def test_the_vault_keys_streams_hold_the_secrets(service):
    client, _ = service
    found: dict[str, set[str]] = {m: set() for m in METHODS}
    for label, text in _streams(client, VAULT):
        found[label.split()[0]].update(leaks(text))
    for method, secrets in found.items():
        assert SECRETS_FOUND <= secrets, (method, secrets)


def _contexts(client, key: str) -> list[tuple[str, str]]:
    out = []
    for method in CONTEXT_METHODS:
        for question in QUESTIONS:
            for extra in ({}, {"max_tokens": 200}, {"top_k": 50, "include_text": True}, {"level": 0, "map": True},
                          {"level": 1, "map": True, "include_text": True}):
                r = client.post("/v1/context", json={"question": question, "method": method, **extra},
                                headers=auth(key))
                assert r.status_code == 200, r.text
                out.append((f"{method} {extra} {question}", said(r.text)))
    return out


def test_no_context_holds_the_vault(service):
    client, chat = service
    before = len(chat.batches)
    found = {label: leaks(text) for label, text in _contexts(client, PUBLIC) if leaks(text)}
    assert found == {}
    prompts = [r.messages[-1]["content"] for batch in chat.batches[before:] for r in batch]
    assert prompts and [p for p in prompts if leaks(p)] == []  # map: true made calls; none saw the vault


def test_the_vault_keys_contexts_hold_the_secrets(service):
    client, _ = service
    found: dict[str, set[str]] = {m: set() for m in CONTEXT_METHODS}
    for label, text in _contexts(client, VAULT):
        found[label.split()[0]].update(leaks(text))
    assert SECRETS_FOUND <= found["basic"] and SECRETS_FOUND <= found["local"]
    assert {"zephyrine", "corvin"} <= found["global"]


def _rewrite_prompts(chat, since: int) -> list[str]:
    return [r.messages[-1]["content"] for batch in chat.batches[since:] for r in batch if r.id == "rewrite"]


def test_a_conversation_never_crosses_keys_or_domain_sets(service):
    client, chat = service
    vault_turn = {"question": "What is the door code of the Zephyrine Vault?", "conversation_id": "shared-id",
                  "method": "basic"}
    first = client.post("/v1/query", json=vault_turn, headers=auth(VAULT)).json()
    assert "QX-7731" in first["answer"]
    since = len(chat.batches)
    follow = {"question": "And who keeps it?", "conversation_id": "shared-id", "method": "basic"}
    r = client.post("/v1/query", json=follow, headers=auth(PUBLIC))
    assert r.status_code == 200 and r.json()["standalone_question"] is None  # a fresh conversation: no rewrite
    assert _rewrite_prompts(chat, since) == [] and leaks(said(r.text), (follow["question"],)) == []
    # The admin key reads both domains; narrowed to public, its own conversation of that id is not shown.
    client.post("/v1/query", json=vault_turn, headers=auth(ADMIN))
    since = len(chat.batches)
    narrowed = client.post("/v1/query", json=follow, headers={**auth(ADMIN), "X-Access-Domains": "public"})
    assert narrowed.status_code == 200 and _rewrite_prompts(chat, since) == []
    assert leaks(said(narrowed.text), (follow["question"],)) == []
    # The control: the vault key's own follow-up is rewritten with its vault turn.
    since = len(chat.batches)
    client.post("/v1/query", json=follow, headers=auth(VAULT))
    prompts = _rewrite_prompts(chat, since)
    assert len(prompts) == 1 and "qx-7731" in prompts[0].lower()


def test_history_sent_by_a_public_caller_reaches_only_its_own_rewrite(service):
    """What a caller sends in `history` is its own words: they reach the rewrite prompt, and retrieval
    still reads only the caller's view."""
    client, chat = service
    history = [{"role": "user", "content": "Tell me about the guild."},
               {"role": "assistant", "content": "The Lumen Guild makes lanterns in Port Keel."}]
    r = client.post("/v1/query", json={"question": "Who founded it?", "history": history, "method": "local"},
                    headers=auth(PUBLIC))
    body = json.loads(said(r.text))
    assert r.status_code == 200 and body["details"]["rewrite"]["turns"] == 2
    assert leaks(json.dumps(body), (history[0]["content"], history[1]["content"], "Who founded it?")) == []
