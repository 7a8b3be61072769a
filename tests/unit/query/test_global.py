"""Global search's dynamic community selection, on the Saltreach world (query_fixtures.py).

Communities: c0a (lanterns, harbour) has reported children c1a (guild workshop) and c1b (treaty
town); c0b (copper) has c1c (company leadership) and c1d (no report).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from corpusgraph.llm.base import ChatResult
from tests.support.query_fixtures import make_engine as engine

pytestmark = pytest.mark.unit


class RatingChat:
    """Rates reports by community id from `scores` (a missing id gets `default`), answers map
    requests with one point per report and everything else with a fixed reduce answer."""

    model = "scripted"

    def __init__(self, scores: dict[str, object], default: object = 0):
        self.scores = scores
        self.default = default
        self.batches: list[list] = []

    def complete(self, requests):
        self.batches.append(list(requests))
        out = []
        for r in requests:
            prompt = r.messages[-1]["content"]
            if r.id.startswith("rate-"):
                score = self.scores.get(r.id[len("rate-"):], self.default)
                text = score if isinstance(score, str) else json.dumps({"score": score})
            elif r.id.startswith("map-"):
                found = re.findall(r"Report (\d+): (.+)", prompt)
                text = json.dumps({"points": [{"description": f"About {t}.", "score": 50, "reports": [int(n)]}
                                              for n, t in found]})
            else:
                text = "The answer [P1]."
            out.append(ChatResult(id=r.id, text=text, tokens_in=100, tokens_out=10))
        return out

    def rated(self) -> list[list[str]]:
        """The ids rated, per batch that rated any."""
        batches = [sorted(r.id[5:] for r in b if r.id.startswith("rate-")) for b in self.batches]
        return [b for b in batches if b]

    def mapped_titles(self) -> list[str]:
        """Every report a map request read (selected or not)."""
        return [t for b in self.batches for r in b if r.id.startswith("map-")
                for _, t in re.findall(r"Report (\d+): (.+)", r.messages[-1]["content"])]

    def reduced_titles(self) -> list[str]:
        """The reports whose points reached the reduce, in its order (each point says "About <title>.")."""
        prompt = next(r.messages[-1]["content"] for b in self.batches for r in b if r.id == "reduce")
        return re.findall(r"\[P\d+\] \(importance \d+\) About (.+)\.", prompt)


def test_dynamic_descends_only_into_relevant_branches(store):
    chat = RatingChat({"c0a": 4, "c0b": 0, "c1a": 3, "c1b": 0})
    answer = engine(store, chat).ask("What holds the lantern trade together?", method="global")
    # Roots first, then only the relevant root's children; c0b's subtree is never rated.
    assert chat.rated() == [["c0a", "c0b"], ["c1a", "c1b"]]
    assert chat.reduced_titles() == ["The Lumen Guild workshop"]  # c1a replaced its parent c0a
    # c1a and c1b are leaves: mapped in the round that rated them, c1b's points then dropped.
    assert chat.mapped_titles() == ["The Lumen Guild workshop", "Treaty town"]
    assert len(chat.batches) == 3 and answer.details["points_unselected"] == 1  # rate, rate + map, reduce
    assert answer.details["selection"] == "dynamic" and answer.details["level"] == [1]
    assert answer.details["rated"] == 4 and answer.details["rounds"] == 2 and answer.details["selected"] == 1
    assert {c.unit_id for c in answer.citations} == {"u1", "u2"}
    assert answer.llm_calls == 4 + 1 + 1 and answer.tokens_in == 100 * answer.llm_calls
    assert answer.answer == "The answer [P1]."


def test_a_relevant_parent_without_relevant_children_is_kept(store):
    chat = RatingChat({"c0a": 3, "c0b": 2, "c1c": 5})
    answer = engine(store, chat).ask("What holds the lantern trade together?", method="global")
    # c0a's children are both irrelevant, so c0a itself is mapped; c1c replaces c0b, ranked first.
    assert chat.reduced_titles() == ["Company leadership", "Lantern makers of Port Keel"]
    assert answer.details["level"] == [0, 1]
    # c0a could only be mapped once its children were rated: one map round after the ratings.
    assert len(chat.batches) == 4 and answer.details["early_pruned"] == 2


def test_nothing_relevant_falls_back_to_mapping_the_whole_level(store):
    chat = RatingChat({}, default=0)
    answer = engine(store, chat, global_={"level": 0}).ask("What holds the lantern trade together?", method="global")
    assert chat.rated() == [["c0a", "c0b"]]  # no descent below irrelevant roots
    assert sorted(chat.mapped_titles()) == ["Copper miners of Grey Hollow", "Lantern makers of Port Keel"]
    assert answer.details["selection"] == "dynamic_fallback" and answer.details["level"] == 0
    assert answer.details["rated"] == 2 and answer.llm_calls == 2 + answer.details["map_calls"] + 1


def test_an_unreadable_rating_keeps_its_branch_and_is_counted(store):
    chat = RatingChat({"c0a": "I think it is quite relevant!", "c0b": 0, "c1a": 0, "c1b": 0})
    answer = engine(store, chat).ask("What holds the lantern trade together?", method="global")
    assert answer.details["rating_failed"] == 1
    assert chat.reduced_titles() == ["Lantern makers of Port Keel"]


def test_explicit_level_and_switch_turn_selection_off(store):
    chat = RatingChat({"c0a": 5, "c0b": 5})
    answer = engine(store, chat).ask("What holds the lantern trade together?", method="global", level=0)
    assert chat.rated() == [] and answer.details["selection"] == "level" and answer.details["level"] == 0
    chat = RatingChat({"c0a": 5, "c0b": 5})
    answer = engine(store, chat, global_={"dynamic": False, "level": 1}).ask("Anything?", method="global")
    assert chat.rated() == [] and answer.details["level"] == 1


def test_max_level_stops_the_descent(store):
    chat = RatingChat({"c0a": 5, "c0b": 5, "c1a": 5, "c1b": 5, "c1c": 5})
    engine(store, chat, global_={"dynamic_max_level": 0}).ask("What holds the lantern trade together?", method="global")
    assert chat.rated() == [["c0a", "c0b"]]
    assert sorted(chat.reduced_titles()) == ["Copper miners of Grey Hollow", "Lantern makers of Port Keel"]
    assert len(chat.batches) == 2  # the roots are leaves here: rated and mapped in one batch, then reduce


def test_a_leaf_is_mapped_while_rated_and_only_relevant_points_are_kept(store):
    ask = "What holds the lantern trade together?"
    early = RatingChat({"c0a": 4, "c0b": 0})
    answer = engine(store, early, global_={"dynamic_max_level": 0}).ask(ask, method="global")
    assert [len(b) for b in early.batches] == [3, 1]  # 2 ratings + 1 map chunk, then the reduce
    assert early.reduced_titles() == ["Lantern makers of Port Keel"]  # c0b's point is dropped
    assert (answer.details["mapped_early"], answer.details["early_pruned"], answer.details["points_unselected"]) == (2, 1, 1)
    assert answer.coverage["reports_mapped"] == 1 and answer.coverage["selection"]["early_pruned"] == 1
    assert {c.unit_id for c in answer.citations} <= {"u1", "u2", "u5", "u7"}  # c0a's units only
    # Off: rate, then map only the relevant one, then reduce; the same report reaches the reduce.
    late = RatingChat({"c0a": 4, "c0b": 0})
    off = engine(store, late, global_={"dynamic_max_level": 0, "dynamic_early_map": False}).ask(ask, method="global")
    assert [len(b) for b in late.batches] == [2, 1, 1] and late.mapped_titles() == ["Lantern makers of Port Keel"]
    assert late.reduced_titles() == early.reduced_titles() and off.coverage["reports_mapped"] == 1


def test_a_fallback_to_the_level_already_mapped_costs_no_second_map(store):
    chat = RatingChat({}, default=0)
    answer = engine(store, chat, global_={"dynamic_max_level": 0, "level": 0}).ask("Anything at all?", method="global")
    assert [len(b) for b in chat.batches] == [3, 1]  # no map round after the ratings
    assert answer.details["selection"] == "dynamic_fallback" and answer.details["points_unselected"] == 0
    assert sorted(chat.reduced_titles()) == ["Copper miners of Grey Hollow", "Lantern makers of Port Keel"]


def test_parse_rating_clamps_and_refuses():
    from corpusgraph.query.global_search import parse_rating

    assert parse_rating('{"score": 9}') == 5 and parse_rating('{"score": "2"}') == 2
    assert parse_rating('{"score": -1}') == 0
    assert parse_rating("relevant") is None and parse_rating('{"rating": 3}') is None
    assert parse_rating('{"score": %s}' % ("9" * 400)) is None  # past float's range: no number


def _points(score, reports="[1]"):
    return '{"points": [{"description": "d", "score": %s, "reports": %s}]}' % (score, reports)


def test_parse_points_drops_a_score_that_is_not_a_finite_number():
    from corpusgraph.query.global_search import parse_points

    chunk = {1: "c1", 2: "c2"}
    for score in ("NaN", "Infinity", "-Infinity", "9" * 400, '"many"', "null"):
        assert parse_points(_points(score), chunk) == [], score
    assert [p.score for p in parse_points(_points(150), chunk)] == [100.0]
    assert [p.score for p in parse_points(_points('"40"'), chunk)] == [40.0]


def test_parse_points_drops_report_numbers_no_report_could_have():
    from corpusgraph.query.global_search import parse_points

    chunk = {1: "c1", 2: "c2"}
    (point,) = parse_points(_points(5, '["%s", "Report 2"]' % ("7" * 5000)), chunk)
    assert point.community_ids == ["c2"]  # the 5,000-digit run dropped, the usable number kept
    (point,) = parse_points(_points(5, '["%s"]' % ("1" * 20)), chunk)
    assert point.community_ids == ["c1", "c2"]  # nothing usable: credited to the whole chunk
    (point,) = parse_points(_points(5, '["Report 0002"]'), chunk)
    assert point.community_ids == ["c2"]  # leading zeros are not digits of the number


# -- the rating budget (query.global.dynamic_max_rated) --------------------------------------------


def test_over_the_rating_budget_the_reports_nearest_the_question_are_rated_first(store):
    # By importance c0a (8.0) would go first; the question's words are c0b's summary's.
    chat = RatingChat({"c0b": 4, "c1c": 5})
    eng = engine(store, chat, global_={"dynamic_max_rated": 1})
    question = "Which company mines copper in the valley?"
    answer = eng.ask(question, method="global")
    assert chat.rated() == [["c0b"]]  # one rating: half the budget would be 0.5, rounded up to 1
    assert eng.embedder.calls == [[question]]  # embedded once, for the order
    # c0b was relevant, but its child c1c could not be rated: c0b itself is mapped.
    assert chat.reduced_titles() == ["Copper miners of Grey Hollow"]
    d = answer.details
    assert (d["rated"], d["unrated"], d["max_rated"], d["rating_order"]) == (1, 2, 1, "report_vectors")
    sel = answer.coverage["selection"]
    assert (sel["unrated"], sel["max_rated"], sel["rating_order"]) == (2, 1, "report_vectors")
    from corpusgraph.query.coverage import describe

    assert any("rating budget of 1 reached: 2 reports left unrated" in line for line in describe(answer.coverage))


def test_a_budget_left_for_the_last_level_rates_its_nearest_reports(store):
    chat = RatingChat({"c0a": 4, "c0b": 0, "c1a": 5, "c1b": 5})
    answer = engine(store, chat, global_={"dynamic_max_rated": 3}).ask("Where was the Saltmarsh Treaty signed?",
                                                                      method="global")
    # Both roots fit the budget; of c0a's two children one rating is left, for the treaty town.
    assert chat.rated() == [["c0a", "c0b"], ["c1b"]]
    assert chat.reduced_titles() == ["Treaty town"] and answer.details["unrated"] == 1


def test_within_the_budget_nothing_is_embedded_or_left_unrated(store):
    chat = RatingChat({"c0a": 4, "c0b": 0, "c1a": 3, "c1b": 0})
    eng = engine(store, chat)  # the default budget (500) is far above this world's 5 reports
    answer = eng.ask("What holds the lantern trade together?", method="global")
    assert eng.embedder.calls == [] and answer.details["unrated"] == 0 and answer.details["rating_order"] is None
    unlimited = RatingChat({"c0a": 4, "c0b": 0, "c1a": 3, "c1b": 0})
    engine(store, unlimited, global_={"dynamic_max_rated": 0}).ask("What holds the lantern trade together?",
                                                                  method="global")
    assert unlimited.rated() == chat.rated() == [["c0a", "c0b"], ["c1a", "c1b"]]


def test_rating_order_without_vectors_is_by_importance(store):
    from corpusgraph.query.global_select import _allowance, nearest_first
    from tests.support.query_fixtures import fake_embed

    ids = ["c1c", "c0b", "c1a", "c0a", "c1b"]
    assert nearest_first(store, ids, None) == (["c1a", "c0a", "c0b", "c1b", "c1c"], "report_rating")
    ranked, how = nearest_first(store, ids, fake_embed(["Ilsa Brand directs the Iron Coast Company"])[0])
    assert how == "report_vectors" and ranked[0] == "c1c" and sorted(ranked) == sorted(ids)
    assert nearest_first(store, ids, np.ones(3, dtype=np.float32))[1] == "report_rating"  # another model's vector
    assert _allowance(None, ["a"] * 30, True) == 30 and _allowance(10, ["a"] * 8, True) == 8
    assert _allowance(10, ["a"] * 30, True) == 5 and _allowance(10, ["a"] * 30, False) == 10


def test_reports_the_budget_deferred_are_ranked_again_in_the_next_round(store, monkeypatch):
    from corpusgraph.query import global_select

    # Three roots over two of budget; c0a's only child is c1a.
    monkeypatch.setattr(global_select, "report_tree", lambda _: ({"c0a": ["c1a"]}, ["c0a", "c0b", "c1b"]))
    chat = RatingChat({"c0a": 0, "c1b": 5})
    answer = engine(store, chat, global_={"dynamic_max_rated": 2}).ask(
        "Mara Voss founded the Lumen Guild; where was the Saltmarsh Treaty signed?", method="global")
    # The first round that binds takes half (1): the nearest root, c0a, irrelevant. The two roots it
    # deferred are ranked again and the budget's last rating goes to the nearer, c1b.
    assert chat.rated() == [["c0a"], ["c1b"]]
    assert chat.reduced_titles() == ["Treaty town"]
    assert (answer.details["rated"], answer.details["unrated"], answer.details["rounds"]) == (2, 1, 2)
