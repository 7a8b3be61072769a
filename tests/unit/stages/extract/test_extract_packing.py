"""Packing several units into one call and mapping the answer back, one row per unit."""

import json

import pytest

from corpusgraph.config import ExtractSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.prompts import load_prompt
from corpusgraph.stages.extract.llm import (ExtractPrompts, PackTask, apportion, build_pack_request, extraction_schema,
                                            pack_id, pack_rows, pack_schema)
from corpusgraph.stages.extract.parse import TRUNCATED_NOTE, split_pack_answer
from tests.conftest import REPO

SEC = ExtractSection(entity_types=["ORGANIZATION", "PERSON", "LOCATION"], max_entities=3, max_relationships=2,
                     units_per_call=3, pack_tokens=300, max_tokens=100)
PROMPTS = ExtractPrompts(load_prompt(REPO / "conf" / "prompts" / "extract.txt"),
                         load_prompt(REPO / "conf" / "prompts" / "extract_continue.txt"))


def unit(i, n):
    return {"unit_id": f"u{i}", "text": f"text {i}", "n_tokens": n}


def test_packs_close_on_token_budget_and_unit_count():
    packs = pack_rows([unit(i, n) for i, n in enumerate([100, 100, 100, 100, 250, 60, 400, 10])], SEC)
    assert [[u["unit_id"] for u in p] for p in packs] == [
        ["u0", "u1", "u2"],  # units_per_call reached
        ["u3"],  # u4 would pass 300 tokens
        ["u4"],
        ["u5"],  # u6 alone is over the budget: it goes on its own
        ["u6"],
        ["u7"],
    ]
    assert pack_rows([], SEC) == []


def test_pack_ids_are_deterministic_and_differ_by_round():
    assert pack_id(["a", "b"], 0) == pack_id(["a", "b"], 0) != pack_id(["a", "b"], 1) != pack_id(["b", "a"], 0)


def test_packed_request_shares_the_system_prompt_and_keys_units_by_number():
    one = build_pack_request("p1", ["Ana works for Contoso."], PROMPTS, SEC)
    three = build_pack_request("p3", ["Ana works for Contoso.", "Bo lives in Porto.", "Cy {x} met Dee."], PROMPTS, SEC)
    assert one.messages[0] == three.messages[0]  # identical prefix for the server's prompt cache
    assert "ORGANIZATION, PERSON, LOCATION" in three.messages[0]["content"]
    assert "{claims}" not in three.messages[0]["content"] and '"claims"' not in three.messages[0]["content"]
    user = three.messages[1]["content"]
    assert user.index("Text 1:\nAna") < user.index("Text 2:\nBo") < user.index("Text 3:\nCy {x} met Dee.")
    assert one.json_schema == extraction_schema(SEC) and one.max_tokens == 100
    assert three.json_schema == pack_schema(SEC, 3) and three.max_tokens == 300
    assert three.json_schema["required"] == ["1", "2", "3"]
    assert three.json_schema["properties"]["2"] == extraction_schema(SEC)


def _answer(obj, **kw):
    return ChatResult(id="p", text=json.dumps(obj), tokens_in=kw.get("tin", 300), tokens_out=kw.get("tout", 90),
                      finish_reason=kw.get("finish", "stop"))


E = {"name": "Contoso", "type": "ORGANIZATION", "description": "A forwarder."}


def test_split_maps_each_numbered_object_to_its_unit():
    rows = split_pack_answer(_answer({
        "1": {"entities": [E], "relationships": []},
        "2": {"entities": [{"name": "Porto", "type": "LOCATION", "description": "A city."}],
              "relationships": [{"source": "Bo", "target": "Porto", "description": "lives in", "strength": 7}]},
    }), 2, SEC)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert [e["name"] for e in rows[0]["entities"]] == ["Contoso"]
    assert rows[1]["relationships"][0]["target"] == "Porto" and rows[1]["relationships"][0]["strength"] == 7
    assert json.loads(rows[1]["raw"])["entities"][0]["name"] == "Porto"  # each row keeps its own part


def test_cut_off_pack_keeps_complete_units_and_flags_the_rest():
    text = json.dumps({"1": {"entities": [E], "relationships": []}})[:-1] + ', "2": {"entities": [{"name": "Por'
    rows = split_pack_answer(ChatResult(id="p", text=text, tokens_in=10, tokens_out=10, finish_reason="length"), 3, SEC)
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert [e["name"] for e in rows[0]["entities"]] == ["Contoso"] and TRUNCATED_NOTE not in (rows[0]["error"] or "")
    assert rows[1]["entities"] == [] and TRUNCATED_NOTE in rows[1]["error"]  # the cut item is dropped, not made up
    assert rows[2]["entities"] == [] and TRUNCATED_NOTE in rows[2]["error"]


def test_failed_and_unparseable_packs_give_one_row_per_unit():
    failed = split_pack_answer(ChatResult(id="p", text=None, error="HTTP 503"), 3, SEC)
    assert [r["status"] for r in failed] == ["llm_error"] * 3
    bad = split_pack_answer(ChatResult(id="p", text="Sorry, no."), 2, SEC)
    assert [r["status"] for r in bad] == ["parse_error"] * 2 and all(r["raw"] == "Sorry, no." for r in bad)


def test_apportion_sums_exactly_and_follows_weights():
    assert apportion(10, [1, 1, 1]) in ([4, 3, 3], [3, 4, 3], [3, 3, 4])
    assert sum(apportion(997, [5, 100, 37, 1])) == 997
    assert apportion(100, [1, 3]) == [25, 75]
    assert apportion(5, [0, 0]) in ([3, 2], [2, 3]) and apportion(0, []) == []


def test_pack_task_rows_match_the_table_and_tokens_add_up():
    from corpusgraph.tables import table

    task = PackTask(SEC, PROMPTS, "ph", "m", "run", 0.0)
    packs = [{"pack_id": "p", "units": [{**unit(0, 50), "prior": None}, {**unit(1, 150), "prior": None}]}]
    out = task.outputs(packs, [_answer({"1": {"entities": [E], "relationships": []},
                                        "2": {"entities": [], "relationships": []}}, tin=400, tout=60)])
    rows = out[0]["rows"]
    assert [r["unit_id"] for r in rows] == ["u0", "u1"] and all(set(r) == set(table("extractions").schema.names) for r in rows)
    assert sum(r["tokens_in"] for r in rows) == 400 and sum(r["tokens_out"] for r in rows) == 60
    assert rows[1]["tokens_in"] > rows[0]["tokens_in"]  # the longer text pays more of the prompt
    assert all(r["gleanings"] == 0 and r["prompt_hash"] == "ph" for r in rows)
    import pyarrow as pa

    pa.Table.from_pylist(out, schema=task.output_schema)  # the Ray worker's conversion


@pytest.mark.parametrize("change", [
    {"entity_types": ["PERSON"]}, {"max_entities": 4}, {"max_tokens": 300}, {"units_per_call": 2},
    {"pack_tokens": 500}, {"glean_rounds": 2}, {"glean_min_missing": 3}, {"claims": True}, {"max_claims": 2},
])
def test_prompt_hash_changes_with_every_setting_that_shapes_answers(change):
    base = ExtractSection()
    prompts = ExtractPrompts(PROMPTS.extract, PROMPTS.cont, load_prompt(REPO / "conf" / "prompts" / "extract_claims.txt"))
    changed = base.model_copy(update=change)
    if change == {"max_claims": 2}:
        base, changed = base.model_copy(update={"claims": True}), changed.model_copy(update={"claims": True})
    assert prompts.hash(base) != prompts.hash(changed)


def test_prompt_hash_covers_every_prompt_file_used_and_only_those():
    from corpusgraph.prompts import Prompt

    sec = ExtractSection(claims=True)
    claims = load_prompt(REPO / "conf" / "prompts" / "extract_claims.txt")
    base = ExtractPrompts(PROMPTS.extract, PROMPTS.cont, claims)
    h = base.hash(sec)
    assert ExtractPrompts(Prompt(PROMPTS.extract.template + " ", "x"), PROMPTS.cont, claims).hash(sec) != h
    assert ExtractPrompts(PROMPTS.extract, Prompt("other {found}", "x"), claims).hash(sec) != h
    assert ExtractPrompts(PROMPTS.extract, PROMPTS.cont, Prompt("other", "x")).hash(sec) != h
    off = ExtractSection(claims=False, glean_rounds=0)  # unused files do not count
    assert ExtractPrompts(PROMPTS.extract, Prompt("a {found}", "x"), Prompt("b", "y")).hash(off) == \
        ExtractPrompts(PROMPTS.extract).hash(off)


def test_pack_requests_are_what_the_stage_sends():
    from corpusgraph.stages.extract.llm import pack_requests

    rows = [unit(i, n) for i, n in enumerate([120, 80, 90, 400])]
    reqs = pack_requests(rows, PROMPTS, SEC)
    # ordered by length: u1 (80), u2 (90), u0 (120) fit in 300 tokens and 3 units; u3 alone
    assert [r.messages[1]["content"].count("Text ") for r in reqs] == [3, 1]
    assert reqs[0].id == pack_id(["u1", "u2", "u0"], 0)


def test_pack_schemas_are_built_once_per_size_and_stay_out_of_the_pass_fingerprint():
    from corpusgraph.storage.shards import fingerprint

    task = PackTask(SEC, PROMPTS, "hash", "m", "run-1", 0.0, 0)
    before = fingerprint(task, "m", 0.0)
    packs = [{"pack_id": f"p{i}", "units": [unit(j, 10) for j in range(n)]} for i, n in enumerate([3, 3, 1])]
    reqs = task.requests(packs)
    assert reqs[0].json_schema is reqs[1].json_schema == pack_schema(SEC, 3)  # one object per pack size
    assert reqs[2].json_schema == pack_schema(SEC, 1) and reqs[2].json_schema is not reqs[0].json_schema
    # The answers' durable folder is keyed on the settings, not on the requests built so far.
    assert fingerprint(task, "m", 0.0) == before
    assert fingerprint(PackTask(SEC.model_copy(update={"max_entities": 4}), PROMPTS, "hash", "m", "run-1", 0.0, 0),
                       "m", 0.0) != before
