"""Access domains: a key bound to some domains never sees what other domains' documents built.

The index (query_fixtures.two_domain_world) holds the public Saltreach world and a "vault" domain
of secrets, mixed into the graph the way extraction mixes them: a public entity also named in a
vault document, a vault document behind an edge between public entities and behind a claim, a
community that takes in a vault entity. The view rules are checked table by table, then a
public-only key tries every endpoint and every method against a model that echoes its whole
prompt into the answer, and no response body and no prompt may hold a vault string or the id of
anything vault text went into. The same requests with a vault key do show the secrets, so the
search would find a leak.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from corpusgraph.config import Config, ServeSection
from corpusgraph.query.engine import METHODS
from corpusgraph.query.access import domain_view_id, restrict
from corpusgraph.query.loaded import LoadedIndex
from tests.support.access_world import ADMIN, HIDDEN_FROM_PUBLIC, KEYS, PUBLIC, QUESTIONS, VAULT
from tests.support.access_world import leaks as _leaks
from tests.support.query_fixtures import DOMAIN_REPORTS, EchoChat, build_two_domain_index, fake_embed, make_engine

pytestmark = pytest.mark.unit

@pytest.fixture(scope="module")
def full(tmp_path_factory):
    from corpusgraph.query.store import IndexStore

    return IndexStore(*build_two_domain_index(tmp_path_factory.mktemp("two-domains")))


# The attack runs on the index as it was (a mixed community hidden whole) and with per-domain
# reports (reports.per_domain), which show a public key the public report of c0a and c1b.
@pytest.fixture(scope="module", params=[False, True], ids=["hidden-whole", "per-domain-reports"])
def world(request, tmp_path_factory):
    from corpusgraph.query.store import IndexStore

    return IndexStore(*build_two_domain_index(tmp_path_factory.mktemp("world"), per_domain=request.param))


@pytest.fixture(scope="module")
def service(world):
    from serving import create_app

    chat = EchoChat()
    app = create_app(Config(serve=ServeSection(api_keys=KEYS)), engine_factory=lambda _s: make_engine(world, chat))
    with TestClient(app) as client:
        deadline = time.monotonic() + 30
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the service never became ready"
            time.sleep(0.02)
        yield client, chat


# -- the view, table by table ----------------------------------------------------------------------


def _ids(store) -> dict[str, set[str]]:
    return {name: set(getattr(store, name)) for name in HIDDEN_FROM_PUBLIC} | {"reports": set(store.reports)}


def test_the_public_view_holds_only_what_public_documents_alone_built(full):
    view = restrict(full, {"public"})
    whole = _ids(full)
    for table, hidden in HIDDEN_FROM_PUBLIC.items():
        assert _ids(view)[table] == whole[table] - hidden, table
    assert set(view.reports) == {"c0b", "c1a", "c1c"}  # c1d has no report; c0a and c1b mix domains
    assert view.report_levels() == [0, 1] and view.reports_by_level[0] == ["c0b"]
    # Degree is what the view can see: rv_smuggle (vault evidence) no longer counts for the company.
    assert full.degree("e_iron") == 4 and view.degree("e_iron") == 3
    assert "kv_launder" not in view.entity_claims.get("e_iron", []) and view.entity_claims["e_iron"] == ["k1"]
    assert view.match_names("Corvin Thale and Port Keel") == [] and full.match_names("Corvin Thale") == ["ev_corvin"]
    # c1a's parent c0a is hidden, so c1a is a root of the view rather than a pointer to it.
    assert full.communities["c1a"]["parent_id"] == "c0a" and view.communities["c1a"]["parent_id"] is None


def test_the_vault_view_and_an_all_domain_view(full):
    vault = restrict(full, {"vault"})
    assert set(vault.entities) == {"ev_corvin", "ev_cartel", "ev_vault"}  # Port Keel mixes domains
    assert set(vault.relationships) == {"rv_leads", "rv_hides"} and set(vault.reports) == {"cv_vault", "cv_inner"}
    assert set(vault.docs) == {"dv_ledger", "dv_bribe", "dv_crates"} and not vault.claims
    both = restrict(full, {"public", "vault"})
    assert _ids(both) == _ids(full)  # nothing is hidden from a key that reads every domain
    assert restrict(full, None) is full


def test_per_domain_reports_show_each_view_its_own_domains_report_of_a_mixed_community(tmp_path):
    from corpusgraph.query.store import IndexStore

    full = IndexStore(*build_two_domain_index(tmp_path, per_domain=True))
    assert set(full.reports) == set(IndexStore(*build_two_domain_index(tmp_path / "plain")).reports)  # unrestricted: as before
    public, vault = restrict(full, {"public"}), restrict(full, {"vault"})
    c0a, c1b = domain_view_id("c0a", "public"), domain_view_id("c1b", "public")
    assert set(public.reports) == {"c0b", "c1a", "c1c", c0a, c1b}
    assert public.reports[c0a]["summary"] == DOMAIN_REPORTS[("c0a", "public")][1]
    # The view's c0a: the public entities among its members, its public units; c1a and c1b under it.
    assert public.communities[c0a]["entity_ids"] == ["e_lumen", "e_mara", "e_tobin", "e_treaty"]
    assert public.communities[c0a]["unit_ids"] == ["u1", "u2", "u5", "u7"] and public.communities[c0a]["level"] == 0
    assert public.communities["c1a"]["parent_id"] == c0a and public.communities[c1b]["parent_id"] == c0a
    assert public.reports_by_level[0] == sorted(["c0b", c0a])
    assert public.partial_communities == {"c0a", "c1b"}
    assert vault.reports[domain_view_id("c0a", "vault")]["title"] == "Cartel at the harbour"
    assert set(restrict(full, {"public", "vault"}).reports) == set(full.reports)  # sees the whole: no split
    # Ids say nothing about the community: not its id, not its domain.
    assert "c0a" not in c0a and "public" not in c0a and c0a != domain_view_id("c0a", "vault")


def test_views_are_built_once_per_domain_set_and_narrow(full):
    loaded = LoadedIndex(full)
    view = loaded.view(["public"])
    assert loaded.view({"public"}) is view  # cached by the set, whatever the iterable
    both = loaded.view({"public", "vault"})
    assert both.view({"public", "elsewhere"}) is view  # a view of a view narrows from the full store
    assert set(loaded.view({"nobody"}).store.entities) == set()
    assert set(restrict(both.store, {"public", "elsewhere"}).entities) == set(view.store.entities)


def test_vector_search_returns_only_visible_hits_and_still_fills_k(full):
    view = restrict(full, {"public"})
    question = fake_embed(["Obsidian Cartel gold Zephyrine Vault door code QX-7731 moonpearls"])
    top = [i for i, _ in full.vectors("text_unit").search(question, 3)[0]]
    assert set(top) & HIDDEN_FROM_PUBLIC["units"]  # the nearest units are vault ones
    hits = view.vectors("text_unit").search(question, 3)[0]
    assert len(hits) == 3 and not {i for i, _ in hits} & HIDDEN_FROM_PUBLIC["units"]
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    assert len(view.vectors("entity")) == len(view.entities) and set(view.vectors("entity").ids) == set(view.entities)
    everything = view.vectors("text_unit").search(np.stack([question[0], question[0]]), 50)
    assert [len(row) for row in everything] == [len(view.units)] * 2


def test_each_keys_view_is_built_before_the_service_says_ready(full):
    from corpusgraph.query.store import IndexStore
    from serving import create_app

    fresh = IndexStore(full.warehouse, full.index_dir)
    made = make_engine(fresh, EchoChat())
    keys = [{"name": "p", "key": "k1", "domains": ["public"]}, {"name": "b", "key": "k2", "domains": ["vault", "public"]},
            {"name": "a", "key": "k3", "domains": ["*"]}]
    app = create_app(Config(serve=ServeSection(api_keys=keys)),
                     engine_factory=lambda _s: made)
    with TestClient(app) as client:
        deadline = time.monotonic() + 30
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert made.index.cached_views() == {frozenset({"public"}), frozenset({"public", "vault"})}


# -- the service, attacked with a public key ---------------------------------------------------------


def _body(response) -> str:
    """The body without `question`: a caller's own words come back to it and prove nothing."""
    try:
        data = response.json()
    except ValueError:
        return response.text
    if isinstance(data, dict):
        data.pop("question", None)
    return json.dumps(data)


def _ask_everything(client, key: str) -> list[tuple[str, int, str]]:
    """Every method x question x level, and a wide top_k: (label, status, body)."""
    out = []
    for method in METHODS:
        for question in QUESTIONS:
            for extra in ({}, {"level": 0}, {"level": 1}, {"top_k": 50}):
                r = client.post("/v1/query", json={"question": question, "method": method, **extra},
                                headers={"Authorization": f"Bearer {key}"})
                out.append((f"{method} {extra} {question}", r.status_code, _body(r)))
    return out


def test_no_method_leaks_another_domain_into_answers_citations_or_prompts(service, world):
    client, chat = service
    before = len(chat.batches)
    answers = _ask_everything(client, PUBLIC)
    assert {status for _, status, _ in answers} == {200}
    leaks = {label: _leaks(body) for label, _, body in answers if _leaks(body)}
    assert not leaks, leaks
    prompts = [r.messages[-1]["content"] for batch in chat.batches[before:] for r in batch]
    assert prompts and not [p for p in prompts if _leaks(p)]
    # The public key was answered from public material: the echo carries public facts and citations.
    local = json.loads(next(b for label, _, b in answers if label.startswith("local {}")))
    assert "Lumen Guild" in local["answer"] and local["citations"]
    if world.domain_reports:  # the public report of the mixed c0a is what global and drift now read
        public_c0a = DOMAIN_REPORTS[("c0a", "public")][1]
        for method in ("global", "drift"):
            assert any(public_c0a in b for label, _, b in answers if label.startswith(method)), method
        level0 = json.loads(next(b for label, _, b in answers if label.startswith("global {'level': 0}")))
        assert level0["coverage"]["reports_mapped"] == 2 and level0["coverage"]["document_share"] == 1.0
    assert all(c["doc_id"] in restrict(world, {"public"}).docs for _, _, b in answers
               for c in json.loads(b).get("citations", []))


def test_the_same_attack_with_the_vault_key_finds_the_secrets(service):
    """The control: the search above can fail. The vault key's answers hold vault facts."""
    client, _ = service
    found: dict[str, set[str]] = {method: set() for method in METHODS}
    for label, status, body in _ask_everything(client, VAULT):
        assert status == 200
        found[label.split()[0]].update(_leaks(body))
    for method, secrets in found.items():  # every method, drift and dynamic global included, reads the vault
        assert {"qx-7731", "zephyrine", "corvin"} <= secrets, (method, secrets)
    assert "dv_ledger" in found["basic"]  # a vault citation
    assert client.get("/v1/entities/ev_vault", headers={"X-API-Key": VAULT}).status_code == 200


def _same_404(client, path: str, hidden_id: str, key: str = PUBLIC) -> None:
    r = client.get(path.format(hidden_id), headers={"X-API-Key": key})
    never = client.get(path.format("never-existed"), headers={"X-API-Key": key})
    assert r.status_code == never.status_code == 404
    assert r.json()["detail"].replace(hidden_id, "never-existed") == never.json()["detail"]  # no tell-tale difference


def test_entities_and_communities_endpoints_show_nothing_of_the_vault(service, world):
    client, _ = service
    bodies = []
    full = world
    for eid in full.entities:
        if eid in HIDDEN_FROM_PUBLIC["entities"]:
            _same_404(client, "/v1/entities/{}", eid)
        else:
            r = client.get(f"/v1/entities/{eid}", params={"limit": 200}, headers={"X-API-Key": PUBLIC})
            assert r.status_code == 200
            bodies.append((eid, r.text))
    public = restrict(full, {"public"})
    for cid in list(full.communities) + [c for c in public.communities if c not in full.communities]:
        if cid in HIDDEN_FROM_PUBLIC["communities"]:
            _same_404(client, "/v1/communities/{}", cid)
        else:  # a public community, or (per-domain reports) a public report of a mixed one
            r = client.get(f"/v1/communities/{cid}", headers={"X-API-Key": PUBLIC})
            assert r.status_code == 200
            bodies.append((cid, r.text))
    for params in ({}, {"level": 0}, {"level": 1}, {"level": 2}, {"limit": 200}):
        r = client.get("/v1/communities", params=params, headers={"X-API-Key": PUBLIC})
        assert r.status_code == 200
        bodies.append((str(params), r.text))
    for path in ("/readyz", "/metrics", "/healthz"):
        bodies.append((path, client.get(path).text))
    leaks = {label: _leaks(text) for label, text in bodies if _leaks(text)}
    assert not leaks, leaks

    iron = client.get("/v1/entities/e_iron", headers={"X-API-Key": PUBLIC}).json()
    assert iron["entity"]["degree"] == 3 and {c["claim_id"] for c in iron["claims"]} == {"k1"}
    assert {n["entity_id"] for n in iron["neighbours"]} == {"e_lumen", "e_ilsa", "e_grey"}
    level0 = client.get("/v1/communities", params={"level": 0}, headers={"X-API-Key": PUBLIC}).json()
    partial = [domain_view_id("c0a", "public")] if full.domain_reports else []
    assert sorted(c["community_id"] for c in level0["communities"]) == sorted(["c0b"] + partial)
    assert level0["levels"] == [0, 1]


def test_asking_for_a_domain_the_key_lacks_is_403_and_says_only_that(service, world):
    client, _ = service
    r = client.get("/v1/communities", headers={"X-API-Key": PUBLIC, "X-Access-Domains": "public,vault"})
    assert r.status_code == 403
    assert r.json() == {"detail": "this API key may not read domain(s) vault (X-Access-Domains)"}
    narrowed = client.get("/v1/communities", headers={"X-API-Key": ADMIN, "X-Access-Domains": "public"}).json()
    partial = {domain_view_id(c, "public") for c in ("c0a", "c1b")} if world.domain_reports else set()
    assert {c["community_id"] for c in narrowed["communities"]} == {"c0b", "c1a", "c1c", "c1d"} | partial
    assert client.get("/v1/entities/ev_vault", headers={"X-API-Key": ADMIN}).status_code == 200
    assert client.get("/v1/entities/e_mara", headers={"X-API-Key": "guess"}).status_code == 401
