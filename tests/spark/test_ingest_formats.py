"""The ingest step on real inputs: PDF and Word files read from ../shared/data/formats, our own
HTML, e-mail, CSV and slide fixtures, a Delta table by path and by catalog name (read again through
its change data feed), a DataFrame through the Python API, and the outputs registered in Spark's
built-in catalog. Every file ends in documents or in quarantine with its reason, and text units
carry the pages and sections that citations name."""

from __future__ import annotations

import gzip
import re

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO, SHARED_DATA
from tests.support.format_fixtures import write_all
from tests.unit.stages.test_ingest_formats import REAL

pytestmark = pytest.mark.spark


def _ctx(spark, tmp_path, inputs, **extra):
    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
        "storage.cache_dir": str(tmp_path / "cache"), **extra})
    cfg.ingest.inputs = inputs
    ctx = RunContext(cfg, spark)
    ctx.wh.ensure_all()
    return ctx


def _rows(ctx, name):
    return [r.asDict(recursive=True) for r in ctx.wh.read(name).collect()]


def _tail(uri: str) -> str:
    """The part of a uri under our fixture folder or the shared formats folder: /pdf/x.pdf, /csv/a.csv#L3."""
    return "/" + re.split(r"/own/|/formats/", uri, maxsplit=1)[-1]


def test_files_of_every_format_end_in_documents_or_quarantine(spark, tmp_path):
    from corpusgraph.query.answer import citations_for
    from corpusgraph.runner.pipeline import run_stage

    own = tmp_path / "own"
    write_all(own)
    formats = SHARED_DATA / "formats"
    ctx = _ctx(spark, tmp_path, [str(own), str(formats / "pdf"), str(formats / "docx")])
    result = run_stage(ctx, "ingest")
    docs = {_tail(d["source_uri"]): d for d in _rows(ctx, "documents")}
    quarantine = {_tail(q["source_uri"]): q["reason"] for q in _rows(ctx, "quarantine")}
    for name, (outcome, expect) in REAL.items():
        if outcome == "quarantine":
            assert quarantine.get("/" + name) == expect, name
        else:  # a text two files share collapses onto one of them
            assert any(d["text"].startswith(expect) for d in docs.values()), name
    # the minimal and the trivial LibreOffice PDFs hold the same text: one document
    assert "/pdf/minimal-document.pdf" in docs or "/pdf/002-trivial-libre-office-writer.pdf" in docs
    assert quarantine["/html/login.html"] == "empty" and quarantine["/email/unknown-charset.eml"] == "unsupported_encoding"
    assert quarantine["/csv/notes.csv#L3"] == quarantine["/csv/notes.csv#L4"] == "bad_record"
    assert quarantine["/csv/bad-bytes.csv#9"] == "unsupported_encoding"
    assert quarantine["/pdf/files.json"] == quarantine["/pdf/LICENSE"] == "unsupported_format"
    assert docs["/csv/notes.csv#1"]["text"] == "The north quay grows by 140 metres.\nWork starts after the storms."
    assert docs["/csv/people.tsv#7"]["title"] == "Tomas Reyl reports from the harbour."
    # the mbox repeats the two .eml files: their texts collapse onto the .eml documents (the smaller uri)
    assert "/email/reply-thread.eml#attachment/2/schedule.docx" in docs and "/email/thread.mbox#1" in docs
    assert "/email/thread.mbox#3" not in docs and "/email/outlook-latin1.eml" in docs
    assert [s["label"] for s in docs["/pptx/deck.pptx"]["spans"]] == ["1", "2"]
    assert result.rows["documents"] == len(docs) and result.rows["quarantined"] == len(quarantine)

    run_stage(ctx, "chunk")
    units = {u["unit_id"]: u for u in _rows(ctx, "text_units")}
    by_doc = {d["doc_id"]: k for k, d in docs.items()}
    geo = [u for u in units.values() if by_doc.get(u["doc_id"]) == "/pdf/GeoTopo-komprimiert.pdf"]
    assert len(geo) > 100 and all(u["page_start"] and u["page_end"] >= u["page_start"] for u in geo)
    assert max(u["page_end"] for u in geo) == 117 and any(u["section"] == "1.1 Topologische Räume" for u in geo)  # the innermost outline entry
    docs_page = [u for u in units.values() if by_doc.get(u["doc_id"]) == "/html/docs.html"]
    assert docs_page and docs_page[0]["section"] == "User guide" and docs_page[0]["page_start"] is None
    cites = citations_for([geo[100]["unit_id"]], units, {d["doc_id"]: d for d in docs.values()})
    assert cites[0].locator.startswith("page") and cites[0].title == "Geometrie und Topologie"


def test_csv_through_spark_gives_the_records_of_the_pure_reader(spark, tmp_path):
    from corpusgraph.config import IngestSection
    from corpusgraph.runner.pipeline import run_stage
    from corpusgraph.stages.ingest.files import parse_file

    folder = tmp_path / "csv"
    folder.mkdir()
    rows = "".join(f'{i},Row {i},"Line one of {i}.\nLine two, with ""quotes""."\n' for i in range(1, 40))
    (folder / "big.csv").write_text("id,title,text\n" + rows + "40,ragged\n")
    (folder / "header-only.csv").write_text("id,title,text\n")
    # Header cells Spark refuses as attribute names, and CRLF line ends (found by tests/spark/test_ingest_fuzz.py).
    (folder / "odd-header.csv").write_bytes(b"id,ship`s.name,text\r\n1,Aster,The Aster docks at dawn.\r\n")
    (folder / "mixed-ends.csv").write_bytes(b"id,text\r1,Line one\nline two\r2,Three\r")
    (folder / "packed.csv").write_bytes(gzip.compress(b"id,title,text\n1,One,The first row.\n"))
    ctx = _ctx(spark, tmp_path, [str(folder)])
    run_stage(ctx, "ingest")
    got = {r["source_uri"].rsplit("/", 1)[1]: r for r in _rows(ctx, "documents") + _rows(ctx, "quarantine")}
    pure = {}
    for name in ("big.csv", "odd-header.csv", "mixed-ends.csv", "packed.csv"):
        data = (folder / name).read_bytes()
        pure.update({r["source_uri"].rsplit("/", 1)[1]: r for r in parse_file(f"file:{folder}/{name}", data, len(data),
                                                                                IngestSection())})
    assert set(pure) == set(got) - {"header-only.csv"}
    assert got["mixed-ends.csv#1"]["text"] == "Line one\nline two" and got["packed.csv"]["reason"] == "binary"
    assert "ship`s.name" in str(got["odd-header.csv#1"]["metadata"]) and got["odd-header.csv#1"]["metadata"] == pure["odd-header.csv#1"]["metadata"]
    assert all(got[k].get("text") == pure[k].get("text") and got[k].get("reason") == pure[k].get("reason") for k in pure)
    assert got["big.csv#L40"]["reason"] == "bad_record" and got["header-only.csv"]["reason"] == "empty"


def test_a_delta_table_read_again_through_its_change_feed(spark, tmp_path):
    from corpusgraph.config import TableInput
    from corpusgraph.runner.pipeline import run_stage

    spark.sql("CREATE DATABASE IF NOT EXISTS kb41")
    location = tmp_path / "articles"
    spark.sql(f"CREATE TABLE kb41.articles (article_id STRING, body STRING, headline STRING, team STRING) USING DELTA "
              f"LOCATION '{location}' TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    try:
        spark.sql("INSERT INTO kb41.articles VALUES ('a', 'Mara Voss chairs the harbour authority.', 'Chair', 'ops'), "
                  "('b', 'Ilsa Brand speaks for the fishing cooperative.', 'Coop', 'ops'), "
                  "('c', 'The north quay grows by 140 metres.', 'Quay', 'ops')")
        table = TableInput(table="kb41.articles", id="article_id", text="body", title="headline", metadata=["team"])
        ctx = _ctx(spark, tmp_path, [table])
        run_stage(ctx, "ingest")
        live = lambda: {d["source_uri"]: d for d in _rows(ctx, "documents") if not d["deleted"]}  # noqa: E731
        first = live()
        assert set(first) == {"delta:kb41.articles#a", "delta:kb41.articles#b", "delta:kb41.articles#c"}
        assert first["delta:kb41.articles#a"]["title"] == "Chair" and '"team": "ops"' in first["delta:kb41.articles#a"]["metadata"]
        assert {r["mode"] for r in _rows(ctx, "input_versions")} == {"full"}

        spark.sql("UPDATE kb41.articles SET body = 'Ilsa Brand now chairs the cooperative.' WHERE article_id = 'b'")
        spark.sql("DELETE FROM kb41.articles WHERE article_id = 'c'")
        spark.sql("INSERT INTO kb41.articles VALUES ('d', 'Tomas Reyl reports from the harbour.', 'Reporter', 'news')")
        result = run_stage(ctx, "ingest")
        second = live()
        assert set(second) == {"delta:kb41.articles#a", "delta:kb41.articles#b", "delta:kb41.articles#d"}
        assert second["delta:kb41.articles#b"]["text"] == "Ilsa Brand now chairs the cooperative."
        assert second["delta:kb41.articles#a"]["doc_id"] == first["delta:kb41.articles#a"]["doc_id"]  # unchanged, kept
        (version,) = _rows(ctx, "input_versions")
        assert (version["mode"], version["version"]) == ("cdf", 4)
        assert any("(cdf)" in note for note in result.notes)
        # an id column that is not there is a clear error, not an empty run
        ctx.cfg.ingest.inputs = [TableInput(table="kb41.articles", id="nope", text="body")]
        with pytest.raises(ValueError, match="has no column 'nope'"):
            run_stage(ctx, "ingest")
    finally:
        spark.sql("DROP TABLE IF EXISTS kb41.articles")


def test_a_delta_folder_a_dataframe_and_the_catalog(spark, tmp_path):
    import corpusgraph
    from corpusgraph.runner.pipeline import run_stage

    folder = str(tmp_path / "plain_delta")
    spark.createDataFrame([("x1", "Contoso Traders ships cargo to Grauholm.", "Cargo")], "id string, text string, "
                          "title string").write.format("delta").save(folder)
    ctx = _ctx(spark, tmp_path, [folder], **{"storage.schema": "cg41"})
    run_stage(ctx, "ingest")  # a folder with a _delta_log is a table, not a folder of Parquet files
    assert [d["source_uri"] for d in _rows(ctx, "documents")] == [f"delta:{folder}#x1"]
    assert _rows(ctx, "quarantine") == []

    frame = spark.createDataFrame([("n1", "Nordlicht Logistik GmbH opened a depot in Port Keel.")], "id string, text string")
    cfg = ctx.cfg.model_copy(deep=True)
    cfg.ingest.inputs = []
    try:
        results = corpusgraph.index(frame, cfg, name="notes", stages=["ingest", "chunk"])
        assert results["ingest"].rows["documents"] == 1
        assert spark.sql("SELECT source_uri FROM cg41.documents WHERE NOT deleted").first()[0] == "dataframe:notes#n1"
        assert spark.sql("SELECT count(*) FROM cg41.text_units").first()[0] == 1
        assert set(corpusgraph.register_tables(spark, cfg)) >= {"cg41.entities", "cg41.community_reports"}
        other = cfg.model_copy(deep=True)
        other.storage.warehouse = str(tmp_path / "elsewhere")
        with pytest.raises(ValueError, match="already registered at"):
            corpusgraph.register_tables(spark, other)
    finally:
        for name in spark.catalog.listTables("cg41"):
            spark.sql(f"DROP TABLE IF EXISTS cg41.{name.name}")


def test_a_warehouse_made_before_the_location_columns_still_merges(spark, tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable

    from corpusgraph.storage.warehouse import Warehouse
    from corpusgraph.tables import table

    wh = Warehouse(spark, str(tmp_path / "old"))
    old = pa.schema([f for f in table("text_units").schema if f.name not in ("page_start", "page_end", "section")])
    RsTable.create(wh.path("text_units"), schema=old)
    wh.ensure_all(["text_units"])
    assert {"page_start", "page_end", "section"} <= set(wh.read("text_units").columns)
    wh.merge("text_units", spark.createDataFrame([("u", "d", 0, "t", 1, 0, 1)], "unit_id string, doc_id string, "
                                                 "ordinal int, text string, n_tokens int, char_start int, char_end int"))
    assert wh.read("text_units").first()["page_start"] is None
