"""A warehouse on a small tmpfs that fills during a stage: the run stops with one clear error
naming the folder, every Delta table stays at its last committed version (delta-rs and Spark
read it), and once the disk has room a rerun finishes with the tables of a clean run.

Stages ingest and chunk (no model, so no LLM call can be paid twice). The tmpfs is sized from a
clean run's own tables: room for what ingest writes, and half of what chunk needs.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.pipeline import run_index
from corpusgraph.runner.run import RunContext
from corpusgraph.tables import TABLES, table_path
from tests.conftest import REPO

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _mount(where: Path, kib: int, remount: bool = False) -> None:
    opts = f"remount,size={kib}k" if remount else f"size={kib}k"
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], check=True, capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        _mount(where, 1024)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"mount -t tmpfs is not permitted here: {getattr(exc, 'stderr', exc)!r}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def _corpus(folder: Path) -> None:
    """~4 MB of text that compresses badly (random made-up words), in 40 files."""
    rng = random.Random(7)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(3, 11)))
             for _ in range(20_000)]
    folder.mkdir()
    for i in range(40):
        words = " ".join(rng.choice(vocab) for _ in range(15_000))
        (folder / f"doc-{i:02d}.txt").write_text(f"Document {i}\n\n{words}\n")


def _cfg(root: Path, inputs: Path):
    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
        "storage.cache_dir": str(root / "cache"), "ingest.max_bytes": "1000000"})
    cfg.ingest.inputs = [str(inputs)]
    return cfg


def _versions(wh: str) -> dict[str, int]:
    from deltalake import DeltaTable

    return {name: DeltaTable(table_path(wh, name)).version() for name in TABLES}


def _rows(wh: str, name: str, drop=("ingested_at",)) -> list[dict]:
    from deltalake import DeltaTable

    table = DeltaTable(table_path(wh, name)).to_pyarrow_table()
    rows = [{k: v for k, v in r.items() if k not in drop} for r in table.to_pylist()]
    return sorted(rows, key=lambda r: tuple(str(v) for v in r.values()))


def test_a_disk_that_fills_mid_stage(spark, tmp_path, small_disk):
    from corpusgraph.storage.diskfull import DiskFullError

    inputs = tmp_path / "in"
    _corpus(inputs)
    # A clean run on a disk with room: the reference tables and the sizes to fit the tmpfs to.
    clean = _cfg(tmp_path / "clean", inputs)
    run_index(RunContext(clean, spark), ["ingest"])
    after_ingest = _du(Path(clean.storage.warehouse))
    run_index(RunContext(clean, spark), ["chunk"])
    units = _du(Path(clean.storage.warehouse) / "text_units")
    assert units > 2_000_000, units  # big enough that half of it is a clear shortfall

    cfg = _cfg(small_disk, inputs)
    cfg.storage.cache_dir = str(tmp_path / "cache")  # only the warehouse is on the small disk
    _mount(small_disk, (after_ingest + units // 2) // 1024 + 256, remount=True)
    run_index(RunContext(cfg, spark), ["ingest"])
    wh = cfg.storage.warehouse
    committed = _versions(wh)

    with pytest.raises(DiskFullError) as err:
        run_index(RunContext(cfg, spark), ["chunk"])
    message = str(err.value)
    assert "no space left on device" in message and wh in message
    assert "last committed version" in message

    # Every table is where the last commit left it, and both readers read it.
    now = _versions(wh)
    for name in TABLES:
        if name != "runs":  # the failed run's own row may have been committed before the disk filled
            assert now[name] == committed[name], name
        assert spark.read.format("delta").load(table_path(wh, name)).count() >= 0
    assert _rows(wh, "documents") == _rows(clean.storage.warehouse, "documents")
    assert _rows(wh, "text_units") == []
    assert not (Path(wh) / "_run.lock").exists()  # released on the way out

    # Room again: the rerun finishes and its tables equal the clean run's.
    _mount(small_disk, 200 * 1024, remount=True)
    run_index(RunContext(cfg, spark), ["chunk"])
    assert _rows(wh, "text_units") == _rows(clean.storage.warehouse, "text_units")
    assert _rows(wh, "documents") == _rows(clean.storage.warehouse, "documents")
    assert _versions(wh)["text_units"] == committed["text_units"] + 1  # one commit, not a torn pair


def test_disk_full_is_recognised_through_a_chain_of_causes():
    import errno

    from corpusgraph.storage.diskfull import is_disk_full

    class JavaError(Exception):
        pass

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise JavaError("job aborted") from inner
    except JavaError as outer:
        assert is_disk_full(outer)
    assert is_disk_full(JavaError("Caused by: java.io.IOException: No space left on device\n\tat ..."))
    assert not is_disk_full(ValueError("a different problem"))
