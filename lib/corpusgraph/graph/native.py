"""Leiden (modularity objective) compiled with numba, over a CSR graph of disjoint node groups.

This is the default engine of `hierarchical_leiden` (graph/leiden.py; igraph's C Leiden is
the other). It implements the algorithm of Traag, Waltman and van Eck (2019), "From Louvain
to Leiden: guaranteeing well-connected communities", written here from the paper:

1. fast local moving: nodes are visited from a queue (random order at first); a node moves
   to the neighbouring community (or an empty one) with the largest modularity gain, and its
   neighbours outside that community are queued again;
2. refinement: inside every community, each node that is still alone and well connected
   merges into a well-connected sub-community of the same community, chosen at random with
   probability proportional to exp(gain / beta) among the non-negative gains (beta -> 0 is
   greedy);
3. aggregation: the refined sub-communities become the nodes of the next graph, whose
   starting partition is the one from step 1, so no community is ever split.

The three steps repeat until moving nodes changes nothing. `n_iterations` runs the whole
algorithm again from its own result, as igraph's parameter of that name does.

Groups: every node carries the group it belongs to and edges never cross groups, so one run
optimises each group's own modularity (its own total edge weight in the null model) -
`hierarchical_leiden` splits all oversized communities of a level in one call this way.
The gain of moving node v into community C is  w(v, C) - k_v * K_C * gamma / (2 m_g),  with
w(v, C) the edge weight between them, k_v and K_C strengths (weighted degrees) and m_g the
total edge weight of v's group.

Determinism: numba's generator is seeded at the start of every call, and the code is
single-threaded, so a seed gives the same partition on every run and machine.
Compilation is cached on disk by numba (`cache=True`); the first call in a fresh install
compiles for a few seconds.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["leiden_groups"]


@njit(cache=True)
def _csr(n, a, b, w):
    """Both directions of the undirected edges (a, b, w) as CSR (indptr, indices, weights)."""
    deg = np.zeros(n + 1, dtype=np.int64)
    for i in range(a.size):
        deg[a[i] + 1] += 1
        deg[b[i] + 1] += 1
    indptr = np.cumsum(deg)
    fill = indptr[:-1].copy()
    indices = np.empty(2 * a.size, dtype=np.int64)
    weights = np.empty(2 * a.size, dtype=np.float64)
    for i in range(a.size):
        x, y = a[i], b[i]
        indices[fill[x]] = y
        weights[fill[x]] = w[i]
        fill[x] += 1
        indices[fill[y]] = x
        weights[fill[y]] = w[i]
        fill[y] += 1
    return indptr, indices, weights


@njit(cache=True)
def _renumber(labels):
    """Labels -> 0..k-1 in order of first appearance; returns (new labels, k)."""
    n = labels.size
    top = 0
    for i in range(n):
        if labels[i] > top:
            top = labels[i]
    mapping = np.full(top + 1, -1, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        c = labels[i]
        if mapping[c] < 0:
            mapping[c] = k
            k += 1
        out[i] = mapping[c]
    return out, k


@njit(cache=True)
def _move_nodes(indptr, indices, weights, strength, scale, comm):
    """Fast local moving (step 1) in place on `comm` (labels in 0..n-1). Returns moves made."""
    n = strength.size
    comm_total = np.zeros(n, dtype=np.float64)
    comm_size = np.zeros(n, dtype=np.int64)
    for v in range(n):
        comm_total[comm[v]] += strength[v]
        comm_size[comm[v]] += 1
    empty = np.empty(n, dtype=np.int64)  # stack of unused community labels
    n_empty = 0
    for c in range(n):
        if comm_size[c] == 0:
            empty[n_empty] = c
            n_empty += 1
    queue = np.random.permutation(n)  # circular; every node is in it at most once
    in_queue = np.ones(n, dtype=np.bool_)
    head = 0
    pending = n
    link = np.zeros(n, dtype=np.float64)  # edge weight from v to each community, reset per v
    seen = np.empty(n, dtype=np.int64)
    moves = 0
    while pending > 0:
        v = queue[head]
        head += 1
        if head == n:
            head = 0
        pending -= 1
        in_queue[v] = False
        old = comm[v]
        n_seen = 0
        for j in range(indptr[v], indptr[v + 1]):
            c = comm[indices[j]]
            if link[c] == 0.0:
                seen[n_seen] = c
                n_seen += 1
            link[c] += weights[j]
        kv = strength[v]
        sv = scale[v] * kv
        # Gains are measured against v standing alone (gain 0).
        best = old
        best_gain = link[old] - sv * (comm_total[old] - kv)
        for i in range(n_seen):
            c = seen[i]
            if c != old:
                gain = link[c] - sv * comm_total[c]
                if gain > best_gain:
                    best = c
                    best_gain = gain
        for i in range(n_seen):
            link[seen[i]] = 0.0
        if best_gain < 0.0 and comm_size[old] > 1:
            # Alone is better than anywhere: take an unused label (one exists, since v's
            # community has another member, so fewer than n labels are in use).
            n_empty -= 1
            best = empty[n_empty]
        if best == old:
            continue
        comm_total[old] -= kv
        comm_size[old] -= 1
        if comm_size[old] == 0:
            empty[n_empty] = old
            n_empty += 1
        comm_total[best] += kv
        comm_size[best] += 1
        comm[v] = best
        moves += 1
        for j in range(indptr[v], indptr[v + 1]):
            u = indices[j]
            if not in_queue[u] and comm[u] != best:
                in_queue[u] = True
                tail = head + pending
                if tail >= n:
                    tail -= n
                queue[tail] = u
                pending += 1
    return moves


@njit(cache=True)
def _refine(indptr, indices, weights, strength, scale, comm, beta):
    """Refinement (step 2): sub-communities of `comm`, labels in 0..n-1 (not renumbered)."""
    n = strength.size
    comm_total = np.zeros(n, dtype=np.float64)
    for v in range(n):
        comm_total[comm[v]] += strength[v]
    ref = np.arange(n)
    ref_total = strength.copy()
    ref_size = np.ones(n, dtype=np.int64)
    # Edge weight from each sub-community to the rest of its community; for a single node,
    # its weight to the other members.
    ref_out = np.zeros(n, dtype=np.float64)
    for v in range(n):
        cv = comm[v]
        for j in range(indptr[v], indptr[v + 1]):
            if comm[indices[j]] == cv:
                ref_out[v] += weights[j]
    link = np.zeros(n, dtype=np.float64)
    seen = np.empty(n, dtype=np.int64)
    cand = np.empty(n, dtype=np.int64)
    gains = np.empty(n, dtype=np.float64)
    for v in np.random.permutation(n):
        if ref_size[ref[v]] != 1:
            continue  # no longer alone: something merged into it
        cv = comm[v]
        kv = strength[v]
        s = scale[v]
        total_c = comm_total[cv]
        if ref_out[v] < s * kv * (total_c - kv):
            continue  # not well connected to its own community
        n_seen = 0
        for j in range(indptr[v], indptr[v + 1]):
            u = indices[j]
            if comm[u] == cv:
                r = ref[u]
                if link[r] == 0.0:
                    seen[n_seen] = r
                    n_seen += 1
                link[r] += weights[j]
        n_cand = 0
        best_gain = 0.0  # staying alone
        for i in range(n_seen):
            r = seen[i]
            if r == v:
                continue
            rt = ref_total[r]
            if ref_out[r] < s * rt * (total_c - rt):
                continue  # sub-community not well connected
            gain = link[r] - s * kv * rt
            if gain >= 0.0:
                cand[n_cand] = r
                gains[n_cand] = gain
                n_cand += 1
                if gain > best_gain:
                    best_gain = gain
        target = v
        if n_cand > 0:
            if beta <= 0.0:
                for i in range(n_cand):
                    if gains[i] == best_gain:
                        target = cand[i]
                        break
            else:
                # Staying alone (gain 0) is a candidate too.
                norm = np.exp((0.0 - best_gain) / beta)
                for i in range(n_cand):
                    gains[i] = np.exp((gains[i] - best_gain) / beta)
                    norm += gains[i]
                x = np.random.random() * norm
                acc = np.exp((0.0 - best_gain) / beta)
                if x >= acc:
                    for i in range(n_cand):
                        acc += gains[i]
                        target = cand[i]
                        if x < acc:
                            break
        if target != v:
            ref_out[target] = ref_out[target] + ref_out[v] - 2.0 * link[target]
            ref_total[target] += kv
            ref_size[target] += 1
            ref_size[v] = 0
            ref[v] = target
        for i in range(n_seen):
            link[seen[i]] = 0.0
    return ref


@njit(cache=True)
def _aggregate(indptr, indices, weights, strength, scale, ref, k):
    """Step 3: the graph whose nodes are the k sub-communities `ref` (labels 0..k-1).

    Internal edges become part of the node's strength (kept as the sum of its members'),
    not explicit self-loops: the moving and refinement steps never count a node's link to
    itself.
    """
    n = strength.size
    start = np.zeros(k + 1, dtype=np.int64)
    for v in range(n):
        start[ref[v] + 1] += 1
    start = np.cumsum(start)
    members = np.empty(n, dtype=np.int64)
    fill = start[:-1].copy()
    for v in range(n):
        members[fill[ref[v]]] = v
        fill[ref[v]] += 1
    new_strength = np.zeros(k, dtype=np.float64)
    new_scale = np.zeros(k, dtype=np.float64)
    new_indptr = np.zeros(k + 1, dtype=np.int64)
    new_indices = np.empty(indices.size, dtype=np.int64)
    new_weights = np.empty(indices.size, dtype=np.float64)
    link = np.zeros(k, dtype=np.float64)
    seen = np.empty(k, dtype=np.int64)
    pos = 0
    for r in range(k):
        n_seen = 0
        for m in range(start[r], start[r + 1]):
            v = members[m]
            new_strength[r] += strength[v]
            new_scale[r] = scale[v]
            for j in range(indptr[v], indptr[v + 1]):
                t = ref[indices[j]]
                if t == r:
                    continue
                if link[t] == 0.0:
                    seen[n_seen] = t
                    n_seen += 1
                link[t] += weights[j]
        for i in range(n_seen):
            t = seen[i]
            new_indices[pos] = t
            new_weights[pos] = link[t]
            link[t] = 0.0
            pos += 1
        new_indptr[r + 1] = pos
    return new_indptr, new_indices[:pos].copy(), new_weights[:pos].copy(), new_strength, new_scale


@njit(cache=True)
def _leiden(indptr, indices, weights, strength, scale, initial, beta, n_iterations, seed):
    np.random.seed(seed)
    membership, _ = _renumber(initial)
    iteration = 0
    while n_iterations < 0 or iteration < n_iterations:
        iteration += 1
        g_indptr, g_indices, g_weights = indptr, indices, weights
        g_strength, g_scale = strength, scale
        comm = membership.copy()
        node_map = np.arange(membership.size)  # original node -> node of the current graph
        while True:
            _move_nodes(g_indptr, g_indices, g_weights, g_strength, g_scale, comm)
            comm, n_comm = _renumber(comm)
            n_here = g_strength.size
            if n_comm == n_here:
                break
            ref = _refine(g_indptr, g_indices, g_weights, g_strength, g_scale, comm, beta)
            ref, k = _renumber(ref)
            if k == n_here:
                break
            # The next graph starts from the unrefined partition of its nodes.
            start = np.empty(k, dtype=np.int64)
            for v in range(n_here):
                start[ref[v]] = comm[v]
            g_indptr, g_indices, g_weights, g_strength, g_scale = _aggregate(
                g_indptr, g_indices, g_weights, g_strength, g_scale, ref, k
            )
            for i in range(node_map.size):
                node_map[i] = ref[node_map[i]]
            comm = start
        result = np.empty(membership.size, dtype=np.int64)
        for i in range(membership.size):
            result[i] = comm[node_map[i]]
        result, _ = _renumber(result)
        # Labels in order of first appearance: equal arrays are equal partitions.
        same = np.array_equal(result, membership)
        membership = result
        if same:
            break
    return membership


def leiden_groups(
    n: int,
    edges: np.ndarray,
    weights: np.ndarray,
    strength: np.ndarray,
    null_factor: np.ndarray,
    seed: int,
    n_iterations: int,
    beta: float = 0.01,
) -> np.ndarray:
    """Membership (labels unique across groups) of a Leiden run on each node group at once.

    `edges` (m, 2) int64 with both ends in the same group, each undirected edge once;
    `weights` (m,) positive; `strength` (n,) each node's weighted degree; `null_factor` (n,)
    gamma / (2 m_g) of the node's group (graph/leiden.py's `_leiden` computes both). Negative
    `n_iterations`: until an iteration changes nothing.
    """
    if len(edges) == 0:
        return np.arange(n, dtype=np.int64)
    a = np.ascontiguousarray(edges[:, 0], dtype=np.int64)
    b = np.ascontiguousarray(edges[:, 1], dtype=np.int64)
    w = np.ascontiguousarray(weights, dtype=np.float64)
    indptr, indices, csr_w = _csr(n, a, b, w)
    del a, b
    initial = np.arange(n, dtype=np.int64)
    return _leiden(indptr, indices, csr_w, np.asarray(strength, dtype=np.float64),
                   np.asarray(null_factor, dtype=np.float64), initial, float(beta), int(n_iterations), int(seed))
