"""Inputs as they come at scale: JSON-lines and Parquet files are containers of documents (the size
limit is per record), gzip-compressed JSON-lines, Parquet read by Spark's reader row group by
row group, many small files, and a run that finds no documents stops loudly."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO

pytestmark = pytest.mark.spark

MAX = 2000  # ingest.max_bytes for these tests


def _ctx(spark, tmp_path, inputs, **extra):
    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
        "storage.cache_dir": str(tmp_path / "cache"), "ingest.max_bytes": str(MAX), **extra})
    cfg.ingest.inputs = [str(p) for p in inputs]
    ctx = RunContext(cfg, spark)
    ctx.wh.ensure_all()
    return ctx


def _tail(uri: str) -> str:
    return uri.rsplit("/", 1)[-1]


def _record(i: int, text: str | None = None) -> dict:
    return {"id": f"r{i}", "title": f"Note {i}", "text": text or f"Depot {i} shipped {i * 7} pallets to Porto. " * 4}


def test_containers_keep_their_records_and_refuse_only_the_bad_ones(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage

    folder = tmp_path / "in"
    folder.mkdir()
    # 40 records of ~180 bytes: the file (7 KB) is far over max_bytes, each record under it.
    lines = [json.dumps(_record(i)) for i in range(40)]
    lines.insert(5, json.dumps(_record(99, "x" * (MAX + 1))))  # one oversized record
    (folder / "batch.jsonl").write_text("\n".join(lines) + "\n")
    assert (folder / "batch.jsonl").stat().st_size > 3 * MAX
    (folder / "more.jsonl.gz").write_bytes(gzip.compress(
        "\n".join(json.dumps(_record(i)) for i in range(100, 110)).encode()))
    whole = gzip.compress("\n".join(json.dumps(_record(i)) for i in range(200, 260)).encode())
    (folder / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])  # truncated in transit
    rows = [_record(i) for i in range(300, 330)] + [{"id": None, "title": "No id", "text": "A row without an id."},
                                                    {"id": "big", "title": "Big", "text": "y" * (MAX + 5)}]
    pq.write_table(pa.Table.from_pylist(rows), folder / "corpus.parquet", row_group_size=7)  # 5 row groups
    (folder / "empty.parquet").write_bytes(b"")
    pq.write_table(pa.Table.from_pylist([_record(400)]).slice(0, 0), folder / "norows.parquet")
    (folder / "broken.parquet").write_bytes(b"PAR1 this is not parquet PAR1")

    ctx = _ctx(spark, tmp_path, [folder])
    res = run_stage(ctx, "ingest")
    docs = {_tail(r["source_uri"]): r for r in ctx.wh.read("documents").collect()}
    quarantine = {_tail(r["source_uri"]): (r["reason"], r["detail"]) for r in ctx.wh.read("quarantine").collect()}

    assert {f"batch.jsonl#r{i}" for i in range(40)} <= set(docs)
    assert {f"more.jsonl.gz#r{i}" for i in range(100, 110)} <= set(docs)
    assert {f"corpus.parquet#r{i}" for i in range(300, 330)} <= set(docs)
    assert "corpus.parquet#L31" in docs  # the row without an id: its 1-based row number
    assert docs["corpus.parquet#r301"]["title"] == "Note 301"
    assert json.loads(docs["corpus.parquet#r301"]["metadata"]) == {"id": "r301"}
    kept_from_cut = {k for k in docs if k.startswith("cut.jsonl.gz#")}
    assert 0 < len(kept_from_cut) < 60  # the readable part of a truncated file is kept

    assert quarantine["batch.jsonl#r99"][0] == "oversized" and str(MAX + 1) in quarantine["batch.jsonl#r99"][1]
    assert quarantine["corpus.parquet#big"][0] == "oversized"
    assert quarantine["cut.jsonl.gz"][0] == "bad_gzip"
    assert quarantine["broken.parquet"][0] == "bad_parquet"
    assert quarantine["norows.parquet"] == ("empty", "no rows")
    assert quarantine["empty.parquet"] == ("empty", "zero bytes")
    assert res.rows == {"documents": len(docs), "duplicates_collapsed": 0, "quarantined": len(quarantine)}
    assert len(docs) == 40 + 10 + len(kept_from_cut) + 31


def test_a_container_over_max_file_bytes_is_refused_whole(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "huge.jsonl").write_text("\n".join(json.dumps(_record(i)) for i in range(30)))
    (folder / "ok.txt").write_text("Small note\nThe Lisbon depot is open.")
    ctx = _ctx(spark, tmp_path, [folder], **{"ingest.max_file_bytes": "3000"})
    run_stage(ctx, "ingest")
    (q,) = ctx.wh.read("quarantine").collect()
    assert _tail(q["source_uri"]) == "huge.jsonl" and q["reason"] == "oversized"
    assert "max_file_bytes=3000" in q["detail"] and "Parquet" in q["detail"]


def test_many_small_files(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage

    folder = tmp_path / "in"
    for i in range(150):
        sub = folder / f"shard{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"n{i:03d}.md").write_text(f"# Note {i}\nTrailer {i} left the Porto hub.")
    ctx = _ctx(spark, tmp_path, [folder])
    res = run_stage(ctx, "ingest")
    assert res.rows == {"documents": 150, "duplicates_collapsed": 0, "quarantined": 0}


def test_input_files_lists_what_pyspark_lists_in_one_round_trip(spark, tmp_path):
    """The listing shortcut gives DataFrame.inputFiles()'s paths, in its order, empty files and odd
    names included; a frame with no JVM behind it (Spark Connect) takes PySpark's own way."""
    from corpusgraph.runner.steps.ingest import input_files

    folder = tmp_path / "in"
    (folder / "sub dir").mkdir(parents=True)
    for i in range(40):
        (folder / f"n{i:02d}.txt").write_text(f"note {i}")
    (folder / "sub dir" / "état, 1 #2.txt").write_text("accented, spaced, hashed")
    (folder / "empty.txt").write_bytes(b"")
    files = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(str(folder))
    listed = input_files(files)
    assert listed == files.inputFiles()
    assert len(listed) == 42 and any(p.endswith("empty.txt") for p in listed)

    class Connect:  # what a Spark Connect DataFrame offers: inputFiles() and no _jdf
        def inputFiles(self):
            return ["s3://bucket/a.txt"]

    assert input_files(Connect()) == ["s3://bucket/a.txt"]


def test_file_names_with_spaces_and_url_characters(spark, tmp_path):
    """The listing names a file as a URI (`sub%20dir/a%20b.txt`), the scan by its path: a name with a
    space, #, % or [ ] once went to quarantine as `empty` beside its document, and beside a Parquet
    or CSV file the whole step failed (PATH_NOT_FOUND). Each file is read once, under its own name."""
    from corpusgraph.runner.pipeline import run_stage

    folder = tmp_path / "in"
    (folder / "Q3 reports").mkdir(parents=True)
    (folder / "Q3 reports" / "hub note #2 [final].txt").write_text("Castor Haulage runs the night shift at Porto.")
    (folder / "Q3 reports" / "100% done.md").write_text("# Done\nThe Lisbon hub closed its backlog in September.")
    pq.write_table(pa.table({"id": ["p1"], "text": ["The Valencia depot added two reefer bays."]}),
                   folder / "Q3 reports" / "depot a%20b.parquet")
    (folder / "crane log [v2].csv").write_text("id,text\nc1,The Gdansk crane was down for a day.\n")
    (folder / "empty file.txt").write_bytes(b"")
    ctx = _ctx(spark, tmp_path, [folder])
    res = run_stage(ctx, "ingest")
    docs = sorted(r["source_uri"].split("/in/", 1)[1] for r in ctx.wh.read("documents").collect())
    assert docs == ["Q3 reports/100% done.md", "Q3 reports/depot a%20b.parquet#p1", "Q3 reports/hub note #2 [final].txt",
                    "crane log [v2].csv#c1"]
    quarantine = {r["source_uri"].split("/in/", 1)[1]: r["reason"] for r in ctx.wh.read("quarantine").collect()}
    assert quarantine == {"empty file.txt": "empty"}
    assert res.rows == {"documents": 4, "duplicates_collapsed": 0, "quarantined": 1}


def test_empty_files_are_found_alike_by_the_driver_and_by_a_join(spark, tmp_path):
    """Local Spark finds the zero-byte files by their size on the driver; elsewhere a join of the
    listing with the scan finds them. Both give the same rows; a path the driver cannot look at
    sends it to the join."""
    from corpusgraph.runner.steps.ingest import input_files
    from corpusgraph.stages.ingest.files import _zero_byte, with_empty_files

    folder = tmp_path / "in"
    (folder / "sub dir").mkdir(parents=True)
    (folder / "a.txt").write_text("Trailer 7 left the Porto hub.")
    (folder / "sub dir" / "empty #1.txt").write_bytes(b"")
    (folder / "e.md").write_bytes(b"")
    files = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(str(folder))
    listed = input_files(files)
    got = {}
    for driver in (True, False):
        rows = with_empty_files(files, listed, driver_sees_files=driver).collect()
        got[driver] = sorted((r["path"].split("/in/", 1)[1], r["length"], r["content"] is None) for r in rows)
    assert got[True] == got[False] == [("a.txt", 29, False), ("e.md", 0, True), ("sub dir/empty #1.txt", 0, True)]
    assert _zero_byte([f"file:{folder}/gone.txt"]) is None and _zero_byte(["s3a://bucket/a.txt"]) is None


def test_no_documents_stops_index_and_estimate_loudly(spark, tmp_path, capsys):
    from corpusgraph.cli.main import main
    from corpusgraph.runner.pipeline import run_stage
    from corpusgraph.runner.steps import ingest as steps

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "big.jsonl").write_text(json.dumps(_record(1, "z" * (MAX + 1))) + "\n")
    (folder / "pic.png").write_bytes(b"\x89PNG")
    ctx = _ctx(spark, tmp_path, [folder])
    with pytest.raises(steps.NoDocumentsError, match=r"no documents .* 2 files listed, 2 inputs quarantined "
                                                     r"\(oversized=1, unsupported_format=1"):
        run_stage(ctx, "ingest")
    assert ctx.wh.read("quarantine").count() == 2  # what was refused is still recorded

    rc = main(["estimate", "--conf", str(REPO / "conf" / "local.yaml"), "--submitted",
               "--set", f"ingest.inputs=[{folder}]", "--set", f"ingest.max_bytes={MAX}",
               "--set", f"storage.warehouse={tmp_path / 'wh2'}", "--set", f"storage.cache_dir={tmp_path / 'c2'}"])
    err = capsys.readouterr().err
    assert rc != 0 and "ingest found no documents" in err and "estimate for 0 documents" not in err
