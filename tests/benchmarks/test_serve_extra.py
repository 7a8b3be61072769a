"""`corpusgraph serve` from a `pip install corpusgraph[serve]` environment (no pyspark, Ray or spaCy)
against an index built elsewhere, beside the same command from the full development environment:
install time and size of the serve-only venv, seconds from start to a ready /readyz, RSS at
readiness and after 20 /v1/context requests, in alternating runs of one session; writes
tests/benchmarks/results/serve_extra.json. Run it alone (under the heavy lock): it times.

The index is the two-domain fixture (tests/support/query_fixtures.py) with its 64-dimension
embeddings served over /v1/embeddings, so neither venv needs the bundled models; the chat model
points at a closed port and is never called (/v1/context: retrieval only): the figures are the
service's own cost.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import REPO
from tests.support.embed_server import EmbedServer
from tests.support.query_fixtures import DIM, build_two_domain_index
from tests.support.wheel import build_wheel

pytestmark = pytest.mark.slow
RESULTS = REPO / "tests" / "benchmarks" / "results" / "serve_extra.json"
RUNS = 3


def _serve(python: Path, conf: Path, env: dict) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(python), "-m", "corpusgraph.cli.main", "serve", "--conf", str(conf), "--port", "0"],
                            cwd=conf.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port: list[int] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            m = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port.append(int(m.group(1)))
                started.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert started.wait(180), "the service did not start"
        with httpx.Client(base_url=f"http://127.0.0.1:{port[0]}", timeout=60) as http:
            while http.get("/readyz").status_code != 200:
                assert time.perf_counter() - t0 < 180
                time.sleep(0.02)
            ready_s = time.perf_counter() - t0
            rss_ready = psutil.Process(proc.pid).memory_info().rss
            for _ in range(20):
                # Retrieval only (embedding, vector search, the graph walk): no chat model involved.
                assert http.post("/v1/context", json={"question": "Who is Mara Voss?", "method": "local"}).status_code == 200
            rss_after = psutil.Process(proc.pid).memory_info().rss
        modules = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in ('pyspark', 'ray', "
                                  "'spacy', 'igraph', 'numba', 'pandas') if u.find_spec(m)])"],
                                 capture_output=True, text=True, env=env, check=True).stdout.strip()
        return {"ready_s": round(ready_s, 2), "rss_ready_mb": round(rss_ready / 2**20), "rss_after_20_mb": round(rss_after / 2**20),
                "index_side_modules_installed": modules}
    finally:
        proc.terminate()
        proc.wait(30)


def test_serve_extra_against_the_full_environment(tmp_path):
    wheel = build_wheel(tmp_path / "build")
    venv = tmp_path / "serve-venv"
    # Without this checkout on PYTHONPATH: pip would take its egg-info for corpusgraph already installed.
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=base_env)
    t0 = time.perf_counter()
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", f"{wheel}[serve]"], check=True,
                   env=base_env)
    install_s = time.perf_counter() - t0
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, env=base_env).stdout.strip())
    size_mb = sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) / 2**20
    dists = len(list(site.glob("*.dist-info")))

    wh, index_dir = build_two_domain_index(tmp_path / "index")
    with EmbedServer(dim=DIM, model="fake-bow-64") as emb:
        conf = tmp_path / "project" / "settings.yaml"
        conf.parent.mkdir()
        conf.write_text(json.dumps({
            "storage": {"warehouse": wh, "index_dir": index_dir, "cache_dir": str(tmp_path / "cache")},
            "llm": {"backend": "openai", "api_base": "http://127.0.0.1:9/v1", "max_retries": 0},
            "embeddings": {"backend": "openai", "model": "fake-bow-64", "api_base": emb.base_url}}))
        envs = {"serve_extra": (venv / "bin" / "python", base_env),
                "full_dev_venv": (Path(sys.executable), {**base_env, "PYTHONPATH": f"{REPO / 'lib'}:{REPO}"})}
        runs: dict[str, list[dict]] = {name: [] for name in envs}
        for _ in range(RUNS):  # alternating, so load drifts hit both alike
            for name, (python, env) in envs.items():
                runs[name].append(_serve(python, conf, env))
    assert runs["serve_extra"][0]["index_side_modules_installed"] == "[]"
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("ready_s", "rss_ready_mb", "rss_after_20_mb")}
           for name, rs in runs.items()}
    result = {
        "what": "corpusgraph serve from a corpusgraph[serve] venv against the full development venv, same index, "
                "alternating runs; medians",
        "serve_venv": {"install_s": round(install_s, 1), "site_packages_mb": round(size_mb), "distributions": dists,
                       "note": "install time includes downloads (pip's cache warm or not: not controlled)"},
        "median": med,
        "ratio_serve_over_full": {k: round(med["serve_extra"][k] / med["full_dev_venv"][k], 2) for k in med["serve_extra"]},
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "load_avg_end": [round(x, 2) for x in os.getloadavg()]},
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median"], indent=2), result["ratio_serve_over_full"])
