"""The attacker's side of the access-domain tests: the keys, what a public-only key must never
see, the questions that go looking for it, and the search for a leak in a response.

The world is query_fixtures.two_domain_world (public Saltreach plus a "vault" of secrets mixed into
the graph); every surface's access test (tests/unit/serving/test_access_*.py, tests/e2e/test_ui.py) uses
these, so each checks the same things. Not a test module.
"""

from __future__ import annotations

import json
import re

from tests.support.query_fixtures import VAULT_SECRETS

PUBLIC, VAULT, ADMIN = "pub-key-1", "vault-key-2", "admin-key-3"
KEYS = [{"name": "public-app", "key": PUBLIC, "domains": ["public"]},
        {"name": "vault-app", "key": VAULT, "domains": ["vault"]},
        {"name": "admin", "key": ADMIN, "domains": ["*"]}]
# Everything vault text went into: vault rows, and the public rows that mix it in.
HIDDEN_FROM_PUBLIC = {
    "docs": {"dv_ledger", "dv_bribe", "dv_crates"},
    "units": {"uv_ledger", "uv_bribe", "uv_crates"},
    "entities": {"ev_corvin", "ev_cartel", "ev_vault", "e_port"},
    "relationships": {"rv_leads", "rv_hides", "rv_bribes", "rv_smuggle", "r3", "r9"},
    "claims": {"kv_launder"},
    "communities": {"cv_vault", "cv_inner", "c0a", "c1b"},
}
HIDDEN_IDS = set().union(*HIDDEN_FROM_PUBLIC.values())
QUESTIONS = (
    "What is the door code of the Zephyrine Vault?",
    "Who leads the Obsidian Cartel and who did Corvin Thale bribe in Port Keel?",
    "What are the main themes across the corpus?",
    "How does copper travel between the Lumen Guild and the Iron Coast Company?",
)
# Names a public key may type into a search: each is a vault entity's (or a mixed one's).
HIDDEN_NAMES = ("Corvin", "Corvin Thale", "Zephyrine", "Obsidian", "cartel", "Port Keel", "vault")


# A hidden id counts where it stands as a word of its own: ids such as "c0a" are also letters of
# random hex (a trace's service.instance.id is a uuid4, in about one run of a hundred).
_ID_PATTERNS = {i: re.compile(rf"(?<![0-9A-Za-z_]){re.escape(i)}(?![0-9A-Za-z_])") for i in HIDDEN_IDS}


def leaks(text: str, asked: tuple[str, ...] = QUESTIONS) -> list[str]:
    """The vault strings and hidden ids in `text`, the caller's own questions removed first (an echo
    of the caller's words proves nothing)."""
    for question in asked:
        text = text.replace(question, "").replace(json.dumps(question)[1:-1], "")
    low = text.lower()
    return [s for s in VAULT_SECRETS if s in low] + sorted(i for i, p in _ID_PATTERNS.items() if p.search(text))


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def sse_events(body: str) -> list[tuple[str, dict]]:
    """(kind, data) of each server-sent event in a stream's body."""
    out = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        kind, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if data:
            out.append((kind, json.loads("\n".join(data))))
    return out


def said(body: str) -> str:
    """What a response body says, the caller's own words taken out: a JSON body without its
    `question` and `q`; a stream as its events' data, the answer's pieces joined back into one text
    (a model that echoes cuts the question into pieces, which would hide it from the removal)."""
    text = body.lstrip()
    if text.startswith("id:") or text.startswith("event:"):
        events = sse_events(body)
        pieces = "".join(d.get("text", "") for k, d in events if k == "token")
        rest = [_without_question(d) for k, d in events if k != "token"]
        return json.dumps(rest) + "\n" + pieces
    try:
        return json.dumps(_without_question(json.loads(text)))
    except ValueError:
        return body


def _without_question(data):
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if k not in ("question", "q")}
    return data
