"""Hierarchical Leiden: ours (graph/leiden.py) against graspologic-native's `hierarchical_leiden`.

graspologic-native is what Microsoft graphrag calls. Both run on the same seeded synthetic
graphs with max cluster size 10, each in its own child process, so the peak memory read back
(the child's max RSS from `resource.getrusage(RUSAGE_CHILDREN)`, one fresh interpreter per run)
belongs to that run alone; the time is the child's own measurement of the call, input
conversion included (graspologic takes a list of (str, str, float) tuples: that is its API, so
building it is part of using it). Level-0 modularity of both is computed here, by one function
(igraph's `Graph.modularity`), from the node -> community labels each child writes.

The graphs are planted partitions: community sizes drawn log-uniformly from 20..400, average
degree 10, a fraction MIXING of each node's edges going to a uniformly random node. Integer
node ids, no duplicate handling left to either side beyond what they do themselves.

    python -m pytest -m slow tests/benchmarks/test_leiden.py      # writes results/leiden.json
    python tests/benchmarks/test_leiden.py --sizes 100000           # ad hoc, prints JSON

The 1M-node / 5M-edge run needs about 3 GB for graspologic and takes a few minutes in all.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "leiden.json"
REPO = HERE.parent.parent

SIZES = (10_000, 100_000, 1_000_000)  # nodes; edges are 5x nodes
EDGES_PER_NODE = 5
MAX_CLUSTER_SIZE = 10
MIXING = 0.3
SEED = 42
# Targets at the largest size (issue 5).
SPEEDUP_TARGET = 1.5
MEMORY_RATIO_TARGET = 0.5
MODULARITY_GAP = 0.005


def planted_partition(n: int, m: int, seed: int) -> np.ndarray:
    """(m, 2) int64 edges over nodes 0..n-1 with planted communities (see module doc)."""
    rng = np.random.default_rng(seed)
    sizes = []
    total = 0
    while total < n:
        s = int(np.exp(rng.uniform(np.log(20), np.log(400))))
        s = min(s, n - total)
        sizes.append(s)
        total += s
    sizes = np.asarray(sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    # Node labels are shuffled so communities are not contiguous id ranges.
    perm = rng.permutation(n).astype(np.int64)
    community = np.repeat(np.arange(len(sizes)), sizes)
    src = rng.integers(0, n, size=m)
    c = community[src]
    inside = rng.random(m) >= MIXING
    dst = np.where(
        inside,
        starts[c] + (rng.random(m) * sizes[c]).astype(np.int64),
        rng.integers(0, n, size=m),
    )
    same = src == dst
    dst[same] = (dst[same] + 1) % n  # no self-loops; a few edges leave their community
    return np.stack([perm[src], perm[dst]], axis=1)


def modularity(n: int, edges: np.ndarray, labels: np.ndarray) -> float:
    """Unweighted Newman-Girvan modularity (igraph), the one yardstick for both libraries."""
    import igraph

    g = igraph.Graph(n=n, edges=edges)
    return float(g.modularity(labels.tolist()))


# -- child processes ------------------------------------------------------------------------


def _child_ours(graph: Path, out: Path, engine: str) -> None:
    sys.path.insert(0, str(REPO / "lib"))
    from corpusgraph.graph.leiden import hierarchical_leiden

    data = np.load(graph)
    n, edges = int(data["n"]), data["edges"]
    del data
    t0, c0 = time.perf_counter(), time.process_time()
    result = hierarchical_leiden(
        n, edges, None, max_cluster_size=MAX_CLUSTER_SIZE, seed=SEED, max_levels=32, engine=engine
    )
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    labels = np.full(n, -1, dtype=np.int64)
    for c in result.communities:
        if c.level == 0:
            labels[c.nodes] = c.index
    np.savez(out, labels=labels, seconds=elapsed, cpu=cpu, levels=result.levels,
             communities=len(result.communities),
             leaves_over=sum(1 for c in result.communities if c.size > MAX_CLUSTER_SIZE))


def _child_graspologic(graph: Path, out: Path) -> None:
    import graspologic_native as gn

    data = np.load(graph)
    n, edges = int(data["n"]), data["edges"]
    del data
    t0, c0 = time.perf_counter(), time.process_time()
    as_str = [(str(a), str(b), 1.0) for a, b in edges.tolist()]
    clusters = gn.hierarchical_leiden(as_str, max_cluster_size=MAX_CLUSTER_SIZE, seed=SEED)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    del as_str
    labels = np.full(n, -1, dtype=np.int64)
    levels = 0
    for c in clusters:
        levels = max(levels, c.level + 1)
        if c.level == 0:
            labels[int(c.node)] = c.cluster
    np.savez(out, labels=labels, seconds=elapsed, cpu=cpu, levels=levels, communities=len({c.cluster for c in clusters}),
             leaves_over=-1)


def run_child(which: str, graph: Path) -> dict:
    """One run in a fresh interpreter: seconds, peak RSS in MB, and level-0 labels."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.npz"
        # A wrapper process per run: RUSAGE_CHILDREN of the wrapper is exactly that run's peak.
        code = (
            "import resource, subprocess, sys;"
            "subprocess.run(sys.argv[1:], check=True);"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
        )
        cmd = [sys.executable, "-c", code, sys.executable, str(Path(__file__).resolve()),
               "--child", which, str(graph), str(out)]
        proc = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO)
        peak_kb = int(proc.stdout.strip().splitlines()[-1])
        data = np.load(out)
        return {
            "seconds": float(data["seconds"]),
            "cpu": float(data["cpu"]),
            "peak_mb": peak_kb / 1024.0,
            "labels": data["labels"],
            "levels": int(data["levels"]),
            "communities": int(data["communities"]),
        }


def warm_numba_cache() -> float:
    """Compile the native engine once (numba caches it on disk); returns the seconds it took.

    Every later process loads the compiled code from the cache, as a deployed indexer does
    after its first run, so the timed children measure the algorithm, not the compiler."""
    code = (
        "import sys, time, numpy as np; sys.path.insert(0, 'lib');"
        "t = time.perf_counter();"
        "from corpusgraph.graph.leiden import hierarchical_leiden;"
        "hierarchical_leiden(4, np.array([[0, 1], [1, 2], [2, 3]]), None, max_cluster_size=2, seed=0, max_levels=2);"
        "print(time.perf_counter() - t)"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO)
    return float(proc.stdout.strip().splitlines()[-1])


def measure(n: int, workdir: Path, with_igraph: bool) -> dict:
    m = EDGES_PER_NODE * n
    edges = planted_partition(n, m, SEED)
    graph = workdir / f"graph_{n}.npz"
    np.savez(graph, n=n, edges=edges)
    ours = run_child("ours", graph)
    theirs = run_child("graspologic", graph)
    row = {
        "nodes": n,
        "edges": m,
        "ours_s": round(ours["cpu"], 3),
        "graspologic_s": round(theirs["cpu"], 3),
        "ours_modularity": round(modularity(n, edges, ours["labels"]), 5),
        "graspologic_modularity": round(modularity(n, edges, theirs["labels"]), 5),
        "ours_peak_mb": round(ours["peak_mb"], 1),
        "graspologic_peak_mb": round(theirs["peak_mb"], 1),
        "ours_wall_s": round(ours["seconds"], 3),
        "graspologic_wall_s": round(theirs["seconds"], 3),
        "ours_levels": ours["levels"],
        "graspologic_levels": theirs["levels"],
        "ours_communities": ours["communities"],
        "graspologic_communities": theirs["communities"],
    }
    if with_igraph:
        # The same hierarchy driven through igraph's C Leiden (engine="igraph"), for scale.
        alt = run_child("ours-igraph", graph)
        row.update({
            "igraph_engine_s": round(alt["cpu"], 3),
            "igraph_engine_modularity": round(modularity(n, edges, alt["labels"]), 5),
            "igraph_engine_peak_mb": round(alt["peak_mb"], 1),
        })
    graph.unlink()
    return row


def run(sizes: tuple[int, ...]) -> dict:
    import graspologic_native  # the bench extra, installed by make setup
    import igraph
    import numba

    compile_s = warm_numba_cache()
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for n in sizes:
            rows.append(measure(n, Path(tmp), with_igraph=True))
            print(json.dumps(rows[-1]), flush=True)
    return {
        "sizes": rows,
        "max_cluster_size": MAX_CLUSTER_SIZE,
        "engine": "native (numba); igraph_engine_* is the same hierarchy through igraph's C Leiden",
        "numba_compile_s": round(compile_s, 2),
        "numba_compile_note": "one-off: the first call in a fresh install compiles and caches the native "
        "engine (numba cache=True); the timed runs load it from that cache",
        "time": "ours_s and graspologic_s are the CPU seconds (user + system, all threads) of the call, "
        "input conversion included; *_wall_s the wall time, which on this shared 2-core machine "
        "depends on what else runs",
        "graph": f"planted partition, community sizes 20..400 log-uniform, {EDGES_PER_NODE} edges per node, "
        f"mixing {MIXING}, seed {SEED}",
        "versions": {"igraph": igraph.__version__, "numba": numba.__version__, "graspologic_native": graspologic_native.__version__
                     if hasattr(graspologic_native, "__version__") else "1.3.1"},
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


@pytest.mark.slow
def test_leiden_against_graspologic():
    report = run(SIZES)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    big = report["sizes"][-1]
    assert big["graspologic_s"] / big["ours_s"] >= SPEEDUP_TARGET, big
    assert big["ours_peak_mb"] <= MEMORY_RATIO_TARGET * big["graspologic_peak_mb"], big
    assert abs(big["ours_modularity"] - big["graspologic_modularity"]) <= MODULARITY_GAP or (
        big["ours_modularity"] > big["graspologic_modularity"]
    ), big


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=3, metavar=("WHICH", "GRAPH", "OUT"))
    ap.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    args = ap.parse_args()
    if args.child:
        which, graph, out = args.child
        if which == "graspologic":
            _child_graspologic(Path(graph), Path(out))
        else:
            _child_ours(Path(graph), Path(out), "igraph" if which == "ours-igraph" else "native")
        return
    print(json.dumps(run(tuple(args.sizes)), indent=2))


if __name__ == "__main__":
    main()
