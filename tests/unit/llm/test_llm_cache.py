"""ResponseCache: canonical keys, durability, and sharing between processes."""

import multiprocessing
import os
import pickle
import sqlite3
import threading
import time

import pytest

from corpusgraph.llm.cache import ResponseCache, cache_key

pytestmark = pytest.mark.unit

MSGS = ({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"})
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}


def test_key_is_a_sha256_hex_and_canonical():
    k = cache_key("m", MSGS, 100, 0.0, SCHEMA)
    assert len(k) == 64 and int(k, 16) >= 0
    # Same request built differently: list vs tuple, key order, int vs float temperature.
    reordered_schema = {"required": ["a"], "properties": {"a": {"type": "string"}}, "type": "object"}
    reordered_msgs = [{"content": "be brief", "role": "system"}, {"content": "hi", "role": "user"}]
    assert cache_key("m", reordered_msgs, 100, 0, reordered_schema) == k


@pytest.mark.parametrize(
    "changed",
    [
        ("m2", MSGS, 100, 0.0, SCHEMA),
        ("m", MSGS[:1], 100, 0.0, SCHEMA),
        ("m", MSGS, 101, 0.0, SCHEMA),
        ("m", MSGS, 100, 0.5, SCHEMA),
        ("m", MSGS, 100, 0.0, None),
        ("m", MSGS, 100, 0.0, {**SCHEMA, "required": []}),
    ],
)
def test_key_changes_with_every_part(changed):
    assert cache_key(*changed) != cache_key("m", MSGS, 100, 0.0, SCHEMA)


def test_get_put_roundtrip_and_overwrite(tmp_path):
    cache = ResponseCache(tmp_path / "sub" / "c.sqlite")  # parent folder created on demand
    assert cache.get("missing") is None
    cache.put("k", {"text": "héllo", "tokens_in": 3})
    assert cache.get("k") == {"text": "héllo", "tokens_in": 3}
    cache.put("k", {"text": "again"})
    assert cache.get("k") == {"text": "again"}
    assert len(cache) == 1
    assert cache.get_many(["k", "missing"]) == {"k": {"text": "again"}}


def test_get_many_beyond_the_parameter_limit(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    for i in range(1200):
        cache.put(f"k{i}", {"i": i})
    found = cache.get_many([f"k{i}" for i in range(0, 1300)])
    assert len(found) == 1200 and found["k1199"] == {"i": 1199}


def test_persists_across_instances_and_uses_wal(tmp_path):
    path = tmp_path / "c.sqlite"
    ResponseCache(path).put("k", {"v": 1})
    assert ResponseCache(path).get("k") == {"v": 1}
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_pickles_as_its_path_only(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put("k", {"v": 1})  # a live connection exists now; pickling must not try to carry it
    state = cache.__getstate__()
    assert state["path"] == str(tmp_path / "c.sqlite")
    assert not any(isinstance(v, sqlite3.Connection) for v in state.values())
    clone = pickle.loads(pickle.dumps(cache))
    assert clone.get("k") == {"v": 1}
    clone.put("k2", {"v": 2})
    assert cache.get("k2") == {"v": 2}


def _writer(path, worker, n):
    cache = ResponseCache(path)
    for i in range(n):
        cache.put(f"{worker}-{i}", {"worker": worker, "i": i})


def _inherited_writer(cache, worker, n):
    # Uses an object whose parent already had a connection open (fork start method).
    for i in range(n):
        cache.put(f"{worker}-{i}", {"worker": worker, "i": i})


def test_many_processes_write_concurrently(tmp_path):
    path = tmp_path / "c.sqlite"
    parent = ResponseCache(path)
    parent.put("parent", {"x": 1})
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 40)) for w in range(3)]
    procs += [ctx.Process(target=_inherited_writer, args=(parent, w, 40)) for w in range(3, 5)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(parent) == 5 * 40 + 1
    assert parent.get("4-39") == {"worker": 4, "i": 39}


def _put_then_die(path):
    ResponseCache(path).put("durable", {"ok": True})
    os._exit(0)  # no close, no cleanup: what a crashed actor leaves behind


def test_a_put_is_committed_before_it_returns(tmp_path):
    path = str(tmp_path / "c.sqlite")
    p = multiprocessing.get_context("fork").Process(target=_put_then_die, args=(path,))
    p.start()
    p.join(30)
    assert p.exitcode == 0
    assert ResponseCache(path).get("durable") == {"ok": True}


def test_retries_while_another_writer_holds_the_lock(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path, busy_timeout_s=0.05, lock_retries=10)
    cache.put("warm", {})
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")  # holds the write lock
    blocker.execute("INSERT INTO responses VALUES ('other', '{}', 0)")
    released = threading.Event()

    def release():
        time.sleep(0.4)
        blocker.execute("COMMIT")
        released.set()

    t = threading.Thread(target=release)
    t.start()
    cache.put("k", {"v": 1})  # would raise "database is locked" without the retry loop
    t.join()
    assert released.is_set()
    assert cache.get("k") == {"v": 1} and cache.get("other") == {}
    blocker.close()


def test_gives_up_after_its_retries_with_the_sqlite_error(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path, busy_timeout_s=0.01, lock_retries=1)
    cache.put("warm", {})
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            cache.put("k", {"v": 1})
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
