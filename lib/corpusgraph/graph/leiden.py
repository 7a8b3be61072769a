"""Seeded hierarchical Leiden over an integer edge list (pure: no Spark, no pandas).

The communities stage collects the entity graph as integer ids (the only corpus-sized thing
that comes to the driver) and calls `hierarchical_leiden`. The result depends only on the
graph, the seed and the parameters: edges are direction-normalised, merged and sorted before
igraph sees them, so the order in which Spark happened to collect them does not matter.

Hierarchy, the way graphrag builds it: level 0 is Leiden over the whole graph; a
community larger than `max_cluster_size` is split by running Leiden again on its induced
subgraph, giving its children one level down, until `max_levels` levels exist. A
community that is not split (small enough, on the last level, or one Leiden cannot
divide) has no children: it is a leaf.

Engines: "native" (default) is Leiden compiled with numba over CSR arrays (graph/native.py);
"igraph" is igraph's C implementation, driven the same way. Both optimise the same objective
and give the same hierarchy structure; the native one is the fastest of the three, igraph's
and graspologic-native's included (tests/benchmarks/results/leiden.json).

Speed (tests/benchmarks/test_leiden.py against graspologic-native): all the oversized
communities of a level are split by ONE Leiden run over the disjoint union of their induced
subgraphs, each keeping its own modularity (see `_leiden`), not one run per community; the
bookkeeping between levels is numpy over integer ids; level 0 runs two Leiden iterations
(the second one is worth about 0.05 modularity on planted partitions), the splits one.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

import igraph
import numpy as np

__all__ = ["Community", "LeidenResult", "hierarchical_leiden", "normalise_edges"]

_EDGE_SLICE = 1 << 20  # edges converted to Python tuples at a time when building a Graph
_BETA = 0.01  # igraph's default randomness of the refinement step
ENGINES = ("native", "igraph")


@dataclass(frozen=True, eq=False)
class Community:
    level: int
    index: int  # position of this community in LeidenResult.communities
    parent: int | None  # index of the parent community; None on level 0
    nodes: np.ndarray  # sorted int64 node ids

    @property
    def size(self) -> int:
        return int(self.nodes.size)


@dataclass
class LeidenResult:
    """Communities ordered by level, then by smallest node id; `index` is the list position.

    `modularity[level]` is the standard (resolution 1) weighted Newman-Girvan modularity of
    the partition of the whole graph made of that level's communities plus the leaves of
    the levels above it, so every level's partition covers every node exactly once and the
    values are comparable between levels. It lies in [-0.5, 1]; it is NaN for a graph with
    no edges, where modularity is undefined.
    """

    n_nodes: int
    communities: list[Community]
    modularity: dict[int, float] = field(default_factory=dict)

    @property
    def levels(self) -> int:
        return 1 + max((c.level for c in self.communities), default=-1)

    def membership(self, level: int) -> np.ndarray:
        """Community index per node for the partition `modularity[level]` describes."""
        out = np.full(self.n_nodes, -1, dtype=np.int64)
        for lvl, m in self._memberships():
            if lvl > level:
                break
            out = m
        return out

    def _memberships(self):
        """(level, membership) for every level, top-down; deeper communities overwrite their
        ancestors, one vectorised assignment per level rather than one per community."""
        out = np.full(self.n_nodes, -1, dtype=np.int64)
        by_level: dict[int, list[Community]] = {}
        for c in self.communities:
            by_level.setdefault(c.level, []).append(c)
        for level in range(self.levels):
            members = by_level.get(level, [])
            if members:
                nodes = np.concatenate([c.nodes for c in members])
                sizes = np.fromiter((c.size for c in members), dtype=np.int64, count=len(members))
                out[nodes] = np.repeat(np.fromiter((c.index for c in members), dtype=np.int64, count=len(members)), sizes)
            yield level, out.copy()


def normalise_edges(
    n_nodes: int, edges: np.ndarray, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) with a < b, self-loops dropped, duplicates (either direction) summed, sorted.

    Returns (edges (k, 2) int64, weights (k,) float64).
    """
    e = np.asarray(edges)
    if e.size == 0:
        e = e.reshape(0, 2)
    if e.ndim != 2 or e.shape[1] != 2:
        raise ValueError(f"edges must have shape (m, 2), got {e.shape}")
    if not np.issubdtype(e.dtype, np.integer):
        raise ValueError(f"edges must be integers, got dtype {e.dtype}")
    e = e.astype(np.int64, copy=False)
    if n_nodes > 3_037_000_499:  # the lo * n + hi key below must fit in int64
        raise ValueError(f"n_nodes {n_nodes} is too large")
    if e.size and (e.min() < 0 or e.max() >= n_nodes):
        raise ValueError(f"edge endpoints must lie in [0, {n_nodes})")
    if weights is None:
        w = np.ones(len(e), dtype=np.float64)
    else:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if w.shape[0] != e.shape[0]:
            raise ValueError(f"{w.shape[0]} weights for {e.shape[0]} edges")
        # Modularity is defined for positive weights only; a zero or NaN weight is an
        # upstream bug that would otherwise surface as a silent, odd partition.
        if w.size and not (np.all(np.isfinite(w)) and np.all(w > 0)):
            raise ValueError("edge weights must be finite and > 0")
    lo = np.minimum(e[:, 0], e[:, 1])
    hi = np.maximum(e[:, 0], e[:, 1])
    keep = lo != hi
    lo, hi, w = lo[keep], hi[keep], w[keep]
    # One int64 key per undirected edge; np.unique sorts it, which is exactly the
    # lexicographic (lo, hi) order, and its inverse lets bincount sum duplicates.
    key = lo * np.int64(n_nodes) + hi
    uniq, inverse = np.unique(key, return_inverse=True)
    summed = np.bincount(inverse.reshape(-1), weights=w, minlength=uniq.size)
    out = np.stack([uniq // n_nodes, uniq % n_nodes], axis=1).astype(np.int64)
    return out, summed.astype(np.float64)


def _graph(n: int, edges: np.ndarray) -> igraph.Graph:
    """An igraph Graph from an (m, 2) int64 array, built in slices.

    igraph reads pairs one Python object at a time; zipped int lists are its fastest input,
    and slicing bounds the transient tuples to _EDGE_SLICE of them instead of all m.
    """
    g = igraph.Graph(n=n)
    for start in range(0, len(edges), _EDGE_SLICE):
        part = edges[start : start + _EDGE_SLICE]
        g.add_edges(list(zip(part[:, 0].tolist(), part[:, 1].tolist())))
    return g


def _leiden(
    n: int,
    edges: np.ndarray,
    weights: np.ndarray,
    group: np.ndarray,
    seed: int,
    resolution: float,
    n_iterations: int,
    engine: str,
) -> np.ndarray:
    """One seeded Leiden run that optimises the modularity of every node group on its own,
    by `engine` ("native" or "igraph"); returns a membership whose labels are unique across
    groups.

    `edges` must stay inside groups (both ends in the same group). Moving node i into community
    C gains w(i, C) - k_i K_C gamma / (2 m_g): strengths k, K and the total edge weight m_g of
    i's group, the per-node factor gamma / (2 m_g) computed here once for both engines. Leiden
    never puts nodes of different connected parts into one community, so one run over the
    disjoint union splits every group as a run per group would, minus a graph build and a
    call per group (thousands per level; they were most of the time).
    """
    if len(edges) == 0:
        return np.arange(n, dtype=np.int64)
    strength = np.bincount(edges[:, 0], weights=weights, minlength=n) + np.bincount(
        edges[:, 1], weights=weights, minlength=n
    )
    group_total = np.bincount(group[edges[:, 0]], weights=weights, minlength=int(group.max()) + 1)
    per_node_total = group_total[group]
    null_factor = np.zeros(n, dtype=np.float64)  # gamma / (2 m_g); 0 in a group without edges
    has = per_node_total > 0
    null_factor[has] = resolution / (2.0 * per_node_total[has])
    del per_node_total, has
    if engine == "native":
        from corpusgraph.graph.native import leiden_groups

        return leiden_groups(n, edges, weights, strength, null_factor, seed, n_iterations, beta=_BETA)
    return _leiden_igraph(n, edges, weights, strength * np.sqrt(null_factor), seed, n_iterations)


def _leiden_igraph(
    n: int, edges: np.ndarray, weights: np.ndarray, node_weights: np.ndarray, seed: int, n_iterations: int
) -> np.ndarray:
    """igraph's Leiden for `_leiden`: the constant Potts model with node weight
    k_i sqrt(gamma / 2 m_g) and resolution 1 is each group's modularity (igraph's own
    modularity objective is exactly that with one group)."""
    g = _graph(n, edges)
    # igraph draws from a Python RNG object. Seed a private one for this call and put
    # igraph's documented default (the `random` module) back afterwards: igraph has no
    # getter for the current generator, so that default is the best restore there is.
    igraph.set_random_number_generator(random.Random(seed))
    try:
        # GraphBase's method returns the bare membership list; Graph.community_leiden wraps it
        # in a VertexClustering whose constructor walks the list in Python again.
        membership, _quality = igraph.GraphBase.community_leiden(
            g,
            edge_weights=weights.tolist(),
            node_weights=node_weights.tolist(),
            resolution=1.0,
            normalize_resolution=False,
            beta=_BETA,
            n_iterations=n_iterations,
        )
    finally:
        igraph.set_random_number_generator(random)
    return np.asarray(membership, dtype=np.int64)


def _groups(nodes: np.ndarray, labels: np.ndarray) -> list[np.ndarray]:
    """Split sorted `nodes` by label; groups come out ordered by their smallest node."""
    order = np.argsort(labels, kind="stable")  # stable: nodes stay sorted inside a group
    sorted_labels = labels[order]
    cuts = np.flatnonzero(np.diff(sorted_labels)) + 1
    groups = [nodes[idx] for idx in np.split(order, cuts)] if len(nodes) else []
    groups.sort(key=lambda g: int(g[0]))
    return groups


def hierarchical_leiden(
    n_nodes: int,
    edges: np.ndarray,
    weights: np.ndarray | None,
    max_cluster_size: int,
    seed: int,
    max_levels: int,
    resolution: float = 1.0,
    n_iterations: int = 2,
    split_iterations: int = 1,
    engine: str = "native",
    on_level: Callable[[int], None] | None = None,
) -> LeidenResult:
    """Hierarchical, seeded Leiden (modularity objective) over nodes 0..n_nodes-1.

    `edges` is (m, 2) integers in either direction, duplicates allowed; `weights` (m,) or
    None for 1.0 each. Isolated nodes each form their own level-0 community.
    `n_iterations` is passed to igraph for level 0: 2 (its default) rather than -1 ("until
    stable"), which measured many times slower for a negligible modularity gain;
    `split_iterations` for the runs that split oversized communities (1: levels below 0 only
    need to cut communities down to size, which a second pass adds time to and little else).
    Each level's run is seeded with `seed + level`. `on_level(n)`, when given, is called with
    the number of levels built so far once each level is complete (a progress bar; once a level).
    """
    if n_nodes < 0:
        raise ValueError("n_nodes must be >= 0")
    if max_cluster_size < 1 or max_levels < 1:
        raise ValueError("max_cluster_size and max_levels must be >= 1")
    if not resolution > 0:
        raise ValueError("resolution must be > 0")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if n_iterations == 0 or split_iterations == 0:
        raise ValueError("n_iterations and split_iterations must be non-zero (negative: until stable)")
    e, w = normalise_edges(n_nodes, edges, weights)

    communities: list[Community] = []
    all_nodes = np.arange(n_nodes, dtype=np.int64)
    membership0 = _leiden(n_nodes, e, w, np.zeros(n_nodes, dtype=np.int64), seed, resolution, n_iterations, engine)
    level_groups = [(None, g) for g in _groups(all_nodes, membership0)]
    del membership0

    label = np.empty(n_nodes, dtype=np.int64)  # which community being split a node is in
    local = np.empty(n_nodes, dtype=np.int64)  # its id in the level's union graph
    level = 0
    while level_groups:
        start = len(communities)
        for parent, nodes in level_groups:
            communities.append(Community(level, len(communities), parent, nodes))
        if on_level is not None:
            on_level(level + 1)
        if level + 1 >= max_levels:
            break
        to_split = [c for c in communities[start:] if c.size > max_cluster_size]
        if not to_split:
            break
        # Every oversized community of this level, as one graph of disjoint parts: its nodes
        # concatenated community by community, its edges those with both ends in one of them.
        sizes = np.fromiter((c.size for c in to_split), dtype=np.int64, count=len(to_split))
        nodes = np.concatenate([c.nodes for c in to_split])
        owner = np.repeat(np.arange(len(to_split), dtype=np.int64), sizes)
        label.fill(-1)
        label[nodes] = owner
        local[nodes] = np.arange(len(nodes), dtype=np.int64)
        la = label[e[:, 0]]
        inside = np.flatnonzero((la >= 0) & (la == label[e[:, 1]]))
        del la
        # local[] is monotone in the node id inside a community, so each edge keeps a < b.
        sub_edges = np.stack([local[e[inside, 0]], local[e[inside, 1]]], axis=1)
        sub = _leiden(len(nodes), sub_edges, w[inside], owner, seed + level + 1, resolution, split_iterations, engine)
        del sub_edges, inside
        children = _groups(nodes, sub)
        parents = np.fromiter((label[ch[0]] for ch in children), dtype=np.int64, count=len(children))
        split = np.bincount(parents, minlength=len(to_split)) > 1
        # A community Leiden cannot divide stays a leaf rather than getting a copy of itself below.
        level_groups = [(to_split[p].index, ch) for p, ch in zip(parents.tolist(), children) if split[p]]
        level += 1

    result = LeidenResult(n_nodes=n_nodes, communities=communities)
    result.modularity = _level_modularity(result, e, w)
    return result


def _level_modularity(result: LeidenResult, e: np.ndarray, w: np.ndarray) -> dict[int, float]:
    """Weighted modularity (resolution 1) of each level's whole-graph partition, in numpy.

    Q = sum_c [ w_in(c) / W - (deg(c) / 2W)^2 ], W the total edge weight.
    """
    total = float(w.sum())
    out: dict[int, float] = {}
    k = len(result.communities)
    for level, m in result._memberships():
        if total == 0.0:
            out[level] = math.nan
            continue
        ca, cb = m[e[:, 0]], m[e[:, 1]]
        same = ca == cb
        w_in = np.bincount(ca[same], weights=w[same], minlength=k)
        deg = np.bincount(ca, weights=w, minlength=k) + np.bincount(cb, weights=w, minlength=k)
        q = w_in.sum() / total - np.sum((deg / (2.0 * total)) ** 2)
        out[level] = float(q)
    return out
