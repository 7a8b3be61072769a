"""notebooks/quickstart.ipynb runs top to bottom against a built index, with the real model.

The index comes from CORPUSGRAPH_WAREHOUSE and CORPUSGRAPH_INDEX_DIR (default: work/warehouse and
work/index, where `make index` writes); the notebook's parameters cell reads the same variables.
Without an index the test is skipped, not failed: building one takes many minutes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NOTEBOOK = REPO / "notebooks" / "quickstart.ipynb"


def _index() -> tuple[Path, Path]:
    warehouse = Path(os.environ.get("CORPUSGRAPH_WAREHOUSE") or REPO / "work" / "warehouse").resolve()
    index_dir = Path(os.environ.get("CORPUSGRAPH_INDEX_DIR") or REPO / "work" / "index").resolve()
    return warehouse, index_dir


def test_quickstart_notebook_runs_top_to_bottom(monkeypatch, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit the notebook with outputs cleared"
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell is the parameters cell"

    warehouse, index_dir = _index()
    if not (warehouse / "community_reports" / "_delta_log").is_dir() or not index_dir.is_dir():
        pytest.skip(f"no index at {warehouse} / {index_dir}: run `make index` or set CORPUSGRAPH_WAREHOUSE "
                    "and CORPUSGRAPH_INDEX_DIR")
    # The kernel inherits this environment. A fresh cache makes the model really answer.
    monkeypatch.setenv("CORPUSGRAPH_WAREHOUSE", str(warehouse))
    monkeypatch.setenv("CORPUSGRAPH_INDEX_DIR", str(index_dir))
    monkeypatch.setenv("CORPUSGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CORPUSGRAPH_CONF", str(REPO / "conf" / "local.yaml"))

    # Minutes per cell: the bundled CPU model takes 10-60 s a call on 2 busy cores, and global
    # search makes one call per chunk of reports plus the reduce.
    client = nbclient.NotebookClient(nb, timeout=1200, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error

    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "community_reports" in printed
    assert "Method: local" in printed and "Method: global" in printed
    assert "Tokens:" in printed
