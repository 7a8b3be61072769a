"""The service response carries the answer's coverage, computed within the caller's view.

Figures are the hand-worked ones of test_coverage.py: on the Saltreach world level 0 maps c0a
and c0b (all 8 live documents); on the two-domain world a public key's level 0 is c0b alone (4
of its 8 documents) and 4 communities are hidden from it.
"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from corpusgraph.config import Config, ServeSection
from corpusgraph.query.engine import METHODS
from tests.support.query_fixtures import build_two_domain_index, make_engine
from tests.unit.query.test_global import RatingChat

pytestmark = pytest.mark.unit

PUBLIC, ADMIN = "pub-key", "admin-key"


def _client(store):
    from serving import create_app

    keys = [{"name": "public", "key": PUBLIC, "domains": ["public"]}, {"name": "admin", "key": ADMIN, "domains": ["*"]}]
    app = create_app(Config(serve=ServeSection(api_keys=keys)),
                     engine_factory=lambda _s: make_engine(store, RatingChat({})))
    client = TestClient(app)
    client.__enter__()
    deadline = time.monotonic() + 30
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the service never became ready"
        time.sleep(0.02)
    return client


@pytest.fixture(scope="module")
def tiny(store):
    client = _client(store)
    yield client
    client.__exit__(None, None, None)


@pytest.fixture(scope="module")
def two_domains(tmp_path_factory):
    from corpusgraph.query.store import IndexStore

    client = _client(IndexStore(*build_two_domain_index(tmp_path_factory.mktemp("two"))))
    yield client
    client.__exit__(None, None, None)


def _ask(client, key, **body):
    r = client.post("/v1/query", json={"question": "What holds the coast together?", **body},
                    headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("method", METHODS)
def test_every_response_carries_coverage(tiny, method):
    body = _ask(tiny, ADMIN, method=method)
    assert body["coverage"]["method"] == body["method"]
    assert body["coverage"]["view"] == {"restricted": False, "communities_hidden": 0}


def test_global_coverage_in_the_response_matches_the_index(tiny):
    cov = _ask(tiny, ADMIN, method="global", level=0)["coverage"]
    assert cov["reports_mapped"] == 2 and cov["reports_in_index"] == 5
    assert cov["by_level"] == [{"level": 0, "mapped": 2, "reports": 2}]
    assert (cov["document_share"], cov["unit_share"]) == (1.0, 1.0)


def test_a_restricted_key_gets_coverage_within_its_view(two_domains):
    cov = _ask(two_domains, PUBLIC, method="global", level=0)["coverage"]
    assert cov["by_level"] == [{"level": 0, "mapped": 1, "reports": 1}] and cov["reports_in_index"] == 3
    assert (cov["documents_in_index"], cov["document_share"]) == (8, 0.5)
    assert cov["view"] == {"restricted": True, "communities_hidden": 4}
    admin = _ask(two_domains, ADMIN, method="global", level=0)["coverage"]
    assert admin["view"]["communities_hidden"] == 0 and admin["documents_in_index"] == 11


def test_the_openapi_schema_documents_coverage(tiny):
    schema = tiny.get("/openapi.json").json()
    ref = schema["paths"]["/v1/query"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    answer = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]  # whatever the service names its model
    assert "coverage" in answer["properties"]
