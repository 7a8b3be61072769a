"""Two real `corpusgraph index` processes on one warehouse: the second is refused at once, naming
the first; after the first is killed outright, the next run takes its stale lock over and finishes.

Stages ingest and chunk only (Spark, no model), on the sample corpus plus a few hundred small
generated files, so that the first run is still holding the lock when the second starts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from corpusgraph.storage.runlock import LOCK_NAME
from corpusgraph.tables import table_path
from tests.conftest import REPO

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SAMPLE = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"


def _command(root, inputs) -> list[str]:
    sets = {"storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
            "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{SAMPLE}, {inputs}]",
            "spark.master": "local[1]"}
    argv = [sys.executable, "-m", "corpusgraph.cli.main", "index", "--conf", str(REPO / "conf" / "local.yaml"),
            "--stages", "ingest,chunk"]
    return argv + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def test_a_second_run_is_refused_and_a_killed_runs_lock_is_taken_over(tmp_path):
    from deltalake import DeltaTable

    inputs = tmp_path / "more"
    inputs.mkdir()
    for i in range(300):
        (inputs / f"note-{i:03d}.txt").write_text(f"Hub note {i}: trailer T-{i} left the Milan hub on time.")
    cmd = _command(tmp_path, inputs)
    lock = tmp_path / "wh" / LOCK_NAME
    first = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not lock.exists():
            assert first.poll() is None, "the first run ended before taking the lock:\n" + first.stderr.read()
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.1)
        holder = json.loads(lock.read_text())
        assert holder["pid"] == first.pid and holder["command"] == "index"

        begin = time.monotonic()
        second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
        refused_in = time.monotonic() - begin
        assert first.poll() is None, "the first run finished before the second was refused; make it slower"
        assert second.returncode == 3, second.stderr
        assert holder["run_id"] in second.stderr and f"pid {first.pid}" in second.stderr
        assert "in use by" in second.stderr
        assert refused_in < 30  # refused before starting Spark (the first took far longer to get this far)
        assert json.loads(lock.read_text())["run_id"] == holder["run_id"]  # the refusal touched nothing

        first.send_signal(signal.SIGKILL)  # no clean-up at all: the lock file stays behind
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
    assert json.loads(lock.read_text())["run_id"] == holder["run_id"]

    third = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "took over a stale run lock" in third.stderr and holder["run_id"] in third.stderr
    assert f"process {holder['pid']} on this host is gone" in third.stderr
    assert not lock.exists()
    documents = DeltaTable(table_path(str(tmp_path / "wh"), "documents")).to_pyarrow_table()
    # Each text file is one document, each line of a JSON-lines file one more; none twice.
    expected = sum(1 if not f.name.endswith(".jsonl") else len(f.read_text().splitlines()) for f in SAMPLE.iterdir())
    assert documents.num_rows == expected + 300
    assert len(set(documents.column("doc_id").to_pylist())) == documents.num_rows
