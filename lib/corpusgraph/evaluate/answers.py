"""`corpusgraph eval`: answer quality of any endpoint on a question file with gold answers.

Every question is asked through each chosen method of the query engine; each answer gets the
metrics of evaluate/score.py (exact match, token F1, contains, and retrieval recall@k from its
citations where the question names its evidence documents) and, with a judge, an LLM verdict
against the gold answer: correct, partially_correct or wrong (prompt conf/prompts/eval_judge.txt,
sent through the judge stage's endpoint, llm.stages.judge, else the query stage's). Questions
without a gold answer get recall only. The report is a JSON object (per question and method, and
means per method) and a short table.

Questions are JSON lines of {"id", "question", "answer", "answer_aliases"?, "evidence_doc_ids"?}
(the ../shared/data dev sets' format). The index must have been built from the documents the
evidence ids name (docs.jsonl ingested with its `id` field, which becomes each document's
source id).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

from corpusgraph.evaluate.score import cited_documents, mean_scores, recall_at_k, score_answer
from corpusgraph.llm.base import ChatModel, ChatRequest
from corpusgraph.llm.parse import parse_json_answer
from corpusgraph.prompts import Prompt

__all__ = ["VERDICTS", "load_questions", "judge_schema_verdict", "judge_answer", "evaluate_answers", "format_table"]

VERDICTS = ("correct", "partially_correct", "wrong")
_UNJUDGED = "unjudged"


def load_questions(path: str | Path, limit: int | None = None) -> list[dict]:
    """The question file's rows (those with a question), at most `limit` of them, in file order."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not a JSON line: {exc}") from None
            if not isinstance(row, dict) or not str(row.get("question") or "").strip():
                raise ValueError(f"{path}:{n}: a question row needs a non-empty 'question'")
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
    return rows


def judge_schema_verdict() -> dict:
    return {"type": "object", "properties": {"verdict": {"type": "string", "enum": list(VERDICTS)},
                                             "reason": {"type": "string", "maxLength": 300}},
            "required": ["verdict", "reason"]}


def _golds(row: dict) -> list[str]:
    gold = row.get("answer")
    if gold is None:
        return []
    return [str(gold)] + [str(a) for a in row.get("answer_aliases") or [] if a]


def judge_answer(chat: ChatModel, prompt: Prompt, question: str, golds: Sequence[str], answer: str,
                 max_tokens: int = 120) -> dict[str, Any]:
    """{"verdict", "reason", "error", "tokens_in", "tokens_out"}; verdict "unjudged" when the judge
    failed or its answer cannot be read (counted, never guessed)."""
    text = prompt.render(question=question.strip(), gold=" / ".join(golds), answer=(answer or "").strip() or "(empty)")
    res = chat.complete([ChatRequest(id="judge", messages=({"role": "user", "content": text},), max_tokens=max_tokens,
                                     json_schema=judge_schema_verdict())])[0]
    out = {"verdict": _UNJUDGED, "reason": None, "error": res.error, "tokens_in": res.tokens_in,
           "tokens_out": res.tokens_out}
    if res.error is None:
        obj, err = parse_json_answer(res.text)
        verdict = str((obj or {}).get("verdict") or "").strip().lower().replace(" ", "_").replace("-", "_")
        if verdict in VERDICTS:
            out.update(verdict=verdict, reason=(obj or {}).get("reason"))
        else:
            out["error"] = err or f"unreadable verdict: {str(res.text)[:200]!r}"
    return out


def evaluate_answers(engine: Any, questions: Iterable[dict], methods: Sequence[str], *, judge: ChatModel | None = None,
                     judge_prompt: Prompt | None = None, log=None) -> dict[str, Any]:
    """Ask every question through every method; score and (with a judge) grade each answer."""
    rows: list[dict] = []
    for q in questions:
        golds, docs = _golds(q), [str(d) for d in q.get("evidence_doc_ids") or []]
        for method in methods:
            t0 = time.perf_counter()
            ans = engine.ask(q["question"], method=method)
            row: dict[str, Any] = {"id": q.get("id"), "question": q["question"], "method": method,
                                   "answer": ans.answer, "error": ans.error, "gold": golds[0] if golds else None,
                                   "seconds": round(time.perf_counter() - t0, 3), "tokens_in": ans.tokens_in,
                                   "tokens_out": ans.tokens_out, "llm_calls": ans.llm_calls}
            if golds:
                row["scores"] = score_answer(ans, golds, docs)
            elif docs:  # no gold answer: recall of the evidence only
                cited = cited_documents(ans.citations or ())
                row["scores"] = {f"recall@{k}": recall_at_k(cited, docs, k) for k in (2, 5)}
            if judge is not None and judge_prompt is not None and golds:
                row["judge"] = judge_answer(judge, judge_prompt, q["question"], golds, ans.answer)
            rows.append(row)
            if log is not None:
                log(f"{method:<7} {str(q.get('id'))[:24]:<24} {row.get('judge', {}).get('verdict', '-'):<17} "
                    f"f1={row.get('scores', {}).get('f1', float('nan')):.2f}")
    return {"methods": list(methods), "questions": len({r["id"] for r in rows}), "rows": rows,
            "summary": summarise(rows, methods)}


def summarise(rows: Sequence[dict], methods: Sequence[str]) -> dict[str, dict]:
    out = {}
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        means = mean_scores([r["scores"] for r in mine if "scores" in r])
        verdicts = Counter(r["judge"]["verdict"] for r in mine if "judge" in r)
        judged = sum(verdicts[v] for v in VERDICTS)
        out[m] = {"answers": len(mine), "errors": sum(1 for r in mine if r["error"]), **means,
                  "judge": {**{v: verdicts[v] for v in VERDICTS}, _UNJUDGED: verdicts[_UNJUDGED],
                            "correct_share": round(verdicts["correct"] / judged, 4) if judged else None},
                  "tokens_in": sum(r["tokens_in"] for r in mine), "tokens_out": sum(r["tokens_out"] for r in mine),
                  "seconds": round(sum(r["seconds"] for r in mine), 2)}
    return out


def format_table(report: dict) -> str:
    head = f"{'method':<8}{'answers':>8}{'EM':>7}{'F1':>7}{'contains':>9}{'judge ok':>9}{'partial':>8}{'wrong':>6}" \
           f"{'unjudged':>9}{'recall@5':>9}"
    lines = [head, "-" * len(head)]
    for m, s in report["summary"].items():
        j = s["judge"]

        def f(key):
            return f"{s[key]:.3f}" if key in s else "-"
        lines.append(f"{m:<8}{s['answers']:>8}{f('em'):>7}{f('f1'):>7}{f('contains'):>9}{j['correct']:>9}"
                     f"{j['partially_correct']:>8}{j['wrong']:>6}{j[_UNJUDGED]:>9}{f('recall@5'):>9}")
    return "\n".join(lines)
