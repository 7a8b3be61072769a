"""Answer metrics, citation recall and the pairwise judge (corpusgraph.evaluate.score)."""

from __future__ import annotations

import json

import pytest

from corpusgraph.evaluate.score import (UNPARSED, cited_documents, contains_answer, exact_match, f1_score, judge_pair,
                                        judge_prompt, mean_scores, normalize_answer, parse_verdict, recall_at_k,
                                        score_answer, source_id, strip_citations, summarise_verdicts)
from corpusgraph.llm.base import ChatResult
from corpusgraph.query.answer import Answer, Citation

CRITS = ("comprehensiveness", "diversity", "empowerment", "directness")


# -- answer metrics ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("The  Eiffel Tower!", "eiffel tower"),
    ("An apple, a pear and THE plum.", "apple pear and plum"),
    ("G. Stanley Hall", "g stanley hall"),
    ("theatre", "theatre"),  # an article inside a word stays
    (None, ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_strip_citations_removes_tags_only():
    text = "Victoria Falls [U1] is in Zimbabwe [U2, U5][R3] (see [Data: Reports (1, 2)]). [Note] stays."
    assert strip_citations(text).split() == ["Victoria", "Falls", "is", "in", "Zimbabwe", "(see", ").", "[Note]", "stays."]


def test_exact_match_takes_any_alias_and_ignores_tags():
    assert exact_match("G. Stanley Hall [U2]", ["Granville Stanley Hall", "G. Stanley Hall"]) == 1.0
    assert exact_match("the stanley hall", "Stanley Hall") == 1.0
    assert exact_match("Stanley Hall was first", "Stanley Hall") == 0.0
    assert exact_match("anything", []) == 0.0


def test_f1_is_token_overlap_best_over_aliases():
    # pred tokens: first president was g stanley hall (6); gold "stanley hall" (2): P=2/6, R=1
    assert f1_score("The first president was G. Stanley Hall.", "Stanley Hall") == pytest.approx(2 * (1 / 3) / (1 / 3 + 1))
    # the better alias wins
    assert f1_score("Stanley Hall", ["G. Stanley Hall", "Stanley Hall"]) == 1.0
    assert f1_score("Paris", "London") == 0.0
    # repeated tokens count once per occurrence in both
    assert f1_score("hall hall hall", "hall") == pytest.approx(0.5)
    assert f1_score("", "yes") == 0.0


def test_contains_answer_needs_whole_words():
    assert contains_answer("It was founded by G. Stanley Hall [U1].", ["G. Stanley Hall"]) == 1.0
    assert contains_answer("The answer is yes.", "yes") == 1.0
    assert contains_answer("It is Yesterday's news", "yes") == 0.0
    assert contains_answer("Hall of Stanley", "Stanley Hall") == 0.0


# -- citations and recall ---------------------------------------------------------------------


def _cite(doc: str, uri: str | None = None) -> Citation:
    return Citation(unit_id=f"u-{doc}", doc_id=f"hash-{doc}", source_uri=uri if uri is not None else f"/data/docs.jsonl#{doc}",
                    title=doc)


def test_source_id_reads_the_jsonl_id_from_the_uri():
    assert source_id(_cite("musique-p0006")) == "musique-p0006"
    assert source_id(_cite("x", uri="/some/file.txt")) == "hash-x"  # no record id: the document id
    assert source_id({"source_uri": "a.jsonl#p1", "doc_id": "h"}) == "p1"


def test_recall_at_k_counts_distinct_documents_in_order():
    ranked = ["d1", "d1", "d3", "d2", "d4"]
    assert recall_at_k(ranked, ["d2", "d3"], 2) == 0.5  # distinct: d1, d3
    assert recall_at_k(ranked, ["d2", "d3"], 3) == 1.0
    assert recall_at_k([], ["d2"], 5) == 0.0
    with pytest.raises(ValueError):
        recall_at_k(ranked, [], 5)


def test_score_answer_reads_citations_in_order():
    answer = Answer(question="q", answer="Victoria Falls [U2].", method="local",
                    citations=[_cite("p9"), _cite("p9"), _cite("p71"), _cite("p1"), _cite("p63")])
    row = score_answer(answer, ["Victoria Falls"], ["p63", "p71"], ks=(2, 5))
    assert row == {"em": 1.0, "f1": 1.0, "contains": 1.0, "recall@2": 0.5, "recall@5": 1.0}
    assert cited_documents(answer.citations) == ["p9", "p71", "p1", "p63"]


def test_mean_scores():
    assert mean_scores([{"em": 1.0, "f1": 0.5}, {"em": 0.0, "f1": 0.25}]) == {"em": 0.5, "f1": 0.375}


# -- judge ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ('{"comprehensiveness": "1", "diversity": "2", "empowerment": "tie", "directness": "2"}',
     ["1", "2", "tie", "2"]),
    ('```json\n{"Comprehensiveness": 1, "diversity": 2, "empowerment": 0, "directness": "Answer 1"}\n```',
     ["1", "2", "tie", "1"]),
    ('Here you go: {"comprehensiveness": {"winner": "Answer 2", "reason": "more detail"}, "diversity": "both"}',
     ["2", "tie", UNPARSED, UNPARSED]),
    ("Comprehensiveness: Answer 2 is more detailed than answer 1\n**Diversity**: Answer 1\n"
     "Empowerment - tie\nDirectness: I cannot say", ["2", "1", "tie", UNPARSED]),
    ('{"comprehensiveness": "1", "diversity": "2", "empow', ["1", "2", UNPARSED, UNPARSED]),  # cut off
    ('{"comprehensiveness": "3", "diversity": true, "empowerment": null, "directness": "1 or 2"}',
     [UNPARSED, UNPARSED, UNPARSED, UNPARSED]),
    ("I like both answers.", [UNPARSED] * 4),
    ("", [UNPARSED] * 4),
    (None, [UNPARSED] * 4),
])
def test_parse_verdict(text, expected):
    assert [parse_verdict(text)[c] for c in CRITS] == expected


def test_judge_prompt_shows_both_answers_in_the_given_order():
    prompt = judge_prompt("Why?", "first answer text", "second {answer} text")
    assert prompt.index("first answer text") < prompt.index("second {answer} text")
    for name in CRITS:
        assert name in prompt


class ScriptedJudge:
    """Answers a judge request from a function of its prompt; records every batch."""

    model = "scripted"

    def __init__(self, decide):
        self.decide = decide
        self.batches = []

    def complete(self, requests):
        self.batches.append(list(requests))
        out = []
        for r in requests:
            text = self.decide(r.messages[0]["content"])
            if text is None:
                out.append(ChatResult(id=r.id, text=None, error="timeout"))
            else:
                out.append(ChatResult(id=r.id, text=text, tokens_in=100, tokens_out=10))
        return out


def _first_is(prompt: str) -> str:
    return prompt.split("Answer 1:\n", 1)[1].split("\n", 1)[0]


def test_judge_pair_asks_both_orders_in_one_batch_and_maps_positions_back():
    # The judge prefers the answer that mentions "graphs" on every criterion, wherever it stands.
    def decide(prompt):
        winner = "1" if "graphs" in _first_is(prompt) else "2"
        return json.dumps({c: winner for c in CRITS})

    chat = ScriptedJudge(decide)
    verdict = judge_pair(chat, "What matters?", "graphs and people", "people")
    assert len(chat.batches) == 1 and len(chat.batches[0]) == 2
    first, second = chat.batches[0]
    assert _first_is(first.messages[0]["content"]) == "graphs and people"
    assert _first_is(second.messages[0]["content"]) == "people"
    assert first.json_schema is not None and set(first.json_schema["required"]) == set(CRITS)
    assert all(verdict.orders[c] == ("A", "A") for c in CRITS)
    assert all(verdict.score_a[c] == 1.0 for c in CRITS)
    assert verdict.tokens_in == 200 and verdict.tokens_out == 20


def test_position_bias_cancels_to_a_tie():
    chat = ScriptedJudge(lambda prompt: json.dumps({c: "1" for c in CRITS}))  # always the first shown
    verdict = judge_pair(chat, "q", "a", "b")
    assert all(verdict.orders[c] == ("A", "B") for c in CRITS)
    assert all(verdict.score_a[c] == 0.5 for c in CRITS)
    summary = summarise_verdicts([verdict], "global", "basic")
    assert summary["directness"]["first_position_win_share"] == 1.0
    assert summary["directness"]["global_win_rate"] == 0.5


def test_unparsed_and_failed_verdicts_are_recorded_not_dropped():
    answers = iter([None, "Comprehensiveness: 2\nno idea about the rest"])  # ab fails, ba half-parses
    chat = ScriptedJudge(lambda prompt: next(answers))
    verdict = judge_pair(chat, "q", "a", "b")
    assert verdict.errors == ("timeout", None)
    # ba put B first, so its "2" is a win for A
    assert verdict.orders["comprehensiveness"] == (UNPARSED, "A")
    assert verdict.score_a["comprehensiveness"] == 1.0
    assert verdict.orders["diversity"] == (UNPARSED, UNPARSED)
    assert verdict.score_a["diversity"] is None
    summary = summarise_verdicts([verdict])
    assert summary["diversity"] == {"A_wins": 0, "B_wins": 0, "ties": 0, "unparsed": 2, "verdicts": 2,
                                    "A_win_rate": None, "first_position_win_share": None}
    assert summary["comprehensiveness"]["unparsed"] == 1 and summary["comprehensiveness"]["A_wins"] == 1


def test_summarise_counts_over_questions():
    verdicts = []
    for winner_ab, winner_ba in (("1", "2"), ("2", "1"), ("tie", "1")):  # A wins, B wins, tie + B
        answers = iter([json.dumps({c: winner_ab for c in CRITS}), json.dumps({c: winner_ba for c in CRITS})])
        verdicts.append(judge_pair(ScriptedJudge(lambda p: next(answers)), "q", "a", "b"))
    s = summarise_verdicts(verdicts, "g", "b")["empowerment"]
    assert (s["g_wins"], s["b_wins"], s["ties"], s["unparsed"], s["verdicts"]) == (2, 3, 1, 0, 6)
    assert s["g_win_rate"] == pytest.approx((1.0 + 0.0 + 0.25) / 3, abs=1e-4)
