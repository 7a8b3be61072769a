"""Prompt building and answer parsing of the LLM stages, with scripted results (no server)."""

import json

import pytest

from corpusgraph.config import ExtractSection, ReportsSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.prompts import Prompt, load_prompt, render
from corpusgraph.stages.extract.llm import ExtractPrompts, PackTask, build_request, extraction_schema
from corpusgraph.stages.extract.parse import parse_extraction
from corpusgraph.stages.reports import build_context, parse_report, report_schema
from corpusgraph.tables import table
from tests.conftest import REPO

SEC = ExtractSection(entity_types=["ORGANIZATION", "PERSON"], max_entities=3, max_relationships=2)


def _walk_arrays(schema):
    if isinstance(schema, dict):
        if schema.get("type") == "array":
            yield schema
        for v in schema.values():
            yield from _walk_arrays(v)


def test_schemas_bound_every_array_and_close_the_type_list():
    for schema in (extraction_schema(SEC), report_schema(ReportsSection())):
        arrays = list(_walk_arrays(schema))
        assert arrays and all("maxItems" in a for a in arrays)
    ent = extraction_schema(SEC)["properties"]["entities"]
    assert ent["maxItems"] == 3 and ent["items"]["properties"]["type"]["enum"] == ["ORGANIZATION", "PERSON"]


def test_request_carries_prompt_text_and_schema():
    prompt = load_prompt(REPO / "conf" / "prompts" / "extract.txt")
    req = build_request("u1", "Ana Reis works for Contoso {not a placeholder}.", ExtractPrompts(prompt), SEC)
    assert req.id == "u1" and req.json_schema == extraction_schema(SEC)
    assert "ORGANIZATION, PERSON" in req.messages[0]["content"] and "{not a placeholder}" in req.messages[1]["content"]
    assert req.max_tokens == SEC.max_tokens


def test_render_fills_only_named_placeholders_and_reports_missing():
    assert render("a {x} {y}", x=1, y="{z}") == "a 1 {z}"
    with pytest.raises(KeyError, match="y"):
        render("{x}{y}", x=1)
    p = Prompt("t {x}", "p")
    assert p.hash("s1") != p.hash("s2") and p.hash("s1") == Prompt("t {x}", "other").hash("s1")


def _ok(obj):
    return ChatResult(id="u", text=json.dumps(obj), tokens_in=10, tokens_out=5)


def test_parse_keeps_valid_mentions_and_notes_what_it_dropped():
    row = parse_extraction(_ok({
        "entities": [
            {"name": " Contoso  Ltd ", "type": "organization", "description": "A forwarder."},
            {"name": "Lisbon", "type": "LOCATION", "description": "outside the closed list"},
            {"name": "contoso ltd", "type": "ORGANIZATION", "description": "duplicate"},
        ],
        "relationships": [
            {"source": "Contoso Ltd", "target": "Ana", "description": "employs", "strength": 42},
            {"source": "Contoso Ltd", "target": "contoso ltd", "description": "self", "strength": 3},
        ],
    }), SEC)
    assert row["status"] == "ok"
    assert [e["name"] for e in row["entities"]] == ["Contoso Ltd"]
    assert row["relationships"] == [{"source": "Contoso Ltd", "target": "Ana", "description": "employs", "strength": 10}]
    assert "LOCATION" in row["error"]


def test_malformed_and_failed_answers_become_rows_not_exceptions():
    bad = parse_extraction(ChatResult(id="u", text="I cannot answer that"), SEC)
    assert bad["status"] == "parse_error" and bad["raw"] == "I cannot answer that" and bad["error"]
    failed = parse_extraction(ChatResult(id="u", text=None, error="HTTP 503 after 3 retries"), SEC)
    assert failed["status"] == "llm_error" and "503" in failed["error"]
    truncated = parse_extraction(ChatResult(id="u", text='{"entities": [{"name": "Ana", "type": "PERSON", '
                                            '"description": "x"}, {"name": "Bo'), SEC)
    assert truncated["status"] == "ok" and [e["name"] for e in truncated["entities"]] == ["Ana"]


def test_extract_task_rows_match_the_table_schema():
    prompt = load_prompt(REPO / "conf" / "prompts" / "extract.txt")
    task = PackTask(SEC, ExtractPrompts(prompt), "ph", "m", "run1", 0.0)
    packs = [{"pack_id": f"p{i}", "units": [{"unit_id": f"u{i}", "text": "t", "n_tokens": 1}]} for i in (1, 2)]
    out = task.outputs(packs, [_ok({"entities": [], "relationships": []}), ChatResult(id="p2", text=None, error="x")])
    rows = [r for o in out for r in o["rows"]]
    assert [r["unit_id"] for r in rows] == ["u1", "u2"] and [r["status"] for r in rows] == ["ok", "llm_error"]
    assert set(rows[0]) == set(table("extractions").schema.names)


def test_report_context_fits_budget_and_uses_child_reports_when_too_big():
    ents = [{"title": f"E{i}", "type": "ORGANIZATION", "description": "word " * 40, "degree": i} for i in range(30)]
    kids = [{"title": "Small child", "summary": "s", "size": 2}, {"title": "Big child", "summary": "b", "size": 9}]
    small = build_context(ents[:2], [], kids, budget=500)
    assert "Sub-community" not in small and "E1" in small
    big = build_context(ents, [], kids, budget=300)
    from corpusgraph.tokens import count_tokens

    assert count_tokens(big) <= 300
    assert big.index("Big child") < big.index("Small child")  # biggest child first


def test_report_parsing_bounds_and_errors():
    rep = parse_report(_ok({"title": "Lisbon ops", "summary": "s", "rating": 14,
                            "findings": [{"summary": "f", "explanation": "e"}] * 9, "rating_explanation": "r"}),
                       ReportsSection(max_findings=5))
    assert rep["status"] == "ok" and rep["rating"] == 10.0 and len(rep["findings"]) == 5
    assert parse_report(_ok({"summary": "no title"}), ReportsSection())["status"] == "parse_error"


def test_report_findings_or_rating_of_the_wrong_kind_count_as_absent():
    for findings in ({"summary": "f"}, 5, True, "a finding"):
        rep = parse_report(_ok({"title": "T", "findings": findings, "rating": 3}), ReportsSection())
        assert rep["status"] == "ok" and rep["findings"] == [] and rep["rating"] == 3.0
    for rating in (float("nan"), float("inf"), int("9" * 400), "high"):
        rep = parse_report(_ok({"title": "T", "findings": [], "rating": rating}), ReportsSection())
        assert rep["status"] == "ok" and rep["rating"] is None
