"""Graph retrieval: BM25, personalised PageRank, and the unit ranking over the tiny index."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from corpusgraph.config import QuerySection, RetrievalSection
from corpusgraph.graph.walk import personalized_pagerank
from corpusgraph.query import hops
from corpusgraph.query.lexical import Bm25, tokenize
from corpusgraph.query.question import parse_question
from corpusgraph.query.retrieval import GraphRetriever, rank_units
from tests.support.query_fixtures import fake_embed, rows_store

# One retriever per store for the whole module (the engine's LoadedIndex keeps one the same way).
_retriever = functools.cache(GraphRetriever)


def _unchecked(**weights) -> RetrievalSection:
    """Weights past the config's bounds (a walk over the whole tiny graph, a node cap below its size)."""
    return RetrievalSection.model_construct(**weights)


def _asked(r, text: str, vector):
    """The question as the engine hands it on: its names and the titles it names matched once."""
    return parse_question(r.store, text, vector, titles=r.titles)


# The steps after the walk, as the retriever calls them: with its passage links and unit vectors.
def _bridge(r, *args):
    return hops.bridge(r.links, r.store.vectors("text_unit"), *args)


def _entity_bridge(r, *args):
    return hops.entity_bridge(r.links, r.store.vectors("text_unit"), *args)


def _named_passages(r, *args):
    return hops.named_passages(r.links, r.store.vectors("text_unit"), *args)


def test_tokenize_drops_stop_words_and_case():
    assert tokenize("Who founded THE Lumen Guild?") == ["founded", "lumen", "guild"]


def test_bm25_prefers_rare_terms_and_shorter_texts():
    bm = Bm25(["copper copper mines", "copper lanterns in the harbour of the old town by the sea", "glass lanterns"])
    s = bm.scores("copper")
    assert s[0] > s[1] > 0 and s[2] == 0  # more occurrences, shorter text
    s = bm.scores("copper lanterns")
    assert s[1] > s[0] and s[1] > s[2]  # the only text with both terms
    assert not bm.scores("the of").any()  # stop words only: nothing matches


def test_bm25_rows_with_all_words_of_a_name():
    bm = Bm25(["Chae Song-hwa joins", "song by Chae", "hwa only", "the of"])
    assert bm.rows_with_all("Chae Song-hwa").tolist() == [0]
    assert bm.rows_with_all("chae").tolist() == [0, 1]
    assert bm.rows_with_all("Chae Zither").tolist() == []  # a word no text has
    assert bm.rows_with_all("of the") is None  # no word at all


def test_ppr_matches_igraph():
    """Our sparse power iteration against igraph's PRPACK on a random weighted graph."""
    import igraph

    rng = np.random.default_rng(7)
    n = 40
    edges = {tuple(sorted(e)) for e in rng.integers(0, n, size=(120, 2)) if e[0] != e[1]}
    edges = sorted(edges)
    w = rng.uniform(0.5, 3.0, size=len(edges))
    reset = np.zeros(n)
    reset[[1, 5, 9]] = [0.5, 0.3, 0.2]
    s, d = np.array([a for a, _ in edges]), np.array([b for _, b in edges])
    ours = personalized_pagerank(np.concatenate([s, d]), np.concatenate([d, s]), np.concatenate([w, w]), n, reset,
                                 damping=0.5, iterations=200, tol=1e-12)
    g = igraph.Graph(n=n, edges=edges, directed=False)
    theirs = np.asarray(g.personalized_pagerank(damping=0.5, reset=reset.tolist(), weights=w.tolist(), directed=False))
    assert ours.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_ppr_without_restart_mass_is_zero():
    out = personalized_pagerank(np.array([0]), np.array([1]), np.array([1.0]), 2, np.zeros(2), 0.5)
    assert not out.any()


def test_weights_come_from_the_query_section():
    w = QuerySection(retrieval={"damping": 0.7, "passage_weight": 0.2, "candidates": 9}).retrieval
    assert (w.damping, w.passage_weight, w.candidates) == (0.7, 0.2, 9)


def test_multi_hop_question_reaches_the_second_hop_passage(store):
    """'the founder of the Lumen Guild' is Mara Voss (u1); what she signed is in u5, which does
    not name the guild: with no passage restart at all, only the walk through the Mara Voss
    entity can reach it, and a passage with no entity (u6) stays unreached."""
    question = "Which treaty did the founder of the Lumen Guild sign?"
    qv = fake_embed([question])[0]
    asked = _asked(_retriever(store), question, qv)
    graph_only = dict(_retriever(store).rank(
        asked, RetrievalSection(passage_weight=0.0, seed_support=False, keep_dense=0), 10))
    assert "u5" in graph_only and "u6" not in graph_only
    assert max(graph_only, key=graph_only.get) in {"u1", "u2", "u4", "u7"}  # the guild's own passages lead
    ranked = rank_units(_retriever(store), asked, RetrievalSection(), 5)
    # With the defaults, the dense guarantee keeps the best passage by the passage score first
    # (the walk's founder passage is not ahead of it by the margin); the founder passage and the
    # treaty passage the walk reached through her are in the context too.
    scores = _retriever(store).passage_scores(asked, RetrievalSection())
    assert ranked[0] == _retriever(store).unit_ids[max(scores, key=scores.get)]
    assert "u1" in ranked and "u5" in ranked
    assert "u9" not in ranked  # its document is deleted


def test_named_entity_passages_outrank_unrelated_ones(store):
    question = "Who directs the Iron Coast Company?"
    ranked = rank_units(_retriever(store), _asked(_retriever(store), question, fake_embed([question])[0]), RetrievalSection(), 8)
    assert ranked[0] == "u3"
    assert ranked.index("u3") < ranked.index("u6")  # storms: no shared entity, low lexical overlap


def test_retriever_is_built_once_per_loaded_index(store):
    from corpusgraph.query.loaded import LoadedIndex

    loaded = LoadedIndex(store)
    assert loaded.retriever() is loaded.retriever()
    r = loaded.retriever()
    assert len(r.unit_ids) == len(store.units) and r.n == len(store.units) + len(store.entities)


def test_a_unit_is_linked_to_the_entity_named_by_its_document_title():
    """u3's text never names the company, but its document's title does ("The ..." dropped)."""
    store = rows_store(
        units={"u3": {"doc_id": "d3", "text": "It mines copper."}, "u4": {"doc_id": "d4", "text": "Copper sales."}},
        docs={"d3": {"title": "The Iron Coast Company"}, "d4": {"title": "Sales"}},
        entities={"e_iron": {"title": "Iron Coast Company", "unit_ids": ["u4"]}},
        relationships={},
        names={"iron coast company": ["e_iron"]},
    )
    r = GraphRetriever(store)
    edges = set(zip(r.graph.src.tolist(), r.graph.dst.tolist()))
    assert {(0, 1), (0, 2)} <= edges  # entity 0 -- unit u3 (node 1) and u4 (node 2)
    assert r.passages_of[0] == 2


def test_entity_vector_seeds_add_to_name_matches(store):
    """No entity is named; the nearest entity vectors seed the walk instead."""
    question = "copper director"
    qv = fake_embed([question])[0]
    asked = _asked(_retriever(store), question, qv)
    with_vectors = _retriever(store).entity_seeds(asked, RetrievalSection(entity_seeds=3))
    names_only = _retriever(store).entity_seeds(asked, RetrievalSection(entity_seeds=0))
    assert names_only == {} and with_vectors
    assert rank_units(_retriever(store), asked, RetrievalSection(entity_seeds=3), 3)


def _path_retriever(n: int):
    """A GraphRetriever over a path of n entities e0 - e1 - ... with one unit on e0."""
    ents = {f"e{i:03d}": {"title": f"E{i}", "unit_ids": ["u0"] if i == 0 else []} for i in range(n)}
    rels = {f"r{i}": {"source_id": f"e{i:03d}", "target_id": f"e{i + 1:03d}", "weight": 1.0} for i in range(n - 1)}
    store = rows_store(units={"u0": {"doc_id": "d0", "text": "x"}}, docs={"d0": {"title": ""}},
                            entities=ents, relationships=rels, names={})
    return GraphRetriever(store)


def test_neighbourhood_grows_whole_hops_within_the_cap():
    r = _path_retriever(30)  # nodes 0..29 entities on a path, node 30 the unit
    seeds = np.array([10])
    assert sorted(r.graph.neighbourhood(seeds, hops=2, cap=100).tolist()) == [8, 9, 10, 11, 12]
    # A hop that would pass the cap is not taken: 1 + 2 fits in 4, 1 + 2 + 2 does not.
    assert sorted(r.graph.neighbourhood(seeds, hops=5, cap=4).tolist()) == [9, 10, 11]


def _random_walk_graph(n: int, edges: int, hub_edges: int, seed: int = 5):
    """A random graph of n nodes with one hub (node 0) joined to hub_edges others."""
    from corpusgraph.graph.walk import WalkGraph

    rng = np.random.default_rng(seed)
    src = np.concatenate([rng.integers(0, n, edges), np.zeros(hub_edges, dtype=np.int64)])
    dst = np.concatenate([rng.integers(0, n, edges), rng.integers(1, n, hub_edges)])
    return WalkGraph(n, src, dst, rng.random(src.size) + 0.1)


def test_neighbourhood_is_the_same_through_sorting_and_through_marking(monkeypatch):
    """Hop lists small against the graph are sorted, a hub's are marked in a graph-sized array:
    the two give the same nodes in the same order (seeds, then each hop's new nodes by id)."""
    from corpusgraph.graph import walk

    g = _random_walk_graph(4000, 6000, 900)
    seeds = np.array([3, 17, 250])
    monkeypatch.setattr(walk, "_SORT_BELOW", 0)
    sorted_way = [g.neighbourhood(seeds, hops=h, cap=10**6) for h in (1, 2, 3)]
    monkeypatch.setattr(walk, "_SORT_BELOW", 10**9)
    marked = [g.neighbourhood(seeds, hops=h, cap=10**6) for h in (1, 2, 3)]
    for a, b in zip(sorted_way, marked):
        assert a.tolist() == b.tolist()
    assert len(set(sorted_way[2].tolist())) == sorted_way[2].size > sorted_way[1].size > seeds.size
    monkeypatch.undo()
    with_hub = g.neighbourhood(np.array([0]), hops=1, cap=10**6)  # 900 hub edges: the marking path
    assert with_hub[0] == 0 and np.all(np.diff(with_hub[1:]) > 0)
    assert set(with_hub[1:].tolist()) == set(g.neighbours(0).tolist()) - {0}


@pytest.mark.parametrize("sort_below", [0, 10**9])  # ids searched in sorted lists / looked up in arrays
def test_sparse_walk_gives_the_dense_walks_scores(monkeypatch, sort_below):
    """walk() returns (nodes, scores) for the nodes it may reach above max_nodes; its scores
    are those of the dense neighbourhood walk at those nodes and zero elsewhere, and below
    max_nodes those of the whole-graph PPR."""
    from corpusgraph.graph import walk

    monkeypatch.setattr(walk, "_SORT_BELOW", sort_below)
    g = _random_walk_graph(3000, 5000, 400)
    seeds, weights = np.array([900, 5, 42]), np.array([0.2, 0.5, 0.3])
    nodes, scores = g.walk(seeds, weights, 0.5, 30, 500, 2)
    # The reference: PPR on the edges with both ends in the neighbourhood, picked edge by edge,
    # each node's transitions normalised by its whole out-weight.
    expected_nodes = g.neighbourhood(np.array([5, 42, 900]), 2, 500)
    assert nodes.tolist() == expected_nodes.tolist() and nodes.size <= 500
    at = {int(v): i for i, v in enumerate(expected_nodes)}
    edges = [(at[a], at[b], w) for a, b, w in zip(g.src.tolist(), g.dst.tolist(), g.weight.tolist())
             if a in at and b in at]
    src, dst, wt = (np.array(x) for x in zip(*edges))
    reset = np.zeros(nodes.size)
    reset[[at[5], at[42], at[900]]] = [0.5, 0.3, 0.2]
    expected = personalized_pagerank(src, dst, wt, nodes.size, reset, 0.5, 30, out_weight=g.out_w[expected_nodes])
    np.testing.assert_allclose(scores, expected, rtol=1e-9, atol=1e-15)
    assert scores.sum() > 0
    dense = np.zeros(g.n)
    dense[seeds] = weights
    np.testing.assert_array_equal(g.neighbourhood_pagerank(dense, 0.5, 30, 2, 500)[nodes], scores)
    reset = dense
    all_nodes, whole = g.walk(seeds, weights, 0.5, 30, g.n, 2)
    np.testing.assert_array_equal(whole[np.argsort(all_nodes)], g.pagerank(reset, 0.5, 30, g.n, 2))


def test_neighbourhood_walk_equals_the_full_walk_when_it_covers_the_graph(store):
    """Reaching every node, the bounded walk is the full PPR; bounded tighter, it keeps the top
    of the ranking (what the context needs) while zeroing far nodes."""
    r = _retriever(store)
    rng = np.random.default_rng(3)
    reset = np.zeros(r.n)
    reset[rng.choice(r.n, size=3, replace=False)] = [0.5, 0.3, 0.2]
    full = personalized_pagerank(r.graph.src, r.graph.dst, r.graph.weight, r.n, reset, 0.5, 200, tol=1e-12)
    covering = r.neighbourhood_pagerank(reset, _unchecked(max_walk_nodes=10**6, walk_hops=r.n, iterations=200))
    np.testing.assert_allclose(covering, full, atol=1e-6)
    near = r.neighbourhood_pagerank(reset, RetrievalSection(max_walk_nodes=10**6, walk_hops=1, iterations=200))
    assert int(np.argmax(near)) == int(np.argmax(full))
    assert (near == 0).sum() > (full == 0).sum()  # nodes past one hop were never visited


def test_large_graphs_rank_through_the_bounded_walk(store):
    """With the whole-graph limit below the store's size, ranking takes the bounded path and the
    multi-hop passage is still reached through the founder entity."""
    question = "Which treaty did the founder of the Lumen Guild sign?"
    qv = fake_embed([question])[0]
    n = _retriever(store).n
    w = _unchecked(passage_weight=0.0, seed_support=False, keep_dense=0, max_walk_nodes=n - 1, walk_hops=3)
    ranked = dict(_retriever(store).rank(_asked(_retriever(store), question, qv), w, 10))
    assert "u5" in ranked and "u6" not in ranked


class _ExactVectors:
    """A vector index over a dict of unit vectors: read-back and exact search."""

    def __init__(self, vecs: dict[str, list[float]]):
        self.vecs = vecs

    def vectors(self, ids):
        return np.asarray([self.vecs[i] for i in ids], dtype=np.float32)

    def search(self, q, k):
        scores = {u: float(np.dot(v, q.reshape(-1))) for u, v in self.vecs.items()}
        return [sorted(scores.items(), key=lambda x: -x[1])[:k]]


def _bridge_store():
    """uA (the first hop) names the film by its title without the "(1986 film)" qualifier; the
    film's document has two units, uB2 closer to the question than uB1."""
    vecs = {"uA": [1.0, 0.0, 0.0], "uB1": [0.3, 0.954, 0.0], "uB2": [0.6, 0.8, 0.0], "uX": [0.0, 0.0, 1.0],
            "uO": [0.9, 0.436, 0.0]}

    units = {
        "uA": {"doc_id": "dA", "text": "Maximum Overdrive was shot in Leland, by the river. The crew stayed."},
        "uB1": {"doc_id": "dB", "text": "The cast list."},
        "uB2": {"doc_id": "dB", "text": "It was directed by Stephen King."},
        "uX": {"doc_id": "dX", "text": "Weather in the Cape Fear region."},
        "uO": {"doc_id": "dO", "text": "The crew of Overdrive Maximum."},
    }
    docs = {"dA": {"title": "Leland, North Carolina"}, "dB": {"title": "Maximum Overdrive (1986 film)"},
            "dX": {"title": "Cape Fear"}, "dO": {"title": "The"}}
    return rows_store(units=units, docs=docs, entities={}, relationships={}, names={},
                           vectors=lambda kind: _ExactVectors(vecs), match_names=lambda question: [])


def test_documents_are_found_by_their_title_mentioned_as_whole_words():
    r = GraphRetriever(_bridge_store())
    assert hops.mentioned_documents(r.links, "uA") == ["dB"]  # qualifier dropped; "The" (stop words only) is no title
    assert hops.mentioned_documents(r.links, "uO") == []  # the words in another order are no mention
    assert hops.mentioned_documents(r.links, "uX") == []  # its own title does not count


def test_bridge_step_puts_the_mentioned_document_after_the_passage_that_names_it():
    r = GraphRetriever(_bridge_store())
    q = np.array([0.6, 0.8, 0.0], dtype=np.float32)  # nearest uB2 (cosine 1.0), then uB1 (0.94)
    ranked = [("uA", 0.9), ("uX", 0.5), ("uO", 0.4)]
    by_question = RetrievalSection(bridge_from=1, bridge_novelty=0.0)
    assert _bridge(r, ranked, q, by_question) == [("uA", 0.9), ("uB2", 0.9), ("uX", 0.5), ("uO", 0.4)]
    # With novelty, uB1 wins: nearly as close to the question and much less like uA (0.3 vs 0.6).
    assert _bridge(r, ranked, q, RetrievalSection(bridge_from=1, bridge_novelty=0.5))[1] == ("uB1", 0.9)
    # Off, or every linked passage too far from the question: the ranking is left as it was.
    assert _bridge(r, ranked, q, RetrievalSection(bridge_from=0)) == ranked
    assert _bridge(r, ranked, np.array([0.0, 0.0, 1.0], dtype=np.float32), RetrievalSection(bridge_from=1)) == ranked
    # The floor applies before novelty: uB1 (0.94) falls below it, so uB2 is taken.
    assert _bridge(r, ranked, q, RetrievalSection(bridge_from=1, bridge_novelty=0.5, bridge_min_score=0.95))[1] == ("uB2", 0.9)
    # A bridged passage ranked lower moves up (once, with the score of the passage before it);
    # one already placed above is not taken again, so the next-best unit of the document is.
    low = [("uA", 0.9), ("uX", 0.5), ("uB2", 0.3)]
    assert _bridge(r, low, q, by_question) == [("uA", 0.9), ("uB2", 0.9), ("uX", 0.5)]
    above = [("uB2", 0.95), ("uA", 0.9), ("uX", 0.5)]
    assert _bridge(r, above, q, RetrievalSection(bridge_from=2, bridge_novelty=0.0)) == \
        [("uB2", 0.95), ("uA", 0.9), ("uB1", 0.9), ("uX", 0.5)]


def test_a_title_inside_the_passages_own_title_is_no_mention():
    store = rows_store(
        units={"u1": {"doc_id": "d1", "text": "A game in which direct action squads meet Dale Brown's heroes."},
               "u2": {"doc_id": "d2", "text": "Tactics."}, "u3": {"doc_id": "d3", "text": "An author."}},
        docs={"d1": {"title": "Act of War: Direct Action"}, "d2": {"title": "Direct action (military)"},
              "d3": {"title": "Dale Brown"}},
        entities={}, relationships={}, names={},
    )
    assert hops.mentioned_documents(GraphRetriever(store).links, "u1") == ["d3"]


def test_titles_sharing_a_first_word_are_told_apart_by_their_whole_run():
    docs = {f"d{i}": {"title": f"Dispatch {i}"} for i in range(50)}
    docs["dn"] = {"title": "Dispatch"}  # a one-word title under the same first word
    docs["dl"] = {"title": "Dispatch 7 (annex)"}  # the same words as d7 once the qualifier goes
    store = rows_store(units={"u0": {"doc_id": "d0", "text": "Dispatch note 0: see Dispatch 7, then dispatch 12."}},
                            docs=docs, entities={}, relationships={}, names={})
    r = GraphRetriever(store)
    # "Dispatch" (own title "Dispatch 0" contains it) is no mention; runs of two words are.
    assert hops.mentioned_documents(r.links, "u0") == ["d7", "dl", "d12"]


def test_a_document_the_question_names_by_title_goes_first_and_is_bridged_from():
    r = GraphRetriever(_bridge_store())
    # The question names "Leland, North Carolina" (dA's title): its passage uA goes first even
    # though the walk found nothing; then the bridge follows uA to the film it names.
    q = np.array([0.8, 0.6, 0.0], dtype=np.float32)
    question = "Who directed the film shot in Leland, North Carolina?"
    assert _named_passages(r, _asked(r, question, q), RetrievalSection()) == ["uA"]
    assert _named_passages(r, _asked(r, question, q), RetrievalSection(title_seeds=0)) == []
    assert _named_passages(r, _asked(r, question, q), RetrievalSection(title_min_score=0.9)) == []  # uA's cosine is 0.8
    assert _named_passages(r, _asked(r, "Who wrote about Leland?", q), RetrievalSection()) == []  # part of a title is no title
    # A question far from uA in vector space: the walk alone ranks it below uX and uO.
    far = np.array([0.0, 0.3, 0.954], dtype=np.float32)
    question = "Which weather station reports near Leland, North Carolina?"
    named = RetrievalSection(title_min_score=0.0, keep_dense=0)
    assert [u for u, _ in r.rank(_asked(r, question, far), RetrievalSection(title_seeds=0, bridge_from=0), 5)][0] == "uX"
    ranked = [u for u, _ in r.rank(_asked(r, question, far), named, 5)]
    assert ranked[0] == "uA" and ranked[1] in {"uB1", "uB2"}  # named first, then its bridge
    # Under the guarantee the title step obeys the walk's rule: uA's place is the walk's best score,
    # no more than what protects uX (the passages' best), so uX keeps the first place; uA follows.
    guarded = [u for u, _ in r.rank(_asked(r, question, far), RetrievalSection(title_min_score=0.0), 5)]
    assert guarded[0] == "uX" and "uA" in guarded


def _entity_bridge_store():
    """uS (Signmark, the first hop) states Finland; uM (the Finnish markka) mentions Finland too.
    uQ shares only Signmark, which the question names; uS2 is another paragraph of uS's own
    document; uH shares only a hub entity found in 61 passages (60 fillers). Seen from the
    question, uQ, uS2 and uH all beat uM once novelty is counted: each must lose for its reason."""
    vecs = {"uS": [1.0, 0.0, 0.0], "uM": [0.6, 0.8, 0.0], "uQ": [0.0, 1.0, 0.0], "uS2": [0.0, 1.0, 0.0],
            "uH": [0.0, 0.98, 0.2], "uE": [0.0, 0.0, 1.0], "uX": [0.0, 0.0, 1.0]}
    fillers = [f"f{i}" for i in range(60)]
    vecs.update({f: [0.0, 0.0, 1.0] for f in fillers})

    units = {u: {"doc_id": "d" + u[1:], "text": ""} for u in vecs}
    units["uS2"]["doc_id"] = "dS"
    docs = {row["doc_id"]: {"title": ""} for row in units.values()}
    entities = {"signmark": {"unit_ids": ["uS", "uS2", "uQ"]}, "finland": {"unit_ids": ["uS", "uS2", "uM"]},
                "hub": {"unit_ids": ["uS", "uH", *fillers]}, "euro": {"unit_ids": ["uE", "uM"]}}
    return rows_store(units=units, docs=docs, entities=entities, relationships={}, names={},
                           vectors=lambda kind: _ExactVectors(vecs), match_names=lambda question: ["signmark"])


def test_entity_bridge_follows_a_stated_entity_to_the_passage_the_question_needs_next():
    r = GraphRetriever(_entity_bridge_store())
    q = np.array([0.6, 0.8, 0.0], dtype=np.float32)
    named = {r.entity_index["signmark"]}
    ranked = [("uS", 0.9), ("uE", 0.5), ("uX", 0.4)]
    one = RetrievalSection(entity_bridge_from=1)
    # Finland leads to uM; Signmark (named by the question), the hub (61 passages > sqrt(67)) and uS's
    # own document are not followed, though uQ, uH and uS2 score higher.
    assert _entity_bridge(r, ranked, q, one, named) == [("uS", 0.9), ("uM", 0.9), ("uE", 0.5), ("uX", 0.4)]
    # Each exclusion matters: without it, the passage it kept out wins.
    assert _entity_bridge(r, ranked, q, one)[1] == ("uQ", 0.9)
    assert _entity_bridge(r, ranked, q, RetrievalSection(entity_bridge_from=1, entity_bridge_max_passages=100),
                           named)[1] == ("uH", 0.9)
    # Off, or nothing close enough to the question: the ranking is left as it was.
    assert _entity_bridge(r, ranked, q, RetrievalSection(entity_bridge_from=0), named) == ranked
    assert _entity_bridge(r, ranked, np.array([0.0, 0.0, 1.0], dtype=np.float32), one, named) == ranked
    # The first passages keep their places; a bridged passage found lower moves up once.
    low = [("uS", 0.9), ("uE", 0.5), ("uX", 0.4), ("uM", 0.1)]
    assert _entity_bridge(r, low, q, RetrievalSection(entity_bridge_from=2), named) == \
        [("uS", 0.9), ("uE", 0.5), ("uM", 0.9), ("uX", 0.4)]


def test_rank_hands_the_entities_the_question_names_to_the_entity_bridge(monkeypatch):
    r = GraphRetriever(_entity_bridge_store())
    question = "What currency did Signmark's country use?"
    assert r.named_entities(_asked(r, question, None)) == {r.entity_index["signmark"]}  # match_names: Signmark
    seen = []
    follow = hops.entity_bridge
    monkeypatch.setattr(hops, "entity_bridge", lambda links, vectors, ranked, qv, w, named=frozenset():
                        seen.append(named) or follow(links, vectors, ranked, qv, w, named))
    ranked = [u for u, _ in r.rank(_asked(r, question, np.array([0.6, 0.8, 0.0], dtype=np.float32)), RetrievalSection(), 10)]
    assert seen == [{r.entity_index["signmark"]}]
    assert len(ranked) == len(set(ranked))  # no passage twice


def _hub_store():
    """Chat-log shape: 'lihua' is in all 40 passages; 'party' (its vector nearest the question,
    so a vector seed) is in p1..p4, none of which the passage scores favour; uT is the passage
    the question is about and names no specific entity."""
    q_dir = [1.0, 0.0, 0.0]
    units_vec = {"uT": [0.95, 0.312, 0.0]}
    units_vec.update({f"p{i}": [0.3, 0.0, 0.954] for i in range(1, 5)})
    units_vec.update({f"f{i}": [0.0, 0.3, 0.954] for i in range(35)})
    entity_vec = {"lihua": [0.0, 1.0, 0.0], "party": q_dir}
    units = {u: {"doc_id": "d" + u, "text": ""} for u in units_vec}
    docs = {row["doc_id"]: {"title": ""} for row in units.values()}
    entities = {"lihua": {"unit_ids": sorted(units)}, "party": {"unit_ids": [f"p{i}" for i in range(1, 5)]}}
    return rows_store(units=units, docs=docs, entities=entities, relationships={}, names={},
                           vectors=lambda kind: _ExactVectors(units_vec if kind == "text_unit" else entity_vec),
                           match_names=lambda question: ["lihua"])


def test_hub_seeds_give_way_to_the_passage_scores_and_the_best_passage_is_kept():
    r = GraphRetriever(_hub_store())
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    question = "What did Li Hua say about the party?"
    old = RetrievalSection(seed_support=False, keep_dense=0, entity_bridge_from=0)
    # A fixed entity share: the vector seed's four passages take the first places.
    assert [u for u, _ in r.rank(_asked(r, question, q), old, 5)][0] != "uT"
    # Seed support alone: neither seed is supported by the passage scores (the hub's passages
    # are mostly fillers, the party's score low), so the passage scores decide.
    support_only = RetrievalSection(keep_dense=0, entity_bridge_from=0)
    assert [u for u, _ in r.rank(_asked(r, question, q), support_only, 5)][0] == "uT"
    # The guarantee's margin is scaled by (1 - trust), trust being the seeds' support: with
    # seed support off the walk is fully trusted and the guarantee moves nothing but the first
    # place, which is basic search's best passage whatever the graph says (keep_first).
    guard_only = RetrievalSection(seed_support=False, entity_bridge_from=0, keep_first=False)
    assert r.rank(_asked(r, question, q), guard_only, 5) == r.rank(_asked(r, question, q), old, 5)
    first_kept = RetrievalSection(seed_support=False, entity_bridge_from=0)
    assert [u for u, _ in r.rank(_asked(r, question, q), first_kept, 5)][0] == "uT"
    # The defaults: uT first.
    assert [u for u, _ in r.rank(_asked(r, question, q), RetrievalSection(), 5)][0] == "uT"


QUESTIONS_FOR_GUARANTEE = ("Who taught Tobin Hale?", "What did Mara Voss and Ilsa Brand agree in Port Keel?",
                           "Do winter storms halt the copper mines?", "Who holds a lantern festival in spring?")


def test_the_guarantee_keeps_basic_searchs_first_places_against_a_graph_without_the_margin(store):
    from corpusgraph.query.hybrid import basic_ranking
    from corpusgraph.query.loaded import LoadedIndex

    loaded, r = LoadedIndex(store), _retriever(store)
    for question in QUESTIONS_FOR_GUARANTEE:
        asked = _asked(r, question, fake_embed([question])[0])
        basic = basic_ranking(loaded, asked, QuerySection(), 5).unit_ids
        # An arbitrary basic ranking (its reverse) and a margin no walk score reaches: every
        # protected passage keeps its place, at each of the first five ranks, steps included.
        for protected in (basic, basic[::-1]):
            ranked = rank_units(r, asked, RetrievalSection(keep_dense_margin=1e9, seed_support_scale=1e-9), 10,
                                protected)
            assert ranked[:5] == protected[:5], question
        # With the margin derived from the walk, the first place is basic's whatever the graph says;
        # without keep_first it is basic's or the graph's own choice.
        assert r.rank(asked, RetrievalSection(), 10, basic)[0][0] == basic[0], question
        graph_only = [u for u, _ in r.rank(asked, RetrievalSection(keep_dense=0), 10)]
        assert r.rank(asked, RetrievalSection(keep_first=False), 10, basic)[0][0] in (basic[0], graph_only[0]), question


def test_the_guarantee_margin_comes_from_the_damping_unless_configured():
    from corpusgraph.query.adaptive import guarantee_margin

    assert guarantee_margin(RetrievalSection()) == 1.0  # d = 0.5: the walk can at most double a score
    assert guarantee_margin(RetrievalSection(damping=0.8)) == pytest.approx(4.0)
    assert guarantee_margin(RetrievalSection(keep_dense_margin=0.3)) == 0.3


def test_a_protected_passage_outside_the_candidates_is_walked_and_keeps_its_place(store):
    # A reranker may lift a passage the passage scores never took in (one candidate here): it gets
    # restart mass, so a graph choice must beat its walk score, not an absent one.
    r = _retriever(store)
    question = "Who taught Tobin Hale?"
    asked = _asked(r, question, fake_embed([question])[0])
    w = RetrievalSection(candidates=1, keep_dense_margin=1e9, seed_support_scale=1e-9)
    ranked = r.rank(asked, w, 10, ["u6", "u2"])
    assert [u for u, _ in ranked[:2]] == ["u6", "u2"] and ranked[0][1] > 0


def _sparse_link_store():
    """Chat-log style: "Chae Song-hwa" is named in every passage's text, but extraction linked
    her entity to one passage only (uB, about karaoke). The question's best passages are uA and
    uC; uW has her name's words apart and does not name her."""
    vecs = {"uA": [0.95, 0.312, 0.0], "uC": [0.9, 0.436, 0.0], "uB": [0.2, 0.0, 0.98], "uW": [0.0, 0.2, 0.98]}
    texts = {"uA": "Chae Song-hwa has a lecture and cannot join the rehearsal on Sunday.",
             "uC": "No rehearsal for her: the hall is closed this week.",
             "uB": "Chae Song-hwa picked three karaoke songs.",
             "uW": "Chae said the song was by Hwa."}
    for i in range(8):
        vecs[f"f{i}"] = [0.1, 0.0, 0.995]
        texts[f"f{i}"] = f"ChaeSong-hwa: good morning, note {i}."
    units = {u: {"doc_id": "d" + u, "text": t} for u, t in texts.items()}
    docs = {row["doc_id"]: {"title": ""} for row in units.values()}
    entities = {"chae": {"title": "Chae Song-hwa", "unit_ids": ["uB"]}}
    return rows_store(units=units, docs=docs, entities=entities, relationships={}, names={},
                      vectors=lambda kind: _ExactVectors(vecs if kind == "text_unit" else {"chae": [0.0, 0.0, 1.0]}),
                      match_names=lambda question: ["chae"])


def test_mentions_count_the_passages_whose_text_names_the_entity():
    r = GraphRetriever(_sparse_link_store())
    e = r.entity_index["chae"]
    # uA, uB and the eight "ChaeSong-hwa:" lines (spacing and punctuation aside); not uW, which
    # has the words but not the name, nor uC. Its links reach one of them.
    assert r.mentions(e) == 10 and r.passages_of[e] == 1


def test_a_seed_linked_to_few_of_the_passages_naming_it_does_not_move_basic_searchs_places():
    r = GraphRetriever(_sparse_link_store())
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    asked = _asked(r, "Why can Chae Song-hwa not join the rehearsal?", q)
    protected = ["uA", "uC", "uB"]
    # Without the coverage, the seed's one linked passage is "well supported" (its own passage
    # scores well on her name) and the walk puts it above basic search's second passage.
    blind = [u for u, _ in r.rank(asked, RetrievalSection(seed_coverage=False, entity_bridge_from=0), 5, protected)]
    assert blind[:2] == ["uA", "uB"]
    # Her links cover 1 of the 10 passages naming her: the seed loses its trust, and basic
    # search's first two places stand.
    ranked = [u for u, _ in r.rank(asked, RetrievalSection(entity_bridge_from=0), 5, protected)]
    assert ranked[:2] == ["uA", "uC"]


def test_identifiers_are_words_of_letters_and_digits_without_ordinals():
    from corpusgraph.query.lexical import identifiers

    text = "Trailer R-77 (booking HQ-52910, report IR-VLC-2026-014) on the PS5 in 2026, the 4th and 26TH; r-77 again"
    assert identifiers(text) == ["R-77", "HQ-52910", "IR-VLC-2026-014", "PS5", "r-77"]
    assert identifiers("Who runs the Milan hub?") == [] and identifiers("") == []


def _identifier_store(extra_r77: int = 0):
    """The README's first question in small: uM writes trailer R-77's move and is far from the
    question in the dense space; the incident reports f0..f5 are near it and share its words
    (dock, lead, hub, trailer, other trailers' R- numbers). No entity holds R-77. uX writes
    "SR-770", which is not R-77; `extra_r77` fillers write R-77 too, making it common."""
    vecs = {"uM": [0.1, 0.0, 0.995], "uX": [0.0, 1.0, 0.0]}
    texts = {"uM": "Trailer R-77 left Valencia on 17 March and is stationed at the Milan hub.",
             "uX": "Order SR-770 for the hub shipped late."}
    for i in range(6):
        vecs[f"f{i}"] = [0.9, 0.436, 0.0]
        texts[f"f{i}"] = f"Incident at the hub: the dock lead found trailer R-{50 + i} warm; the trailer was moved."
    for i in range(extra_r77):
        vecs[f"e{i}"] = [0.0, 0.0, 1.0]
        texts[f"e{i}"] = "A note that mentions trailer R-77 in passing."
    units = {u: {"doc_id": "d" + u, "text": t} for u, t in texts.items()}
    docs = {row["doc_id"]: {"title": ""} for row in units.values()}
    entities = {"valencia": {"title": "Valencia", "unit_ids": ["uM"]}, "hub": {"title": "hub", "unit_ids": sorted(units)}}
    return rows_store(units=units, docs=docs, entities=entities, relationships={}, names={},
                      vectors=lambda kind: _ExactVectors(vecs), match_names=lambda question: [])


def test_an_identifier_the_question_writes_seeds_the_passages_that_write_it():
    r = GraphRetriever(_identifier_store())
    question = _asked(r, "Who is the dock lead at the hub that trailer R-77 was moved to?",
                      np.array([1.0, 0.0, 0.0], dtype=np.float32))
    w = RetrievalSection()
    # The passages writing R-77 whole: uM, not uX's SR-770.
    assert {code: [r.unit_ids[i] for i in rows] for code, rows in r.identifier_passages(question, w).items()} == \
        {"R-77": ["uM"]}
    without = [u for u, _ in r.rank(question, RetrievalSection(code_seeds=False), 5)]
    ranked = [u for u, _ in r.rank(question, w, 5)]
    # Without the identifier's seed the incident reports fill the first places and uM is not among
    # them; with it uM comes second: the first place stays the passage scores' best (keep_first).
    assert "uM" not in without
    assert ranked[1] == "uM" and ranked[0] == without[0]


def test_an_identifier_in_more_passages_than_the_candidates_or_held_by_a_named_entity_is_no_seed():
    common = GraphRetriever(_identifier_store(extra_r77=4))
    question = _asked(common, "Who is the dock lead at the hub that trailer R-77 was moved to?",
                      np.array([1.0, 0.0, 0.0], dtype=np.float32))
    assert len(common.identifier_passages(question, RetrievalSection())["R-77"]) == 5
    assert common.identifier_passages(question, _unchecked(**{**RetrievalSection().model_dump(), "candidates": 4})) == {}
    # A named entity whose title does not hold the identifier leaves it a seed of its own; one whose
    # title holds it ("Trailer R-77") is the seed instead.
    r = GraphRetriever(_identifier_store())
    named = parse_question(r.store, "Where is trailer R-77?", None, named=["valencia"])
    assert list(r.identifier_passages(named, RetrievalSection())) == ["R-77"]
    r77 = rows_store(units={"uM": {"doc_id": "dM", "text": "Trailer R-77 is in Milan."}}, docs={"dM": {"title": ""}},
                     entities={"t": {"title": "Trailer R-77", "unit_ids": ["uM"]}}, relationships={}, names={},
                     vectors=lambda kind: _ExactVectors({"uM": [1.0, 0.0, 0.0]}), match_names=lambda q: ["t"])
    held = GraphRetriever(r77)
    assert held.identifier_passages(parse_question(held.store, "Where is trailer R-77?", None), RetrievalSection()) == {}
