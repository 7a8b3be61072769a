"""Entity resolution on small in-memory frames: the transform the resolve step runs
(runner/steps/resolve.resolve_tables, over tables held in memory and frames saved in memory:
tests/verbs/util.py), and its parts (stages/resolve/).

The adjudication tests here use a scripted chat model (prompt building and answer parsing are
what they check); tests/spark/test_resolve_step.py runs the same path as a step, through Delta
and Ray, against the real embedded server.
"""

from __future__ import annotations

import pytest
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.testing import assertDataFrameEqual

from corpusgraph.config import ResolveSection
from corpusgraph.llm.base import ChatResult
from tests.conftest import REPO
from tests.support.resolve_fixtures import AT, extraction, unit_frames
from tests.verbs.util import FrameTables, Saved

pytestmark = pytest.mark.spark

# (unit, [(name, type, description)], [(source, target, strength)])
UNITS = [
    ("u1", [("Contoso Pharmaceuticals Inc.", "ORGANIZATION", "Drug maker headquartered in Lisbon."),
            ("Lisbon", "LOCATION", "Capital of Portugal.")],
     [("Contoso Pharmaceuticals Inc.", "Lisbon", 4)]),
    ("u2", [("Contoso Pharmaceutcals", "ORGANIZATION", "Drug maker with a plant near Lisbon."),
            ("Lisbon", "LOCATION", "Port city.")],
     [("Lisbon", "Contoso Pharmaceutcals", 3)]),
    ("u3", [("CONTOSO PHARMACEUTICALS", "ORGANIZATION", "Generic drug maker in Lisbon."),
            ("Ana Reis", "PERSON", "Chief executive of Contoso.")],
     [("CONTOSO PHARMACEUTICALS", "Ana Reis", 2)]),
    ("u4", [("Contoso Pharmaceuticals EMEA", "ORGANIZATION", "Regional sales arm for Europe, set up in Madrid."),
            ("Contoso Pharmaceuticals", "ORGANIZATION", "Parent drug maker.")],
     [("Contoso Pharmaceuticals EMEA", "Contoso Pharmaceuticals", 5)]),
    ("u5", [("Reis, Ana", "PERSON", "Chief executive of the drug maker Contoso."),
            ("Rui Reis", "PERSON", "Football coach in Porto, brother of Ana Reis.")],
     [("Reis, Ana", "Rui Reis", 1)]),
    ("u6", [("Paris", "LOCATION", "Capital of France."),
            ("Paris Hilton", "PERSON", "Media personality and hotel heiress.")],
     [("Paris Hilton", "Paris", 1)]),
    ("u7", [("Mikhail Gorbachev", "PERSON", "Last leader of the Soviet Union."),
            ("Moscow", "LOCATION", "Capital of Russia.")],
     [("Mikhail Gorbachev", "Moscow", 6)]),
    ("u8", [("Michail Gorbatchev", "PERSON", "Soviet leader, led the Soviet Union until 1991."),
            ("Moscow", "LOCATION", "Russian capital.")],
     [("Moscow", "Michail Gorbatchev", 2)]),
]
# conf/local.yaml's resolve section (the defaults) with no LLM round.
NO_LLM = ResolveSection(llm_adjudication=False, summarise_descriptions=False)


def _no_model(task, df, part):
    raise AssertionError(f"resolve asked the model ({part}) with adjudication and summaries off")


def load(spark, tables: FrameTables, units) -> None:
    """The tables hold exactly `units` as live extractions (a later call replaces them)."""
    ex, tu = unit_frames(spark, units)
    tables.overwrite("extractions", ex)
    tables.overwrite("text_units", tu)


def resolve(spark, units=UNITS, sec: ResolveSection = NO_LLM, tables: FrameTables | None = None):
    """What the resolve step runs, on in-memory tables holding `units`: (tables, rows, saved frames)."""
    from corpusgraph.runner.steps.resolve import ResolveIO, resolve_tables

    tables = tables if tables is not None else FrameTables(spark)
    if units is not None:
        load(spark, tables, units)
    saved = Saved()
    rows, _ = resolve_tables(ResolveIO(tables, saved, _no_model), sec, prompt_hash="P", model="M", llm_model="M",
                             temperature=0.0)
    return tables, rows, saved


@pytest.fixture(scope="module")
def resolved(spark):
    tables, rows, _ = resolve(spark)
    ents = tables.read("entities").collect()
    by_alias = {a: e for e in ents for a in e["aliases"]}
    aliases = {r["mention"]: r for r in tables.read("entity_aliases").collect()}
    return tables, rows, by_alias, aliases


def test_variants_merge_and_hard_negatives_stay_apart(resolved):
    _, rows, by_alias, _ = resolved
    contoso = by_alias["Contoso Pharmaceuticals Inc."]
    # legal suffix and case (exact key) and a typo (similarity) all land on one entity
    assert set(contoso["aliases"]) >= {"Contoso Pharmaceuticals Inc.", "Contoso Pharmaceutcals", "CONTOSO PHARMACEUTICALS",
                                       "Contoso Pharmaceuticals"}
    assert contoso["unit_ids"] == ["u1", "u2", "u3", "u4"]
    assert by_alias["Reis, Ana"]["entity_id"] == by_alias["Ana Reis"]["entity_id"]  # word order
    assert by_alias["Michail Gorbatchev"]["entity_id"] == by_alias["Mikhail Gorbachev"]["entity_id"]  # transliteration
    # hard negatives: regional arm, sibling sharing the surname, city and namesake person
    assert by_alias["Contoso Pharmaceuticals EMEA"]["entity_id"] != contoso["entity_id"]
    assert by_alias["Rui Reis"]["entity_id"] != by_alias["Ana Reis"]["entity_id"]
    assert by_alias["Paris"]["entity_id"] != by_alias["Paris Hilton"]["entity_id"]
    assert rows["pairs_scored"] > 0 and rows["entities"] == len({e["entity_id"] for e in by_alias.values()})


def test_aliases_record_every_decision_and_a_merge_can_be_undone(resolved, spark):
    _, _, by_alias, aliases = resolved
    assert set(aliases) == {n.strip().lower() for _, ents, _ in UNITS for n, _, _ in ents}
    typo = aliases["contoso pharmaceutcals"]
    assert typo["method"] in ("similarity", "llm") and 0.0 < typo["score"] <= 1.0
    assert typo["exact_id"] != typo["entity_id"]  # merged away from its own name's entity
    own = aliases["lisbon"]
    assert own["method"] == "exact" and own["score"] == 1.0 and own["exact_id"] == own["entity_id"]
    emea = aliases["contoso pharmaceuticals emea"]
    assert emea["rejected_id"] == by_alias["Contoso Pharmaceuticals Inc."]["entity_id"]
    assert emea["rejected_reason"] in ("below_band", "not_asked") and emea["rejected_score"] < 0.5
    assert aliases["paris hilton"]["rejected_reason"] in (None, "type_clash", "below_band")
    # Undo: mapping every mention back to exact_id gives exactly the exact-name entities.
    exact_tables, _, _ = resolve(spark, sec=NO_LLM.model_copy(update={"method": "exact"}))
    exact = {r["mention"]: r["entity_id"] for r in exact_tables.read("entity_aliases").collect()}
    assert {m: a["exact_id"] for m, a in aliases.items()} == exact


def test_relationship_weights_accumulate_over_merged_endpoints(resolved):
    tables, _, by_alias, _ = resolved
    contoso, lisbon = by_alias["CONTOSO PHARMACEUTICALS"]["entity_id"], by_alias["Lisbon"]["entity_id"]
    rels = {(r["source_id"], r["target_id"]): r for r in tables.read("relationships").collect()}
    edge = rels[tuple(sorted([contoso, lisbon]))]
    assert edge["weight"] == 7.0 and edge["unit_ids"] == ["u1", "u2"]  # 4 (exact spelling) + 3 (typo)
    assert all(a != b for a, b in rels)  # no self loops from merged endpoints
    # the EMEA arm's edge to its parent survives, now pointing at the merged parent
    assert tuple(sorted([by_alias["Contoso Pharmaceuticals EMEA"]["entity_id"], contoso])) in rels


def _labels_until_stable(spark, nodes, edges):
    from corpusgraph.stages.resolve import merge as RM

    labels = RM.cc_start(nodes)
    for _ in range(20):
        new = RM.cc_step(labels, edges).localCheckpoint()
        if RM.changed(labels, new).count() == 0:
            return new
        labels = new
    raise AssertionError("no convergence")


def test_components_of_a_long_chain_with_ids_in_random_order_take_few_rounds(spark):
    """A chain of 256 names whose ids are in random order (as hashed ids are): every name ends
    with the chain's smallest id, in at most 12 rounds. Propagation alone moves a label one edge
    per round and needed 80-100 rounds on such chains (see the resolve_merge docstring)."""
    import random

    from corpusgraph.stages.resolve import merge as RM

    ids = [f"n{i:03d}" for i in range(256)]
    order = ids[:]
    random.Random(3).shuffle(order)
    nodes = spark.createDataFrame([(i,) for i in ids + ["lone"]], "node_id string")
    edges = spark.createDataFrame(list(zip(order, order[1:])), "a string, b string")
    labels = RM.cc_start(nodes)
    for rounds in range(1, 13):
        new = RM.cc_step(labels, edges).localCheckpoint()
        if RM.changed(labels, new).count() == 0:
            break
        labels = new
    else:
        raise AssertionError("not converged in 12 rounds")
    got = {r["node_id"]: r["label"] for r in new.collect()}
    assert {got[i] for i in ids} == {"n000"} and got["lone"] == "lone"
    assert rounds <= 12


def test_connected_components_and_the_chain_guard(spark):
    from corpusgraph.stages.resolve import merge as RM

    ids = [f"n{i}" for i in range(8)]
    nodes = spark.createDataFrame([(i,) for i in ids], "node_id string")
    # a chain n0-n1-...-n5 (one strong link n0-n1, the rest merely plausible) and a pair n6-n7
    chain = [("n0", "n1", 0.99), ("n1", "n2", 0.9), ("n2", "n3", 0.9), ("n3", "n4", 0.9), ("n4", "n5", 0.9),
             ("n6", "n7", 0.88)]
    edges = spark.createDataFrame(chain, "a string, b string, score double")
    labels = {r["node_id"]: r["label"] for r in _labels_until_stable(spark, nodes, edges).collect()}
    assert {labels[i] for i in ids[:6]} == {"n0"} and labels["n6"] == labels["n7"] == "n6"

    sec = ResolveSection(max_component_size=3, strict_threshold=0.95)
    lab_df = spark.createDataFrame(list(labels.items()), "node_id string, label string")
    kept, cut = RM.guard_edges(edges, lab_df, sec)
    assert sorted((r["a"], r["b"]) for r in cut.collect()) == [("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n4", "n5")]
    again = {r["node_id"]: r["label"] for r in _labels_until_stable(spark, nodes, kept).collect()}
    assert again["n1"] == "n0" and len({again[i] for i in ids[2:6]}) == 4  # the chain is cut
    assert again["n6"] == again["n7"]  # small groups keep their weaker edges

    # a component still too big after the strict bar becomes a star around its medoid
    star = spark.createDataFrame([("n0", "n1", 0.99), ("n1", "n2", 0.99), ("n2", "n3", 0.99), ("n1", "n4", 0.97)],
                                 "a string, b string, score double")
    lab = _labels_until_stable(spark, nodes, star)
    new, cut2 = RM.star_cut(lab, star, sec)
    got = {r["node_id"]: r["label"] for r in new.collect()}
    assert got["n0"] == got["n2"] == got["n4"] == got["n1"] == "n1"  # n1 has the highest score sum
    assert got["n3"] == "n3" and [(r["a"], r["b"]) for r in cut2.collect()] == [("n2", "n3")]


def test_the_guard_relabels_only_oversized_components_as_a_full_recompute_would(spark):
    from corpusgraph.runner.steps import resolve as RR
    from corpusgraph.stages.resolve import merge as RM

    ids = [f"n{i}" for i in range(12)]
    nodes = spark.createDataFrame([(i,) for i in ids], "node_id string")
    # an oversized chain n0..n5 with weak links (cut), an oversized group n6..n9 whose strong core
    # is still too big (a star), and a small pair n10-n11 with a weak link (kept)
    rows = [("n0", "n1", 0.99), ("n1", "n2", 0.9), ("n2", "n3", 0.99), ("n3", "n4", 0.9), ("n4", "n5", 0.9),
            ("n6", "n7", 0.99), ("n7", "n8", 0.99), ("n8", "n9", 0.99), ("n7", "n9", 0.97),
            ("n10", "n11", 0.88)]
    edges = spark.createDataFrame(rows, "a string, b string, score double")
    sec = ResolveSection(max_component_size=3, strict_threshold=0.95)

    save = Saved()
    labels, _ = RR._components(save, sec, nodes, edges, "cc", [])  # saved frames, as resolve hands them
    got_df, cut = RR.guarded(save, sec, edges, labels, [])
    # the reference: components recomputed over every node and every kept edge, then the star cut
    kept, weak = RM.guard_edges(edges, labels, sec)
    full, star_cut = RM.star_cut(_labels_until_stable(spark, nodes, kept), kept, sec)
    assertDataFrameEqual(got_df.select("node_id", "label"), full.select("node_id", "label"))
    got = {r["node_id"]: r["label"] for r in got_df.collect()}
    assert got["n0"] == got["n1"] == "n0" and got["n2"] == got["n3"] == "n2" and got["n5"] == "n5"
    assert got["n10"] == got["n11"] == "n10"  # a small component keeps its weak edge
    assert {got[i] for i in ids[6:10]} == {"n7"}  # the medoid (highest score sum): every member has a spoke to it
    expected_cut = {(r["a"], r["b"]) for r in weak.unionByName(star_cut).collect()}
    assert {(r["a"], r["b"]) for r in cut.collect()} == expected_cut
    assert {("n1", "n2"), ("n3", "n4"), ("n4", "n5"), ("n8", "n9")} == expected_cut


def test_each_name_takes_its_best_attaching_edge_and_its_best_rejection(spark):
    from corpusgraph.stages.resolve import merge as RM

    nodes = spark.createDataFrame([(f"n{i}", f"k{i}") for i in range(6)], "node_id string, key string")
    labels = spark.createDataFrame([("n0", "n0"), ("n1", "n0"), ("n2", "n0"), ("n3", "n3"), ("n4", "n4")],
                                   "node_id string, label string")  # n5 has no label: it stays itself
    decided = spark.createDataFrame([
        ("n0", "n1", 0.95, True, "score", None, None),
        ("n1", "n2", 0.90, True, "llm", None, "e-llm"),  # ties n0-n2 for n2: the larger other id (n1) wins
        ("n0", "n2", 0.90, True, "score", None, None),
        ("n2", "n3", 0.80, True, "score", None, None),  # cut by the guard: a rejection with reason guard
        ("n3", "n4", 0.60, False, "score", "below", None),
        ("n0", "n4", 0.60, False, "score", "y", None),  # ties n3-n4 for n4: n3 wins
        ("n2", "n9", 0.99, False, "score", "z", None),  # n9 has no label: the pair is not a decision
    ], "a string, b string, score double, merge boolean, method string, reason string, error string")
    cut = spark.createDataFrame([("n2", "n3", 0.80)], "a string, b string, score double")
    got = {r["node_id"]: (r["key"], r["entity_id"], r["score"], r["method"], r["exact_id"], r["rejected_id"],
                          r["rejected_score"], r["rejected_reason"], r["error"])
           for r in RM.decisions(nodes, labels, decided, cut).collect()}
    assert got == {
        "n0": ("k0", "n0", 1.0, "exact", "n0", "n4", 0.60, "y", None),
        "n1": ("k1", "n0", 0.95, "score", "n1", None, None, None, None),
        "n2": ("k2", "n0", 0.90, "llm", "n2", "n3", 0.80, "guard", "e-llm"),
        "n3": ("k3", "n3", 1.0, "exact", "n3", "n0", 0.80, "guard", None),
        "n4": ("k4", "n4", 1.0, "exact", "n4", "n3", 0.60, "below", None),
        "n5": ("k5", "n5", 1.0, "exact", "n5", None, None, None, None),
    }


class ScriptedJudge:
    """A chat model that answers adjudications from a script keyed on the two names it is shown."""

    model = "scripted"

    def __init__(self, answers):
        self.answers, self.seen = answers, []

    def complete(self, requests):
        out = []
        for req in requests:
            text = req.messages[1]["content"]
            self.seen.append(text)
            answer = next((a for k, a in self.answers.items() if k in text), '{"same": false, "reason": "no"}')
            out.append(ChatResult(id=req.id, text=answer, tokens_in=10, tokens_out=5))
        return out


def test_the_ambiguous_band_goes_to_the_adjudicator(spark):
    from corpusgraph.prompts import load_prompt
    from corpusgraph.stages.resolve import mentions as R
    from corpusgraph.stages.resolve import blocking as RB
    from corpusgraph.stages.resolve import llm as RL
    from corpusgraph.stages.resolve import score as RS
    from corpusgraph.tables import spark_schema

    units = [
        ("a1", [("Fabrikam Freight", "ORGANIZATION", "Forwarder in Antwerp.")], []),
        ("a2", [("Fabrikam", "ORGANIZATION", "Forwarder with a depot in Antwerp.")], []),
        ("a3", [("Northwind Labs", "ORGANIZATION", "Research lab in Oslo.")], []),
        ("a4", [("Northwind", "ORGANIZATION", "Trading house in Oslo.")], []),
        ("a5", [("Tailspin Toys", "ORGANIZATION", "Toy maker in Rome.")], []),
        ("a6", [("Tailspin", "ORGANIZATION", "Toy maker based in Rome.")], []),
    ]
    sec = ResolveSection(band_low=0.0, auto_threshold=0.999)  # every candidate pair is in the band
    ex = spark.createDataFrame([extraction(u, e, r) for u, e, r in units], spark_schema("extractions"))
    live = R.live_extractions(ex, spark.createDataFrame([(u,) for u, _, _ in units], "unit_id string"), "P", "M")
    nodes = RB.nodes(R.mentions(live, sec), live, sec)
    scored = RS.score_pairs(RS.pair_features(RB.candidate_pairs(RB.block_keys(nodes, sec), sec), nodes), sec)
    inputs = [r.asDict() for r in RL.adjudication_inputs(RS.band(scored, sec), nodes).collect()]
    assert len(inputs) == 3
    judge = ScriptedJudge({"Fabrikam Freight": '{"same": true, "reason": "same forwarder"}',
                           "Northwind Labs": '{"same": false, "reason": "lab vs trading house"}',
                           "Tailspin Toys": 'Sure! {"same": maybe'})
    task = RL.AdjudicateTask(sec, load_prompt(REPO / "conf" / "prompts" / "resolve_adjudicate.txt"))
    requests = task.requests(inputs)
    assert all(r.json_schema == RL.adjudication_schema() and r.max_tokens == sec.adjudicate_max_tokens for r in requests)
    out = task.outputs(inputs, judge.complete(requests))
    assert any("Description: Forwarder in Antwerp." in s for s in judge.seen)
    verdicts = spark.createDataFrame(out, schema=from_arrow_schema(RL.AdjudicateTask.output_schema))
    decided = {frozenset((r["a"], r["b"])): r for r in RS.decide(scored, sec, verdicts).collect()}
    title = {r["node_id"]: r["title"] for r in nodes.collect()}
    by_names = {frozenset(title[x] for x in k): v for k, v in decided.items()}
    fab = by_names[frozenset(["Fabrikam Freight", "Fabrikam"])]
    assert fab["merge"] and fab["method"] == "llm"
    north = by_names[frozenset(["Northwind Labs", "Northwind"])]
    assert not north["merge"] and north["reason"] == "llm_no"
    tail = by_names[frozenset(["Tailspin Toys", "Tailspin"])]
    assert not tail["merge"] and tail["reason"] == "parse_error" and tail["error"]  # recorded, no crash
    # with adjudication off, the same band does not merge and says why
    off = RS.decide(scored, sec, None).collect()
    assert all(not r["merge"] and r["reason"] == "not_asked" for r in off)


def test_long_merged_descriptions_are_summarised_or_cut(spark):
    from corpusgraph.prompts import load_prompt
    from corpusgraph.stages.resolve import mentions as R
    from corpusgraph.stages.resolve import llm as RL
    from corpusgraph.tables import spark_schema

    sec = ResolveSection(max_description_chars=100)
    long_a, long_b = "Operates the night shift at the Porto hub. " * 2, "Runs cold-chain trucks to Madrid. " * 2
    units = [("s1", [("Castor Haulage", "ORGANIZATION", long_a)], []),
             ("s2", [("castor haulage", "ORGANIZATION", long_b)], []),
             ("s3", [("Short Co", "ORGANIZATION", "Small.")], [])]
    ex = spark.createDataFrame([extraction(u, e, r) for u, e, r in units], spark_schema("extractions"))
    live = R.live_extractions(ex, spark.createDataFrame([(u,) for u, _, _ in units], "unit_id string"), "P", "M")
    groups = R.grouped(R.mentions(live, sec))
    todo = [r.asDict() for r in R.long_descriptions(groups, sec).collect()]
    assert [r["title"] for r in todo] == ["Castor Haulage"] and long_a.strip() in todo[0]["text"]
    task = RL.SummariseTask(sec, load_prompt(REPO / "conf" / "prompts" / "resolve_summarise.txt"))
    req = task.requests(todo)[0]
    # The schema bounds nothing (llama.cpp's server dies on a long maxLength); the parser cuts instead.
    assert "Castor Haulage" in req.messages[0]["content"] and "maxLength" not in req.json_schema["properties"]["description"]
    too_long = task.outputs(todo, [ChatResult(id=req.id, text='{"description": "%s"}' % ("Porto night shift. " * 20))])
    assert too_long[0]["status"] == "ok" and len(too_long[0]["summary"]) == 100
    out = task.outputs(todo, [ChatResult(id=req.id, text='{"description": "Night shift in Porto; trucks to Madrid."}')])
    summaries = spark.createDataFrame(out, schema=from_arrow_schema(RL.SummariseTask.output_schema))
    rels = R.relationships(live, sec)
    ents = {r["title"]: r for r in R.entities(groups, rels, sec, summaries).collect()}
    assert ents["Castor Haulage"]["description"] == "Night shift in Porto; trucks to Madrid."
    assert ents["Short Co"]["description"] == "Small."
    bad = task.outputs(todo, [ChatResult(id=req.id, text="no json here")])
    assert bad[0]["status"] == "parse_error" and bad[0]["summary"] is None
    cut = {r["title"]: r for r in R.entities(groups, rels, sec).collect()}  # no summary: joined, cut at the limit
    assert len(cut["Castor Haulage"]["description"]) == 100


def _extraction(unit_id, entities, rels):
    return {
        "unit_id": unit_id, "prompt_hash": "P", "model": "M", "status": "ok",
        "entities": [{"name": n, "type": t, "description": d} for n, t, d in entities],
        "relationships": [{"source": s, "target": t, "description": d, "strength": w} for s, t, d, w in rels],
        "claims": [], "tokens_in": 10, "tokens_out": 5, "gleanings": 0, "error": None, "raw": "{}",
        "run_id": "r", "extracted_at": AT,
    }


def test_resolve_merges_normalised_names_and_accumulates_weights(spark):
    from corpusgraph.config import ResolveSection
    from corpusgraph.stages.resolve import mentions as R
    from corpusgraph.tables import spark_schema

    units = spark.createDataFrame([(u,) for u in ["u1", "u2", "u3"]], "unit_id string")
    rows = [
        _extraction("u1", [("Contoso Ltd", "ORGANIZATION", "A forwarder."), ("Lisbon", "LOCATION", "A hub.")],
                    [("Contoso Ltd", "Lisbon", "runs a hub in", 4)]),
        _extraction("u2", [("contoso", "ORGANIZATION", "Late pickups."), ("LISBON", "LOCATION", "Port city.")],
                    [("Lisbon", "contoso", "hosts", 3), ("contoso", "Ana Reis", "employs", 2)]),
        _extraction("gone", [("Ghost", "PERSON", "x")], []),  # unit no longer exists
    ]
    ex = spark.createDataFrame(rows, spark_schema("extractions"))
    sec = ResolveSection()
    live = R.live_extractions(ex, units, "P", "M")
    rels = R.relationships(live, sec)
    ents = R.entities(R.grouped(R.mentions(live, sec)), rels, sec)
    by_title = {r["title"]: r for r in ents.collect()}
    # "Ghost" came from a dead unit; ties between spellings resolve to the smallest, repeatably.
    assert set(by_title) == {"Contoso Ltd", "LISBON", "Ana Reis"}
    contoso = by_title["Contoso Ltd"]
    assert contoso["aliases"] == ["Contoso Ltd", "contoso"] and contoso["unit_ids"] == ["u1", "u2"]
    assert contoso["frequency"] == 2 and contoso["degree"] == 2 and contoso["type"] == "ORGANIZATION"
    assert by_title["Ana Reis"]["type"] == "UNKNOWN"  # named only as an endpoint: kept, not dropped
    weights = {(r["source_id"], r["target_id"]): r["weight"] for r in rels.collect()}
    pair = tuple(sorted([contoso["entity_id"], by_title["LISBON"]["entity_id"]]))
    assert weights[pair] == 7.0  # 4 + 3, direction ignored
    aliases = R.entity_aliases(R.mentions(live, sec)).collect()
    assert {a["mention"] for a in aliases if a["entity_id"] == contoso["entity_id"]} == {"contoso ltd", "contoso"}
    assert all(a["method"] == "exact" and a["score"] == 1.0 for a in aliases)
    # The outputs match the declared table contracts.
    tables = FrameTables(spark, entities=ents, relationships=rels)
    assert tables.read("entities").count() == 3
