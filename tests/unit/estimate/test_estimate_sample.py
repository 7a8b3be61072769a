"""The ratio estimator behind a sampled dry run: its total and its stated 95% bound, checked
against populations whose true totals are known."""

from __future__ import annotations

import numpy as np
import pytest

from corpusgraph.estimate.sample import ratio_estimate

pytestmark = pytest.mark.unit


def _population(n_clusters: int, seed: int) -> list[dict]:
    """Clusters of units: prompt tokens = 1.3 x text tokens + 380 per request, plus noise."""
    rng = np.random.default_rng(seed)
    n_tokens = rng.integers(4_000, 60_000, n_clusters)
    requests = np.maximum(1, (n_tokens / 1000).round()).astype(int)
    tokens_in = (1.3 * n_tokens + 380 * requests + rng.normal(0, 800, n_clusters)).round().astype(int)
    return [{"n_tokens": int(a), "tokens_in": int(b), "requests": int(c), "units": 200}
            for a, b, c in zip(n_tokens, tokens_in, requests)]


def test_the_bound_covers_the_truth_about_95_percent_of_the_time():
    pop = _population(5_000, seed=0)
    true_total = sum(c["tokens_in"] for c in pop)
    x_total = sum(c["n_tokens"] for c in pop)
    rng = np.random.default_rng(1)
    covered, bounds = 0, []
    for _ in range(400):
        idx = rng.choice(len(pop), 250, replace=False)
        total, bound = ratio_estimate([pop[i] for i in idx], "tokens_in", "n_tokens", x_total, 250 / len(pop))
        covered += abs(total - true_total) <= bound * total
        bounds.append(bound)
    assert 0.92 <= covered / 400 <= 0.98  # a real 95% interval, neither too wide nor too narrow
    assert 0.001 < float(np.median(bounds)) < 0.01  # and a tight one at 5% sampled


def test_a_full_sample_is_exact_and_degenerate_samples_say_so():
    pop = _population(50, seed=2)
    x_total = sum(c["n_tokens"] for c in pop)
    total, bound = ratio_estimate(pop, "tokens_in", "n_tokens", x_total, 1.0)
    assert total == pytest.approx(sum(c["tokens_in"] for c in pop)) and bound == 0.0
    assert ratio_estimate(pop[:1], "tokens_in", "n_tokens", x_total, 0.02)[1] == float("inf")
    assert ratio_estimate([], "tokens_in", "n_tokens", x_total, 0.0) == (0.0, float("inf"))
