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


# A neighbourhood's id lists are sorted (and searched) while they are under 1/_SORT_BELOW of the
# graph's nodes, else marked in (or looked up through) an array of the graph's size: on a graph of
# millions of nodes the two cost the same near n/512, sorting losing above it and marking below.
_SORT_BELOW = 512


def _find(sorted_set: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each of `values` is in `sorted_set` (sorted, distinct), whether it is there), by
    binary search; a place is meaningful only where found."""
    if sorted_set.size == 0:
        return np.zeros(values.size, dtype=np.int64), np.zeros(values.size, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), sorted_set.size - 1)
    return at, sorted_set[at] == values


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

    def _distinct_new(self, found: np.ndarray, seen: np.ndarray) -> np.ndarray:
        """The distinct ids of `found` not in `seen` (sorted, distinct), sorted (see _SORT_BELOW)."""
        if found.size * _SORT_BELOW < self.n:
            fresh = np.unique(found)
            return fresh[~_find(seen, fresh)[1]]
        mark = np.zeros(self.n, dtype=bool)
        mark[found] = True
        mark[seen] = False
        return np.flatnonzero(mark)

    def neighbourhood(self, seeds: np.ndarray, hops: int, cap: int) -> np.ndarray:
        """The seeds and the nodes within `hops` of them, grown a whole hop at a time while the
        total stays within `cap` (a hop that would pass it is not taken). Its cost follows the
        edges it reads, not the graph's size."""
        seeds = np.asarray(seeds, dtype=np.int64)
        parts, frontier, seen = [seeds], seeds, np.unique(seeds)
        for _ in range(hops):
            positions, _ = self._out_positions(frontier)
            found = self._distinct_new(self.csr_dst[positions], seen)
            if found.size == 0 or seen.size + found.size > cap:
                break
            parts.append(found)
            # Both sorted and apart: a stable sort (timsort) merges the two runs in one pass.
            frontier, seen = found, np.sort(np.concatenate([seen, found]), kind="stable")
        return np.concatenate(parts)

    def walk(self, seeds: np.ndarray, weights: np.ndarray, damping: float, iterations: int, max_nodes: int,
             hops: int) -> tuple[np.ndarray, np.ndarray]:
        """`pagerank` from restart weights on `seeds` (distinct node ids), as (nodes, scores) for the
        nodes it may reach (zero scores among them); above `max_nodes` nodes no array of the
        graph's size is made, so a question's cost follows its neighbourhood alone."""
        seeds = np.asarray(seeds, dtype=np.int64)
        weights = np.asarray(weights, dtype=np.float64)
        if self.n <= max_nodes:
            reset = np.zeros(self.n)
            reset[seeds] = weights
            scores = personalized_pagerank(self.src, self.dst, self.weight, self.n, reset, damping, iterations)
            return np.arange(self.n), scores
        return self._neighbourhood_walk(seeds, weights, damping, iterations, hops, max_nodes)

    def _neighbourhood_walk(self, seeds: np.ndarray, weights: np.ndarray, damping: float, iterations: int,
                            hops: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
        keep = weights != 0
        order = np.argsort(seeds[keep])  # the restart nodes in id order
        seeds, weights = seeds[keep][order], weights[keep][order]
        nodes = self.neighbourhood(seeds, hops, max(cap, seeds.size))  # starts with the seeds, in order
        # Each out-edge's target as a position in `nodes`, or -1 outside them: by binary search
        # for a neighbourhood small against the graph, else through a graph-sized lookup.
        positions, counts = self._out_positions(nodes)
        targets = self.csr_dst[positions]
        if nodes.size * _SORT_BELOW < self.n:
            rank = np.argsort(nodes)
            at, found = _find(nodes[rank], targets)
            dst = np.where(found, rank[at], -1)
        else:
            local = np.full(self.n, -1, dtype=np.int64)
            local[nodes] = np.arange(nodes.size)
            dst = local[targets]
        inside = dst >= 0
        src = np.repeat(np.arange(nodes.size, dtype=np.int64), counts)
        reset = np.zeros(nodes.size)
        reset[: seeds.size] = weights
        scores = personalized_pagerank(src[inside], dst[inside], self.csr_w[positions][inside], nodes.size,
                                       reset, damping, iterations, out_weight=self.out_w[nodes])
        return nodes, scores

    def neighbourhood_pagerank(self, reset: np.ndarray, damping: float, iterations: int, hops: int,
                               cap: int) -> np.ndarray:
        """PPR restricted to the restart nodes and the nodes within `hops` of them (at most `cap`
        of them, see `neighbourhood`); zero elsewhere (the dense form of the walk above `cap`)."""
        reset = np.asarray(reset, dtype=np.float64)
        seeds = np.flatnonzero(reset)
        nodes, scores = self._neighbourhood_walk(seeds, reset[seeds], damping, iterations, hops, cap)
        out = np.zeros(self.n)
        out[nodes] = scores
        return out
