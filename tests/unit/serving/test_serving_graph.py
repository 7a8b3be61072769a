"""The query service's graph routes: an entity with its neighbourhood, communities and their
reports, over the tiny Saltreach index (query_fixtures.py)."""

from __future__ import annotations

import pytest

from tests.support.query_fixtures import DOCS, ENTITIES
from tests.unit.serving.test_serving import running

pytestmark = pytest.mark.unit


def test_an_entity_with_its_neighbourhood_units_and_documents(store):
    with running(store) as (client, _):
        body = client.get("/v1/entities/e_tobin").json()
        assert body["entity"] == {"entity_id": "e_tobin", "title": "Tobin Hale", "type": "PERSON",
                                  "description": ENTITIES["e_tobin"][2], "aliases": [], "frequency": 2, "degree": 2}
        assert [r["rel_id"] for r in body["relationships"]] == ["r2", "r10"]  # heaviest first
        assert [(n["entity_id"], n["rel_ids"]) for n in body["neighbours"]] == [("e_mara", ["r2"]), ("e_lumen", ["r10"])]
        assert [u["unit_id"] for u in body["units"]] == ["u2"]  # u9's document is deleted
        assert body["units"][0]["text"] == DOCS["d2"][1]
        assert body["documents"] == [{"doc_id": "d2", "title": "An apprentice", "source_uri": "file:///corpus/d2.txt",
                                      "access_domain": "default"}]
        assert [(c["community_id"], c["title"]) for c in body["communities"]] == [
            ("c0a", "Lantern makers of Port Keel"), ("c1a", "The Lumen Guild workshop")]
        assert body["claims"] == [] and body["truncated"] is False

        grey = client.get("/v1/entities/e_grey", params={"limit": 1}).json()
        assert grey["truncated"] and len(grey["relationships"]) == 1 and grey["claims"][0]["claim_id"] == "k1"
        missing = client.get("/v1/entities/e_nobody")
        assert missing.status_code == 404 and missing.json() == {"detail": "no such entity in this index"}
        assert client.get("/v1/entities/e_mara", params={"limit": 0}).status_code == 422
        assert client.get("/v1/entities/" + "x" * 300).status_code == 422


def test_communities_by_level_and_one_with_its_report(store):
    with running(store) as (client, _):
        every = client.get("/v1/communities").json()
        assert every["levels"] == [0, 1] and every["total"] == 6
        assert [c["community_id"] for c in every["communities"]] == ["c0a", "c0b", "c1a", "c1b", "c1c", "c1d"]
        level1 = client.get("/v1/communities", params={"level": 1, "limit": 2, "offset": 1}).json()
        assert level1["total"] == 4 and [c["community_id"] for c in level1["communities"]] == ["c1b", "c1c"]
        assert level1["communities"][0] == {"community_id": "c1b", "level": 1, "parent_id": "c0a", "size": 2,
                                            "title": "Treaty town", "rating": 6.0}
        empty = client.get("/v1/communities", params={"level": 5}).json()
        assert empty == {"levels": [0, 1], "total": 0, "communities": [], "index_version": empty["index_version"]}
        for bad in ({"level": -1}, {"level": 16}, {"limit": 0}, {"limit": 201}, {"offset": -1}, {"level": "x"}):
            r = client.get("/v1/communities", params=bad)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", next(iter(bad))]

        c0a = client.get("/v1/communities/c0a").json()
        assert c0a["children"] == ["c1a", "c1b"] and c0a["report"]["rating"] == 8.0
        assert len(c0a["entities"]) == 5 and c0a["report"]["findings"][0]["summary"] == "The members share one trade"
        assert client.get("/v1/communities/c1d").json()["report"] is None  # too small for a report
        assert client.get("/v1/communities/nope").status_code == 404


def test_every_v1_route_needs_a_key_when_keys_are_set(store):
    with running(store, api_keys=["k1"]) as (client, _):
        for path in ("/v1/entities/e_mara", "/v1/communities", "/v1/communities/c0a"):
            r = client.get(path)
            assert r.status_code == 401 and "X-API-Key" in r.json()["detail"]
            assert client.get(path, headers={"X-API-Key": "k1"}).status_code == 200
