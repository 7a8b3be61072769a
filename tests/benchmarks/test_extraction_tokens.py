"""Tokens are the bill: LLM tokens per 1,000 corpus tokens, corpusgraph's extract vs graphrag's (issue 4).

Both extract entities and relationships from the same MuSiQue paragraphs with the same model,
the bundled SmolLM2-135M behind llama.cpp's OpenAI-compatible server, each through a counting
proxy (counting_proxy.py) that records the server's own usage figures for every call:
- corpusgraph: the product path, `run_index` with stages ingest, chunk, extract and the
  embedded-default config (conf/local.yaml) unchanged, its embedded server reached through the
  proxy; every extract setting is the default, so the figure follows whatever the product does.
- graphrag: the pinned graphrag 3.x in its own virtualenv (graphrag_side.py), default settings
  except concurrent_requests 1 (as ours, llm.concurrency 1: the server answers one request at a
  time), only its extraction workflows, its chat model pointed at the proxy.
Each side gets a freshly started model server and an empty response cache, so every call is paid.

Target (issue 4): ours_tokens_per_1k at most a third of graphrag_tokens_per_1k. Corpus tokens are
the paragraphs' texts counted with cl100k (corpusgraph.tokens). On a shared 2-core machine the
model takes seconds to tens of seconds a call, so the corpus is the first CG_TOK_MUSIQUE_DOCS
paragraphs (default 8: the whole test took 8 minutes here on 29 Nov 2026, ours 4 min with Spark
and Ray start-up, graphrag 3.5 min; the committed results are from CG_TOK_MUSIQUE_DOCS=24 with
CG_TOK_GRAPHRAG_TIMEOUT_S=1200, 16 minutes on 30 Nov 2026) and graphrag is stopped after CG_TOK_GRAPHRAG_TIMEOUT_S
(default 480): graphrag sets no max_tokens, so a small model's answer can run until the context
is full. What graphrag did (completed, aborted and why, or stopped) is recorded, never hidden.
When it was stopped, both figures are taken over the paragraphs graphrag finished (the proxy
records which paragraph each call was about); the whole-corpus figures stay in the detail.

Parseability: ours, the extraction rows with status ok (the rest are parse or LLM errors);
graphrag, the answers from which its record format yields at least one entity or relationship
record (graphrag_side.parseable_records).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import time
from collections import Counter
from pathlib import Path

import pytest

from corpusgraph.config import load_config
from corpusgraph.llm.server import EmbeddedServer, find_bundled_gguf
from corpusgraph.tokens import count_tokens
from tests.support import graphrag_side
from tests.support.child_server import ChildServer
from tests.conftest import REPO, SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.llm, pytest.mark.spark, pytest.mark.ray]

HERE = Path(__file__).resolve().parent
SUPPORT = Path(__file__).resolve().parents[1] / "support"
RESULTS = HERE / "results" / "extraction_tokens.json"
PROXY = SUPPORT / "counting_proxy.py"
MUSIQUE = SHARED_DATA / "musique100" / "docs.jsonl"
DOCS = int(os.environ.get("CG_TOK_MUSIQUE_DOCS", "8"))
GRAPHRAG_TIMEOUT_S = float(os.environ.get("CG_TOK_GRAPHRAG_TIMEOUT_S", "480"))
GRAPHRAG_CONCURRENCY = 1
TARGET_RATIO = 1 / 3


class CountingProxy(ChildServer):
    """counting_proxy.py in its own process, in front of `upstream`."""

    def __init__(self, upstream: str):
        super().__init__(PROXY, "--upstream", upstream)

    def calls(self) -> list[dict]:
        return self.get_json("/calls")


def paragraphs(n: int) -> list[dict]:
    lines = MUSIQUE.read_text(encoding="utf-8").splitlines()[:n]
    return [json.loads(line) for line in lines]


def summarise(calls: list[dict], corpus_tokens: int, units: int) -> dict:
    """Token totals of one side's calls, per 1,000 corpus tokens and per unit."""
    tin = sum(c["prompt_tokens"] for c in calls)
    tout = sum(c["completion_tokens"] for c in calls)
    return {
        "calls": len(calls), "calls_per_unit": round(len(calls) / units, 3),
        # Calls that opened a conversation (graphrag: one per unit it reached before any stop).
        "first_round_calls": sum(1 for c in calls if c["messages"] <= 2),
        "tokens_in": tin, "tokens_out": tout,
        "tokens_per_1k": round((tin + tout) * 1000 / corpus_tokens, 1) if corpus_tokens else None,
        "prompt_tokens_per_unit": round(tin / units, 1) if units else None,
        "failed_calls": sum(1 for c in calls if c["status"] >= 400),
        "answers_cut_at_max_tokens": sum(1 for c in calls if c["finish_reason"] == "length"),
        "longest_answer_tokens": max((c["completion_tokens"] for c in calls), default=0),
        "model_seconds": round(sum(c["seconds"] for c in calls), 1),
    }


def unit_of(call: dict, docs: list[dict]) -> int | None:
    """Index of the paragraph a call was about: the one whose text opens inside the call's
    first user message (None when no paragraph, or several, do)."""
    text = " ".join((call.get("first_user") or "").split())
    heads = [" ".join(d["text"].split())[:120] for d in docs]
    hits = [i for i, head in enumerate(heads) if head and head in text]
    return hits[0] if len(hits) == 1 else None


def graphrag_units(calls: list[dict], docs: list[dict], max_gleanings: int = 1) -> dict:
    """graphrag's calls grouped by paragraph: which units it finished (its first call failed,
    or its max_gleanings gleaning calls came back), and how many answers it could parse."""
    by_unit: dict[int, list[dict]] = {}
    unmatched = 0
    for c in calls:
        i = unit_of(c, docs)
        if i is None:
            unmatched += 1
        else:
            by_unit.setdefault(i, []).append(c)
    finished = []
    for i, cs in sorted(by_unit.items()):
        opening = min(c["messages"] for c in cs)  # graphrag opens with one user message
        first = [c for c in cs if c["messages"] == opening]
        gleans = [c for c in cs if c["messages"] > opening]
        if (first and all(c["status"] >= 400 for c in first)) or len(gleans) >= max_gleanings:
            finished.append(i)
    answered = [c for c in calls if c["status"] < 400]
    records = [graphrag_side.parseable_records(c["answer"]) for c in answered]
    unit_entities = {i: sum(graphrag_side.parseable_records(c["answer"])[0] for c in cs if c["status"] < 400)
                     for i, cs in by_unit.items()}
    return {
        "units_reached": len(by_unit), "units_finished": finished, "calls_not_matched_to_a_unit": unmatched,
        "answers": len(answered),
        "answers_parseable": sum(1 for e, r in records if e or r),
        "entity_records_parseable": sum(e for e, _ in records),
        "relationship_records_parseable": sum(r for _, r in records),
        "units_with_a_parseable_entity": sum(1 for n in unit_entities.values() if n),
        "context_overflows": sum(1 for c in calls if c["status"] >= 400 and "context" in (c["error"] or "").lower()),
    }


def _model_description() -> str:
    cfg = load_config(REPO / "conf" / "local.yaml")
    return f"{find_bundled_gguf().name} (bundled '{cfg.llm.model}'), llama-cpp-python server, n_ctx {cfg.llm.n_ctx}"


def model_server(log: Path) -> EmbeddedServer:
    """A fresh bundled-model server with the embedded default's settings (conf/local.yaml)."""
    cfg = load_config(REPO / "conf" / "local.yaml")
    return EmbeddedServer(log, model_alias=cfg.llm.model, n_ctx=cfg.llm.n_ctx)


class _Proxied:
    """Stands where the run's ChatEndpoint keeps its embedded server: the same kind of server, started by
    this benchmark, reached through the counting proxy; stopping it is left to its owner."""

    def __init__(self, base_url: str):
        self.base_url = base_url

    def stop(self) -> None:
        pass


def run_ours(spark, root: Path, docs: list[dict]) -> dict:
    from corpusgraph.runner.pipeline import run_index
    from corpusgraph.runner.run import RunContext

    inputs = root / "in"
    inputs.mkdir(parents=True)
    (inputs / "musique.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    with model_server(root / "llm.log") as server:
        proxy = CountingProxy(server.base_url)
        try:
            # The embedded default unchanged (llm.backend embedded: llama.cpp's schema dialect),
            # except that the server it talks to is the one started above, behind the proxy.
            # (llm.backend openai would send OpenAI's json_schema response_format, which
            # llama-cpp-python's server rejects with a 422.)
            cfg = load_config(REPO / "conf" / "local.yaml", {
                "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
                "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{inputs}]",
            })
            assert cfg.llm.backend == "embedded"
            ctx = RunContext(cfg, spark)
            ctx.endpoint._server = _Proxied(proxy.base_url)  # what the run's ChatEndpoint hands the workers
            t0 = time.monotonic()
            run_index(ctx, ["ingest", "chunk", "extract"])
            wall = time.monotonic() - t0
            calls = proxy.calls()
        finally:
            proxy.stop()
    units = ctx.wh.read("text_units").count()
    rows = [r.asDict() for r in ctx.wh.read("extractions").select("status", "entities", "relationships").collect()]
    usage = ctx.results["extract"].usage
    # Completed: the stages returned (an exception would have ended the test) and every unit has
    # its extractions row.
    return {"units": units, "wall_s": round(wall, 1), "completed": len(rows) == units, "error": None,
            "extraction_rows": len(rows), "rows_ok": sum(1 for r in rows if r["status"] == "ok"),
            "rows_by_status": dict(sorted(Counter(r["status"] for r in rows).items())),
            "rows_ok_with_an_entity": sum(1 for r in rows if r["status"] == "ok" and r["entities"]),
            "entities_found": sum(len(r["entities"] or []) for r in rows),
            "relationships_found": sum(len(r["relationships"] or []) for r in rows),
            # The product's own `llm_calls` accounting, next to the server's figures above.
            "product_accounting": None if usage is None else {
                "calls": usage.calls, "tokens_in": usage.tokens_in, "tokens_out": usage.tokens_out,
                "cache_hits": usage.cache_hits, "errors": usage.errors},
            "calls_log": calls}


def run_graphrag(root: Path, docs: list[dict]) -> dict:
    with model_server(root / "llm.log") as server:
        proxy = CountingProxy(server.base_url)
        try:
            # One request in flight, as on our side (llm.concurrency 1): the server answers one at a
            # time anyway, so graphrag's 25 would only queue, time out and resend; and a stop at
            # the timeout then leaves whole units done (both of their calls) rather than none.
            graphrag_side.write_project(root / "project", ((d["title"], d["text"]) for d in docs), proxy.base_url,
                                        model=server.model, concurrent_requests=GRAPHRAG_CONCURRENCY)
            # llama.cpp serves no embeddings here, which graphrag's start-up check would call.
            run = graphrag_side.run_index(root / "project", timeout_s=GRAPHRAG_TIMEOUT_S, skip_validation=True)
            calls = proxy.calls()
        finally:
            proxy.stop()
    return {"units": run.text_units, "wall_s": round(run.wall_s, 1), "completed": run.completed,
            "error": run.error, "entities_found": run.entities, "relationships_found": run.relationships,
            "calls_log": calls}


@pytest.mark.skipif(not MUSIQUE.is_file(), reason=f"{MUSIQUE} is absent: this benchmark needs ../shared/data")
def test_extraction_tokens_against_graphrag(spark, tmp_path):
    graphrag_side.ensure_venv()
    docs = paragraphs(DOCS)
    MODEL_DESCRIPTION = _model_description()
    doc_tokens = [count_tokens(d["text"]) for d in docs]
    corpus_tokens = sum(doc_tokens)
    ours = run_ours(spark, tmp_path / "ours", docs)
    theirs = run_graphrag(tmp_path / "graphrag", docs)
    ours_s = summarise(ours["calls_log"], corpus_tokens, len(docs))
    theirs_s = summarise(theirs["calls_log"], corpus_tokens, len(docs))
    g_units = graphrag_units(theirs["calls_log"], docs)
    finished = g_units["units_finished"]
    # graphrag stopped at the timeout has paid for some units only: its figure is then taken over
    # the units it finished, and ours over the same units, so that like is set against like.
    # (Over the whole corpus, a stopped graphrag's total is only a lower bound.)
    all_finished = len(finished) == len(docs)
    fin_tokens = sum(doc_tokens[i] for i in finished)
    theirs_fin = summarise([c for c in theirs["calls_log"] if unit_of(c, docs) in set(finished)],
                           fin_tokens, len(finished)) if finished else None
    ours_fin = summarise([c for c in ours["calls_log"] if unit_of(c, docs) in set(finished)],
                         fin_tokens, len(finished)) if finished else None
    ours_unmatched = sum(1 for c in ours["calls_log"] if unit_of(c, docs) is None)
    if all_finished:
        basis = f"all {len(docs)} paragraphs"
        ours_1k, theirs_1k = ours_s["tokens_per_1k"], theirs_s["tokens_per_1k"]
    elif finished and ours_unmatched == 0:
        basis = (f"the {len(finished)} of {len(docs)} paragraphs graphrag finished before it stopped; "
                 f"ours over the same paragraphs (over all {len(docs)}: {ours_s['tokens_per_1k']})")
        ours_1k, theirs_1k = ours_fin["tokens_per_1k"], theirs_fin["tokens_per_1k"]
    else:
        basis = (f"all {len(docs)} paragraphs; graphrag finished {len(finished)} of them before it stopped, "
                 "so its figure is a lower bound")
        ours_1k, theirs_1k = ours_s["tokens_per_1k"], theirs_s["tokens_per_1k"]
    ratio = ours_1k / theirs_1k if theirs_1k else None
    for side in (ours, theirs):
        side.pop("calls_log")
    if theirs["completed"]:
        outcome = "completed"
    elif theirs["error"] and theirs["error"].startswith("timed out"):
        outcome = f"stopped at the timeout ({GRAPHRAG_TIMEOUT_S:g} s)"
    else:
        outcome = f"aborted: {theirs['error']}"
    result = {
        "corpus": "musique100",
        "ours_tokens_per_1k": ours_1k,
        "graphrag_tokens_per_1k": theirs_1k,
        "model": MODEL_DESCRIPTION,
        "ratio_ours_to_graphrag": None if ratio is None else round(ratio, 3),
        "target_ratio": round(TARGET_RATIO, 3),
        "tokens_per_1k_basis": basis,
        "subset": f"first {len(docs)} paragraphs of docs.jsonl (CG_TOK_MUSIQUE_DOCS)",
        "paragraphs": len(docs), "corpus_tokens_cl100k": corpus_tokens,
        "graphrag_outcome": outcome,
        "graphrag_completed": theirs["completed"],
        "graphrag_error": theirs["error"],
        "graphrag_units_finished": len(finished),
        "ours_completed": ours["completed"],
        "ours_units_with_parseable_answer": ours["rows_ok"],
        "ours_parse_failures": ours["extraction_rows"] - ours["rows_ok"],
        "graphrag_answers_parseable": f"{g_units['answers_parseable']} of {g_units['answers']}",
        "graphrag_units_with_a_parseable_entity": f"{g_units['units_with_a_parseable_entity']} of {len(docs)}",
        "ours": ours | ours_s | {"same_units_as_graphrag_finished": ours_fin, "calls_not_matched_to_a_unit": ours_unmatched},
        "graphrag": theirs | theirs_s | g_units | {
            "finished_units_only": theirs_fin, "version": graphrag_side.GRAPHRAG_VERSION,
            "timeout_s": GRAPHRAG_TIMEOUT_S,
            "settings": f"defaults (max_gleanings 1, no max_tokens) except concurrent_requests {GRAPHRAG_CONCURRENCY} "
                        "(graphrag's default 25 only queues at a one-request server); extraction workflows only"},
        "machine": f"{platform.platform()}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("ours", "graphrag")}, indent=2))
    # Behaviour: our extract answered every unit through the proxy; both sides' calls were counted.
    assert ours["units"] >= len(docs) and ours_s["calls"] >= 1 and ours_s["failed_calls"] == 0
    assert ours["completed"]
    assert theirs_s["calls"] >= 1
    # The target, checked after the figures are written so that a miss is still recorded.
    assert ratio is not None and ratio <= TARGET_RATIO, ratio
