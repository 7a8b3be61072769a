"""Incremental resolve: stored pair decisions (resolve_pairs) are reused only while they hold.

The fingerprints are pure; the rest runs the real resolve step (steps.index.resolve on Delta, local
Spark, adjudication off) on small extraction fixtures: a second resolve after one unit is added
or removed scores only the candidate pairs that touch a name that unit mentions, reuses the
rest, and ends with the same tables as a from-scratch resolve of the final units.
"""

from __future__ import annotations

import pytest

from corpusgraph.config import ResolveSection, load_config
from corpusgraph.prompts import Prompt
from corpusgraph.stages.resolve import score as RS
from tests.conftest import REPO
from tests.verbs.test_resolve import extraction


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


# -- the real step on Delta -----------------------------------------------------------------------


def _context(spark, folder, **overrides):
    from corpusgraph.runner.run import RunContext

    base = {"storage.warehouse": str(folder / "wh"), "storage.index_dir": str(folder / "idx"),
            "storage.cache_dir": str(folder / "cache"), "resolve.llm_adjudication": "false",
            "resolve.summarise_descriptions": "false"}
    ctx = RunContext(load_config(REPO / "conf" / "local.yaml", {**base, **overrides}), spark)
    ctx.wh.ensure_all()
    return ctx


def _load(ctx, units):
    """The extractions and text_units tables hold exactly `units` (a later call replaces them)."""
    from corpusgraph.stages.extract.llm import extract_identity
    from corpusgraph.tables import spark_schema

    _, phash, model = extract_identity(ctx.cfg.extract, ctx.cfg.prompt_path, ctx.cfg.llm.model)
    rows = [extraction(u, e, r, phash, model) for u, e, r in units]
    ctx.wh.overwrite("extractions", ctx.spark.createDataFrame(rows, spark_schema("extractions")))
    ctx.wh.overwrite("text_units", ctx.spark.createDataFrame(
        [(u, "d", 0, "", 0, 0, 0) for u, _, _ in units],
        "unit_id string, doc_id string, ordinal int, text string, n_tokens int, char_start int, char_end int"))


def _node_ids(ctx, units):
    """Node ids of every name the units mention (listed or as a relationship end)."""
    from corpusgraph.stages.resolve import mentions as R

    names = {n for _, ents, rels in units for n, _, _ in ents} | {x for _, _, rels in units for s, t, _ in rels
                                                                  for x in (s, t)}
    df = ctx.spark.createDataFrame([(n,) for n in sorted(names)], "name string")
    return {r["id"] for r in df.select(R.node_id(R.normalised(df["name"], ctx.cfg.resolve)).alias("id")).collect()}


def _tables(ctx):
    out = {}
    for name, key in (("entities", "entity_id"), ("entity_aliases", "mention_key"), ("relationships", "rel_id"),
                      ("claims", "claim_id")):
        out[name] = sorted((r.asDict(recursive=True) for r in ctx.wh.read(name).collect()), key=lambda r: r[key])
    out["resolve_pairs"] = sorted((r["a"], r["b"], r["score"], r["merge"], r["reason"])
                                  for r in ctx.wh.read("resolve_pairs").collect())
    return out


def _scored_now(ctx):
    return {(r["a"], r["b"]) for r in ctx.spark.read.parquet(ctx.handoff("resolve", "scored-now")).collect()}


@pytest.mark.spark
def test_a_second_resolve_scores_only_pairs_touching_the_changed_names(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage

    ctx = _context(spark, tmp_path / "inc")
    _load(ctx, BASE)
    first = run_stage(ctx, "resolve")
    assert first.rows["pairs_reused"] == 0 and first.rows["pairs_scored"] == first.rows["pairs"] > 0
    assert ctx.wh.read("resolve_pairs").count() == first.rows["pairs"]

    # Nothing changed: every pair is reused, none scored.
    again = run_stage(ctx, "resolve")
    assert again.rows["pairs_scored"] == 0 and again.rows["pairs_reused"] == first.rows["pairs"]

    # One unit added: only pairs with an endpoint the new unit names are scored.
    _load(ctx, BASE + [ADDED])
    added = run_stage(ctx, "resolve")
    touched = _node_ids(ctx, [ADDED])
    scored_now = _scored_now(ctx)
    assert len(scored_now) == added.rows["pairs_scored"] > 0
    assert all(a in touched or b in touched for a, b in scored_now)
    stored = {(r["a"], r["b"]) for r in ctx.wh.read("resolve_pairs").collect()}
    away = {p for p in stored if p[0] not in touched and p[1] not in touched}
    assert away and added.rows["pairs_reused"] >= len(away)  # every pair away from the new unit was reused
    assert added.rows["pairs_scored"] + added.rows["pairs_reused"] == added.rows["pairs"] == len(stored)
    with_added = _tables(ctx)

    # One unit removed: its names' pairs are rescored or dropped, the rest reused.
    removed_unit = BASE[2]
    final = [u for u in BASE if u is not removed_unit] + [ADDED]
    _load(ctx, final)
    removed = run_stage(ctx, "resolve")
    # Its two names occur nowhere else, so no surviving node changed: nothing to score, their pair dropped.
    assert removed.rows["pairs_scored"] == 0 and _scored_now(ctx) == set()
    assert removed.rows["pairs_dropped"] > 0 and removed.rows["pairs_reused"] == removed.rows["pairs"] > 0
    incremental = _tables(ctx)

    # The same units resolved from scratch give the same tables.
    fresh = _context(spark, tmp_path / "fresh")
    _load(fresh, final)
    run_stage(fresh, "resolve")
    assert _tables(fresh) == incremental
    fresh2 = _context(spark, tmp_path / "fresh2")
    _load(fresh2, BASE + [ADDED])
    run_stage(fresh2, "resolve")
    assert _tables(fresh2) == with_added
    # the transliteration still merges across the old and the new unit
    by_alias = {a: e["entity_id"] for e in incremental["entities"] for a in e["aliases"]}
    assert by_alias["Michail Gorbatchev"] == by_alias["Mikhail Gorbachev"]


@pytest.mark.spark
def test_changed_weights_rescore_every_pair_and_exact_writes_no_pairs(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage

    ctx = _context(spark, tmp_path / "w")
    _load(ctx, BASE)
    first = run_stage(ctx, "resolve")
    w = {**ctx.cfg.resolve.weights, "name": 2.9}
    other = _context(spark, tmp_path / "w", **{"resolve.weights": w})
    res = run_stage(other, "resolve")
    assert res.rows["pairs_reused"] == 0 and res.rows["pairs_scored"] == first.rows["pairs"]
    exact = _context(spark, tmp_path / "exact", **{"resolve.method": "exact"})
    _load(exact, BASE)
    out = run_stage(exact, "resolve")
    assert "pairs" not in out.rows and exact.wh.read("resolve_pairs").count() == 0
    assert out.rows["entities"] == len({e for e in _node_ids(exact, BASE)})
