"""Warehouse: tables created and small records upserted by delta-rs on a local warehouse, then
read and written by Spark (and the other way round), with the schemas of tables.py."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from corpusgraph.storage.warehouse import Warehouse
from corpusgraph.tables import TABLES, spark_schema

pytestmark = pytest.mark.spark

T0 = datetime(2026, 3, 1, 8, 30, tzinfo=timezone.utc)


def _run(run_id: str, status: str, finished=None) -> dict:
    return dict(run_id=run_id, kind="index", config_hash="c1", started=T0, finished=finished, status=status,
                stage_counts="{}")


def test_tables_made_by_delta_rs_have_the_declared_spark_schemas(spark, tmp_path):
    from deltalake import DeltaTable

    wh = Warehouse(spark, str(tmp_path / "wh"))
    wh.ensure_all()
    for name in TABLES:
        assert (tmp_path / "wh" / name / "_delta_log").is_dir(), name
        assert wh.read(name).schema == spark_schema(name), name
        assert wh.read(name).count() == 0
    version = DeltaTable(wh.path("runs")).version()
    wh.ensure_all()  # a second call changes nothing
    assert DeltaTable(wh.path("runs")).version() == version


def test_records_upsert_on_the_key_between_spark_writes(spark, tmp_path):
    wh = Warehouse(spark, str(tmp_path / "wh"))
    wh.ensure_all()
    wh.upsert_records("runs", [_run("r1", "running")])
    finished = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
    wh.upsert_records("runs", [_run("r1", "ok", finished)])  # the same key: updated, not added
    # Spark merges into the same table, then delta-rs again: each sees the other's commits.
    wh.merge("runs", spark.createDataFrame([tuple(_run("r2", "running").values())], spark_schema("runs")))
    wh.upsert_records("runs", [_run("r3", "failed")])
    rows = {r.run_id: r for r in wh.read("runs").collect()}
    assert sorted(rows) == ["r1", "r2", "r3"]
    assert (rows["r1"].status, rows["r2"].status, rows["r3"].status) == ("ok", "running", "failed")
    # Spark returns session-local naive timestamps; compare the instants.
    assert rows["r1"].finished.astimezone(timezone.utc) == finished and rows["r3"].finished is None

    wh.upsert_records("llm_calls", [dict(run_id="r1", stage="extract", calls=3, tokens_in=120, usd=0.25)])
    wh.upsert_records("llm_calls", [])  # nothing to write: no commit
    (call,) = wh.read("llm_calls").collect()
    assert (call.calls, call.tokens_in, call.usd, call.tokens_out) == (3, 120, 0.25, None)


def test_a_record_with_a_column_the_table_lacks_is_refused(spark, tmp_path):
    wh = Warehouse(spark, str(tmp_path / "wh"))
    with pytest.raises(ValueError, match=r"lacks: \['cost'\]"):
        wh.upsert_records("llm_calls", [dict(run_id="r1", stage="extract", cost=1.0)])


def test_delete_where_missing_deletes_rows_whose_key_is_gone_and_commits_nothing_when_none_is(spark, tmp_path):
    from deltalake import DeltaTable

    wh = Warehouse(spark, str(tmp_path / "wh"))
    wh.ensure_all(["runs"])
    wh.upsert_records("runs", [_run(r, "succeeded", T0) for r in ("r1", "r2", "r3")])
    version = DeltaTable(wh.path("runs")).version()
    ids = lambda: sorted(r["run_id"] for r in wh.read("runs").collect())  # noqa: E731

    # Every stored key is still there (and one more that the table never had): no MERGE, no new version.
    assert wh.delete_where_missing("runs", spark.createDataFrame([(r,) for r in ("r3", "r1", "r2", "r4")],
                                                                 "run_id string"), "run_id") is False
    assert DeltaTable(wh.path("runs")).version() == version and ids() == ["r1", "r2", "r3"]

    assert wh.delete_where_missing("runs", spark.createDataFrame([("r2",), ("r2",)], "run_id string"), "run_id")
    assert DeltaTable(wh.path("runs")).version() == version + 1 and ids() == ["r2"]


def test_overwrite_returns_the_rows_written_also_when_delta_commits_nothing(spark, tmp_path):
    from deltalake import DeltaTable

    wh = Warehouse(spark, str(tmp_path / "wh"))
    wh.ensure_all(["runs"])
    frame = lambda ids: spark.createDataFrame([(r, "index", "c1", T0, T0, "succeeded", "{}") for r in ids],  # noqa: E731
                                              spark_schema("runs"))
    # An empty frame over an empty table: Delta records no commit for it; the table has 0 rows.
    assert wh.overwrite("runs", frame([])) == 0
    assert DeltaTable(wh.path("runs")).version() == 0
    assert wh.overwrite("runs", frame(["r1", "r2"])) == 2
    # An empty frame over rows removes them (a commit), and says 0.
    assert wh.overwrite("runs", frame([])) == 0
    assert wh.read("runs").count() == 0 and DeltaTable(wh.path("runs")).version() == 2


def test_a_merge_into_a_table_without_rows_appends_the_same_rows(spark, tmp_path):
    """A first build's MERGEs find an empty target: the rows go in by an append (a WRITE commit),
    duplicates and all, as the MERGE would insert them; once the table holds rows, merges upsert
    on the key and soft-delete what is absent as before."""
    from deltalake import DeltaTable

    wh = Warehouse(spark, str(tmp_path / "wh"))
    wh.ensure_all(["runs"])
    frame = lambda rows: spark.createDataFrame([(r, "index", "c1", T0, None, s, "{}") for r, s in rows],  # noqa: E731
                                               spark_schema("runs"))
    wh.merge("runs", frame([]))  # nothing to write into an empty table
    wh.merge("runs", frame([("r1", "running"), ("r2", "running")]))
    assert DeltaTable(wh.path("runs")).history(1)[0]["operation"] == "WRITE"
    assert sorted((r.run_id, r.status) for r in wh.read("runs").collect()) == [("r1", "running"), ("r2", "running")]
    wh.merge("runs", frame([("r2", "succeeded"), ("r3", "running")]), delete_missing=True)
    assert DeltaTable(wh.path("runs")).history(1)[0]["operation"] == "MERGE"
    assert sorted((r.run_id, r.status) for r in wh.read("runs").collect()) == [("r2", "succeeded"), ("r3", "running")]
