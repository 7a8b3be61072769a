"""LLM extraction against the real bundled model: packed calls, gleaning, cut-off answers, and
the extract stage end to end on Spark + Ray. Short texts and small caps keep it quick."""

from __future__ import annotations

import json

import pytest

from corpusgraph.config import ExtractSection, LLMSection
from corpusgraph.llm import EmbeddedServer, open_chat_model
from corpusgraph.prompts import load_prompt
from corpusgraph.stages.extract import glean as G
from corpusgraph.stages.extract import llm as X
from corpusgraph.stages.extract import parse as P
from corpusgraph.tokens import count_tokens
from tests.conftest import REPO

pytestmark = pytest.mark.llm

# Each text names more things than max_entities allows, so the gleaning rule fires for all.
TEXTS = [
    "Giulia Sarti leads the Milan hub of Halvard & Quist. Brightwater Haulage and Fenmore Foods ship through Milan and Genoa.",
    "Marek Novak drove trailer R-77 from Valencia to Lyon for Contoso. Northwind Traders paid Contoso in Paris.",
    "The Port of Rotterdam signed a deal with Maersk. Hana Ito of Fabrikam met Tobias Berg in Antwerp and Hamburg.",
]
SEC = ExtractSection(entity_types=["PERSON", "ORGANIZATION", "LOCATION"], max_entities=2, max_relationships=1,
                     max_tokens=160, units_per_call=4, pack_tokens=500, glean_rounds=1)
PROMPTS = X.ExtractPrompts(load_prompt(REPO / "conf" / "prompts" / "extract.txt"),
                           load_prompt(REPO / "conf" / "prompts" / "extract_continue.txt"))


def _units():
    return [{"unit_id": f"u{i}", "text": t, "n_tokens": count_tokens(t), "prior": None} for i, t in enumerate(TEXTS)]


def test_one_packed_call_then_a_gleaning_round(tmp_path):
    with EmbeddedServer(log_path=tmp_path / "server.log") as server:
        chat = open_chat_model(LLMSection(backend="embedded"), tmp_path / "cache", base_url=server.base_url)
        packs = X.pack_rows(_units(), SEC)
        assert len(packs) == 1 and len(packs[0]) == 3
        first = X.PackTask(SEC, PROMPTS, "ph", "smollm2", "run", 0.0, 0)
        pack = [{"pack_id": X.pack_id([u["unit_id"] for u in packs[0]], 0), "units": packs[0]}]
        results = chat.complete(first.requests(pack))
        assert len(results) == 1 and results[0].error is None, results[0].error
        rows = first.outputs(pack, results)[0]["rows"]
        assert [r["unit_id"] for r in rows] == ["u0", "u1", "u2"]
        assert all(r["status"] == "ok" for r in rows), [(r["status"], r["error"], r["raw"]) for r in rows]
        assert sum(r["tokens_in"] for r in rows) == results[0].tokens_in > 0
        assert sum(r["tokens_out"] for r in rows) == results[0].tokens_out > 0
        assert sum(len(r["entities"]) for r in rows) > 0  # the constrained answer mapped back to its units
        for r in rows:
            assert all(e["type"] in SEC.entity_types for e in r["entities"])

        todo = [{**u, "prior": {k: r[k] for k in X.PRIOR_COLUMNS}} for u, r in zip(_units(), rows)
                if G.needs_gleaning(u["text"], r, SEC)]
        assert todo, "every text names more things than max_entities: the rule must ask for more"
        glean = X.PackTask(SEC, PROMPTS, "ph", "smollm2", "run", 0.0, 1)
        gpack = [{"pack_id": X.pack_id([u["unit_id"] for u in todo], 1), "units": todo}]
        gres = chat.complete(glean.requests(gpack))
        assert gres[0].error is None, gres[0].error
        for before, after in zip(todo, glean.outputs(gpack, gres)[0]["rows"]):
            prior = before["prior"]
            assert after["gleanings"] == 1 and after["status"] == "ok"
            assert after["tokens_in"] > prior["tokens_in"] and after["tokens_out"] > prior["tokens_out"]
            names = [e["name"] for e in after["entities"]]
            assert names[: len(prior["entities"])] == [e["name"] for e in prior["entities"]]  # nothing lost
            items = lambda row: len(row["entities"]) + len(row["relationships"])  # noqa: E731
            assert items(after) > items(prior) or G.GLEAN_STOP_NOTE in (after["error"] or "")


def test_answers_cut_at_max_tokens_become_rows_not_crashes(tmp_path):
    tight = SEC.model_copy(update={"max_tokens": 12})
    with EmbeddedServer(log_path=tmp_path / "server.log") as server:
        chat = open_chat_model(LLMSection(backend="embedded"), tmp_path / "cache", base_url=server.base_url)
        units = _units()
        reqs = [X.build_pack_request("p", [u["text"] for u in units], PROMPTS, tight),
                X.build_request("u0", units[0]["text"], PROMPTS, tight)]
        packed, single = chat.complete(reqs)
    assert packed.finish_reason == single.finish_reason == "length"
    rows = P.split_pack_answer(packed, 3, tight)
    assert [r["status"] for r in rows] == ["ok"] * 3  # repaired, never a crash
    assert all(P.TRUNCATED_NOTE in r["error"] for r in rows[1:])  # texts the cut answer never reached
    row = P.parse_extraction(single, tight)
    assert row["status"] in ("ok", "parse_error") and (row["status"] == "ok") == (P.TRUNCATED_NOTE in (row["error"] or ""))


@pytest.mark.slow  # Spark + Ray + the model server: about a minute on a quiet 2-core machine
@pytest.mark.spark
@pytest.mark.ray
def test_extract_stage_packs_and_gleans_on_spark_and_ray(spark, tmp_path):
    from deltalake import DeltaTable

    from corpusgraph.config import load_config
    from corpusgraph.runner.pipeline import run_stage
    from corpusgraph.runner.run import RunContext
    from corpusgraph.tables import table_path

    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
        "storage.cache_dir": str(tmp_path / "cache"), "extract.entity_types": "[PERSON, ORGANIZATION, LOCATION]",
        "extract.max_entities": "2", "extract.max_relationships": "1", "extract.max_tokens": "160",
    })
    ctx = RunContext(cfg, spark)
    try:
        ctx.wh.ensure_all()
        units = [(f"u{i}", "d", i, t, count_tokens(t), 0, len(t)) for i, t in enumerate(TEXTS)]
        ctx.wh.overwrite("text_units", spark.createDataFrame(
            units, "unit_id string, doc_id string, ordinal int, text string, n_tokens int, char_start int, char_end int"))
        res = run_stage(ctx, "extract")
        again = run_stage(ctx, "extract")
    finally:
        ctx.close()
    assert res.rows["units"] == res.rows["sent"] == 3
    # Units are packed within each Spark partition (no shuffle), so 3 units over 2 partitions
    # may take 2 calls; still fewer calls than units, first pass and gleaning together.
    assert res.rows["gleaned_round1"] >= 1
    assert res.rows["calls"] < res.rows["sent"] + res.rows["gleaned_round1"]
    assert res.usage.calls == res.rows["calls"]
    rows = DeltaTable(table_path(cfg.storage.warehouse, "extractions")).to_pyarrow_table().to_pylist()
    assert sorted(r["unit_id"] for r in rows) == ["u0", "u1", "u2"]
    assert {r["prompt_hash"] for r in rows} == {X.ExtractPrompts(PROMPTS.extract, PROMPTS.cont).hash(cfg.extract)}
    assert sum(r["gleanings"] for r in rows) == res.rows["gleaned_round1"]
    assert sum(r["tokens_in"] + r["tokens_out"] for r in rows) == res.usage.tokens_in + res.usage.tokens_out
    assert again.usage.calls == 0 and not again.rows.get("calls")  # a rerun pays nothing


@pytest.mark.slow  # several real-model calls: minutes on a busy 2-core machine; `make test-e2e` runs it
def test_prompt_tune_writes_an_editable_prompt_folder_from_the_sample_corpus(tmp_path, capsys):
    """`corpusgraph prompt-tune` on the bundled freight corpus: text_units (one unit per
    document, written here with delta-rs so no JVM starts) sampled, the real model asked for
    types and examples, the folder written and usable as a config."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from corpusgraph.cli.main import main
    from corpusgraph.config import load_config
    from corpusgraph.tables import table, table_path
    from corpusgraph.tokens import truncate_tokens

    docs = sorted((REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs").iterdir())
    texts = [truncate_tokens(d.read_text(), 300) for d in docs]
    rows = [{"unit_id": f"u{i:02d}", "doc_id": d.stem, "ordinal": 0, "text": t, "n_tokens": count_tokens(t),
             "char_start": 0, "char_end": len(t)} for i, (d, t) in enumerate(zip(docs, texts))]
    sets = {"storage.warehouse": str(tmp_path / "wh"), "storage.cache_dir": str(tmp_path / "cache")}
    write_deltalake(table_path(sets["storage.warehouse"], "text_units"),
                    pa.Table.from_pylist(rows, schema=table("text_units").schema))
    out = tmp_path / "tuned"
    argv = ["prompt-tune", "--conf", str(REPO / "conf" / "local.yaml"), "--out", str(out), "--n", "4",
            "--examples", "1", "--max-types", "5"]
    for k, v in sets.items():
        argv += ["--set", f"{k}={v}"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "sampled 4 units of text_units" in printed
    snippet = (out / "entity_types.yaml").read_text()
    conf = tmp_path / "tuned.yaml"
    conf.write_text(f"base: {REPO / 'conf' / 'local.yaml'}\n" + snippet)
    cfg = load_config(conf)
    assert 2 <= len(cfg.extract.entity_types) <= 8
    assert all(t == t.upper() for t in cfg.extract.entity_types)
    prompt = (out / "extract.txt").read_text()
    assert "{entity_types}" in prompt  # still a template the run fills
    if "Example 1" in prompt:  # an example is kept only when its names are in its own text
        example_text, answer = prompt.split("Example 1, Text 1:\n", 1)[1].split("\nAnswer:\n", 1)
        answer = json.loads(answer.strip().splitlines()[0])
        assert all(e["name"].casefold() in example_text.casefold() for e in answer["entities"])
    else:
        assert "none of the" in snippet  # and the snippet says why there is none


@pytest.mark.slow  # several real-model calls: minutes on a busy 2-core machine; `make test-e2e` runs it
def test_claims_come_back_schema_constrained(tmp_path):
    sec = SEC.model_copy(update={"claims": True, "max_claims": 2, "max_tokens": 260})
    prompts = X.ExtractPrompts(PROMPTS.extract, None, load_prompt(REPO / "conf" / "prompts" / "extract_claims.txt"))
    text = "Fenmore Foods said on 2026-07-02 that Brightwater Haulage delivered its chilled load late to Milan."
    with EmbeddedServer(log_path=tmp_path / "server.log") as server:
        chat = open_chat_model(LLMSection(backend="embedded"), tmp_path / "cache", base_url=server.base_url)
        res = chat.complete([X.build_request("c1", text, prompts, sec)])[0]
    assert res.error is None, res.error
    obj = json.loads(res.text) if res.finish_reason == "stop" else None
    if obj is not None:  # the grammar made the model answer the claims key with the contract's fields
        assert "claims" in obj and len(obj["claims"]) <= 2
        assert all(c["status"] in P.CLAIM_STATUSES for c in obj["claims"])
    row = P.split_pack_answer(res, 1, sec, [text])[0]
    assert row["status"] == "ok"
    for c in row["claims"]:
        assert set(c) == {"subject", "object", "type", "status", "description", "start", "end"}
        assert P.grounded(c["subject"], text)  # a subject from another text never gets through
        assert all(d is None or len(d) in (4, 7, 10) for d in (c["start"], c["end"]))  # a date or nothing
