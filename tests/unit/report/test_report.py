"""`corpusgraph report`'s data and page without a browser: what it reads from a real (delta-rs
written) warehouse, the sums each figure draws, the hierarchy's values, the none panels, and the
command line. tests/e2e/test_report_html.py renders the page in Chromium."""

from __future__ import annotations

import json
import re

import pytest

from corpusgraph.report.data import estimate_vs_actual, hierarchy, load_report_data, stage_rows
from corpusgraph.report.html import build_page, figures, write_report
from tests.support.report_fixtures import ODD_TITLE, small_warehouse


def test_data_read_from_the_warehouse(tmp_path):
    data = load_report_data(str(small_warehouse(tmp_path, estimate=True, quarantine=True)))
    assert [r["kind"] for r in data.runs] == ["index", "index"]  # the estimate run is kept apart
    assert data.runs[0]["stages"] == {"ingest": 4.0, "extract": 40.0, "reports": 30.0}
    assert data.runs[0]["wall_s"] == 90.0
    assert data.estimate["run_id"].startswith("estimate-") and len(data.estimate["stages"]) == 4
    assert sorted(data.entity_types) == [("LOCATION", 4), ("ORGANIZATION", 4), ("PERSON", 4)]
    assert data.degrees == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert data.communities_total == 4 and data.reports_total == 3
    assert data.quarantine == [("empty", 2), ("binary", 1)]
    assert data.tables["entities"] == (12, 0) and data.tables["documents"] is None


def test_llm_rows_and_estimate_against_actual(tmp_path):
    data = load_report_data(str(small_warehouse(tmp_path, estimate=True)))
    rows = {r["stage"]: r for r in stage_rows(data.llm_calls)}
    assert list(rows) == ["extract", "reports"]  # pipeline order
    assert (rows["extract"]["calls"], rows["extract"]["cache_hits"], rows["extract"]["tokens_in"]) == (5, 1, 6100)
    assert rows["extract"]["usd"] == pytest.approx(0.3125) and rows["extract"]["errors"] == 1
    cmp = estimate_vs_actual(data.estimate, data.runs, data.llm_calls)
    by = {r["stage"]: r for r in cmp["rows"]}
    assert list(by) == ["extract", "resolve", "reports"]  # embed is batches, not chat calls: left out
    # Actual requests: paid calls plus cache hits over both index runs.
    assert (by["extract"]["est_calls"], by["extract"]["calls"], by["extract"]["paid_calls"]) == (6, 6, 5)
    assert by["extract"]["tokens_in"] + by["extract"]["tokens_out"] == 7200
    assert (by["resolve"]["calls"], by["reports"]["calls"]) == (0, 3)
    assert cmp["index_runs"] == 2 and cmp["est_wall_s"] == 120.0 and cmp["llm_seconds"] == 78.0
    assert cmp["est_usd_configured"] == 0.5 and cmp["usd"] == pytest.approx(0.4375)
    assert estimate_vs_actual(None, data.runs, data.llm_calls) is None
    assert estimate_vs_actual(data.estimate, [], data.llm_calls) is None  # no index run to compare


def test_hierarchy_values_cover_children_and_levels_stop_at_the_limit():
    rows = [{"community_id": "a", "level": 0, "parent_id": None, "size": 2},
            {"community_id": "a1", "level": 1, "parent_id": "a", "size": 2},
            {"community_id": "a2", "level": 1, "parent_id": "a", "size": 3},  # children bigger than the parent
            {"community_id": "a2x", "level": 2, "parent_id": "a2", "size": 5},
            {"community_id": "b", "level": 0, "parent_id": None, "size": 4}]
    nodes = {n["id"]: n for n in hierarchy(rows, {"a": "Report A"})}
    assert nodes["a2"]["value"] == 5 and nodes["a"]["value"] == 7 and nodes["b"]["value"] == 4
    assert nodes["a"]["title"] == "Report A" and nodes["b"]["title"] is None
    assert nodes["a1"]["parent"] == "a" and nodes["a"]["parent"] == ""
    # A limit of 4 keeps levels 0 and 1 whole and leaves level 2 out; 1 keeps the largest root.
    assert sorted(n["id"] for n in hierarchy(rows, {}, limit=4)) == ["a", "a1", "a2", "b"]
    assert [n["id"] for n in hierarchy(rows, {}, limit=1)] == ["b"]


def test_figures_carry_the_tables_sums(tmp_path):
    figs = figures(load_report_data(str(small_warehouse(tmp_path, estimate=True, quarantine=True))))
    assert all(f is not None for f in figs.values())
    assert sum(figs["chart-types"]["data"][0]["x"]) == 12 and sum(figs["chart-degrees"]["data"][0]["y"]) == 12
    time_traces = {t["name"]: t["y"] for t in figs["chart-time"]["data"]}
    assert time_traces["extract"] == [40.0, 8.0] and time_traces["reports"] == [30.0, 0.0]
    assert len(set(figs["chart-time"]["data"][0]["x"])) == 2  # two runs in one minute: two bars
    sun = figs["chart-hierarchy"]["data"][0]
    assert sun["type"] == "sunburst" and sorted(sun["ids"]) == ["c0", "c0.0", "c0.1", "c1"]
    labels = dict(zip(sun["ids"], sun["labels"]))
    assert labels["c0.1"] == "community c0.1" and labels["c1"] == "Orsolya Foods and the Gdansk hub"
    assert labels["c0"].startswith("Dock &lt;b&gt;leads&lt;/b&gt; &amp;")  # shown as written, not as markup
    assert labels["c0.0"].endswith("\u2026") and len(labels["c0.0"]) == 40
    assert dict(zip(figs["chart-quarantine"]["data"][0]["x"], figs["chart-quarantine"]["data"][0]["y"])) == \
        {"empty": 2, "binary": 1}


def test_page_is_offline_and_says_none_for_empty_tables(tmp_path):
    page = build_page(load_report_data(str(small_warehouse(tmp_path))))
    assert not re.search(r"<script[^>]+src=", page)  # plotly.js is inline: nothing to fetch
    assert 'id="chart-estimate-none"' in page and "No estimate run is recorded" in page
    assert 'id="chart-quarantine-none"' in page and "No input was quarantined" in page
    assert '<div class="chart" id="chart-hierarchy">' in page
    # One closing script tag per script element: the odd title cannot end the data early.
    assert page.count("</script>") == page.count("<script") == 3
    payload = page.split('id="report-figures">', 1)[1].split("</script>", 1)[0]
    assert set(json.loads(payload)) == {"chart-time", "chart-llm", "chart-types", "chart-degrees", "chart-hierarchy"}


def test_the_command_writes_the_page_and_refuses_a_missing_warehouse(tmp_path, capsys):
    from corpusgraph.cli.main import main

    wh = small_warehouse(tmp_path, quarantine=True)
    assert main(["report", "--set", f"storage.warehouse={wh}", "--out", str(tmp_path / "out")]) == 0
    assert "wrote" in capsys.readouterr().out and (tmp_path / "out" / "index.html").stat().st_size > 1_000_000
    assert main(["report", "--set", f"storage.warehouse={tmp_path / 'nothing'}", "--out", str(tmp_path / "o2")]) == 2
    assert "no Delta tables under" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError):
        write_report(str(tmp_path / "nothing"), tmp_path / "o3")
