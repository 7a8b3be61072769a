"""The real ingest stage over one folder of a few hundred generated files (tests/support/fuzz_files.py)
plus links and folders where files were expected: the run does not fail, and documents,
collapsed duplicates and quarantine rows add up to what the pure parser makes of each input."""

from __future__ import annotations

import os
import random

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO
from tests.support.fuzz_files import make_file
from tests.unit.stages.test_fuzz_ingest import check_file

pytestmark = pytest.mark.spark

N_FILES = 300


def test_a_folder_of_generated_files_through_the_real_ingest_stage(spark, tmp_path):
    from deltalake import DeltaTable

    from corpusgraph.runner.pipeline import run_stage
    from corpusgraph.tables import table_path

    # CORPUSGRAPH_FUZZ_SEED replays a failure: the message names the base seed of the folder.
    base = int(os.environ.get("CORPUSGRAPH_FUZZ_SEED") or random.randrange(10**9))
    print(f"base seed {base} (CORPUSGRAPH_FUZZ_SEED={base} replays it)")
    folder = tmp_path / "in"
    (folder / "nested" / "deeper").mkdir(parents=True)
    expected = 0
    parquet_rows = {}
    for i in range(N_FILES):
        name, data = make_file(base + i)
        where = folder / ("nested" if i % 3 else "") / name
        where.write_bytes(data)
        records = len(check_file(name, data, _section()))  # what the pure parser makes of it
        if name.endswith(".parquet"):
            parquet_rows[name] = records
        else:
            expected += records
    # Where files were expected: a folder named like a file (its file inside is read), a link to
    # a file (read as that file), a link to a folder, and a link to nothing.
    (folder / "notes.txt").mkdir()
    (folder / "notes.txt" / "inner.md").write_text("# Inner\nA note inside a folder named notes.txt.")
    (folder / "deeper-link").symlink_to(folder / "nested" / "deeper")
    (folder / "alias.md").symlink_to(folder / "notes.txt" / "inner.md")
    (folder / "dangling.txt").symlink_to(tmp_path / "no-such-file.txt")
    expected += 2  # inner.md and alias.md: the same text, so one document and one collapsed copy

    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
        "storage.cache_dir": str(tmp_path / "cache"), "ingest.max_bytes": str(_section().max_bytes)})
    cfg.ingest.inputs = [str(folder)]
    ctx = RunContext(cfg, spark)
    ctx.wh.ensure_all()
    result = run_stage(ctx, "ingest")

    rows = result.rows
    quarantine = DeltaTable(table_path(cfg.storage.warehouse, "quarantine")).to_pyarrow_table().to_pylist()
    documents = DeltaTable(table_path(cfg.storage.warehouse, "documents")).to_pyarrow_table()
    assert documents.num_rows == rows["documents"] and len(quarantine) == rows["quarantined"]
    assert all(q["reason"] for q in quarantine)
    dangling = [q for q in quarantine if q["source_uri"].endswith("dangling.txt")]
    # A Parquet file whose column types clash with one read before it is refused whole (Spark
    # reads them all as one frame); the others give one row per record, as the pure parser does.
    clashed = {q["source_uri"].rsplit("/", 1)[1] for q in quarantine if q["reason"] == "schema_conflict"}
    assert clashed <= set(parquet_rows)
    expected += sum(1 if name in clashed else n for name, n in parquet_rows.items())
    got = rows["documents"] + rows["duplicates_collapsed"] + rows["quarantined"] - len(dangling)
    assert got == expected, f"base seed {base}: {rows}, {len(dangling)} dangling, expected {expected}"
    assert len(dangling) <= 1 and all(q["reason"] for q in dangling)
    assert os.path.islink(folder / "dangling.txt")


def _section():
    from corpusgraph.config import IngestSection

    return IngestSection(max_bytes=200_000)
