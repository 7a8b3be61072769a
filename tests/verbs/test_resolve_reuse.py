"""Incremental resolve: stored pair decisions (resolve_pairs) are reused only while they hold.

The fingerprints are pure; the rest runs what the resolve step runs (runner/steps/resolve.
resolve_tables, adjudication off) on in-memory tables holding small extraction fixtures
(tests/verbs/util.py): a second resolve after one unit is added or removed scores only the
candidate pairs that touch a name that unit mentions, reuses the rest, and ends with the same
tables as a from-scratch resolve of the final units. The step's own reading and writing of
resolve_pairs in Delta is covered by tests/e2e/test_update.py.
"""

from __future__ import annotations

import pytest

from pyspark.testing import assertDataFrameEqual

from corpusgraph.config import ResolveSection
from corpusgraph.prompts import Prompt
from corpusgraph.stages.resolve import score as RS
from tests.verbs.test_resolve import NO_LLM, resolve
from tests.verbs.util import FrameTables


# (unit, [(name, type, description)], [(source, target, strength)])
BASE = [
    ("u1", [("Contoso Pharmaceuticals Inc.", "ORGANIZATION", "Drug maker headquartered in Lisbon."),
            ("Lisbon", "LOCATION", "Capital of Portugal.")], [("Contoso Pharmaceuticals Inc.", "Lisbon", 4)]),
    ("u2", [("Contoso Pharmaceutcals", "ORGANIZATION", "Drug maker with a plant near Lisbon."),
            ("Lisbon", "LOCATION", "Port city.")], [("Lisbon", "Contoso Pharmaceutcals", 3)]),
    ("u3", [("Ana Reis", "PERSON", "Chief executive of Contoso."),
            ("Rui Reis", "PERSON", "Football coach in Porto.")], [("Ana Reis", "Rui Reis", 1)]),
    ("u4", [("Mikhail Gorbachev", "PERSON", "Last leader of the Soviet Union."),
            ("Moscow", "LOCATION", "Capital of Russia.")], [("Mikhail Gorbachev", "Moscow", 6)]),
    ("u5", [("Paris", "LOCATION", "Capital of France."),
            ("Paris Hilton", "PERSON", "Media personality and hotel heiress.")], [("Paris Hilton", "Paris", 1)]),
]
ADDED = ("u6", [("Michail Gorbatchev", "PERSON", "Soviet leader until 1991."),
                ("Moskva", "LOCATION", "Russian capital.")], [("Moskva", "Michail Gorbatchev", 2)])


def test_score_fingerprint_follows_the_weights_only():
    a = ResolveSection()
    assert RS.score_fingerprint(a) == RS.score_fingerprint(ResolveSection())
    assert RS.score_fingerprint(a) != RS.score_fingerprint(ResolveSection(weights={**a.weights, "name": 2.0}))
    # thresholds are applied by decide() on every run: changing them keeps the stored scores valid
    assert RS.score_fingerprint(a) == RS.score_fingerprint(ResolveSection(auto_threshold=0.7, band_low=0.1))


def test_verdict_fingerprint_follows_prompt_model_and_limits():
    from corpusgraph.stages.resolve import llm as RL

    p, sec = Prompt("Same entity? Answer in JSON.", "x"), ResolveSection()
    base = RL.verdict_fingerprint(p, sec, "m", 0.0)
    assert base == RL.verdict_fingerprint(Prompt("Same entity? Answer in JSON.", "elsewhere"), sec, "m", 0.0)
    assert base != RL.verdict_fingerprint(Prompt("Same thing? Answer in JSON.", "x"), sec, "m", 0.0)
    assert base != RL.verdict_fingerprint(p, sec, "other", 0.0)
    assert base != RL.verdict_fingerprint(p, sec, "m", 0.7)
    assert base != RL.verdict_fingerprint(p, ResolveSection(adjudicate_max_tokens=64), "m", 0.0)


# -- the transform the step runs, on in-memory tables -------------------------------------------


def _node_ids(spark, sec: ResolveSection, units):
    """Node ids of every name the units mention (listed or as a relationship end)."""
    from corpusgraph.stages.resolve import mentions as R

    names = {n for _, ents, rels in units for n, _, _ in ents} | {x for _, _, rels in units for s, t, _ in rels
                                                                  for x in (s, t)}
    df = spark.createDataFrame([(n,) for n in sorted(names)], "name string")
    return {r["id"] for r in df.select(R.node_id(R.normalised(df["name"], sec)).alias("id")).collect()}


TABLES = (("entities", "entity_id"), ("entity_aliases", "mention_key"), ("relationships", "rel_id"),
          ("claims", "claim_id"))


def _assert_same_tables(mine: FrameTables, theirs: FrameTables):
    for name, _ in TABLES:
        assertDataFrameEqual(mine.read(name), theirs.read(name))
    cols = ["a", "b", "score", "merge", "reason"]
    assertDataFrameEqual(mine.read("resolve_pairs").select(cols), theirs.read("resolve_pairs").select(cols))


def _scored_now(saved):
    return {(r["a"], r["b"]) for r in saved.parts["scored-now"].collect()}


@pytest.mark.spark
def test_a_second_resolve_scores_only_pairs_touching_the_changed_names(spark):
    tables, first, _ = resolve(spark, BASE)
    assert first["pairs_reused"] == 0 and first["pairs_scored"] == first["pairs"] > 0
    assert tables.read("resolve_pairs").count() == first["pairs"]

    # Nothing changed: every pair is reused, none scored.
    _, again, _ = resolve(spark, None, tables=tables)
    assert again["pairs_scored"] == 0 and again["pairs_reused"] == first["pairs"]

    # One unit added: only pairs with an endpoint the new unit names are scored.
    _, added, saved = resolve(spark, BASE + [ADDED], tables=tables)
    touched = _node_ids(spark, NO_LLM, [ADDED])
    scored_now = _scored_now(saved)
    assert len(scored_now) == added["pairs_scored"] > 0
    assert all(a in touched or b in touched for a, b in scored_now)
    stored = {(r["a"], r["b"]) for r in tables.read("resolve_pairs").collect()}
    away = {p for p in stored if p[0] not in touched and p[1] not in touched}
    assert away and added["pairs_reused"] >= len(away)  # every pair away from the new unit was reused
    assert added["pairs_scored"] + added["pairs_reused"] == added["pairs"] == len(stored)
    with_added = FrameTables(spark, **{name: tables.read(name) for name, _ in TABLES},
                             resolve_pairs=tables.read("resolve_pairs"))

    # One unit removed: its names' pairs are rescored or dropped, the rest reused.
    removed_unit = BASE[2]
    final = [u for u in BASE if u is not removed_unit] + [ADDED]
    _, removed, saved = resolve(spark, final, tables=tables)
    # Its two names occur nowhere else, so no surviving node changed: nothing to score, their pair dropped.
    assert removed["pairs_scored"] == 0 and _scored_now(saved) == set()
    assert removed["pairs_dropped"] > 0 and removed["pairs_reused"] == removed["pairs"] > 0

    # The same units resolved from scratch give the same tables.
    fresh, _, _ = resolve(spark, final)
    _assert_same_tables(tables, fresh)
    fresh2, _, _ = resolve(spark, BASE + [ADDED])
    _assert_same_tables(with_added, fresh2)
    # the transliteration still merges across the old and the new unit
    by_alias = {a: e["entity_id"] for e in tables.rows("entities", "entity_id") for a in e["aliases"]}
    assert by_alias["Michail Gorbatchev"] == by_alias["Mikhail Gorbachev"]


@pytest.mark.spark
def test_changed_weights_rescore_every_pair_and_exact_writes_no_pairs(spark):
    tables, first, _ = resolve(spark, BASE)
    w = {**NO_LLM.weights, "name": 2.9}
    _, res, _ = resolve(spark, None, NO_LLM.model_copy(update={"weights": w}), tables=tables)
    assert res["pairs_reused"] == 0 and res["pairs_scored"] == first["pairs"]
    exact, out, _ = resolve(spark, BASE, NO_LLM.model_copy(update={"method": "exact"}))
    assert "pairs" not in out and exact.read("resolve_pairs").count() == 0
    assert out["entities"] == len(_node_ids(spark, NO_LLM, BASE))
