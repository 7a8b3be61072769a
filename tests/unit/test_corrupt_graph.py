"""The corruptions of the retrieval benchmark (tests/support/corrupt_graph.py) on the tiny index:
each spoils what it says and nothing else, and local ranking on the spoiled graph keeps basic
search's first two places (the guarantee at the ranks a reader reads)."""

from __future__ import annotations

import pytest

from corpusgraph.config import QuerySection
from corpusgraph.query.hybrid import basic_ranking
from corpusgraph.query.loaded import LoadedIndex
from corpusgraph.query.question import parse_question
from corpusgraph.query.retrieval import rank_units
from tests.support.corrupt_graph import EMPTY_TITLE, HUB_SHARE, HUBS, corrupt
from tests.support.query_fixtures import fake_embed

pytestmark = pytest.mark.unit

QUESTIONS = ("Who taught Tobin Hale?", "Who mines copper near Grey Hollow?",
             "What did Mara Voss and Ilsa Brand agree in Port Keel?", "Who holds a lantern festival in spring?")


def test_each_corruption_spoils_the_graph_and_keeps_the_text(store):
    links, facts = corrupt(store, "random_links", seed=1)
    assert facts["entities_relinked"] == len(store.entities) and set(links.units) == set(store.units)
    assert [len(links.entities[e]["unit_ids"]) for e in store.entities] == \
        [len(store.entities[e]["unit_ids"]) for e in store.entities]
    assert any(links.relationships[r]["source_id"] != store.relationships[r]["source_id"] for r in store.relationships)
    hubs, facts = corrupt(store, "hub_boilerplate")
    added = [e for e in hubs.entities if e not in store.entities]
    assert len(added) == HUBS and all(len(hubs.entities[h]["unit_ids"]) == int(HUB_SHARE * len(store.units))
                                      for h in added)
    titles, _ = corrupt(store, "empty_titles")
    assert {d["title"] for d in titles.docs.values()} == {EMPTY_TITLE}
    assert [u["text"] for u in titles.units.values()] == [u["text"] for u in store.units.values()]
    with pytest.raises(ValueError, match="unknown corruption"):
        corrupt(store, "nonsense")


def _first_two(store, question):
    loaded = LoadedIndex(store)
    asked = parse_question(store, question, fake_embed([question])[0], titles=loaded.retriever().titles)
    basic = basic_ranking(loaded, asked, QuerySection(), 5).unit_ids
    return basic[:2], rank_units(loaded.retriever(), asked, QuerySection().retrieval, 10, basic)[:2]


def test_on_a_graph_of_random_links_local_keeps_basic_searchs_first_two_places(store):
    bad, _ = corrupt(store, "random_links")
    for question in QUESTIONS:
        basic, local = _first_two(bad, question)
        assert local == basic, question


@pytest.mark.parametrize("kind", ["hub_boilerplate", "empty_titles"])
def test_hubs_and_empty_titles_change_nothing_at_the_first_two_places(store, kind):
    # The graph's real evidence is still there (Tobin Hale's edge to Mara Voss puts u1 second):
    # hubs get no restart mass (seed support) and a title that names nothing links nothing.
    bad, _ = corrupt(store, kind)
    for question in QUESTIONS:
        assert _first_two(bad, question)[1] == _first_two(store, question)[1], question
