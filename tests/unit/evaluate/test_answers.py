"""`corpusgraph eval`'s scoring (evaluate/answers.py): questions read from JSON lines, EM/F1/recall per
answer, the judge's verdict through a real HTTP endpoint (a conformance server whose judge answers
are scripted), means per method and the table. The bundled model's run of the whole command on a
dev-set slice is tests/llm/test_eval_smoke.py."""

from __future__ import annotations

import json

import pytest

from corpusgraph.config import LLMSection
from corpusgraph.evaluate.answers import evaluate_answers, format_table, judge_answer, load_questions
from corpusgraph.llm.factory import open_chat_model
from corpusgraph.prompts import load_prompt
from corpusgraph.query.answer import Answer, Citation
from tests.conftest import REPO
from tests.support.provider_server import ProviderServer

PROMPT = load_prompt(REPO / "conf" / "prompts" / "eval_judge.txt")


class Answers:
    """The query side's part, fixed: which answer each method gives (the engine is not what is tested)."""

    def __init__(self, by_method):
        self.by_method = by_method

    def ask(self, question, method="auto", level=None):
        text, docs = self.by_method[method]
        cites = [Citation(unit_id=f"u{i}", doc_id=d, source_uri=f"docs.jsonl#{d}", title=d)
                 for i, d in enumerate(docs)]
        return Answer(question=question, answer=text, method=method, citations=cites, tokens_in=10, tokens_out=3,
                      llm_calls=1)


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    with ProviderServer("openai", "--key", "k", "--models", "judge-m") as srv:
        llm = LLMSection(backend="openai", api_base=srv.base_url, api_key="k", model="judge-m", profile="openai")
        yield open_chat_model(llm, tmp_path_factory.mktemp("cache")), srv


def test_questions_are_read_with_a_limit_and_bad_lines_are_named(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": "a", "question": "Q1?", "answer": "x"}\n\n{"id": "b", "question": "Q2?", "answer": null}\n')
    assert [q["id"] for q in load_questions(path)] == ["a", "b"]
    assert [q["id"] for q in load_questions(path, limit=1)] == ["a"]
    path.write_text('{"id": "a", "question": ""}\n')
    with pytest.raises(ValueError, match="q.jsonl:1: a question row needs"):
        load_questions(path)


def test_the_judge_answers_through_the_endpoint_with_the_judge_schema(judge):
    chat, srv = judge
    got = judge_answer(chat, PROMPT, "Who runs the dock?", ["Giulia Sarti"], "Giulia Sarti runs it [U1].")
    # the conformance server answers a schema with its first enum value: the verdict path is read
    assert got["verdict"] == "correct" and got["error"] is None and got["tokens_in"] > 0
    assert srv.stats()["kinds"] == ["judge"] and srv.stats()["refused"] == 0


def test_scores_verdicts_and_recall_per_method(judge, tmp_path):
    chat, _ = judge
    questions = [{"id": "q1", "question": "Who runs the Milan dock?", "answer": "Giulia Sarti",
                  "answer_aliases": ["Sarti"], "evidence_doc_ids": ["d1", "d2"]},
                 {"id": "q2", "question": "Themes?", "answer": None, "evidence_doc_ids": ["d3"]}]
    engine = Answers({"basic": ("Giulia Sarti [U1]", ["d1", "d9"]), "local": ("The dock lead is Sarti.", ["d2", "d1"])})
    report = evaluate_answers(engine, questions, ["basic", "local"], judge=chat, judge_prompt=PROMPT)
    rows = {(r["id"], r["method"]): r for r in report["rows"]}
    assert rows[("q1", "basic")]["scores"]["em"] == 1.0 and rows[("q1", "local")]["scores"]["em"] == 0.0
    assert rows[("q1", "local")]["scores"]["recall@2"] == 1.0 and rows[("q1", "basic")]["scores"]["recall@2"] == 0.5
    assert "judge" not in rows[("q2", "basic")] and rows[("q2", "basic")]["scores"] == {"recall@2": 0.0, "recall@5": 0.0}
    assert report["summary"]["basic"]["judge"]["correct"] == 1 and report["summary"]["basic"]["answers"] == 2
    table = format_table(report)
    assert table.splitlines()[2].startswith("basic") and "recall@5" in table.splitlines()[0]
    json.dumps(report)  # the report is plain JSON
