"""CPU an LLM actor spends turning answers into Arrow rows, per answer (issue 13's per-call cost).

The extraction actor (passes.llm._LLMWorker) used to make a one-row Arrow table for each answer as
it came and concatenate them when a shard was written; it now keeps the answered rows as dicts and
builds one table per shard. Both ways are timed here on real extraction answers: a seeded synthetic
corpus (synthetic_corpus.py), packed and prompted by the product's PackTask, answered by the
scripted scale server's own answer function (scale_server.answer_for) from the corpus's truth,
then parsed by PackTask.outputs (timed too, as the reference: work both ways must do).

Measured: CPU seconds (time.process_time) per answer for each way, in shards of 32 answers (the
pipeline's llm.concurrency), alternating the ways ROUNDS times; the ratio is old / new. Writes
tests/benchmarks/results/actor_rows.json.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import time

import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from corpusgraph.config import ExtractSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.llm.openai_http import request_body
from corpusgraph.runner.passes.llm import _LLMWorker, output_schema
from corpusgraph.stages.extract.llm import PackTask, extract_identity
from tests.support import scale_server
from tests.support import synthetic_corpus
from tests.conftest import REPO

pytestmark = pytest.mark.slow

RESULTS = REPO / "tests" / "benchmarks" / "results" / "actor_rows.json"
DOCS, UNITS_PER_PACK, SHARD, ROUNDS = 2000, 4, 32, 5


def _answers(tmp_path):
    corpus = tmp_path / "corpus"
    synthetic_corpus.ensure(corpus, DOCS, 0)
    docs = pads.dataset(corpus / "parquet", format="parquet").to_table(columns=["id", "text"]).to_pylist()
    lex = scale_server.Lexicon(corpus / "truth")
    # the limits the results were measured with (the defaults are now sized for real models)
    section = ExtractSection(units_per_call=6, pack_tokens=1000, max_tokens=400, max_entities=5, max_relationships=5)
    prompts, prompt_hash, model = extract_identity(section, lambda p: REPO / "conf" / p, "scripted-scale")
    task = PackTask(section, prompts, prompt_hash, model, "run", 0.0)
    units = [{"unit_id": d["id"], "text": d["text"][:2000], "n_tokens": len(d["text"][:2000]) // 4, "prior": None}
             for d in docs]
    packs = [{"pack_id": f"p{i}", "units": units[i:i + UNITS_PER_PACK]} for i in range(0, len(units), UNITS_PER_PACK)]
    results = []
    for req in task.requests(packs):
        _, obj = scale_server.answer_for(lex, request_body("scripted-scale", req))
        text = obj if isinstance(obj, str) else json.dumps(obj)
        results.append(ChatResult(req.id, text, tokens_in=1500, tokens_out=len(text) // 4, seconds=0.01))
    return task, packs, results


def _worker(task) -> _LLMWorker:
    """The actor's row-building methods without its model client (nothing here calls a model)."""
    w = _LLMWorker.__new__(_LLMWorker)
    w.task, w.batch = task, False
    w.schema = output_schema(task)
    return w


def test_actor_rows_cpu(tmp_path):
    task, packs, results = _answers(tmp_path)
    w = _worker(task)
    shards = [(packs[i:i + SHARD], results[i:i + SHARD]) for i in range(0, len(packs), SHARD)]

    def parse_only():
        for ps, rs in shards:
            for p, r in zip(ps, rs):
                w.output_rows([p], [r])

    def per_answer_tables():  # before: a one-row table per answer, concatenated per shard
        for ps, rs in shards:
            pa.concat_tables([w.table([p], [r]) for p, r in zip(ps, rs)])

    def per_shard_table():  # now: rows kept as dicts, one table per shard
        for ps, rs in shards:
            rows = [row for p, r in zip(ps, rs) for row in w.output_rows([p], [r])]
            pa.Table.from_pylist(rows, schema=w.schema)

    ways = {"parse_only": parse_only, "per_answer_tables": per_answer_tables, "per_shard_table": per_shard_table}
    ms: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(ROUNDS):
        for name, fn in ways.items():
            t0 = time.process_time()
            fn()
            ms[name].append((time.process_time() - t0) / len(packs) * 1e3)
    med = {k: statistics.median(v) for k, v in ms.items()}
    # Both ways give the same shard from the same rows.
    ps, rs = shards[0]
    rows = [row for p, r in zip(ps, rs) for row in w.output_rows([p], [r])]
    one_by_one = pa.concat_tables([pa.Table.from_pylist([row], schema=w.schema) for row in rows])
    assert one_by_one.equals(pa.Table.from_pylist(rows, schema=w.schema)) and one_by_one.num_rows == len(ps)
    out = {
        "answers": len(packs), "units_per_answer": UNITS_PER_PACK, "answers_per_shard": SHARD, "rounds": ROUNDS,
        "cpu_ms_per_answer": ms, "median_cpu_ms_per_answer": med,
        "arrow_ms_per_answer_old": med["per_answer_tables"] - med["parse_only"],
        "arrow_ms_per_answer_new": med["per_shard_table"] - med["parse_only"],
        "old_over_new": med["per_answer_tables"] / med["per_shard_table"],
        "loadavg": os.getloadavg(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": dt.date.today().isoformat(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(med), flush=True)
