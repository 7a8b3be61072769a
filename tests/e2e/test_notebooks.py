"""The three notebooks run top to bottom in the project's kernel, as `make test` runs them.

notebooks/quickstart.ipynb indexes documents and asks them with every method: here three
documents of lib/corpusgraph/samples/freight (multi-hop chain 1 of its README: trailer R-77 ->
Milan -> its dock lead), with fast extraction (spaCy, no LLM) and the deterministic scripted
server (tests/support/scripted_server.py) for the resolve, reports and query calls.
explore.ipynb reads the session's shared sample index (tests/e2e/conftest.py: top entities, a
community and its report, a path, the drawing); estimate.ipynb makes a dry run of that index's
inputs, into a warehouse of its own, and draws its chart. Every setting reaches the notebooks
through their parameters cell, as CORPUSGRAPH_* environment variables, the way a Jupyter user or
a runner sets them.

After each notebook the test runs one more cell in the same kernel that prints what the notebook
computed (answers, the path, the estimate) as JSON, and checks it against the tables read here
with delta-rs.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.conftest import SAMPLE

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.ray]

NOTEBOOKS = REPO / "notebooks"
# Multi-hop chain 1 of the sample's README: trailer R-77 -> Milan -> its dock lead.
DOCS = ["fenmore-complaint-2026-07.md", "valencia-weekly-2026-w12.md", "milan-weekly-2026-w14.md"]
METHODS = ["basic", "local", "global", "drift", "auto"]
PROBE = "NOTEBOOK-PROBE "


def _read(name: str):
    import nbformat

    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), f"commit {name}.ipynb with outputs cleared"
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell is the parameters cell"
    return nb


def _execute(name: str, env: dict[str, str], probe: str, timeout: int = 1200) -> tuple[object, dict]:
    """Run notebooks/<name>.ipynb with `env` added to this environment, then `probe` (code that
    returns a dict) in the same kernel; the notebook with its outputs and the probe's dict.

    `timeout` is per cell: the quickstart's index cell took 1,084 s at load average 50 on 2 cores
    (and over 600 s at 20), every stage's Spark and Ray start-up rather than its eight documents."""
    import nbformat
    from nbclient import NotebookClient

    nb = _read(name)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json as _json, sys as _sys, corpusgraph as _cg\n"
        f"print({PROBE!r} + _json.dumps({{'python': _sys.executable, 'prefix': _sys.prefix, "
        f"'corpusgraph': _cg.__file__, **({probe})}}, default=str))"))
    # Jupyter starts a kernel in the notebook's folder: the parameters' relative defaults count from there.
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute(env={**os.environ, **env})  # CellExecutionError names the cell and its traceback
    printed = [o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout"]
    line = next(ln for ln in "".join(printed).splitlines() if ln.startswith(PROBE))
    facts = json.loads(line[len(PROBE):])
    # The kernel is this project's interpreter with this checkout's corpusgraph.
    assert facts["prefix"] == sys.prefix and Path(facts["python"]).parent == Path(sys.executable).parent
    assert Path(facts["corpusgraph"]).resolve().is_relative_to(REPO / "lib")
    return nb, facts


def _outputs(nb) -> list[dict]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def _stdout(nb) -> str:
    return "".join(o.get("text", "") for o in _outputs(nb) if o.get("name") == "stdout")


def _table(warehouse: str, name: str) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(f"{warehouse}/{name}").to_pyarrow_table().to_pylist()


def _settings(llm_url: str, root: Path) -> dict:
    """What the notebooks are given as CORPUSGRAPH_SETTINGS: the scripted server, local[2] Spark."""
    return {
        "llm.concurrency": 8, "llm.model": "scripted", "llm.backend": "openai", "llm.api_base": llm_url,
        "spark.master": "local[2]", "spark.driver_memory": "2g", "ray.num_cpus": 2,
        "spark.extra": {"spark.databricks.delta.snapshotPartitions": "2",
                        # keep spark-warehouse/ and derby.log out of notebooks/
                        "spark.sql.warehouse.dir": str(root / "spark-warehouse"),
                        "spark.driver.extraJavaOptions": f"-Dderby.system.home={root}"},
    }


@pytest.fixture(scope="module")
def notebook_env(tmp_path_factory, scripted_url):
    """The quickstart's environment: three sample documents, its own warehouse."""
    root = tmp_path_factory.mktemp("notebooks")
    inputs = root / "docs"
    inputs.mkdir()
    for name in DOCS:
        shutil.copy(SAMPLE / name, inputs / name)
    settings = {**_settings(scripted_url, root), "extract.method": "fast",
                # Resolution by its rules alone: two Ray rounds fewer (adjudication, summaries).
                "resolve.llm_adjudication": False, "resolve.summarise_descriptions": False}
    return {
        "CORPUSGRAPH_ROOT": str(root / "work"), "CORPUSGRAPH_INPUTS": str(inputs),
        "CORPUSGRAPH_SETTINGS": json.dumps(settings),
        # Not the defaults' ../work: this run writes nothing into the checkout.
        "CORPUSGRAPH_WAREHOUSE": str(root / "work" / "warehouse"),
        "CORPUSGRAPH_INDEX_DIR": str(root / "work" / "index"), "CORPUSGRAPH_CACHE_DIR": str(root / "work" / "cache"),
    }


@pytest.fixture(scope="module")
def quickstart(notebook_env):
    """The quickstart notebook's run: it builds the index that the other notebooks read."""
    return _execute("quickstart", notebook_env, """{
        'answers': {m: {'method': a.method, 'error': a.error, 'answer': a.answer, 'route_reason': a.route_reason,
                        'units': sorted({c.unit_id for c in a.citations}), 'calls': a.llm_calls, 'tokens_in': a.tokens_in}
                    for m, a in answers.items()},
        'sizes': sizes, 'stages': {s: r.rows for s, r in run.results.items()}}""")


def test_quickstart_indexes_the_sample_and_answers_with_every_method(quickstart, notebook_env):
    nb, facts = quickstart
    stages = facts["stages"]
    assert list(stages) == ["ingest", "chunk", "extract", "resolve", "communities", "reports", "embed"]
    assert stages["ingest"]["documents"] == len(DOCS) and stages["ingest"]["quarantined"] == 0
    assert stages["extract"]["sent"] == stages["extract"]["units"] == stages["chunk"]["text_units"]
    assert stages["reports"]["status_ok"] == stages["reports"]["sent"] > 0
    # The sizes the notebook printed are the tables' own.
    sizes, warehouse = facts["sizes"], notebook_env["CORPUSGRAPH_WAREHOUSE"]
    assert sizes["documents"] == len(_table(warehouse, "documents")) == len(DOCS)
    assert sizes["entities"] == len(_table(warehouse, "entities")) > 10
    assert sizes["community_reports"] > 0
    assert "No LLM call" not in _stdout(nb) and "total" in _stdout(nb)  # the run summary, which paid for reports

    units = {u["unit_id"] for u in _table(warehouse, "text_units")}
    answers = facts["answers"]
    assert list(answers) == METHODS
    for method, a in answers.items():
        assert a["error"] is None and a["answer"].strip(), method
        assert a["calls"] >= 1 and a["tokens_in"] > 0, method
        assert set(a["units"]) <= units, method
        if method != "auto":
            assert a["method"] == method
    for method in ("basic", "local", "drift"):
        assert answers[method]["units"], f"{method} cited no text unit"
    assert answers["auto"]["method"] in {"basic", "local", "global", "drift"} and answers["auto"]["route_reason"]
    printed = _stdout(nb)
    for method in METHODS:
        assert f"=== {method}:" in printed
    assert "Method: drift" in printed and "Tokens:" in printed


def _shared_env(sample_index) -> dict:
    """The shared sample index, as the notebooks' parameters name it."""
    return {"CORPUSGRAPH_WAREHOUSE": sample_index.sets["storage.warehouse"],
            "CORPUSGRAPH_INDEX_DIR": sample_index.sets["storage.index_dir"]}


def test_explore_shows_entities_a_community_a_path_and_the_graph(sample_index):
    warehouse = sample_index.warehouse
    nb, facts = _execute("explore", _shared_env(sample_index), """{
        'top': list(top.entity_id), 'top_degree': list(top.degree), 'community': community['community_id'], 'report_title': report['title'],
        'members': members, 'path': path, 'source': source, 'target': target,
        'traces': [(t.name, len([x for x in t.x if x is not None])) for t in fig.data]}""", timeout=300)
    entities = {e["entity_id"]: e for e in _table(warehouse, "entities")}
    rel_rows = _table(warehouse, "relationships")
    rels = {frozenset((r["source_id"], r["target_id"])) for r in rel_rows}
    degree = dict.fromkeys(entities, 0)
    for r in rel_rows:  # relationships per entity, a self-loop once
        degree[r["source_id"]] += 1
        degree[r["target_id"]] += r["target_id"] != r["source_id"]
    # Top entities: the most connected ones, most first, with their degrees counted here.
    assert len(facts["top"]) == 15
    assert facts["top_degree"] == [degree[e] for e in facts["top"]] == sorted(facts["top_degree"], reverse=True)
    assert facts["top_degree"][0] == max(degree.values()) > 1
    # The community shown and its report are the tables' own.
    reports = {r["community_id"]: r for r in _table(warehouse, "community_reports")}
    communities = {c["community_id"]: c for c in _table(warehouse, "communities")}
    assert facts["report_title"] == reports[facts["community"]]["title"]
    assert sorted(facts["members"]) == sorted(entities[e]["title"] for e in communities[facts["community"]]["entity_ids"])
    # The path joins the two named entities through real relationships.
    path = facts["path"]
    assert entities[path[0]]["title"] == "Fenmore Foods" and entities[path[-1]]["title"] == "Giulia Sarti"
    assert len(path) >= 2 and all(frozenset(p) in rels for p in zip(path, path[1:]))
    # The drawing: the path as one thick trace of len(path) - 1 segments, every shown entity as a node.
    traces = dict((name, n) for name, n in facts["traces"])
    assert traces["path"] == 2 * (len(path) - 1)
    assert sum(n for name, n in facts["traces"] if name not in {"path", "relationship"}) >= len(path)
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for o in _outputs(nb))
    assert "hops" in _stdout(nb)


def test_estimate_dry_runs_the_documents_and_draws_its_chart(sample_index, scripted_url, tmp_path):
    # The shared index's inputs and settings, a warehouse of its own (the shared one is read-only).
    settings = {**_settings(scripted_url, tmp_path),
                **{k: v for k, v in sample_index.sets.items() if k.startswith(("resolve.", "llm.usd"))}}
    env = {"CORPUSGRAPH_ROOT": str(tmp_path / "work"), "CORPUSGRAPH_INPUTS": str(sample_index.inputs),
           "CORPUSGRAPH_SETTINGS": json.dumps(settings), "CORPUSGRAPH_WAREHOUSE": str(tmp_path / "work" / "warehouse"),
           "CORPUSGRAPH_INDEX_DIR": str(tmp_path / "work" / "index"), "CORPUSGRAPH_CACHE_DIR": str(tmp_path / "work" / "cache")}
    nb, facts = _execute("estimate", env, """{
        'documents': est.documents, 'units': est.units, 'calls': est.llm_calls, 'chart': str(chart),
        'stages': [s.stage for s in est.stages]}""")
    # The dry run chunked the same documents the same way as the index.
    assert facts["documents"] == len(_table(sample_index.warehouse, "documents"))
    assert facts["units"] == len(_table(sample_index.warehouse, "text_units"))
    assert facts["calls"] > 0 and "extract" in facts["stages"]
    chart = Path(facts["chart"])
    assert chart.stat().st_size > 1000 and chart.parent == Path(env["CORPUSGRAPH_ROOT"]) / "estimate"
    shown = [o["data"] for o in _outputs(nb) if "data" in o]
    assert any("image/svg+xml" in d or "image/png" in d for d in shown), "the chart was not displayed"
    runs = [r for r in _table(env["CORPUSGRAPH_WAREHOUSE"], "runs") if r["kind"] == "estimate"]
    assert len(runs) == 1 and runs[0]["status"] == "ok"
    # The dry run called no model: the scripted server answered nothing for it (its runs row says so).
    assert json.loads(runs[0]["stage_counts"])["units"] == facts["units"]
