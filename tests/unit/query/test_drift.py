"""DRIFT search on the Saltreach world (query_fixtures.py) with a scripted model."""

from __future__ import annotations

import json

import pytest

from corpusgraph.llm.base import ChatResult
from tests.support.query_fixtures import make_engine as engine

pytestmark = pytest.mark.unit


class DriftChat:
    """Primer: a partial answer and `follow_ups`; each follow-up answer cites [U1] and proposes
    `more`; reduce: plain text. `broken` request ids get prose instead of JSON."""

    model = "scripted"

    def __init__(self, follow_ups, more=(), broken=()):
        self.follow_ups, self.more, self.broken = list(follow_ups), list(more), set(broken)
        self.batches: list[list] = []

    def complete(self, requests):
        self.batches.append(list(requests))
        out = []
        for r in requests:
            if r.id in self.broken:
                text = "Well, it depends."
            elif r.id == "drift-primer":
                text = json.dumps({"answer": "The guild and the harbour are bound together.", "follow_ups": self.follow_ups})
            elif r.id.startswith("drift-") and r.id != "drift-reduce":
                text = json.dumps({"answer": "Mara Voss trained Tobin Hale [U1].", "follow_ups": self.more})
            else:
                text = "Mara Voss shaped the guild [P2]."
            out.append(ChatResult(id=r.id, text=text, tokens_in=100, tokens_out=10))
        return out


QUESTION = "How did Mara Voss shape the Lumen Guild?"


def test_primer_follow_ups_in_one_batch_then_reduce(store):
    chat = DriftChat(["Who trained Tobin Hale?", "What did the Lumen Guild make?"])
    answer = engine(store, chat).ask(QUESTION, method="drift")
    primer, follow, reduce = chat.batches
    assert [r.id for r in primer] == ["drift-primer"] and primer[0].json_schema
    prompt = primer[0].messages[-1]["content"]
    assert "Report 1:" in prompt and QUESTION in prompt  # the nearest reports prime it
    assert [r.messages[-1]["content"].split("Question: ")[1].split("\n")[0] for r in follow] == [
        "Who trained Tobin Hale?", "What did the Lumen Guild make?"]
    assert "-- Source texts --" in follow[0].messages[-1]["content"]  # a local-search context
    points = reduce[0].messages[-1]["content"]
    assert "[P1] The guild and the harbour" in points and "[P2] Who trained Tobin Hale? Mara Voss trained" in points
    assert answer.method == "drift" and answer.answer == "Mara Voss shaped the guild [P2]."
    assert answer.details["primer_source"] == "report_vectors" and answer.details["rounds"] == 1
    assert answer.details["follow_ups"] == ["Who trained Tobin Hale?", "What did the Lumen Guild make?"]
    assert answer.llm_calls == 4 and answer.tokens_in == 400 and answer.usd > 0
    assert answer.citations and all(c.unit_id in store.units for c in answer.citations)


def test_the_question_and_each_follow_up_have_their_names_matched_once(store, monkeypatch):
    asked = []
    match = store.match_names
    monkeypatch.setattr(store, "match_names", lambda text: asked.append(text) or match(text))
    engine(store, DriftChat(["Who trained Tobin Hale?", "What did the Lumen Guild make?"])).ask(QUESTION, method="drift")
    assert asked == [QUESTION, "Who trained Tobin Hale?", "What did the Lumen Guild make?"]


def test_breadth_and_depth_bound_the_calls(store):
    chat = DriftChat(["Q one?", "Q two?", "Q three?", "Q four?"], more=["Q five?", "Q one?"])
    answer = engine(store, chat, drift={"breadth": 2, "depth": 2}).ask(QUESTION, method="drift")
    sizes = [len(b) for b in chat.batches]
    assert sizes == [1, 2, 1, 1]  # primer, 2 follow-ups, the one new follow-up (Q one? was asked), reduce
    assert answer.details["follow_ups"] == ["Q one?", "Q two?", "Q five?"] and answer.details["rounds"] == 2


def test_a_broken_primer_falls_back_to_the_question_and_is_counted(store):
    chat = DriftChat([], broken={"drift-primer", "drift-0-0"})
    answer = engine(store, chat).ask(QUESTION, method="drift")
    assert answer.details["follow_ups"] == [QUESTION] and answer.details["failed_steps"] == 2
    assert answer.error == "every DRIFT step failed; no partial answer to reduce" and answer.answer == ""


def test_auto_routes_how_questions_about_entities_to_drift(store):
    from corpusgraph.query.engine import route

    method, reason = route(store, QUESTION)
    assert method == "drift" and "Mara Voss" in reason and "'how'" in reason
    assert route(store, "Who founded the Lumen Guild?")[0] == "local"


def test_primer_falls_back_to_entity_communities_without_report_vectors(store):
    from corpusgraph.query.drift import primer_reports
    from corpusgraph.query.question import parse_question
    from tests.support.query_fixtures import fake_embed

    ids, source = primer_reports(store, parse_question(store, QUESTION, fake_embed([QUESTION])[0]), 2)
    assert source == "report_vectors" and len(ids) == 2
    saved = store._vectors.pop("community_report", None)
    store._vectors["community_report"] = _Missing()
    try:
        ids, source = primer_reports(store, parse_question(store, QUESTION, fake_embed([QUESTION])[0]), 3)
    finally:
        store._vectors["community_report"] = saved
    assert source == "entity_communities" and ids and all(c in store.reports for c in ids)
    # The communities holding both named entities come before any held by a vector neighbour only.
    assert set(ids[:2]) == set(store.entity_communities["e_mara"]) & set(store.entity_communities["e_lumen"])


class _Missing:
    """A report index built with another embedder: dims do not match the question's."""

    dim = -1


def test_parse_step():
    from corpusgraph.query.drift import parse_step

    assert parse_step('{"answer": " A. ", "follow_ups": ["x?", "x?", " ", "y?", 3]}', 5) == ("A.", ["x?", "y?"])
    assert parse_step('{"answer": "A."}', 5) == ("A.", [])
    assert parse_step('{"follow_ups": []}', 5) is None and parse_step("prose", 5) is None
