"""Coverage benchmarks (issue 16): what a restricted key's global search can reach, before and
after per-domain reports, and the dynamic global latency figure.

1. restricted_document_coverage: the synthetic corpus of the scale benchmark (synthetic_corpus.py,
   CORPUSGRAPH_BENCH_COVERAGE_DOCS documents, default 500, seed 0; each document in one of four
   access domains) is indexed by the real pipeline (Spark local[2], Delta, Ray) through reports
   with reports.per_domain on, against the scripted scale server. Then for each domain, the view
   of a key bound to it alone: the share of its documents under at least one report it can map
   (query/coverage.mappable_document_share), with the per-domain reports ("after") and without
   them ("before": the same index, its community_domain_reports left out, i.e. today's rule that
   hides a mixed community whole). The headline is the mean over the domains' keys.
2. dynamic_global_over_one_call: copied from results/query_latency.json
   (test_query_latency.py::test_global_latency measures it).
3. podcast (test_podcast_coverage_against_tokens): the cost dial of a global question. The 60
   episodes of ../shared/data/podcast are indexed by the real pipeline with the fast (spaCy)
   extraction, exact resolution and reports written by the scripted server (scripted_server.py:
   each report restates the entities and relationships of its context). Then every one of the 125
   questions is asked globally, once with dynamic selection (the default path) and once at each
   fixed level; for each: the share of episodes under the mapped reports (the answer's own
   coverage.document_share, counted from the index) and the tokens the answer cost (prompt and
   completion of every rating, map and reduce call, cl100k counts of the real prompts). The
   ratings and map answers come from the scripted server's lexical reader (lexical_query.py: a
   report rates by the question's content words it contains), not from a model: the curve shows
   what each setting reads and costs on this index, not how well a model would judge relevance.
   Writes coverage_tokens.svg beside the results (the chart in README).

    python -m pytest -m slow tests/benchmarks/test_coverage.py   # writes results/coverage.json
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time

import pytest

from tests.support import scale_server
from tests.support import scripted_server
from tests.support import synthetic_corpus
from tests.benchmarks.test_scale import config_for, start_spark
from tests.conftest import REPO, SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.spark]

RESULTS = REPO / "tests" / "benchmarks" / "results" / "coverage.json"
LATENCY = REPO / "tests" / "benchmarks" / "results" / "query_latency.json"
DOCS = int(os.environ.get("CORPUSGRAPH_BENCH_COVERAGE_DOCS", "500"))
ROOT = REPO / "work" / "coverage"
STAGES = ["ingest", "chunk", "extract", "resolve", "communities", "reports"]
TARGET = 0.9
PODCAST = SHARED_DATA / "podcast"
CHART = RESULTS.with_name("coverage_tokens.svg")
EPISODES = int(os.environ.get("CORPUSGRAPH_BENCH_COVERAGE_EPISODES", "60"))
PODCAST_STAGES = ["ingest", "chunk", "extract", "resolve", "communities", "reports", "embed"]


def write_results(part: dict) -> dict:
    """Merge `part` into coverage.json: each test rewrites only its own keys."""
    out = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    out.update(part)
    out["date"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    return out


def build(n: int) -> tuple[str, str, dict]:
    """Index the corpus of n documents through reports with per-domain reports; (wh, idx, stage rows)."""
    import ray

    from corpusgraph.runner.pipeline import run_index
    from corpusgraph.runner.run import RunContext

    corpus = ROOT.parent / "scale" / f"corpus-{n}"
    synthetic_corpus.ensure(corpus, n, 0)
    run_dir = ROOT / f"run-{n}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    with scale_server.running(corpus / "truth", "--chat-latency-s", "0", "--chat-slots", "64", "--dim", "64",
                              "--adjudicate", "oracle") as server:
        cfg, _ = config_for(n, corpus, run_dir, server.base_url)
        cfg.reports.per_domain = True
        spark = start_spark(cfg, run_dir)
        try:
            results = run_index(RunContext(cfg, spark), STAGES)
        finally:
            spark.stop()
            ray.shutdown()
    rows = {name: dict(r.rows) for name, r in results.items()}
    return cfg.storage.warehouse, cfg.storage.index_dir, rows


def name_leaks(store) -> tuple[int, int, list]:
    """Entity names in per-domain reports that no unit of that domain contains (whole words):
    (names checked, not in the domain's text, a few examples). The scripted server writes reports
    from the prompt, so a name there that the domain never wrote came through the context."""
    import re

    titles = {f.lower() for e in store.entities.values() for f in [e.get("title")] + list(e.get("aliases") or [])
              if f and len(f) > 5}
    by_domain: dict[str, str] = {}
    for u, row in store.units.items():
        d = store.unit_domain.get(u)
        by_domain[d] = by_domain.get(d, "") + "\n" + row["text"].lower()
    checked, leaks = 0, []
    for (cid, d), rep in store.domain_reports.items():
        text = " ".join([rep.get("title") or "", rep.get("summary") or ""] + [
            f"{f.get('summary') or ''} {f.get('explanation') or ''}" for f in rep.get("findings") or []]).lower()
        for name in titles:
            pattern = r"(?<!\w)" + re.escape(name) + r"(?!\w)"
            if re.search(pattern, text):
                checked += 1
                if not re.search(pattern, by_domain.get(d, "")):
                    leaks.append((cid, d, name))
    return checked, len(leaks), leaks[:5]


def measure(wh: str, idx: str) -> dict:
    from corpusgraph.query.access import restrict
    from corpusgraph.query.coverage import mappable_document_share
    from corpusgraph.query.store import IndexStore

    after = IndexStore(wh, idx, load_vectors=False)
    before = IndexStore(wh, idx, load_vectors=False)
    before.domain_reports = {}  # the same index without its per-domain reports: today's rule
    domains = sorted({d.get("access_domain") for d in after.docs.values()})
    mixed = sum(1 for c in after.communities.values()
                if len({after.unit_domain.get(u) for u in c.get("unit_ids") or ()}) > 1)
    per_key = {}
    for d in domains:
        b, a = restrict(before, {d}), restrict(after, {d})
        per_key[d] = {"documents": len(a.docs), "before": mappable_document_share(b),
                      "after": mappable_document_share(a), "reports_before": len(b.reports),
                      "reports_after": len(a.reports)}
    return {
        "before": round(sum(k["before"] for k in per_key.values()) / len(per_key), 4),
        "after": round(sum(k["after"] for k in per_key.values()) / len(per_key), 4),
        "per_key": per_key,
        "communities": len(after.communities),
        "communities_mixing_domains": mixed,
        "reports": len(after.reports),
        "domain_reports": len(after.domain_reports),
        "unrestricted": mappable_document_share(after),
        "names_in_domain_reports": dict(zip(("checked", "not_in_the_domains_text", "examples"), name_leaks(after))),
    }


def test_restricted_document_coverage():
    t0 = time.perf_counter()
    if os.environ.get("CORPUSGRAPH_BENCH_COVERAGE_REUSE") == "1":  # measure the last build again
        run = ROOT / f"run-{DOCS}"
        wh, idx = str(run / "wh"), str(run / "idx")
        old = json.loads(RESULTS.read_text())["restricted_document_coverage_detail"]
        rows, build_s = old.get("reports_stage_rows"), old.get("build_s")
    else:
        wh, idx, rows = build(DOCS)
        build_s = time.perf_counter() - t0
    figures = measure(wh, idx)
    latency = json.loads(LATENCY.read_text()) if LATENCY.exists() else {}
    out = {
        "restricted_document_coverage": {"before": figures["before"], "after": figures["after"]},
        "dynamic_global_over_one_call": latency.get("global_dynamic_over_one_call"),
        "restricted_document_coverage_detail": {
            **figures, "corpus": f"synthetic_corpus.py, {DOCS} documents, seed 0 (scale benchmark's corpus)",
            "measure": "per domain key: share of its documents under at least one report its view can map, any "
                       "level; before = the same index without community_domain_reports",
            "reports_stage_rows": rows.get("reports") if "reports" in (rows or {}) else rows,
            "build_s": round(build_s, 1),
        },
        "load_average_1m_after": round(os.getloadavg()[0], 1),
    }
    write_results(out)
    assert figures["domain_reports"] > 0 and figures["after"] >= figures["before"]
    assert figures["after"] >= TARGET, figures
    assert figures["names_in_domain_reports"]["not_in_the_domains_text"] == 0, figures["names_in_domain_reports"]


# -- podcast: episode coverage against tokens, per selection ------------------------------------


def podcast_config(base_url: str):
    """The podcast index's config: the retrieval benchmark's (fast extraction, exact resolution),
    reports from the scripted server at `base_url`, storage under work/coverage/podcast-<n>."""
    from tests.benchmarks.test_retrieval import config_for as retrieval_config
    from tests.benchmarks.test_retrieval import first_rows_file

    folder = ROOT / f"podcast-{EPISODES}"
    docs = folder / "docs.jsonl"
    first_rows_file(PODCAST / "docs.jsonl", EPISODES, docs)
    cfg = retrieval_config("podcast", folder, docs=docs, overrides={
        "llm.backend": "openai", "llm.api_base": base_url, "llm.model": "scripted", "llm.concurrency": "16"})
    return cfg, folder, docs


def build_podcast(spark, cfg, folder, docs) -> dict:
    """Run the stages unless a build with the same config (the endpoint's port aside) and the
    same episodes is there; returns seconds per stage of the build that made the index."""
    import hashlib

    from corpusgraph.runner.pipeline import run_index
    from corpusgraph.runner.run import RunContext

    index_config = cfg.model_dump(mode="json", exclude={"query": True, "serve": True,
                                                        "llm": {"api_key", "api_base", "api_bases"}})
    key = {"config": hashlib.sha256(json.dumps(index_config, sort_keys=True).encode()).hexdigest()[:16],
           "docs": hashlib.sha256(docs.read_bytes()).hexdigest()[:16]}
    marker = folder / "built.json"
    if marker.is_file() and json.loads(marker.read_text()).get("key") == key:
        return json.loads(marker.read_text())["stage_seconds"]
    results = run_index(RunContext(cfg, spark), PODCAST_STAGES)
    seconds = {stage: round(r.seconds, 1) for stage, r in results.items()}
    marker.write_text(json.dumps({"key": key, "stage_seconds": seconds}))
    return seconds


def level_documents(store, level: int) -> float:
    """Share of the index's episodes under the communities of `level` that have a report,
    counted here from the tables (communities' units -> units' documents), not by the engine."""
    units = set()
    for cid, rep in store.reports.items():
        if rep["level"] == level:
            com = store.communities[cid]
            units |= set(com.get("unit_ids") or [u for e in com.get("entity_ids") or ()
                                                  for u in store.entities[e].get("unit_ids") or ()])
    docs = {store.units[u]["doc_id"] for u in units if u in store.units}
    return len(docs) / len(store.docs)


def ask_all(engine, questions: list[dict], level: int | None) -> list[dict]:
    rows = []
    for q in questions:
        a = engine.ask(q["question"], method="global", level=level)
        cov = a.coverage
        rows.append({"id": q["id"], "episode_coverage": cov["document_share"], "tokens": a.tokens_in + a.tokens_out,
                     "llm_calls": a.llm_calls, "reports_mapped": cov["reports_mapped"], "error": a.error,
                     "cited_episodes": len({c.doc_id for c in a.citations}), "selection": cov.get("selection"),
                     "levels": [b["level"] for b in cov["by_level"]]})
    return rows


def _mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows) if rows else 0.0


def summarise(rows: list[dict]) -> dict:
    covs = sorted(r["episode_coverage"] for r in rows)
    return {"episode_coverage": round(_mean(rows, "episode_coverage"), 4), "tokens": round(_mean(rows, "tokens")),
            "llm_calls": round(_mean(rows, "llm_calls"), 1), "reports_mapped": round(_mean(rows, "reports_mapped"), 1),
            "cited_episodes": round(_mean(rows, "cited_episodes"), 2),
            "episode_coverage_min": covs[0], "episode_coverage_median": covs[len(covs) // 2],
            "episode_coverage_max": covs[-1], "errors": sum(1 for r in rows if r["error"])}


def coverage_chart(dynamic: dict, dynamic_rows: list[dict], levels: list[dict], episodes: int) -> str:
    """An SVG: mean episode coverage against mean tokens per question, one point per fixed level
    joined in level order, the dynamic path's mean as a diamond and each question's dynamic
    answer as a small grey dot."""
    w, h, left, bottom, top, right = 640, 400, 70, 50, 40, 30
    xmax = max([r["tokens"] for r in dynamic_rows] + [lv["tokens"] for lv in levels]) * 1.08 or 1

    def x(t): return left + (w - left - right) * t / xmax
    def y(c): return h - bottom - (h - bottom - top) * c
    parts = [f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="14">Global search on {episodes} podcast '
             f'episodes: episode coverage against tokens per question</text>',
             f'<line x1="{left}" y1="{y(0)}" x2="{w - right}" y2="{y(0)}" stroke="#333"/>',
             f'<line x1="{left}" y1="{y(0)}" x2="{left}" y2="{y(1)}" stroke="#333"/>',
             f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">tokens per question (rating + map + reduce)</text>',
             f'<text x="18" y="{h / 2}" text-anchor="middle" transform="rotate(-90 18 {h / 2})">share of episodes '
             'under mapped reports</text>']
    for c in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{left - 8}" y="{y(c) + 4}" text-anchor="end">{c:.2f}</text>'
                     f'<line x1="{left}" y1="{y(c)}" x2="{w - right}" y2="{y(c)}" stroke="#eee"/>')
    for i in range(5):
        t = xmax * i / 4
        parts.append(f'<text x="{x(t)}" y="{y(0) + 18}" text-anchor="middle">{t / 1000:.0f}k</text>')
    for r in dynamic_rows:
        parts.append(f'<circle cx="{x(r["tokens"]):.1f}" cy="{y(r["episode_coverage"]):.1f}" r="2.5" fill="#bbb"/>')
    path = " ".join(f'{"M" if i == 0 else "L"}{x(lv["tokens"]):.1f},{y(lv["episode_coverage"]):.1f}'
                    for i, lv in enumerate(levels))
    parts.append(f'<path d="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for lv in levels:
        cx, cy = x(lv["tokens"]), y(lv["episode_coverage"])
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="#1f77b4"/>'
                     f'<text x="{cx + 8:.1f}" y="{cy - 8:.1f}">level {lv["level"]}</text>')
    dx, dy = x(dynamic["tokens"]), y(dynamic["episode_coverage"])
    parts.append(f'<path d="M{dx:.1f},{dy - 8:.1f} L{dx + 8:.1f},{dy:.1f} L{dx:.1f},{dy + 8:.1f} L{dx - 8:.1f},{dy:.1f} Z" '
                 f'fill="#d62728"/><text x="{dx + 10:.1f}" y="{dy + 16:.1f}" fill="#d62728">dynamic (mean; grey: '
                 'each question)</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
            f'font-size="12">\n' + "\n".join(parts) + "\n</svg>\n")


@pytest.mark.skipif(not (PODCAST / "questions.jsonl").is_file(), reason=f"podcast data not found under {PODCAST}")
def test_podcast_coverage_against_tokens(spark):
    from corpusgraph.query.open import open_query_engine
    from tests.benchmarks.test_retrieval import _read_jsonl

    questions = _read_jsonl(PODCAST / "questions.jsonl")
    t0 = time.perf_counter()
    with scripted_server.running("--lexical-query") as base_url:
        cfg, folder, docs = podcast_config(base_url)
        stage_seconds = build_podcast(spark, cfg, folder, docs)
        engine = open_query_engine(cfg, base_url)
        store = engine.store
        levels = sorted(store.report_levels())
        t1 = time.perf_counter()
        dynamic_rows = ask_all(engine, questions, None)
        level_rows = {lvl: ask_all(engine, questions, lvl) for lvl in levels}
        query_s = time.perf_counter() - t1
    dynamic = summarise(dynamic_rows)
    per_level = [{"level": lvl, "reports": sum(1 for r in store.reports.values() if r["level"] == lvl),
                  **summarise(rows)} for lvl, rows in level_rows.items()]
    selections = [r["selection"] or {} for r in dynamic_rows]
    part = {"podcast": {
        "dynamic": {**dynamic, "threshold": cfg.query.global_.dynamic_threshold,
                    "rated": round(sum(s.get("rated", 0) for s in selections) / len(selections), 1),
                    "pruned": round(sum(s.get("pruned", 0) for s in selections) / len(selections), 1),
                    "descended": round(sum(s.get("descended", 0) for s in selections) / len(selections), 1),
                    "fallback_to_level": sum(1 for s in selections if s.get("fallback"))},
        "levels": per_level,
        "questions": len(questions), "episodes": len(store.docs),
        "index": {"text_units": len(store.units), "entities": len(store.entities),
                  "communities": len(store.communities), "reports": len(store.reports),
                  "stage_seconds": stage_seconds},
        "measure": "mean over the questions of one global answer each: episode_coverage = the answer's "
                   "coverage.document_share (episodes under the mapped reports / episodes in the index); tokens = "
                   "prompt + completion tokens of every call the answer made (cl100k counts of the real prompts)",
        "model": "index: fast (spaCy) extraction, exact resolution, reports by scripted_server.py; query: "
                 "ratings and map answers by lexical_query.py (the question's content words in the report), "
                 "not a model",
        "per_question_dynamic": [{k: r[k] for k in ("id", "episode_coverage", "tokens", "reports_mapped")}
                                 for r in dynamic_rows],
        "query_s": round(query_s, 1), "total_s": round(time.perf_counter() - t0, 1),
        "load_average_1m_after": round(os.getloadavg()[0], 1),
    }}
    write_results(part)
    CHART.write_text(coverage_chart(dynamic, dynamic_rows, per_level, len(store.docs)))

    assert len(store.docs) == EPISODES and levels, (len(store.docs), levels)
    for lvl, rows in level_rows.items():  # the engine's figure, against the tables counted here
        expected = round(level_documents(store, lvl), 4)
        assert all(r["episode_coverage"] == expected for r in rows), (lvl, expected, rows[:3])
        assert all(r["levels"] == [lvl] and r["error"] is None for r in rows)
    assert all(0.0 <= r["episode_coverage"] <= 1.0 and r["tokens"] > 0 for r in dynamic_rows)
    assert all((r["selection"] or {}).get("rated", 0) > 0 for r in dynamic_rows)
