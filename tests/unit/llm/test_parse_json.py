"""parse_json_answer: what small models actually send back, and what it makes of it."""

import pytest

from corpusgraph.llm.parse import parse_json_answer

pytestmark = pytest.mark.unit


def ok(text):
    obj, err = parse_json_answer(text)
    assert err is None, err
    assert isinstance(obj, dict)
    return obj


def bad(text):
    obj, err = parse_json_answer(text)
    assert obj is None
    assert isinstance(err, str) and err
    return err


def test_plain_object():
    assert ok('{"a": 1, "b": [true, null, "x"]}') == {"a": 1, "b": [True, None, "x"]}


def test_code_fence_and_prose_are_stripped():
    text = 'Sure! Here it is:\n```json\n{"name": "Acme", "n": 2}\n```\nHope that helps.'
    assert ok(text) == {"name": "Acme", "n": 2}


def test_fence_without_language_and_without_closing_fence():
    assert ok('```\n{"a": "b"}') == {"a": "b"}


def test_braces_and_escaped_quotes_inside_strings_do_not_confuse_the_scan():
    text = 'noise {"quote": "he said \\"{not json}\\"", "k": "}"} trailing } junk'
    assert ok(text) == {"quote": 'he said "{not json}"', "k": "}"}


def test_later_object_found_when_first_brace_is_prose():
    assert ok('Use {curly} style: {"ok": true}') == {"ok": True}


def test_raw_newline_inside_string_is_accepted():
    assert ok('{"d": "line one\nline two"}') == {"d": "line one\nline two"}


def test_trailing_commas_are_removed():
    assert ok('{"a": [1, 2,], "b": {"c": 3,},}') == {"a": [1, 2], "b": {"c": 3}}


def test_truncated_inside_a_string_value_drops_the_partial_value():
    text = '{"entities": [{"name": "Acme", "type": "ORG"}, {"name": "Micro'
    assert ok(text) == {"entities": [{"name": "Acme", "type": "ORG"}, {}]}


def test_truncated_after_a_complete_value_keeps_it():
    text = '{"entities": [{"name": "Acme", "type": "ORG", "description": "A maker"'
    assert ok(text) == {"entities": [{"name": "Acme", "type": "ORG", "description": "A maker"}]}


def test_truncated_after_key_or_colon_drops_the_key():
    assert ok('{"a": "x", "b"') == {"a": "x"}
    assert ok('{"a": "x", "b":') == {"a": "x"}
    assert ok('{"a": "x", "b": ') == {"a": "x"}


def test_truncated_number_at_the_end_is_not_trusted():
    # "12" might be the start of 1200: dropped, not kept.
    assert ok('{"a": 1, "weight": 12') == {"a": 1}
    assert ok('{"a": 1, "weight": 12,') == {"a": 1, "weight": 12}


def test_truncated_right_after_an_opening_bracket():
    assert ok('{"summary": "s", "findings": [') == {"summary": "s", "findings": []}
    assert ok("{") == {}


def test_truncated_nested_containers_are_closed_in_order():
    text = '{"a": {"b": [1, 2, {"c": [3, "four"'
    assert ok(text) == {"a": {"b": [1, 2, {"c": [3, "four"]}]}}


def test_top_level_array_is_an_error():
    assert bad('[{"a": 1}, {"b": 2}]') == "expected a JSON object, got an array"
    assert bad('```json\n[1, 2]\n```') == "expected a JSON object, got an array"


def test_empty_and_none_are_errors():
    assert bad("") == "empty answer"
    assert bad("   \n") == "empty answer"
    assert bad(None) == "empty answer"


def test_prose_only_is_an_error():
    assert "no JSON object" in bad("I cannot help with that.")


def test_unrepairable_junk_is_an_error_with_a_reason():
    err = bad("{'single': 'quotes'}")
    assert "invalid JSON" in err


def test_truncated_inside_the_first_key_is_an_error_or_empty():
    # Nothing complete was said; an empty object is the honest repair.
    assert ok('{"entit') == {}
