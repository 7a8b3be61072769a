"""Coverage on every answer, checked against the Saltreach world (query_fixtures.py) by hand.

The world's live index: 8 documents d1..d8 with one unit each (u1..u8; d9 is deleted), 5
reports: level 0 c0a (units u1 u2 u5 u7) and c0b (u3 u4 u6 u8); level 1 c1a (u1 u2), c1b
(u5 u7) and c1c (u3 u4); c1d (u8) has no report. Every expected figure below is worked out
from those lists, not asked of the code.
"""

from __future__ import annotations

import json
import re

import pytest

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatResult
from corpusgraph.query.access import restrict
from corpusgraph.query.answer import format_answer
from corpusgraph.query.engine import METHODS
from tests.support.query_fixtures import ENTITIES, ScriptedChat, build_two_domain_index, fake_embed
from tests.support.query_fixtures import make_engine as engine
from tests.unit.query.test_global import RatingChat

pytestmark = pytest.mark.unit

NOT_RESTRICTED = {"restricted": False, "communities_hidden": 0}


class MapChat(RatingChat):
    """RatingChat whose map answers are chosen per report title: `answers[title]` is the raw map
    answer text for a chunk holding that report (prose: unparseable)."""

    def __init__(self, answers: dict[str, str], **kw):
        super().__init__({}, **kw)
        self.answers = answers

    def complete(self, requests):
        out = super().complete(requests)
        for i, r in enumerate(requests):
            if r.id.startswith("map-"):
                titles = [t for _, t in re.findall(r"Report (\d+): (.+)", r.messages[-1]["content"])]
                for title in titles:
                    if title in self.answers:
                        out[i] = ChatResult(id=r.id, text=self.answers[title], tokens_in=100, tokens_out=10)
        return out


def test_global_at_a_level_counts_reports_units_and_documents_under_them(store):
    answer = engine(store, RatingChat({})).ask("What holds the coast together?", method="global", level=0)
    cov = answer.coverage
    assert cov["method"] == "global" and cov["reports_mapped"] == 2 and cov["reports_in_index"] == 5
    assert cov["by_level"] == [{"level": 0, "mapped": 2, "reports": 2}]
    # c0a and c0b together hold all 8 live units, so all 8 documents.
    assert (cov["units_under"], cov["units_in_index"], cov["unit_share"]) == (8, 8, 1.0)
    assert (cov["documents_under"], cov["documents_in_index"], cov["document_share"]) == (8, 8, 1.0)
    assert cov["selection"] is None and cov["view"] == NOT_RESTRICTED
    # RatingChat answers one point (score 50) per report: 2 points, both in the reduce.
    assert cov["points"] == {"returned": 2, "zero_score": 0, "unselected": 0, "kept": 2, "dropped": 0}

    level1 = engine(store, RatingChat({})).ask("What holds the coast together?", method="global", level=1).coverage
    # c1a, c1b, c1c: u1 u2 u5 u7 u3 u4 = 6 of 8 units, d1 d2 d3 d4 d5 d7 = 6 of 8 documents.
    assert level1["by_level"] == [{"level": 1, "mapped": 3, "reports": 3}]
    assert (level1["units_under"], level1["unit_share"], level1["document_share"]) == (6, 0.75, 0.75)


def test_dynamic_selection_says_what_it_rated_pruned_and_descended(store):
    chat = RatingChat({"c0a": 4, "c0b": 0, "c1a": 3, "c1b": 0})
    cov = engine(store, chat).ask("What holds the lantern trade together?", method="global").coverage
    # Rated c0a c0b, then c0a's children c1a c1b; c0b and c1b pruned; only c0a descended.
    sel = cov["selection"]
    assert (sel["rated"], sel["pruned"], sel["descended"], sel["threshold"]) == (4, 2, 1, 1)
    assert sel["fallback"] is False and sel["rating_failed"] == 0
    # c1a alone is mapped: u1 u2 -> 2 of 8 units and documents.
    assert cov["reports_mapped"] == 1 and cov["by_level"] == [{"level": 1, "mapped": 1, "reports": 3}]
    assert (cov["unit_share"], cov["document_share"]) == (0.25, 0.25)
    # c1b, a leaf, was mapped with its rating and its one point dropped when it was pruned.
    assert sel["mapped_early"] == 2 and sel["early_pruned"] == 1 and cov["points"]["unselected"] == 1

    fallback = engine(store, RatingChat({}, default=0), global_={"level": 0}).ask("Anything?", method="global").coverage
    assert fallback["selection"]["fallback"] is True and fallback["selection"]["pruned"] == 2
    assert fallback["reports_mapped"] == 2 and fallback["document_share"] == 1.0


# Report blocks (with their separator) are 106 tokens (c1a), 102 (c1b) and 98 (c1c): a 200-token
# budget packs c1a alone and c1b with c1c, so level 1 is mapped in two chunks.
WORKSHOP, TREATY = "The Lumen Guild workshop", "Treaty town"


def _points(*scored: tuple[str, int]) -> str:
    return json.dumps({"points": [{"description": d, "score": s, "reports": [1]} for d, s in scored]})


def test_failed_and_zero_scored_map_answers_are_counted(store):
    chat = MapChat({WORKSHOP: "I cannot answer in JSON.", TREATY: _points(("Nothing here.", 0), ("Treaties.", 40))})
    cov = engine(store, chat, max_context_tokens=200).ask("What holds it?", method="global", level=1).coverage
    assert cov["map_calls"] == 2 and cov["map_failed"] == 1
    assert cov["points"] == {"returned": 2, "zero_score": 1, "unselected": 0, "kept": 1, "dropped": 0}
    # The failed chunk's report still counts as mapped: the map step read it (its answer is lost).
    assert cov["reports_mapped"] == 3


def test_points_the_reduce_budget_leaves_out_are_counted_as_dropped(store):
    # "[Pn] (importance 50) " and 80 words of " word" make a 90-token block with its newline, so a
    # 200-token reduce holds two blocks and no useful part of a third (19 tokens left < 32).
    long = " ".join(["word"] * 80)
    chat = MapChat({WORKSHOP: _points((long, 50), (long, 50)), TREATY: _points((long, 50))})
    cov = engine(store, chat, max_context_tokens=200).ask("What holds it?", method="global", level=1).coverage
    assert cov["points"] == {"returned": 3, "zero_score": 0, "unselected": 0, "kept": 2, "dropped": 1}


def test_local_seeds_say_how_they_were_found_and_the_context_is_counted(store):
    question = "Who taught Tobin Hale?"
    # The nearest entity vector other than the named Tobin Hale, from the texts the index embeds.
    texts = {e: f"{t}: {d}" for e, (t, _, d, _) in ENTITIES.items()}
    sims = {e: float(fake_embed([v])[0] @ fake_embed([question])[0]) for e, v in texts.items()}
    nearest = max((e for e in sims if e != "e_tobin"), key=lambda e: sims[e])
    chat = ScriptedChat("Mara Voss [U1].")
    answer = engine(store, chat, top_k_entities=2, top_k_units=3).ask(question, method="local")
    cov = answer.coverage
    assert cov["seeds"] == [{"entity_id": "e_tobin", "title": "Tobin Hale", "found_by": "name"},
                            {"entity_id": nearest, "title": ENTITIES[nearest][0], "found_by": "vector"}]
    assert cov["hops"] == 1
    prompt = chat.batches[0][0].messages[-1]["content"]
    tags = re.findall(r"\[U(\d+)\] \(from ([^)]*)\)", prompt)
    assert cov["units"] == len(tags) and cov["documents"] == len({title for _, title in tags})
    budget = QuerySection().max_context_tokens
    assert cov["budget_tokens"] == budget and cov["context_tokens"] == answer.context_tokens > 0
    assert cov["budget_used"] == round(answer.context_tokens / budget, 4)


def test_basic_reports_k_and_the_similarity_of_the_last_unit_kept(store):
    question = "Do winter storms halt the copper mines?"
    qv = fake_embed([question])[0]
    ids = sorted(store.units)
    sims = sorted((fake_embed([store.units[u]["text"]])[0] @ qv for u in ids), reverse=True)
    cov = engine(store, ScriptedChat("x"), top_k_units=3).ask(question, method="basic").coverage
    assert cov["k"] == 3 and cov["units"] == 3 and cov["documents"] == 3  # one unit per document
    assert cov["last_similarity"] == pytest.approx(float(sims[2]), abs=1e-4)


def test_drift_counts_its_primer_and_follow_up_contexts(store):
    from tests.unit.query.test_drift import DriftChat

    chat = DriftChat(["Who trained Tobin Hale?"])
    cov = engine(store, chat).ask("How did Mara Voss shape the guild?", method="drift").coverage
    assert cov["primer_reports"] == 3 and cov["follow_ups"] == 1
    assert {"entity_id": "e_tobin", "title": "Tobin Hale", "found_by": "name"} in cov["seeds"]
    follow = next(r for b in chat.batches for r in b if r.id == "drift-0-0").messages[-1]["content"]
    assert cov["units"] == len(re.findall(r"\[U\d+\] \(from", follow))
    assert cov["budget_tokens"] == 2 * QuerySection().max_context_tokens  # the primer's context and one follow-up's


@pytest.mark.parametrize("method", METHODS)
def test_every_method_answers_with_coverage(store, method):
    answer = engine(store, RatingChat({"c0a": 3})).ask("How did Mara Voss shape the Lumen Guild?", method=method)
    assert answer.coverage["method"] == answer.method and answer.coverage["view"] == NOT_RESTRICTED
    assert json.loads(json.dumps(answer.to_dict()))["coverage"] == answer.coverage


def test_a_restricted_view_is_covered_within_itself_and_counts_what_it_hides(tmp_path):
    from corpusgraph.query.store import IndexStore

    full = IndexStore(*build_two_domain_index(tmp_path))
    view = restrict(full, {"public"})
    cov = engine(view, RatingChat({})).ask("What holds the coast together?", method="global", level=0).coverage
    # The public view: level 0 has only c0b (c0a takes in the cartel); 8 public units and documents.
    assert cov["by_level"] == [{"level": 0, "mapped": 1, "reports": 1}] and cov["reports_in_index"] == 3
    assert (cov["units_in_index"], cov["unit_share"], cov["document_share"]) == (8, 0.5, 0.5)
    # Hidden: c0a and c1b (mixed), cv_vault and cv_inner (vault only): a count, nothing else.
    assert cov["view"] == {"restricted": True, "communities_hidden": 4}
    whole = engine(full, RatingChat({})).ask("What holds the coast together?", method="global", level=0).coverage
    assert whole["view"] == NOT_RESTRICTED and whole["reports_in_index"] == 7 and whole["units_in_index"] == 11


def test_the_shell_text_shows_coverage(store):
    answer = engine(store, RatingChat({})).ask("What holds the coast together?", method="global", level=0)
    text = format_answer(answer)
    assert ("Coverage: 2 reports mapped (2 of 2 at level 0; 5 in the index); under them 100% of documents, "
            "100% of text units") in text
    assert "map answers failed: 0 of 1; points kept 2, dropped 0" in text
    local = format_answer(engine(store, ScriptedChat("x"), top_k_entities=1).ask("Who taught Tobin Hale?",
                                                                                  method="local"))
    assert "Coverage: seeds Tobin Hale (name); 1 hop(s);" in local


def test_per_domain_reports_raise_a_restricted_keys_coverage(tmp_path):
    from corpusgraph.query.store import IndexStore

    view = restrict(IndexStore(*build_two_domain_index(tmp_path, per_domain=True)), {"public"})
    cov = engine(view, RatingChat({})).ask("What holds the coast together?", method="global", level=0).coverage
    # Level 0 of the view: c0b and the public report of c0a (units u1 u2 u5 u7): all 8 public units.
    assert cov["by_level"] == [{"level": 0, "mapped": 2, "reports": 2}] and cov["reports_in_index"] == 5
    assert (cov["unit_share"], cov["document_share"]) == (1.0, 1.0)
    # c0a and c1b are partly seen now; only the vault's own two communities are hidden.
    assert cov["view"] == {"restricted": True, "communities_hidden": 2}


def test_the_share_of_a_keys_documents_under_reports_it_can_map(tmp_path):
    from corpusgraph.query.coverage import mappable_document_share
    from corpusgraph.query.store import IndexStore

    before = IndexStore(*build_two_domain_index(tmp_path / "before"))
    after = IndexStore(*build_two_domain_index(tmp_path / "after", per_domain=True))
    # Public: c0b c1a c1c hold u1 u2 u3 u4 u6 u8 (6 of 8 documents); the public reports of c0a and
    # c1b add u5 u7. Vault: cv_vault and cv_inner hold uv_ledger (1 of 3); c0a's vault report adds uv_bribe.
    assert mappable_document_share(restrict(before, {"public"})) == 0.75
    assert mappable_document_share(restrict(after, {"public"})) == 1.0
    assert mappable_document_share(restrict(before, {"vault"})) == round(1 / 3, 4)
    assert mappable_document_share(restrict(after, {"vault"})) == round(2 / 3, 4)
    # The whole index: every document but dv_crates (no community holds uv_crates): 10 of 11, either way.
    assert mappable_document_share(before) == mappable_document_share(after) == round(10 / 11, 4)
