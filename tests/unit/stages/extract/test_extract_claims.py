"""Optional claims: in the prompt and schema only when on, parsed strictly into claims[]."""

import json

from corpusgraph.config import ExtractSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.prompts import load_prompt
from corpusgraph.stages.extract.llm import ExtractPrompts, build_pack_request, extraction_schema
from corpusgraph.stages.extract.parse import parse_extraction
from tests.conftest import REPO

ON = ExtractSection(claims=True, max_claims=2)
PROMPTS = ExtractPrompts(load_prompt(REPO / "conf" / "prompts" / "extract.txt"), None,
                         load_prompt(REPO / "conf" / "prompts" / "extract_claims.txt"))


def test_claims_are_in_schema_and_prompt_only_when_on():
    assert "claims" not in extraction_schema(ExtractSection())["properties"]
    claims = extraction_schema(ON)["properties"]["claims"]
    assert claims["maxItems"] == 2 and claims["items"]["properties"]["status"]["enum"] == ["TRUE", "FALSE", "SUSPECTED"]
    assert "claims" in extraction_schema(ON)["required"]
    on = build_pack_request("p", ["t"], PROMPTS, ON).messages[0]["content"]
    off = build_pack_request("p", ["t"], PROMPTS, ExtractSection()).messages[0]["content"]
    assert '"claims": up to 2' in on and '"claims"' not in off


def test_claims_parse_into_the_contract_columns():
    answer = {"entities": [], "relationships": [], "claims": [
        {"subject": "Contoso", "object": "Port of Lisbon", "type": "delay", "status": "true",
         "description": "Contoso shipments were delayed at the port.", "start": "2024-03-01", "end": "March"},
        {"subject": "Contoso", "object": "", "type": "FINE", "status": "SUSPECTED", "description": "x",
         "start": "", "end": ""},
        {"subject": "Contoso", "object": "", "type": "FINE", "status": "MAYBE", "description": "bad status",
         "start": "", "end": ""},
        {"object": "no subject", "type": "X", "status": "TRUE"},
    ]}
    row = parse_extraction(ChatResult(id="u", text=json.dumps(answer)), ON)
    assert row["status"] == "ok"
    assert row["claims"] == [
        {"subject": "Contoso", "object": "Port of Lisbon", "type": "DELAY", "status": "TRUE",
         "description": "Contoso shipments were delayed at the port.", "start": "2024-03-01", "end": None},
        {"subject": "Contoso", "object": None, "type": "FINE", "status": "SUSPECTED", "description": "x",
         "start": None, "end": None},
    ]
    # With claims off the same answer yields none.
    assert parse_extraction(ChatResult(id="u", text=json.dumps(answer)), ExtractSection())["claims"] == []
