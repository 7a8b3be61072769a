"""Every parser of model answers turns any text into an ok or parse_error result, never an exception.

Generated answers drawn ten at a time (fuzz_strategies.py), as many as the hypothesis profile's
examples allow: a small sample in the default tier, 10,000 per parser under `make test-fuzz`
(tests/conftest.py). Arbitrary text, JSON cut short,
wrong types, odd numbers (NaN, 1e999, 5,000 digits), deep nesting and huge arrays. Each test also
checks the shape of what comes back, so "no exception" cannot hide a nonsense row.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, note, settings

from corpusgraph.config import ExtractSection, ReportsSection, ResolveSection
from corpusgraph.llm.base import ChatResult
from tests.support.fuzz_strategies import answer_batches

pytestmark = [pytest.mark.unit, pytest.mark.fuzz]

BATCH = 10
# max_examples from the loaded profile (tests/conftest.py): INPUTS answers per parser per run.
FUZZ = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
INPUTS = FUZZ.max_examples * BATCH

EXTRACT = ExtractSection(claims=True)
STATUSES = {"ok", "parse_error"}


def _result(text, finish="stop"):
    return ChatResult(id="r", text=text, finish_reason=finish)


def _short_str(value, limit):
    return isinstance(value, str) and len(value) <= limit


def fuzz(check, arity: int = 1) -> int:
    """Run check(*answers) over INPUTS generated answers (arity at a time); returns how many."""
    seen = [0]

    @FUZZ
    @given(answer_batches(BATCH * arity))
    def run(batch):
        for i in range(0, len(batch), arity):
            args = batch[i: i + arity]
            try:
                check(*args)
            except BaseException:
                note(f"failing input (first 300 characters): {[a[:300] if a else a for a in args]!r}")
                raise
            seen[0] += arity

    run()
    assert seen[0] >= INPUTS
    return seen[0]


def test_json_repair_returns_an_object_or_a_reason():
    from corpusgraph.llm.repair import repair_json_object

    def check(text):
        got = repair_json_object(text)
        assert (got.obj is None) != (got.error is None)
        assert got.obj is None or isinstance(got.obj, dict)

    fuzz(check)


def _check_extraction_row(row):
    assert row["status"] in STATUSES
    if row["status"] == "parse_error":
        assert row["error"] and row["entities"] == row["relationships"] == row["claims"] == []
        return
    for e in row["entities"]:
        assert _short_str(e["name"], 80) and e["name"] and e["type"] in EXTRACT.entity_types
        assert _short_str(e["description"], 300)
    for r in row["relationships"]:
        assert _short_str(r["source"], 80) and _short_str(r["target"], 80)
        assert type(r["strength"]) is int and 1 <= r["strength"] <= 10
    for c in row["claims"]:
        assert c["status"] in ("TRUE", "FALSE", "SUSPECTED") and _short_str(c["subject"], 80)
    assert len(row["claims"]) <= EXTRACT.max_claims


def test_extraction_of_one_unit_and_of_a_pack():
    from corpusgraph.stages.extract.parse import parse_extraction, split_pack_answer

    def check(text, other):
        _check_extraction_row(parse_extraction(_result(text), EXTRACT))
        rows = split_pack_answer(_result(other, "length"), 3, EXTRACT, ["Mara Voss met Ilsa Brand.", "", "x" * 10])
        assert len(rows) == 3
        for row in rows:
            _check_extraction_row(row)

    fuzz(check, arity=2)


def test_gleaning_merges_what_a_round_parsed():
    from corpusgraph.stages.extract.glean import merge_gleaned
    from corpusgraph.stages.extract.parse import parse_extraction

    def check(first, second):
        prior, new = parse_extraction(_result(first), EXTRACT), parse_extraction(_result(second), EXTRACT)
        merged, added = merge_gleaned(prior, new)
        assert 0 <= added <= sum(len(new[k]) for k in ("entities", "relationships", "claims"))
        assert merged["entities"][: len(prior["entities"])] == prior["entities"]

    fuzz(check, arity=2)


def test_description_summaries():
    from corpusgraph.stages.resolve.llm import parse_summary

    section = ResolveSection()

    def check(text):
        row = parse_summary(_result(text), section)
        assert row["status"] in STATUSES
        if row["status"] == "ok":
            assert row["summary"] and _short_str(row["summary"], section.max_description_chars)
        else:
            assert row["summary"] is None and row["error"]

    fuzz(check)


def test_resolution_verdicts():
    from corpusgraph.stages.resolve.llm import parse_verdict

    def check(text):
        row = parse_verdict(_result(text))
        assert row["status"] in STATUSES
        assert (row["status"] == "ok") == isinstance(row["same"], bool)

    fuzz(check)


def test_community_reports():
    from corpusgraph.stages.reports import parse_report

    section = ReportsSection()

    def check(text):
        row = parse_report(_result(text), section)
        assert row["status"] in STATUSES
        if row["status"] == "ok":
            assert row["title"] and len(row["findings"]) <= section.max_findings
            assert row["rating"] is None or 0.0 <= row["rating"] <= 10.0

    fuzz(check)


def test_global_map_points_and_ratings():
    from corpusgraph.query.global_map import parse_points, parse_rating

    chunk = {1: "c1", 2: "c2", 3: "c3"}

    def check(text):
        points = parse_points(text, chunk)
        assert points is None or isinstance(points, list)
        for p in points or ():
            assert p.description.strip() and 0.0 <= p.score <= 100.0  # False for NaN too
            assert p.community_ids and set(p.community_ids) <= set(chunk.values())
        rating = parse_rating(text)
        assert rating is None or (type(rating) is int and 0 <= rating <= 5)

    fuzz(check)


def test_drift_steps():
    from corpusgraph.query.drift import parse_step

    def check(text):
        step = parse_step(text, 3)
        if step is not None:
            answer, follow = step
            assert isinstance(answer, str) and len(follow) <= 3 and all(q.strip() for q in follow)

    fuzz(check)


# -- the inputs that broke a parser, kept as plain examples -----------------------------------------


@pytest.mark.parametrize("text", [
    '{"entities": 5, "relationships": true, "claims": 3}',
    '{"entities": [{"name": "Mara Voss", "type": "PERSON"}], "relationships": '
    '[{"source": "Mara Voss", "target": "Ilsa Brand", "strength": 1e999}]}',
    '{"entities": ' + "1" * 5000 + "}",
    "[" * 100_000,
    '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"entities": [' + "{" * 50_000,
])
def test_inputs_that_used_to_raise_in_extraction(text):
    from corpusgraph.stages.extract.parse import parse_extraction

    row = parse_extraction(_result(text), EXTRACT)
    assert row["status"] in STATUSES


def test_deep_nesting_is_refused_quickly():
    import time

    from corpusgraph.llm.repair import repair_json_object

    begin = time.perf_counter()
    got = repair_json_object('{"a": ' + "[" * 200_000)
    assert got.obj is None and "deep" in got.error
    assert time.perf_counter() - begin < 2.0


def test_a_finite_strength_is_clamped_and_an_infinite_one_dropped():
    from corpusgraph.stages.extract.parse import parse_extraction

    text = ('{"entities": [], "relationships": [{"source": "A", "target": "B", "strength": 1e999}, '
            '{"source": "A", "target": "C", "strength": 99}]}')
    row = parse_extraction(_result(text), EXTRACT)
    assert [(r["target"], r["strength"]) for r in row["relationships"]] == [("C", 10)]
    assert not math.isinf(row["relationships"][0]["strength"])


# -- bugs the fuzz tests found in the report and map parsers, fixed there -------------------------


@pytest.mark.parametrize("findings", ['{"a": 1}', "5", "true"])
def test_report_findings_not_a_list_count_as_none(findings):
    from corpusgraph.stages.reports import parse_report

    row = parse_report(_result('{"title": "T", "findings": %s}' % findings), ReportsSection())
    assert row["status"] == "ok" and row["findings"] == []


def test_map_report_number_too_long_is_dropped():
    from corpusgraph.query.global_map import parse_points

    points = parse_points('{"points": [{"description": "d", "score": 5, "reports": ["%s"]}]}' % ("7" * 5000),
                          {1: "c1"})
    assert points[0].community_ids == ["c1"]


def test_map_nan_score_is_not_kept():
    from corpusgraph.query.global_map import parse_points

    points = parse_points('{"points": [{"description": "d", "score": NaN, "reports": [1]}]}', {1: "c1"})
    assert points == [] or not math.isnan(points[0].score)


def test_a_huge_array_parses_in_reasonable_time():
    import time

    from corpusgraph.stages.extract.parse import parse_extraction

    item = '{"name": "Mara Voss", "type": "PERSON", "description": "founder"}'
    text = '{"entities": [' + ",".join([item] * 20_000) + '], "relationships": [' + ",".join(["7"] * 20_000) + "]}"
    begin = time.perf_counter()
    row = parse_extraction(_result(text), EXTRACT)
    assert row["status"] == "ok" and [e["name"] for e in row["entities"]] == ["Mara Voss"]
    assert time.perf_counter() - begin < 10
