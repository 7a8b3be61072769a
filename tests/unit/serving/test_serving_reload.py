"""Every response names the index version that answered, and a new version is swapped in whole:
readers under load see the old version or the new one, never a mix (serving.versions, EngineHolder)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from corpusgraph.tables import TABLES, table_path
from tests.support.query_fixtures import ScriptedChat, build_tiny_index, make_engine
from tests.unit.serving.test_serving import (QUESTION, settings, wait_ready)
from tests.support.service_thread import serve_in_thread

pytestmark = pytest.mark.unit

ADMIN = {"X-Admin-Key": "admin-secret"}


def _delta_versions(wh: str) -> dict[str, int]:
    """The tables' versions as delta-rs reads them, independently of the service."""
    from deltalake import DeltaTable

    return {name: DeltaTable(table_path(wh, name)).version()
            for name in ("documents", "text_units", "entities", "relationships", "claims", "communities",
                         "community_reports")}


def _rewrite(wh: str, name: str, key: str, row_id: str, **changes) -> None:
    """One commit to `name`: the row `row_id` with `changes`, every other row as it was."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    rows = DeltaTable(table_path(wh, name)).to_pyarrow_table().to_pylist()
    rows = [{**r, **changes} if r[key] == row_id else r for r in rows]
    write_deltalake(table_path(wh, name), pa.Table.from_pylist(rows, schema=TABLES[name].schema), mode="overwrite")


@pytest.fixture
def index(tmp_path):
    return build_tiny_index(tmp_path)


def _app(index, **kw):
    from corpusgraph.query.store import IndexStore
    from serving import create_app

    wh, index_dir = index
    return create_app(settings(**kw), engine_factory=lambda _s: make_engine(IndexStore(wh, index_dir),
                                                                            ScriptedChat("Mara Voss [R1].")))


def test_an_update_under_concurrent_readers_is_seen_whole_or_not_at_all(index):
    from corpusgraph.storage.runlock import run_lock

    wh, _ = index
    app = _app(index, admin_key="admin-secret")
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        ready = wait_ready(http).json()
        old = ready["index_version"]
        assert old and ready["table_versions"] == _delta_versions(wh)

        seen: list[list[tuple]] = []
        stop = threading.Event()

        def read():
            mine: list[tuple] = []
            seen.append(mine)
            with httpx.Client(base_url=url, timeout=30) as own:
                while not stop.is_set():
                    r = own.get("/v1/entities/e_tobin")
                    body = r.json()
                    rel = next(x for x in body["relationships"] if x["rel_id"] == "r2")
                    mine.append((r.status_code, r.headers.get("x-index-version"), body["index_version"],
                                 body["entity"]["description"], rel["description"]))
                    q = own.post("/v1/query", json={"question": QUESTION, "method": "basic"})
                    mine.append((q.status_code, q.headers.get("x-index-version"), q.json()["index_version"],
                                 None, None))

        readers = [threading.Thread(target=read) for _ in range(4)]
        for t in readers:
            t.start()
        time.sleep(0.5)
        # An update commits two tables, one after the other, holding the warehouse's run lock:
        # a reload between the two commits is refused, so no reader ever gets half of it.
        with run_lock(wh, "update-test-1", "update"):
            _rewrite(wh, "entities", "entity_id", "e_tobin", description="NEW head of the workshop")
            refused = http.post("/admin/reload", headers=ADMIN)
            assert refused.status_code == 409 and "update-test-1" in refused.json()["detail"]
            _rewrite(wh, "relationships", "rel_id", "r2", description="NEW taught by")
        time.sleep(0.3)
        swapped = http.post("/admin/reload", headers=ADMIN)
        time.sleep(0.5)
        stop.set()
        for t in readers:
            t.join(30)
        again = http.post("/admin/reload", headers=ADMIN).json()

    assert swapped.status_code == 200, swapped.text
    new = swapped.json()["index_version"]
    assert swapped.json()["changed"] and swapped.json()["previous_version"] == old and new != old
    assert swapped.json()["table_versions"] == _delta_versions(wh)
    assert again["changed"] is False and again["index_version"] == new

    old_text = ("Lantern maker trained by Mara Voss; later led the guild workshop.", None)
    for mine in seen:
        versions = [v for _, v, _, _, _ in mine]
        assert all(status == 200 for status, *_ in mine)
        assert all(header == field for _, header, field, _, _ in mine)  # header and body agree
        assert set(versions) == {old, new}  # every reader saw both, and nothing else
        first_new = versions.index(new)
        assert set(versions[first_new:]) == {new}  # once swapped, never back
        for _, version, _, desc, rel in mine:
            if desc is None:
                continue
            if version == old:
                assert desc == old_text[0] and not rel.startswith("NEW")
            else:
                assert desc == "NEW head of the workshop" and rel == "NEW taught by"


def test_reload_is_off_without_an_admin_key_and_needs_the_key(index):
    from fastapi.testclient import TestClient

    with TestClient(_app(index)) as client:
        wait_ready(client)
        assert client.post("/admin/reload", headers=ADMIN).status_code == 404
    with TestClient(_app(index, admin_key="admin-secret")) as client:
        wait_ready(client)
        assert client.post("/admin/reload").status_code == 401
        assert client.post("/admin/reload", headers={"X-Admin-Key": "nope"}).status_code == 401
        assert client.post("/admin/reload", headers=ADMIN).json()["changed"] is False
        assert "admin-secret" not in repr(client.app.state.settings)


def test_the_poll_picks_up_a_new_version_only_when_no_run_holds_the_warehouse(index):
    from fastapi.testclient import TestClient

    from corpusgraph.storage.runlock import run_lock

    wh, _ = index

    def version(client):
        return client.get("/readyz").json()["index_version"]

    with TestClient(_app(index, reload_poll_s=0.1)) as client:
        wait_ready(client)
        first = version(client)
        with run_lock(wh, "index-test-2", "index"):
            _rewrite(wh, "entities", "entity_id", "e_mara", description="NEW founder")
            time.sleep(0.6)
            assert version(client) == first  # the run is still writing
            assert client.get("/v1/entities/e_mara").json()["entity"]["description"] != "NEW founder"
        deadline = time.monotonic() + 10
        while version(client) == first and time.monotonic() < deadline:
            time.sleep(0.05)
        r = client.get("/v1/entities/e_mara")
        assert r.json()["entity"]["description"] == "NEW founder"
        assert r.headers["x-index-version"] == version(client) != first


def test_a_load_during_which_a_table_moves_is_read_again(monkeypatch):
    import serving.versions as versions

    calls = []

    def load():
        calls.append(1)
        return len(calls)

    # Fake warehouse versions: the first load sees the entities table move under it.
    states = iter([{"entities": 1}, {"entities": 2}, {"entities": 2}, {"entities": 2}, {"entities": 2}])
    monkeypatch.setattr(versions, "table_versions", lambda wh, s3=None: next(states))
    assert versions.load_consistent("wh", load) == (2, {"entities": 2})

    moving = iter(range(100))
    monkeypatch.setattr(versions, "table_versions", lambda wh, s3=None: {"entities": next(moving)})
    with pytest.raises(versions.IndexChanging, match="kept changing"):
        versions.load_consistent("wh", load, attempts=2)
    with pytest.raises(versions.IndexChanging, match="index-9 is writing"):
        versions.load_consistent("wh", load, busy=lambda: "index-9")


def test_an_engine_without_a_delta_store_names_no_version(store):
    from fastapi.testclient import TestClient

    from serving import create_app

    class Plain:  # e.g. a test double: no warehouse, so no version to name
        def ask(self, question, method="auto", level=None, top_k=None, domains=None):
            from corpusgraph.query.answer import Answer

            return Answer(question=question, answer="a", method="basic")

    with TestClient(create_app(settings(), engine_factory=lambda _s: Plain())) as client:
        wait_ready(client)
        r = client.post("/v1/query", json={"question": QUESTION})
        assert r.status_code == 200 and r.json()["index_version"] is None and "x-index-version" not in r.headers
