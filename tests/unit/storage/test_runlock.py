"""The warehouse run lock (corpusgraph.storage.runlock): one holder, stale locks taken over, always released."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from corpusgraph.storage.runlock import LOCK_NAME, RunLocked, holding_run_lock, refuse_if_running, run_lock, running

pytestmark = pytest.mark.unit


def _plant(warehouse, **fields):
    """Write a lock file as another run would have left it."""
    record = {"run_id": "index-old-1", "command": "index", "host": socket.gethostname(), "pid": os.getpid(),
              "pid_start": None, "started_at": "2026-01-01T00:00:00+00:00", "heartbeat": time.time(),
              "heartbeat_at": "now", **fields}
    warehouse.mkdir(parents=True, exist_ok=True)
    (warehouse / LOCK_NAME).write_text(json.dumps(record))
    return record


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_live_holder_refuses_a_second_run_naming_the_first(tmp_path):
    wh = tmp_path / "wh"
    with run_lock(str(wh), "index-first", "index") as held:
        assert json.loads((wh / LOCK_NAME).read_text())["run_id"] == "index-first" == held["run_id"]
        with pytest.raises(RunLocked) as err:
            with run_lock(str(wh), "update-second", "update"):
                pytest.fail("the second run got the lock")
        message = str(err.value)
        assert "index-first" in message and f"pid {os.getpid()}" in message and socket.gethostname() in message
        assert str(wh) in message
        assert "index-first" in running(str(wh))
        with pytest.raises(RunLocked, match="index-first"):
            refuse_if_running(str(wh))
        assert json.loads((wh / LOCK_NAME).read_text())["run_id"] == "index-first"  # untouched by the refusal
    assert not (wh / LOCK_NAME).exists() and running(str(wh)) is None


def test_a_live_process_elsewhere_holds_it(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        from corpusgraph.storage.runlock import _proc_start

        _plant(tmp_path / "wh", pid=sleeper.pid, pid_start=_proc_start(sleeper.pid))
        with pytest.raises(RunLocked, match=f"pid {sleeper.pid}"):
            with run_lock(str(tmp_path / "wh"), "index-new", "index"):
                pass
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_dead_holder_on_this_host_is_taken_over_and_said_so(tmp_path):
    wh = tmp_path / "wh"
    pid = _dead_pid()
    _plant(wh, pid=pid)
    said = []
    assert running(str(wh)) is None
    with run_lock(str(wh), "index-new", "index", say=said.append):
        assert json.loads((wh / LOCK_NAME).read_text())["run_id"] == "index-new"
    assert len(said) == 1 and "took over a stale run lock" in said[0] and "index-old-1" in said[0]
    assert f"process {pid} on this host is gone" in said[0]
    assert not (wh / LOCK_NAME).exists()


def test_a_reused_pid_does_not_keep_a_dead_run_alive(tmp_path):
    _plant(tmp_path / "wh", pid=os.getpid(), pid_start="1")  # our pid, but not our process start time
    said = []
    with run_lock(str(tmp_path / "wh"), "index-new", "index", say=said.append):
        pass
    assert "is gone" in said[0]


def test_a_stale_heartbeat_is_taken_over_and_a_fresh_one_elsewhere_is_not(tmp_path):
    wh = tmp_path / "wh"
    _plant(wh, host="another-host", pid=1, heartbeat=time.time() - 1000)
    said = []
    with run_lock(str(wh), "index-new", "index", stale_after_s=600, say=said.append):
        pass
    assert "heartbeat is 1000 s old" in said[0] or "heartbeat is 1001 s old" in said[0]

    _plant(wh, host="another-host", pid=1, heartbeat=time.time() - 10)
    with pytest.raises(RunLocked, match="another-host"):
        with run_lock(str(wh), "index-new", "index", stale_after_s=600):
            pass


def test_a_damaged_lock_file_is_judged_by_its_age(tmp_path):
    wh = tmp_path / "wh"
    wh.mkdir()
    (wh / LOCK_NAME).write_text('{"run_id": "half-wr')
    with pytest.raises(RunLocked):  # just written: its writer may be alive
        with run_lock(str(wh), "index-new", "index", stale_after_s=600):
            pass
    old = time.time() - 700
    os.utime(wh / LOCK_NAME, (old, old))
    with run_lock(str(wh), "index-new", "index", stale_after_s=600, say=lambda m: None):
        pass


def test_released_when_the_run_raises(tmp_path):
    wh = tmp_path / "wh"
    with pytest.raises(ZeroDivisionError):
        with run_lock(str(wh), "index-a", "index"):
            1 / 0
    assert not (wh / LOCK_NAME).exists()
    with run_lock(str(wh), "index-b", "index"):
        pass


def test_the_heartbeat_is_refreshed_while_the_run_goes_on(tmp_path):
    wh = tmp_path / "wh"
    with run_lock(str(wh), "index-a", "index", heartbeat_s=0.05) as held:
        first = json.loads((wh / LOCK_NAME).read_text())["heartbeat"]
        time.sleep(0.4)
        later = json.loads((wh / LOCK_NAME).read_text())["heartbeat"]
        assert later > first + 0.2 and held["run_id"] == "index-a"


def test_a_lock_taken_from_a_live_run_is_not_released_by_it(tmp_path):
    wh = tmp_path / "wh"
    said = []
    with run_lock(str(wh), "index-a", "index", heartbeat_s=0.05, say=said.append):
        _plant(wh, run_id="index-b")  # as if index-b had judged us stale
        time.sleep(0.3)
    assert json.loads((wh / LOCK_NAME).read_text())["run_id"] == "index-b"  # ours to keep, not a's to delete
    assert any("no longer ours" in m for m in said)


def _contend(warehouse: str, results) -> None:
    try:
        with run_lock(warehouse, f"index-{os.getpid()}", "index", say=lambda m: None):
            results.put(("won", os.getpid()))
            time.sleep(1.5)
    except RunLocked:
        results.put(("refused", os.getpid()))


def test_of_many_processes_taking_over_one_stale_lock_exactly_one_wins(tmp_path):
    wh = tmp_path / "wh"
    _plant(wh, pid=_dead_pid())
    mp = multiprocessing.get_context("fork")
    results = mp.Queue()
    procs = [mp.Process(target=_contend, args=(str(wh), results)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    outcomes = sorted(results.get(timeout=5)[0] for _ in procs)
    assert outcomes == ["refused"] * 5 + ["won"]


def test_the_pipeline_hook_locks_around_the_run(tmp_path):
    wh = tmp_path / "wh"
    logged = []
    ctx = SimpleNamespace(cfg=SimpleNamespace(storage=SimpleNamespace(warehouse=str(wh), run_lock_stale_s=600.0)),
                          run_id="update-x", kind="update", log=logged.append)

    @holding_run_lock
    def steps(context):
        assert "update-x" in running(str(wh))
        return "done"

    assert steps(ctx) == "done" and not (wh / LOCK_NAME).exists()


def test_a_warehouse_uri_gets_no_lock_and_says_so(tmp_path):
    said = []
    with run_lock("s3a://bucket/warehouse", "index-a", "index", say=said.append) as held:
        assert held is None
    assert "no run lock" in said[0] and running("s3a://bucket/warehouse") is None
    with run_lock(f"file://{tmp_path}/wh", "index-a", "index"):
        assert (tmp_path / "wh" / LOCK_NAME).exists()
