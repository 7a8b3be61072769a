"""ShardSink under the threads of one actor: ray_runner flushes several batches at once, each
through asyncio.to_thread, so one sink's write() runs in parallel with itself."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import fs as pafs

from corpusgraph.storage import locations as storage
from corpusgraph.storage.shards import ATTEMPT, UNIT, ShardSink

pytestmark = pytest.mark.unit


class _SlowFolders(pafs.LocalFileSystem):
    """A local filesystem whose folders take a while to make: the window in which a second
    thread could write into a folder the first has not made yet."""

    def create_dir(self, path, *, recursive=True):
        time.sleep(0.3)
        super().create_dir(path, recursive=recursive)


def test_parallel_first_writes_wait_for_the_folder_and_never_share_a_name(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "arrow_filesystem", lambda location, s3=None: (_SlowFolders(), str(location)))
    folder = tmp_path / "progress" / "reports" / "level0" / "fp"
    sink = ShardSink(str(folder), None, "index-test")
    threads, start, errors = 8, threading.Barrier(8), []

    def write(i: int) -> None:
        start.wait()
        try:
            sink.write(pa.table({"answer": [f"a{i}-0", f"a{i}-1"]}), [f"u{i}-0", f"u{i}-1"])
        except Exception as exc:  # noqa: BLE001 - every thread's failure is the finding
            errors.append(exc)

    workers = [threading.Thread(target=write, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    shards = sorted(p.name for p in folder.iterdir())
    assert len(shards) == threads and not any(n.startswith(".") for n in shards)  # no temporary left behind
    rows = pa.concat_tables([pq.read_table(folder / n) for n in shards])
    assert sorted(rows.column(UNIT).to_pylist()) == sorted(f"u{i}-{j}" for i in range(threads) for j in range(2))
    assert set(rows.column(ATTEMPT).to_pylist()) == {"index-test"}


def test_a_sink_pickled_into_an_actor_gets_its_own_lock_and_prefix(tmp_path):
    import pickle

    sink = ShardSink(str(tmp_path / "p"), None, "run-1")
    copy = pickle.loads(pickle.dumps(sink))
    assert copy._lock is not sink._lock and copy._prefix != sink._prefix
    copy.write(pa.table({"answer": ["x"]}), ["k"])
    assert [p.name.split("-")[-1] for p in (tmp_path / "p").iterdir()] == ["000001.parquet"]
