"""Safe repair of cut-off answers, on answers the bundled model really gave.

The samples below are verbatim answers of SmolLM2-135M (llama.cpp server, schema-constrained)
to extraction requests with a tiny max_tokens, recorded with finish_reason "length".
"""

import json

from corpusgraph.config import ExtractSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.llm.parse import parse_json_answer
from corpusgraph.llm.repair import repair_json_object
from corpusgraph.stages.extract.parse import TRUNCATED_NOTE, grounded, parse_extraction, split_pack_answer

SEC = ExtractSection(entity_types=["PERSON", "ORGANIZATION", "LOCATION"], max_entities=2, max_relationships=1)
TEXTS = [
    "Giulia Sarti leads the Milan hub of Halvard & Quist. Brightwater Haulage and Fenmore Foods ship through Milan and Genoa.",
    "Marek Novak drove trailer R-77 from Valencia to Lyon for Contoso. Northwind Traders paid Contoso in Paris.",
    "The Port of Rotterdam signed a deal with Maersk. Hana Ito of Fabrikam met Tobias Berg in Antwerp and Hamburg.",
]
SINGLE10 = '{"entities":[{"name":"M'
SINGLE45 = '{"entities":[{"name":"Marek Novak","type":"PERSON","description":"Northwind Traders"}], "relationships":[{"source":"R-77","target":"Lyon'
PACK10 = '{"1":{ "entities":[{"name":"Giulia Sarti","type":"PERSON","description":"Mariano di Giulio Sarti"},{"name":"Marek Novak","type":"LOCATION","description":"Bergen"}],"relationships":[{"source":"Mario di Giulio Sart'
PACK45 = '{"1":{ "entities":[{"name":"Giulia Sarti","type":"PERSON","description":"Mariano di Giulio Sarti"},{"name":"Marek Novak","type":"LOCATION","description":"Bergen"}],"relationships":[{"source":"Mario di Giulio Sarti","target":"Giulia Sarti","description":"Mariano di Giulio Sarti","strength":1}]},"2":{ "entities":[{"name":"Giulia Sarti","type":"PERSON","description'
PACK70 = '{"1":{ "entities":[{"name":"Giulia Sarti","type":"PERSON","description":"Mariano di Giulio Sarti"},{"name":"Marek Novak","type":"LOCATION","description":"Bergen"}],"relationships":[{"source":"Mario di Giulio Sarti","target":"Giulia Sarti","description":"Mariano di Giulio Sarti","strength":1}]},"2":{ "entities":[{"name":"Giulia Sarti","type":"PERSON","description":"Bergen"}],"relationships":[{"source":"Mario di Giulio Sarti","target":"Marek Novak","description":"Marian'


def cut(text):
    return ChatResult(id="x", text=text, tokens_in=100, tokens_out=10, finish_reason="length")


def test_cut_inside_the_first_name_keeps_nothing_invented():
    rep = repair_json_object(SINGLE10)
    assert rep.truncated and rep.obj == {"entities": [{}]}  # "M..." is dropped, not kept as a name
    row = parse_extraction(cut(SINGLE10), SEC)
    assert row["status"] == "ok" and row["entities"] == [] and TRUNCATED_NOTE in row["error"]


def test_cut_inside_a_relationship_drops_that_item_only():
    rep = repair_json_object(SINGLE45)
    assert rep.truncated and rep.obj["entities"][0]["name"] == "Marek Novak"
    assert rep.obj["relationships"] == [{"source": "R-77"}]  # the half-written target is gone
    row = parse_extraction(cut(SINGLE45), SEC)
    assert [e["name"] for e in row["entities"]] == ["Marek Novak"]
    assert row["relationships"] == []  # no target and no strength: nothing is made up for them


def test_cut_packs_keep_the_texts_they_finished():
    for sample, complete in ((PACK10, 0), (PACK45, 1), (PACK70, 1)):
        rows = split_pack_answer(cut(sample), 3, SEC)
        assert [r["status"] for r in rows] == ["ok"] * 3
        assert rows[2]["entities"] == [] and TRUNCATED_NOTE in rows[2]["error"]  # never reached
        for r in rows[:complete]:
            assert r["entities"] and TRUNCATED_NOTE not in (r["error"] or "")
    rows = split_pack_answer(cut(PACK70), 3, SEC)
    assert rows[1]["relationships"] == []  # its relationship was cut mid-description: dropped
    assert TRUNCATED_NOTE in rows[1]["error"]  # the last text reached, so it is the one gleaned


def test_names_from_another_text_of_the_pack_are_dropped():
    rows = split_pack_answer(cut(PACK45), 3, SEC, TEXTS)
    # The model put "Marek Novak" (text 2) and "Mario di Giulio Sarti" (in no text) under text 1.
    assert [e["name"] for e in rows[0]["entities"]] == ["Giulia Sarti"]
    assert rows[0]["relationships"] == [] and "not written in the text" in rows[0]["error"]
    assert grounded("giulia  sarti", TEXTS[0]) and grounded("Halvard Quist", TEXTS[0])
    assert not grounded("Marek Novak", TEXTS[0])


def test_repair_strips_fences_and_prose_and_parse_json_answer_uses_it():
    wrapped = "Here you go:\n```json\n" + SINGLE45 + "\n```"
    assert parse_json_answer(wrapped)[0] == repair_json_object(SINGLE45).obj
    assert repair_json_object("no json here").obj is None
    done = json.loads('{"entities": [], "relationships": []}')
    assert repair_json_object(json.dumps(done)).obj == done and not repair_json_object(json.dumps(done)).truncated


# -- the whole-answer fast path: the same object as the character walk ---------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from corpusgraph.llm import repair as repair_module  # noqa: E402

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _json_values, max_size=5), st.sampled_from(["", " ", "\n", "  \n"]))
def test_a_whole_valid_object_reads_as_the_walk_reads_it(obj, pad):
    text = pad + json.dumps(obj) + pad
    walked = repair_module._parse_from(text, text.index("{"))
    got = repair_json_object(text)
    assert got == walked and got.obj == json.loads(text) and not got.truncated


def _nested(depth):
    return '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def test_depth_is_counted_alike_on_both_paths():
    limit = repair_module.MAX_DEPTH
    assert repair_json_object(_nested(limit)).obj is not None
    too_deep = repair_json_object(_nested(limit + 1))
    assert too_deep.obj is None and "deeper than" in too_deep.error


def test_a_code_fence_inside_a_string_value_does_not_hide_the_object():
    text = json.dumps({"entities": [{"name": "A", "description": "see ```code``` here"}], "relationships": []})
    assert repair_json_object(text).obj == json.loads(text)
