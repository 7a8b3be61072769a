"""Global search's rating budget (query.global.dynamic_max_rated) on a scale index, in one process.

The index is a run folder that `make bench-scale` left under work/scale (CORPUSGRAPH_BENCH_BUDGET_RUN,
default run-100000; the benchmark skips, saying so, when it is not there). Chat goes to
fixed_latency_answer_server.py (0.2 s a call, 512 slots, 10% of relevance ratings relevant, drawn
from a hash of the prompt: it reads no meaning, so which reports are selected says nothing about
answer quality here, only what a question costs); question embeddings to scale_server.py, the
endpoint the embed stage used. Each question is asked once per budget (0: none, then each of
BUDGETS), each budget with a fresh response cache; per question: seconds, LLM calls, reports
rated and left unrated, rounds, reports mapped, map calls and the document share under them.

Writes tests/benchmarks/results/global_budget.json.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import time

import pytest

from tests.support import scale_server
from tests.support.child_server import ChildServer
from tests.benchmarks.test_scale import ROOT, embedding_overrides
from tests.conftest import REPO

pytestmark = [pytest.mark.slow]

HERE = REPO / "tests" / "benchmarks"
SUPPORT = REPO / "tests" / "support"
RESULTS = HERE / "results" / "global_budget.json"
RUN = os.environ.get("CORPUSGRAPH_BENCH_BUDGET_RUN", "run-100000")
BUDGETS = [0, 500, 200]
QUESTIONS = ["What are the main themes across these documents?",
             "What recurring problems do the organisations face?",
             "Which partnerships come up most often?"]
LATENCY_S, RELEVANT_SHARE = 0.2, 0.1


def test_global_questions_at_each_rating_budget(tmp_path):
    from corpusgraph.config import load_config
    from corpusgraph.query.open import open_query_engine

    root = ROOT / RUN
    if not (root / "idx" / "community_report.faiss").is_file():
        pytest.skip(f"no index at {root}: build it first with make bench-scale")
    corpus = root.parent / RUN.removesuffix("-exact").replace("run-", "corpus-", 1)
    rows, reports = [], None
    with scale_server.running(corpus / "truth", "--dim", "64") as embed_server, \
            ChildServer(SUPPORT / "fixed_latency_answer_server.py", "--slots", "512", "--latency-s", str(LATENCY_S),
                        "--relevant-share", str(RELEVANT_SHARE)) as llm:
        for budget in BUDGETS:
            sets = {"storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
                    "storage.cache_dir": str(tmp_path / f"cache-{budget}"), "llm.backend": "openai",
                    "llm.api_base": llm.base_url, "llm.model": "bench", "llm.concurrency": "64",
                    "query.global.dynamic_max_rated": str(budget), **embedding_overrides(embed_server.base_url)}
            engine = open_query_engine(load_config(REPO / "conf" / "local.yaml", sets), None)
            reports = len(engine.store.reports)
            for question in QUESTIONS:
                t0 = time.perf_counter()
                answer = engine.ask(question, method="global")
                seconds = time.perf_counter() - t0
                cov, sel = answer.coverage, answer.coverage["selection"]
                rows.append({"max_rated": budget, "question": question, "seconds": round(seconds, 2),
                             "llm_calls": answer.llm_calls, "rated": sel["rated"], "unrated": sel["unrated"],
                             "rounds": sel["rounds"], "rating_order": sel["rating_order"],
                             "reports_mapped": cov["reports_mapped"], "map_calls": cov["map_calls"],
                             "document_share": cov["document_share"], "error": answer.error})
                print(json.dumps(rows[-1]), flush=True)
    RESULTS.write_text(json.dumps({
        "index": f"work/scale/{RUN} (make bench-scale: pipeline, scripted LLM and embeddings)",
        "reports": reports, "questions": rows,
        "llm": f"fixed_latency_answer_server.py, {LATENCY_S} s a call, 512 slots, {RELEVANT_SHARE:.0%} of relevance "
               "ratings relevant (a hash of the prompt)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }, indent=2) + "\n")
    for row in rows:
        assert row["error"] is None, row
        if row["max_rated"]:
            assert row["rated"] <= row["max_rated"], row
