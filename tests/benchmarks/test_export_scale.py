"""`corpusgraph export` of the 100k-document synthetic index (issue 15, item 3).

The index is the warehouse `make bench-scale` left under work/scale/run-<n>/wh
(CORPUSGRAPH_BENCH_EXPORT_DOCS, default 100000); the benchmark skips, saying so, when that run
has not been made. Each export runs as its own `corpusgraph export` process, exactly as a user
would start it; its wall time and its peak resident memory (ru_maxrss from wait4: the kernel's
high-water mark of that one process, not a sample) and the user and system CPU seconds are
recorded with the machine's load average before and after. Runs: GraphML and Neo4j of the whole
index (the targets: under 10 minutes each, peak memory under 2 GB), and Neo4j for one domain
(the restricted path, which keeps degrees and community parents per view).

The export only reads the warehouse. Its output goes to a temporary folder, checked against the
tables' row counts (read here with delta-rs), sized, and removed.

Writes tests/benchmarks/results/export.json.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow]

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "export.json"
DOCS = int(os.environ.get("CORPUSGRAPH_BENCH_EXPORT_DOCS", "100000"))
WAREHOUSE = REPO / "work" / "scale" / f"run-{DOCS}" / "wh"
TARGET_S, TARGET_RSS_MB = 600.0, 2048.0
RUNS = (("graphml", None), ("neo4j", None), ("neo4j", "public"))


def _loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def _rows(name: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(WAREHOUSE / name)).to_pyarrow_dataset().count_rows()


def _export(fmt: str, domains: str | None, out: Path) -> dict:
    argv = [str(Path(sys.executable).parent / "corpusgraph"), "export", "--format", fmt, "--out", str(out),
            "--warehouse", str(WAREHOUSE)]
    if domains:
        argv += ["--domains", domains]
    load_before = _loadavg()
    log_out, log_err = out.parent / f"{out.name}.stdout", out.parent / f"{out.name}.stderr"
    t0 = time.perf_counter()
    with open(log_out, "w") as fo, open(log_err, "w") as fe:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, so its own rusage comes with it
    wall = time.perf_counter() - t0
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    out_text, err_text = log_out.read_text(), log_err.read_text()
    assert code == 0, err_text[-3000:]
    size = sum(p.stat().st_size for p in out.iterdir())
    manifest = json.loads((out / "export.json").read_text())
    return {
        "format": fmt, "domains": domains, "wall_s": round(wall, 1), "user_s": round(usage.ru_utime, 1),
        "sys_s": round(usage.ru_stime, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "output_mb": round(size / 2**20, 1), "load_before": load_before, "load_after": _loadavg(),
        "manifest": {k: v for k, v in manifest.items() if k not in ("warehouse", "command", "script", "file")},
        "stdout_tail": out_text.strip().splitlines()[-1:],
    }


def test_export_100k(tmp_path):
    if not (WAREHOUSE / "entities" / "_delta_log").is_dir():
        pytest.skip(f"no {DOCS}-document index at {WAREHOUSE}: run `make bench-scale` first")
    index = {n: _rows(n) for n in ("documents", "text_units", "entities", "relationships", "communities",
                                   "community_reports")}
    load_start = _loadavg()
    runs = []
    for fmt, domains in RUNS:
        out = tmp_path / f"{fmt}-{domains or 'all'}"
        run = _export(fmt, domains, out)
        runs.append(run)
        m = run["manifest"]
        if fmt == "graphml" and domains is None:
            assert (m["nodes"], m["edges"]) == (index["entities"], index["relationships"])
        if fmt == "neo4j" and domains is None:
            assert m["files"]["entities.csv"] == index["entities"]
            assert m["files"]["related.csv"] == index["relationships"]
            assert m["files"]["communities.csv"] == index["communities"]
        shutil.rmtree(out)
    whole = [r for r in runs if r["domains"] is None]
    result = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other jobs",
        "index": {**index, "warehouse": str(WAREHOUSE.relative_to(REPO)),
                  "built_by": f"make bench-scale (pipeline, scripted LLM and embeddings), work/scale/run-{DOCS}"},
        "load_average_start": load_start, "load_average_end": _loadavg(),
        "targets": {"wall_s": TARGET_S, "peak_rss_mb": TARGET_RSS_MB},
        "met": {
            f"{r['format']}": {"wall": r["wall_s"] < TARGET_S, "peak_rss": r["peak_rss_mb"] < TARGET_RSS_MB}
            for r in whole
        },
        "runs": runs,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
