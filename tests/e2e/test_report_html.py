"""`corpusgraph report` rendered in headless Chromium (Debian's package, `make browser`).

The index: the freight sample plus three inputs that ingest refuses (empty, binary, unsupported),
built by the real stages (Spark + Delta, Ray, the HTTP client) against the deterministic scripted
server (tests/support/scripted_server.py), ingest to reports, then a dry run
(`run_estimate`) so the warehouse holds an estimate to compare. The page is written by the real
command line and loaded from file:// over the DevTools protocol (tests/e2e/browser.py): no
console error or failed load, every chart's Plotly.newPlot resolved, each chart's SVG holds
marks of non-zero area, and the drawn data equal the tables. The full-page screenshot goes to the
test's own folder; with CORPUSGRAPH_UPDATE_SCREENSHOTS=1 it also replaces the one kept at
tests/e2e/screenshots/index_report.png (so a plain `make test` leaves the checkout clean). A small delta-rs warehouse with no estimate and no
quarantine rows, and one with every table empty, show "none" panels and still log no error.
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys

import pytest

from corpusgraph.report.data import MAX_COMMUNITIES
from tests.conftest import REPO
from tests.e2e.browser import Chromium, find_chromium

pytestmark = pytest.mark.e2e

SAMPLE = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"
SCREENSHOT = REPO / "tests" / "e2e" / "screenshots" / "index_report.png"
CHARTS = ["chart-time", "chart-llm", "chart-estimate", "chart-types", "chart-degrees", "chart-hierarchy",
          "chart-quarantine"]
WIDTH = 1400

# Per chart div: its SVG layers and the marks (bars, slices) that have an area on screen.
MARKS_JS = """(() => {
  const out = {};
  document.querySelectorAll('div.chart').forEach(div => {
    const marks = Array.from(div.querySelectorAll('g.trace path, g.slice path, g.point path'))
      .filter(p => { const b = p.getBBox(); return b.width * b.height > 0; });
    out[div.id] = {svg: div.querySelectorAll('svg.main-svg').length, marks: marks.length};
  });
  return out;
})()"""


@pytest.fixture(scope="module")
def browser():
    if find_chromium() is None:
        pytest.fail("no chromium on PATH: run `make browser` (Debian's chromium package)")
    with Chromium() as b:
        yield b


def _report(warehouse, out, command_line: bool = True) -> str:
    """The page through the real command line (or write_report in this process); its file:// URL."""
    if not command_line:
        from corpusgraph.report.html import write_report

        return write_report(str(warehouse), out).resolve().as_uri()
    proc = subprocess.run([sys.executable, "-m", "corpusgraph.cli.main", "report", "--conf", str(REPO / "conf" / "local.yaml"),
                           "--set", f"storage.warehouse={warehouse}", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wrote" in proc.stdout
    return (out / "index.html").resolve().as_uri()


def _open(browser, url):
    page = browser.open(url, width=WIDTH)
    rendered = page.evaluate("window.reportRendered", await_promise=True, timeout=60)
    return page, rendered


@pytest.fixture(scope="module")
def freight_index(spark, tmp_path_factory):
    from corpusgraph.config import load_config
    from corpusgraph.runner.dry_run import run_estimate
    from corpusgraph.runner.pipeline import run_index
    from corpusgraph.runner.run import RunContext
    from tests.support import scripted_server

    root = tmp_path_factory.mktemp("report")
    inputs = root / "in"
    shutil.copytree(SAMPLE, inputs)
    (inputs / "empty.txt").write_bytes(b"")
    (inputs / "scan.txt").write_bytes(b"\x00\x01PK\x03\x04 not text")
    (inputs / "slides.key").write_text("a format ingest does not read")
    with scripted_server.running() as url:
        cfg = load_config(REPO / "conf" / "local.yaml", {
            "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
            "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{inputs}]",
            "llm.backend": "openai", "llm.preflight": "false", "llm.api_base": url, "llm.model": "scripted",
            "llm.concurrency": "8",
            "llm.usd_per_1k_in": "0.00015", "llm.usd_per_1k_out": "0.0006"})
        # The stages that make the report's tables; embed's vectors are not in the report.
        run_index(RunContext(cfg, spark), ["ingest", "chunk", "extract", "resolve", "communities", "reports"])
        run_estimate(cfg, spark, out_dir=root / "estimate")
    return root / "wh"


def _table(warehouse, name, columns=None):
    from deltalake import DeltaTable

    from corpusgraph.tables import table_path

    return DeltaTable(table_path(str(warehouse), name)).to_pyarrow_table(columns=columns).to_pylist()


@pytest.mark.spark
@pytest.mark.ray
def test_report_of_the_freight_index_draws_every_chart(freight_index, browser, tmp_path):
    page, rendered = _open(browser, _report(freight_index, tmp_path / "report"))
    assert page.errors == []
    assert rendered == {"drawn": CHARTS, "failed": []}
    marks = page.evaluate(MARKS_JS)
    assert set(marks) == set(CHARTS)
    for chart, m in marks.items():
        assert m["svg"] >= 1 and m["marks"] >= 1, (chart, m)
    assert page.evaluate("document.querySelectorAll('p.none').length") == 0

    def data(chart, trace=0):
        return page.evaluate(f"(() => {{ const t = document.getElementById('{chart}').data[{trace}];"
                             " return {x: t.x, y: t.y, ids: t.ids, labels: t.labels}; })()")

    entities = _table(freight_index, "entities", ["type"])
    assert sum(data("chart-types")["x"]) == len(entities) > 20
    assert sum(data("chart-degrees")["y"]) == len(entities)
    communities = _table(freight_index, "communities", ["community_id"])
    titles = {r["community_id"]: r["title"] for r in _table(freight_index, "community_reports")}
    sun = data("chart-hierarchy")
    assert len(communities) <= MAX_COMMUNITIES and sorted(sun["ids"]) == sorted(r["community_id"] for r in communities)
    assert titles and all(sun["labels"][sun["ids"].index(c)].startswith(html.escape(t[:30], quote=False))
                          for c, t in titles.items())
    q = data("chart-quarantine")
    assert {"empty", "binary", "unsupported_format"} <= set(q["x"])
    assert sum(q["y"]) == len(_table(freight_index, "quarantine", ["reason"]))
    # Estimate against actual: the extract and reports stages, each with requests on both sides.
    est, act = data("chart-estimate", 0), data("chart-estimate", 1)
    assert est["x"] == act["x"] and {"extract", "reports"} <= set(est["x"])
    for stage in ("extract", "reports"):
        i = est["x"].index(stage)
        assert est["y"][i] > 0 and act["y"][i] > 0
    runs = page.evaluate("document.getElementById('chart-time').data.map(t => t.name)")
    assert runs == ["ingest", "chunk", "extract", "resolve", "communities", "reports"]
    shot = page.screenshot(tmp_path / SCREENSHOT.name, WIDTH)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    if os.environ.get("CORPUSGRAPH_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, SCREENSHOT)


def test_report_of_a_warehouse_without_estimate_or_quarantine_says_none(browser, tmp_path):
    from tests.support.report_fixtures import ODD_TITLE, small_warehouse

    page, rendered = _open(browser, _report(small_warehouse(tmp_path), tmp_path / "report", command_line=False))
    assert page.errors == []
    assert rendered == {"drawn": ["chart-time", "chart-llm", "chart-types", "chart-degrees", "chart-hierarchy"],
                        "failed": []}
    assert all(m["marks"] >= 1 for m in page.evaluate(MARKS_JS).values())
    nones = page.evaluate("Array.from(document.querySelectorAll('p.none')).map(p => [p.id, p.textContent])")
    assert [i for i, _ in nones] == ["chart-estimate-none", "chart-quarantine-none"]
    assert "No estimate run is recorded" in nones[0][1] and "No input was quarantined" in nones[1][1]
    # The title's markup shows as text on its slice; the script tag in it ended nothing.
    slices = page.evaluate("Array.from(document.querySelectorAll('#chart-hierarchy g.slice text')).map(t => t.textContent)")
    assert any(s.startswith(ODD_TITLE[:20]) for s in slices), slices


def test_report_of_empty_tables_is_all_none_panels(browser, tmp_path):
    from tests.support.report_fixtures import write

    wh = tmp_path / "wh"
    for name in ("runs", "llm_calls", "entities", "communities", "community_reports", "quarantine"):
        write(wh, name, [])
    page, rendered = _open(browser, _report(wh, tmp_path / "report", command_line=False))
    assert page.errors == []
    assert rendered == {"drawn": [], "failed": []}
    assert page.evaluate("document.querySelectorAll('div.chart').length") == 0
    assert page.evaluate("document.querySelectorAll('p.none').length") == len(CHARTS)
