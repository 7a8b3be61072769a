"""prompt-tune's pure parts: sampling, type parsing, example choice, the written folder."""

import json

from corpusgraph.config import ExtractSection, load_config
from corpusgraph.llm.base import ChatResult
from corpusgraph.prompts import load_prompt
from corpusgraph.stages.extract.llm import ExtractPrompts, build_request
from corpusgraph.stages.extract.tune import (TuneResult, good_example, parse_types, sample_units, tuned_template,
                                             types_request, write_prompt_folder)
from tests.conftest import REPO

PROMPT = load_prompt(REPO / "conf" / "prompts" / "extract.txt")


def test_sample_is_seeded_and_independent_of_row_order():
    rows = [{"unit_id": f"u{i}", "text": f"t{i}"} for i in range(30)] + [{"unit_id": "empty", "text": "  "}]
    a = sample_units(rows, 5, seed=1)
    assert [r["unit_id"] for r in a] == [r["unit_id"] for r in sample_units(list(reversed(rows)), 5, seed=1)]
    assert len(a) == 5 and all(r["unit_id"] != "empty" for r in a)
    assert len(sample_units(rows, 100)) == 30


def test_types_request_is_bounded_and_parsing_keeps_clean_distinct_names():
    req = types_request(["word " * 2000, "short"], max_types=4, budget_tokens=200)
    assert req.json_schema["properties"]["entity_types"]["maxItems"] == 4 and req.max_tokens < 200
    from corpusgraph.tokens import count_tokens

    assert count_tokens(req.messages[1]["content"]) < 260
    ans = ChatResult(id="t", text=json.dumps({"entity_types": ["vessel", "PORT", "Port", "shipping line", "THING", "X"]}))
    assert parse_types(ans, 4) == (["VESSEL", "PORT", "SHIPPING_LINE"], None)
    assert parse_types(ChatResult(id="t", text="no"), 4)[0] == []
    assert parse_types(ChatResult(id="t", text=None, error="boom"), 4)[1].endswith("boom")


def test_only_grounded_answers_make_examples():
    text = "Ana Reis manages the Lisbon hub of Contoso."
    ok = {"status": "ok", "entities": [{"name": "Ana Reis"}, {"name": "Contoso"}],
          "relationships": [{"source": "Ana Reis", "target": "Contoso", "description": "works for"}]}
    assert good_example(text, ok)
    assert not good_example(text, {**ok, "entities": [{"name": "Ana Reis"}, {"name": "Microsoft"}]})  # not in text
    assert not good_example(text, {**ok, "entities": [{"name": "Ana Reis"}]})  # too thin
    assert not good_example(text, {**ok, "relationships": [{"source": "Ana Reis", "target": "Bo", "description": "x"}]})
    assert not good_example(text, {**ok, "status": "parse_error"})


def test_examples_go_into_the_system_prompt_without_creating_placeholders():
    ex = [{"text": "Weird {entity_types} text about Contoso.", "answer": {"entities": [{"name": "Contoso"}]}}]
    tpl = tuned_template(PROMPT.template, ex)
    assert tpl.startswith(PROMPT.template.rstrip("\n")) and "Example 1" in tpl and '"Contoso"' in tpl
    from corpusgraph.prompts import Prompt

    req = build_request("u", "t", ExtractPrompts(Prompt(tpl, "x")), ExtractSection())
    assert "Weird { entity_types } text" in req.messages[0]["content"]
    assert tuned_template(PROMPT.template, []) == PROMPT.template


def test_written_folder_is_a_config_a_run_can_use(tmp_path):
    res = TuneResult(entity_types=["VESSEL", "PORT"], examples=[{"text": "t", "answer": {"entities": []}}],
                     sampled=3, notes=["a note"])
    written = write_prompt_folder(tmp_path / "tuned", res, PROMPT, REPO / "conf" / "prompts", "docs/", "smollm2")
    assert {p.name for p in written} == {"extract.txt", "extract_continue.txt", "extract_claims.txt", "entity_types.yaml"}
    snippet = (tmp_path / "tuned" / "entity_types.yaml").read_text()
    assert "# note: a note" in snippet
    conf = tmp_path / "conf.yaml"
    conf.write_text(f"base: {REPO / 'conf' / 'local.yaml'}\n" + snippet)
    cfg = load_config(conf)
    assert cfg.extract.entity_types == ["VESSEL", "PORT"]
    prompts = ExtractPrompts(load_prompt(cfg.prompt_path(cfg.extract.prompt)),
                             load_prompt(cfg.prompt_path(cfg.extract.prompt_continue)))
    assert "VESSEL, PORT" in prompts.system(cfg.extract) and "Example 1" in prompts.system(cfg.extract)
