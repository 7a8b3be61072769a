"""Extending a stored community hierarchy to a changed graph (pure numpy; igraph for modularity).

An update keeps the previous partition when it still fits: each new node is placed by weighted
neighbour majority, level by level, and the modularity of the extended level 0 on the new graph
is compared with the one recorded when the hierarchy was detected (the update's communities
step decides from the drift whether to keep it or detect again).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["OldPartition", "old_partition", "extend_partition", "modularity"]


@dataclass
class OldPartition:
    """The stored hierarchy mapped onto the new graph's node indices.

    labels[L][i]: slot of node i's level-L community (-1: not on that level, or a new node);
    parents[L][k]: slot at level L-1 of level-L slot k; versions/modularities per level."""

    labels: list[np.ndarray]
    parents: list[np.ndarray]
    recorded: dict[int, float]
    versions: dict[int, str]


def old_partition(ids: list[str], rows: list[dict]) -> OldPartition:
    pos = {e: i for i, e in enumerate(ids)}
    levels = sorted({r["level"] for r in rows})
    by_level = {lv: sorted((r for r in rows if r["level"] == lv), key=lambda r: r["community_id"]) for lv in levels}
    slot = {r["community_id"]: k for lv in levels for k, r in enumerate(by_level[lv])}
    labels, parents, recorded, versions = [], [], {}, {}
    for lv in levels:
        arr = np.full(len(ids), -1, dtype=np.int64)
        for k, r in enumerate(by_level[lv]):
            idx = [pos[e] for e in r["entity_ids"] if e in pos]
            arr[idx] = k
        labels.append(arr)
        parents.append(np.array([slot.get(r["parent_id"], -1) for r in by_level[lv]], dtype=np.int64))
        recorded[lv] = float(by_level[lv][0]["modularity"]) if by_level[lv] else float("nan")
        versions[lv] = by_level[lv][0]["graph_version"] if by_level[lv] else ""
    return OldPartition(labels, parents, recorded, versions)


def _adjacency(n: int, edges: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (indptr, neighbours, weights) of the undirected graph."""
    src = np.concatenate([edges[:, 0], edges[:, 1]]) if len(edges) else np.zeros(0, np.int64)
    dst = np.concatenate([edges[:, 1], edges[:, 0]]) if len(edges) else np.zeros(0, np.int64)
    ww = np.concatenate([w, w]) if len(edges) else np.zeros(0)
    order = np.argsort(src, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
    return indptr, dst[order], ww[order]


def _assign(adj, labels: np.ndarray, group: np.ndarray, todo: np.ndarray) -> np.ndarray:
    """Give each node in `todo` the label its labelled neighbours of the same group carry the
    most weight of (ties: the smaller label); repeat while it changes something, so chains of new
    nodes fill in from their labelled end. Nodes with no such neighbour stay -1."""
    indptr, nbr, ww = adj
    labels = labels.copy()
    pending = [int(v) for v in np.flatnonzero(todo)]
    while pending:
        left = []
        for v in pending:
            tally: dict[int, float] = {}
            for u, x in zip(nbr[indptr[v]:indptr[v + 1]], ww[indptr[v]:indptr[v + 1]]):
                if labels[u] >= 0 and group[u] == group[v]:
                    tally[int(labels[u])] = tally.get(int(labels[u]), 0.0) + float(x)
            if tally:
                labels[v] = min(tally, key=lambda k: (-tally[k], k))
            else:
                left.append(v)
        if len(left) == len(pending):
            break
        pending = left
    return labels


def extend_partition(n: int, edges: np.ndarray, w: np.ndarray, old: OldPartition) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Pure: the old hierarchy with every new node placed, level by level.

    Level 0: neighbour majority; new nodes with no placed neighbour form new communities, one per
    connected group among themselves. Level L: a new node is placed among the children of its
    level L-1 community by neighbour majority within that parent, else in the biggest child."""
    adj = _adjacency(n, edges, w)
    new = old.labels[0] < 0 if old.labels else np.ones(n, dtype=bool)
    labels = [_assign(adj, old.labels[0], np.zeros(n, dtype=np.int64), new)]
    parents = [old.parents[0].copy()]
    left = np.flatnonzero(labels[0] < 0)
    if len(left):  # connected groups of the unplaced, by union-find over their mutual edges
        root = {int(v): int(v) for v in left}

        def find(v: int) -> int:
            while root[v] != v:
                root[v] = root[root[v]]
                v = root[v]
            return v

        indptr, nbr, _ = adj
        for v in left:
            for u in nbr[indptr[v]:indptr[v + 1]]:
                if int(u) in root:
                    a, b = find(int(v)), find(int(u))
                    root[max(a, b)] = min(a, b)
        next_slot, slot_of = len(parents[0]), {}
        for v in left:
            r = find(int(v))
            if r not in slot_of:
                slot_of[r], next_slot = next_slot, next_slot + 1
            labels[0][v] = slot_of[r]
        parents[0] = np.concatenate([parents[0], np.full(next_slot - len(parents[0]), -1, dtype=np.int64)])
    for lv in range(1, len(old.labels)):
        up, par = labels[lv - 1], old.parents[lv]
        has_children = np.zeros(len(parents[lv - 1]) + 1, dtype=bool)
        has_children[par[par >= 0]] = True
        todo = new & (up >= 0) & has_children[np.where(up >= 0, up, -1)]
        lab = _assign(adj, old.labels[lv], up, todo)
        if (todo & (lab < 0)).any():  # no neighbour inside the parent: the parent's biggest child
            sizes = np.bincount(lab[lab >= 0], minlength=len(par))
            for v in np.flatnonzero(todo & (lab < 0)):
                kids = np.flatnonzero(par == up[v])
                lab[v] = kids[np.lexsort((kids, -sizes[kids]))[0]]
        labels.append(lab)
        parents.append(par.copy())
    return labels, parents


def modularity(n: int, edges: np.ndarray, w: np.ndarray, labels: np.ndarray) -> float:
    """Weighted Newman-Girvan modularity (resolution 1), as hierarchical Leiden (leiden.py) records it."""
    import igraph

    if not len(edges):
        return float("nan")
    g = igraph.Graph(n=n, edges=edges.tolist())
    return float(g.modularity(labels.tolist(), weights=w.tolist()))
