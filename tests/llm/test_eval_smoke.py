"""`corpusgraph eval` end to end on the bundled model: a smoke test, not a quality figure.

The first three questions of ../shared/data/hotpotqa100/dev.jsonl, an index of their six evidence
documents built with conf/local.yaml (the embedded SmolLM2-135M), then the command line's eval over
basic and local search with the same model as judge. It checks that every answer is asked, scored
and judged, and prints the table; nothing is tuned on these questions, and a 135M model's answers
say nothing about quality (README "Measure answer quality on your own model").
"""

from __future__ import annotations

import json

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.pipeline import run_index
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO, SHARED_DATA

pytestmark = [pytest.mark.llm, pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]

SET = SHARED_DATA / "hotpotqa100"


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.skipif(not (SET / "dev.jsonl").is_file(), reason=f"{SET} is absent (third-party data, not in the repo)")
def test_eval_on_three_hotpotqa_questions_with_the_bundled_model(spark, tmp_path, capsys):
    from corpusgraph.cli.main import main
    from corpusgraph.evaluate.answers import VERDICTS

    questions = _lines(SET / "dev.jsonl")[:3]
    wanted = {d for q in questions for d in q["evidence_doc_ids"]}
    docs = [d for d in _lines(SET / "docs.jsonl") if d["id"] in wanted]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    sets = {"storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
            "storage.cache_dir": str(tmp_path / "cache"), "ingest.inputs": f"[{tmp_path / 'in'}]"}
    run_index(RunContext(load_config(REPO / "conf" / "local.yaml", sets), spark))
    out = tmp_path / "eval.json"
    args = ["eval", "--conf", str(REPO / "conf" / "local.yaml"), "--questions", str(tmp_path / "questions.jsonl"),
            "--methods", "basic,local", "--out", str(out)]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["questions"] == 3 and len(report["rows"]) == 6
    for row in report["rows"]:
        assert row["error"] is None and row["answer"].strip()
        assert {"em", "f1", "contains", "recall@2", "recall@5"} <= set(row["scores"])
        assert row["judge"]["verdict"] in (*VERDICTS, "unjudged")
    assert report["summary"]["local"]["answers"] == 3 and "basic" in printed and "recall@5" in printed
    with capsys.disabled():
        print("\n" + printed)
