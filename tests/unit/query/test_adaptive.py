"""Seed support and the dense guarantee (query/adaptive.py), on hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from corpusgraph.query.adaptive import entity_share, keep_dense, link_coverage, seed_support


def test_seed_support_is_the_mean_passage_score_over_the_seeds_passages():
    score = np.array([1.0, 0.5, 0.0, 0.0])
    support = seed_support({7: np.array([0]), 8: np.array([0, 1, 2, 3]), 9: np.array([], dtype=np.int64)}, score)
    assert support == {7: 1.0, 8: pytest.approx(0.375), 9: 0.0}


def test_link_coverage_is_the_share_of_naming_passages_the_links_reach():
    assert link_coverage(1, 40) == pytest.approx(0.025)  # linked to one of the forty passages naming it
    assert link_coverage(6, 3) == 1.0  # more links than passages naming it (aliases, title links): full
    assert link_coverage(2, 0) == 1.0  # no passage known to name it: nothing to scale by


def test_entity_share_follows_the_weighted_mean_support():
    # seeds 7 (weight 3, support 1.0) and 8 (weight 1, support 0.2): mean (3 + 0.2) / 4 = 0.8
    assert entity_share({7: 3.0, 8: 1.0}, {7: 1.0, 8: 0.2}, passage_weight=0.2) == pytest.approx(0.8 * 0.8)
    # a hub: its passages are almost never candidates, so the walk gives way to the passages
    assert entity_share({5: 1.0}, {5: 0.01}, passage_weight=0.2) == pytest.approx(0.008)
    assert entity_share({}, {}, passage_weight=0.2) == 0.0


RANKED = [("g1", 0.10), ("d1", 0.09), ("g2", 0.08), ("d2", 0.07)]


def test_protected_passages_keep_their_places_when_the_graph_is_not_stronger_by_the_margin():
    # g1 (0.10) is not twice d1 (0.09) nor d2 (0.07): both protected passages go first, in dense order.
    out = keep_dense(RANKED, ["d1", "d2"], {"d1": 0.09, "d2": 0.07}, keep=2, margin=1.0)
    assert [u for u, _ in out] == ["d1", "d2", "g1", "g2"]
    assert dict(out) == dict(RANKED)  # scores travel with their passages, nothing lost


def test_a_graph_choice_with_enough_evidence_wins_the_place():
    ranked = [("g1", 0.20), ("d1", 0.09), ("g2", 0.08), ("d2", 0.07)]
    # g1 = 0.20 >= 2 x 0.09: first; g2 = 0.08 < 2 x 0.09 and < 2 x 0.07: after both protected.
    out = keep_dense(ranked, ["d1", "d2"], {"d1": 0.09, "d2": 0.07}, keep=2, margin=1.0)
    assert [u for u, _ in out] == ["g1", "d1", "d2", "g2"]


def test_margin_zero_and_off_leave_the_graph_ranking_as_it_is():
    evidence = dict(RANKED)
    assert keep_dense(RANKED, ["d2", "d1"], evidence, keep=2, margin=0.0) == RANKED
    assert keep_dense(RANKED, ["d2", "d1"], evidence, keep=0, margin=5.0) == RANKED


def test_only_the_first_keep_dense_passages_are_protected_and_missing_ones_come_in():
    # d3 is not in the graph ranking at all; with keep=1 only d3 is protected, d1 keeps its graph place.
    out = keep_dense(RANKED, ["d3", "d1"], {"d3": 0.09}, keep=1, margin=1.0)
    assert [u for u, _ in out] == ["d3", "g1", "d1", "g2", "d2"]
    assert dict(out)["d3"] == 0.0
