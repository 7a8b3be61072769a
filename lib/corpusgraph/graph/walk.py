"""Personalised PageRank over a weighted undirected graph, whole or near its restart nodes.

Pure numpy over integer node ids: the query side's ranking (query/retrieval.py) builds one
`WalkGraph` of entity and passage nodes per index and walks it per question. A walk over the
whole graph costs a few sparse products over the edge list; above a size the caller chooses,
the walk runs on the neighbourhood of the restart nodes only (grown hop by hop from the CSR
adjacency), with transition weights still normalised by each node's full out-weight, so mass
that would leave the neighbourhood is dropped rather than bent back in. That keeps a
question's cost independent of the graph's size.
"""

from __future__ import annotations

import numpy as np

__all__ = ["personalized_pagerank", "WalkGraph"]


def personalized_pagerank(
    src: np.ndarray, dst: np.ndarray, weight: np.ndarray, n: int, reset: np.ndarray, damping: float,
    iterations: int = 30, tol: float = 1e-7, out_weight: np.ndarray | None = None,
) -> np.ndarray:
    """PPR over a directed weighted edge list (give both directions for an undirected graph).

    p = (1 - d) r + d (P^T p), P row-normalised; mass at nodes with no out-edge restarts, so
    p always sums to 1. `out_weight` (per node) normalises instead of the edges' own sums: a
    walk on part of a graph passes each node's full out-weight, so mass bound outside the part
    is dropped rather than bent back in.
    """
    r = np.asarray(reset, dtype=np.float64)
    total = r.sum()
    if total <= 0:
        return np.zeros(n)
    r = r / total
    out_w = np.bincount(src, weights=weight, minlength=n) if out_weight is None else out_weight
    step = np.divide(weight, out_w[src], out=np.zeros_like(weight, dtype=np.float64), where=out_w[src] > 0)
    dangling = out_w == 0
    p = r.copy()
    for _ in range(iterations):
        moved = np.bincount(dst, weights=p[src] * step, minlength=n)
        nxt = (1 - damping) * r + damping * (moved + p[dangling].sum() * r)
        if np.abs(nxt - p).sum() < tol:
            return nxt
        p = nxt
    return p


class WalkGraph:
    """An undirected weighted graph of `n` nodes: both directions of every edge as arrays, and a
    CSR adjacency (edges sorted by source) for neighbourhoods."""

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray):
        self.n = n
        s, d = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        w = np.asarray(weight, dtype=np.float64)
        self.src, self.dst = np.concatenate([s, d]), np.concatenate([d, s])
        self.weight = np.concatenate([w, w])
        order = np.argsort(self.src, kind="stable")
        self.csr_dst, self.csr_w = self.dst[order], self.weight[order]
        self.indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.src, minlength=n), out=self.indptr[1:])
        self.out_w = np.bincount(self.src, weights=self.weight, minlength=n)

    def neighbours(self, node: int) -> np.ndarray:
        """The nodes `node` has an edge to (with repeats where it has several)."""
        return self.csr_dst[self.indptr[node]: self.indptr[node + 1]]

    def pagerank(self, reset: np.ndarray, damping: float, iterations: int, max_nodes: int, hops: int) -> np.ndarray:
        """PPR from `reset`: over the whole graph up to `max_nodes` nodes, above that over the
        neighbourhood of the restart nodes (`hops` hops, at most `max_nodes` nodes)."""
        if self.n <= max_nodes:
            return personalized_pagerank(self.src, self.dst, self.weight, self.n, reset, damping, iterations)
        return self.neighbourhood_pagerank(reset, damping, iterations, hops, max_nodes)

    def _out_positions(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions in the CSR arrays of every out-edge of `nodes`, and each one's out-degree."""
        starts = self.indptr[nodes]
        counts = self.indptr[nodes + 1] - starts
        firsts = np.cumsum(counts) - counts
        positions = np.repeat(starts - firsts, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        return positions, counts

    def neighbourhood(self, seeds: np.ndarray, hops: int, cap: int) -> np.ndarray:
        """The seeds and the nodes within `hops` of them, grown a whole hop at a time while the
        total stays within `cap` (a hop that would pass it is not taken)."""
        inside = np.zeros(self.n, dtype=bool)
        inside[seeds] = True
        parts, frontier, total = [seeds], seeds, seeds.size
        for _ in range(hops):
            positions, _ = self._out_positions(frontier)
            found = self.csr_dst[positions]
            # Distinct new nodes, sorted, by marking them: next to a hub the raw list runs to
            # millions of ids, and np.unique's hashing of them cost more than the walk itself.
            fresh = np.zeros(self.n, dtype=bool)
            fresh[found[~inside[found]]] = True
            found = np.flatnonzero(fresh)
            if found.size == 0 or total + found.size > cap:
                break
            inside[found] = True
            parts.append(found)
            frontier, total = found, total + found.size
        return np.concatenate(parts)

    def neighbourhood_pagerank(self, reset: np.ndarray, damping: float, iterations: int, hops: int,
                               cap: int) -> np.ndarray:
        """PPR restricted to the restart nodes and the nodes within `hops` of them (at most `cap`
        of them, see `neighbourhood`); zero elsewhere."""
        seeds = np.flatnonzero(reset)
        nodes = self.neighbourhood(seeds, hops, max(cap, seeds.size))
        local = np.full(self.n, -1, dtype=np.int64)
        local[nodes] = np.arange(nodes.size)
        positions, counts = self._out_positions(nodes)
        src = np.repeat(np.arange(nodes.size, dtype=np.int64), counts)
        dst = local[self.csr_dst[positions]]
        keep = dst >= 0
        out = np.zeros(self.n)
        out[nodes] = personalized_pagerank(src[keep], dst[keep], self.csr_w[positions][keep], nodes.size,
                                           reset[nodes], damping, iterations, out_weight=self.out_w[nodes])
        return out
