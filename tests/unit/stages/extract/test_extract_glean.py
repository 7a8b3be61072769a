"""Gleaning: the cheap rule that decides which units get another round, and the merge."""

import json

from corpusgraph.config import ExtractSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.prompts import load_prompt
from corpusgraph.stages.extract.glean import (GLEAN_STOP_NOTE, merge_gleaned, named_spans, needs_gleaning,
                                              uncovered_spans)
from corpusgraph.stages.extract.llm import ExtractPrompts, PackTask, build_pack_request
from corpusgraph.stages.extract.parse import TRUNCATED_NOTE
from tests.conftest import REPO

SEC = ExtractSection(entity_types=["ORGANIZATION", "PERSON", "LOCATION"], max_entities=3, max_relationships=2,
                     glean_min_missing=2)
PROMPTS = ExtractPrompts(load_prompt(REPO / "conf" / "prompts" / "extract.txt"),
                         load_prompt(REPO / "conf" / "prompts" / "extract_continue.txt"))
TEXT = "The Journal of Mathematical Physics is published by the American Institute of Physics. Its editor is Jan Solovej."


def ent(name, etype="ORGANIZATION"):
    return {"name": name, "type": etype, "description": ""}


def row(ents=(), rels=(), error=None, gleanings=0, status="ok"):
    return {"status": status, "entities": list(ents), "relationships": list(rels), "claims": [], "error": error,
            "gleanings": gleanings, "tokens_in": 100, "tokens_out": 20, "raw": "{}"}


def test_named_spans_skip_sentence_openers_but_keep_names():
    spans = named_spans(TEXT)
    assert {"Journal of Mathematical Physics", "American Institute of Physics", "Jan Solovej"} <= spans
    assert "The" not in spans and "Its" not in spans


def test_single_words_count_as_names_except_where_a_sentence_opens():
    # Opening the text, after . ! ? : ; or a quote (spaces between or not), or after a line
    # break: a sentence opener, left out. After a comma or a plain space, or after leading spaces
    # with no line break: a name.
    assert named_spans("Acme sued Zeta") == {"Zeta"}
    assert named_spans("Sued by Acme.  Zeta won! Ford lost? Kia: Opel; \"Seat\" went") == {"Acme"}
    assert named_spans("went home\n  Zeta, then Ford \n Kia") == {"Ford"}
    assert named_spans("  Zeta") == {"Zeta"}
    assert named_spans("so, Zeta and\tFord") == {"Zeta", "Ford"}
    assert named_spans("New York. Bank of England") == {"New York", "Bank of England"}  # runs are kept


def test_covered_names_are_not_missing():
    assert uncovered_spans(TEXT, [ent("Journal of Mathematical Physics"), ent("American Institute of Physics"),
                                  ent("Jan Solovej", "PERSON")]) == set()
    assert uncovered_spans(TEXT, [ent("American Institute of Physics")]) == {"Journal of Mathematical Physics", "Jan Solovej"}


def test_rule_gleans_incomplete_results_only():
    complete = [ent("Journal of Mathematical Physics"), ent("American Institute of Physics")]
    assert not needs_gleaning(TEXT, row(complete), SEC)  # one name uncovered is under the threshold of 2
    assert needs_gleaning(TEXT, row([ent("Jan Solovej", "PERSON")]), SEC)  # two names uncovered
    assert needs_gleaning(TEXT, row(complete, error=TRUNCATED_NOTE), SEC)  # the answer was cut off
    full = [ent("A"), ent("B"), ent("C")]  # hit max_entities
    assert needs_gleaning("a b c", row(full), SEC)
    rels = [{"source": "A", "target": "B"}, {"source": "B", "target": "C"}]
    assert needs_gleaning("a b c", row([ent("A")], rels), SEC)  # hit max_relationships
    # After a round the caps double: what was merged is not "full" unless that round filled up too.
    assert not needs_gleaning("a b c", row(full, gleanings=1), SEC)
    assert not needs_gleaning(TEXT, row([], error=GLEAN_STOP_NOTE), SEC)  # a round found nothing: stop
    assert not needs_gleaning(TEXT, row(status="parse_error"), SEC)


def test_merge_adds_only_new_items():
    prior = row([ent("Contoso")], [{"source": "Ana", "target": "Contoso", "description": "", "strength": 5}])
    new = row([ent("contoso"), ent("Ana", "PERSON")], [{"source": "Contoso", "target": "Ana", "description": "", "strength": 2},
                                                        {"source": "Ana", "target": "Porto", "description": "", "strength": 4}])
    merged, added = merge_gleaned(prior, new)
    assert [e["name"] for e in merged["entities"]] == ["Contoso", "Ana"]
    assert [(r["source"], r["target"]) for r in merged["relationships"]] == [("Ana", "Contoso"), ("Ana", "Porto")]
    assert added == 2
    assert merge_gleaned(prior, prior)[1] == 0


def test_gleaning_request_names_what_was_found():
    req = build_pack_request("g", [TEXT, "Bo lives in Porto."], PROMPTS, SEC,
                             priors=[row([ent("Jan Solovej", "PERSON")]), row([])])
    first = build_pack_request("p", [TEXT], PROMPTS, SEC)
    assert req.messages[0] == first.messages[0]  # same system prompt as the first pass
    user = req.messages[1]["content"]
    assert "Text 1: Jan Solovej (PERSON)" in user and "Text 2: nothing" in user and "missed" in user


def _gleaned(answer, prior, finish="stop"):
    task = PackTask(SEC, PROMPTS, "ph", "m", "run2", 0.0, round_=1)
    units = [{"unit_id": "u1", "text": TEXT, "n_tokens": 30, "prior": prior}]
    res = ChatResult(id="g", text=answer, tokens_in=70, tokens_out=15, finish_reason=finish)
    return task.outputs([{"pack_id": "g", "units": units}], [res])[0]["rows"][0]


def test_glean_round_merges_into_the_row_and_counts_tokens_and_rounds():
    prior = row([ent("Jan Solovej", "PERSON")], error=TRUNCATED_NOTE)
    out = _gleaned(json.dumps({"entities": [ent("American Institute of Physics")], "relationships": []}), prior)
    assert [e["name"] for e in out["entities"]] == ["Jan Solovej", "American Institute of Physics"]
    assert out["gleanings"] == 1 and out["tokens_in"] == 170 and out["tokens_out"] == 35
    assert out["status"] == "ok" and not (out["error"] or "")  # the truncation note is resolved by the round
    assert out["unit_id"] == "u1" and out["run_id"] == "run2"


def test_a_round_with_nothing_new_or_a_bad_answer_stops_gleaning_and_keeps_the_prior():
    prior = row([ent("Jan Solovej", "PERSON")])
    same = _gleaned(json.dumps({"entities": [ent("jan solovej", "PERSON")], "relationships": []}), prior)
    assert GLEAN_STOP_NOTE in same["error"] and [e["name"] for e in same["entities"]] == ["Jan Solovej"]
    bad = _gleaned("not json at all", prior)
    assert bad["status"] == "ok" and GLEAN_STOP_NOTE in bad["error"] and bad["entities"] == prior["entities"]
    assert not needs_gleaning(TEXT, same, SEC) and not needs_gleaning(TEXT, bad, SEC)
