"""Local retrieval with the bundled model's extraction (issue 4's `llm` rows), beside the fast
method on the same paragraphs, in the same run.

LLM extraction of both dev corpora (2,884 paragraphs) with the bundled SmolLM2-135M costs about
14 s a paragraph on this 2-core machine (extraction_tokens.json: 332 model-seconds for 24
paragraphs): some 11 hours. This benchmark indexes a prefix of each corpus instead, the first
PREFIX[name] paragraphs of docs.jsonl (CORPUSGRAPH_RL_DOCS_MUSIQUE100, _HOTPOTQA100), and scores
the dev questions whose evidence paragraphs all lie inside it (a question's paragraphs sit
together in docs.jsonl, but the dev questions are interleaved with others, so a prefix holds
fewer of them than its share). Both indexes of a prefix go through the product with
test_retrieval.py's `build_index` and the same config but `extract.method`:

- llm: the embedded default's extraction (prompts, schema, gleaning, one unit per call), the
  bundled model started by the pipeline as `corpusgraph index` starts it;
- fast: spaCy named entities and co-occurrence, no LLM.

Resolution is exact-name in both (the similarity method's adjudication band would call the model
too, and this row is about extraction); neither has community reports. Both are ranked by the
same query code with the same question vectors (`measure`). A prefix has fewer distractors than
the whole corpus, so its recall is higher: the rows compare the two methods with each other, not
with retrieval.json. The llm index's extraction rows are counted from its `extractions` table
(status, entities, tokens).

    CORPUSGRAPH_RL_DOCS_MUSIQUE100=200 CORPUSGRAPH_RL_DOCS_HOTPOTQA100=100 \\
        .venv/bin/pytest tests/benchmarks/test_retrieval_llm.py -m slow -s -p no:cacheprovider
"""

from __future__ import annotations

import json
import os
import platform
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.benchmarks.test_retrieval import DATASETS, _read_jsonl, build_index, first_rows_file, measure
from tests.conftest import REPO, SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.ray, pytest.mark.llm]

PREFIX = {name: int(os.environ.get(f"CORPUSGRAPH_RL_DOCS_{name.upper()}", default))
          for name, default in (("musique100", 200), ("hotpotqa100", 100), ("lihua", 40))}
# The corpora to (re)measure; the others keep their rows in the results file. Each costs 10-60
# minutes of CPU the first time (the LLM cache then makes a rerun cheap).
RUN = [n for n in os.environ.get("CORPUSGRAPH_RL_DATASETS", ",".join(DATASETS)).split(",") if n]
CACHE = REPO / "work" / "bench-cache" / "retrieval-llm"
RESULTS = REPO / "tests" / "benchmarks" / "results" / "retrieval_llm.json"
METHODS = ("llm", "fast")


def prefix_corpus(name: str, n: int) -> tuple[Path, list[dict], list[dict]]:
    """The first `n` paragraphs of the corpus written as a jsonl input, with those paragraphs and
    the dev questions whose evidence lies entirely inside them."""
    if n < 1:
        raise ValueError(f"a prefix needs at least one paragraph, got {n}")
    path = CACHE / name / f"docs-first-{n}.jsonl"
    docs = first_rows_file(SHARED_DATA / name / "docs.jsonl", n, path)
    inside = {d["id"] for d in docs}
    # Unanswerable questions (no evidence) are left out: recall is undefined for them.
    questions = [q for q in _read_jsonl(SHARED_DATA / name / "dev.jsonl")
                 if q["evidence_doc_ids"] and set(q["evidence_doc_ids"]) <= inside]
    return path, docs, questions


def extraction_counts(spark, cfg) -> dict:
    """What the extract stage recorded: rows by status, mentions found, LLM tokens."""
    from corpusgraph.tables import table_path

    rows = spark.read.format("delta").load(table_path(cfg.storage.warehouse, "extractions")).select(
        "status", "entities", "relationships", "tokens_in", "tokens_out", "gleanings").collect()
    return {
        "rows": len(rows),
        "rows_by_status": dict(Counter(r["status"] for r in rows)),
        "rows_with_an_entity": sum(1 for r in rows if r["entities"]),
        "entity_mentions": sum(len(r["entities"] or ()) for r in rows),
        "relationship_mentions": sum(len(r["relationships"] or ()) for r in rows),
        "gleaning_rounds": sum(r["gleanings"] or 0 for r in rows),
        "tokens_in": sum(r["tokens_in"] or 0 for r in rows),
        "tokens_out": sum(r["tokens_out"] or 0 for r in rows),
    }


@pytest.mark.skipif(not all((SHARED_DATA / n / "dev.jsonl").is_file() for n in DATASETS),
                    reason=f"eval data not found under {SHARED_DATA} ({', '.join(DATASETS)})")
def test_local_retrieval_with_the_bundled_models_extraction(spark):
    from corpusgraph.llm.minilm import MiniLMEmbedder
    from corpusgraph.llm.server import MODEL_FILE

    embedder = MiniLMEmbedder()
    unknown = set(RUN) - set(DATASETS)
    assert not unknown, f"CORPUSGRAPH_RL_DATASETS names corpora this benchmark does not have: {sorted(unknown)}"
    report: dict = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    for name in RUN:
        path, docs, questions = prefix_corpus(name, PREFIX[name])
        assert questions, f"no dev question of {name} has all its evidence in the first {PREFIX[name]} paragraphs"
        rows = {}
        for method in METHODS:
            # One LLM cache per corpus: a longer prefix pays only for the paragraphs a shorter one had not.
            cfg, seconds = build_index(spark, name, folder=CACHE / name / f"first-{PREFIX[name]}-{method}", docs=path,
                                       overrides={"extract.method": method, "storage.cache_dir": str(CACHE / name / "cache")})
            row = measure(name, cfg, embedder, docs=docs, questions=questions, check_steps=False)
            row["index_stage_seconds"] = seconds
            if method == "llm":
                row["extraction"] = extraction_counts(spark, cfg)
            rows[method] = row
            print(name, method, json.dumps(row, indent=1), flush=True)
        report[name] = {"paragraphs": len(docs), "questions": len(questions), "prefix_of": "docs.jsonl",
                        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), **rows}
    report["model"] = f"{MODEL_FILE} (bundled, llama.cpp on CPU)"
    report["machine"] = f"{platform.machine()}, {platform.system()}, {os.cpu_count()} cores (shared)"
    report["date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    report["measured_now"] = RUN
    report["note"] = ("A prefix of each corpus (see paragraphs), the dev questions whose evidence lies in it; llm = "
                      "the embedded default's extraction with the bundled model, fast = spaCy; exact-name "
                      "resolution and no reports in both. Compare the two methods with each other, not with "
                      "retrieval.json (fewer distractors here).")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    for name in RUN:
        llm = report[name]["llm"]
        # The measurement is whole: every unit extracted by the model left a row, none crashed the stage.
        assert llm["extraction"]["rows"] == llm["text_units"], name
        assert llm["method"] == "llm" and report[name]["fast"]["method"] == "fast", name
