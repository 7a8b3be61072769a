"""Basic search's ranking: relative score and reciprocal rank fusion, the rerankers against a real HTTP server of our
own (TEI, vLLM and Cohere-style shapes), the chat model as a listwise reranker (scripted here; the
real bundled model in tests/llm), and what basic search reports about the ranking that ran."""

from __future__ import annotations

import pytest

from corpusgraph.config import QuerySection, RerankSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.llm.rerank import ChatReranker, HttpReranker, open_reranker, parse_listwise
from corpusgraph.query.hybrid import relative_score, rrf
from tests.support.query_fixtures import ScriptedChat, make_engine
from tests.support.rerank_server import RerankServer

pytestmark = pytest.mark.unit

PASSAGES = ["The guild makes lanterns.", "Copper is mined near Grey Hollow by the company.",
            "Storms flood the valley."]
QUERY = "Where is copper mined by the company?"


def test_rrf_rewards_agreement_and_keeps_first_met_order_on_ties():
    fused = [item for item, _ in rrf([["a", "b", "c"], ["b", "d", "a"]])]
    assert fused[0] == "b"  # 2nd and 1st beats 1st and 3rd
    assert fused.index("a") < fused.index("c") and fused.index("a") < fused.index("d")
    assert [item for item, _ in rrf([["x", "y"], ["y", "x"]])] == ["x", "y"]  # a tie: as first met
    assert rrf([]) == [] and [i for i, _ in rrf([["only"]])] == ["only"]


# BM25 puts x far ahead of every other hit; dense search puts x third, just under y and z.
LEXICAL = [("x", 20.0), ("y", 2.0), ("z", 1.0)]
DENSE = [("y", 0.60), ("z", 0.59), ("x", 0.55), ("w", 0.20)]


def test_relative_score_keeps_a_hit_that_one_ranking_puts_far_ahead_where_rank_fusion_sees_only_ranks():
    fused = relative_score([LEXICAL, DENSE])
    # x: 1 (BM25's best) + (0.55 - 0.20) / (0.60 - 0.20) = 1.875; y: (2 - 1) / 19 + 1; z: 0 + 0.975; w: 0
    assert [item for item, _ in fused] == ["x", "y", "z", "w"]
    assert dict(fused)["x"] == pytest.approx(1.875) and dict(fused)["w"] == 0.0
    # Rank fusion sees x 1st and 3rd against y 2nd and 1st, and puts y first.
    assert [item for item, _ in rrf([[u for u, _ in LEXICAL], [u for u, _ in DENSE]])][0] == "y"


def test_relative_score_on_equal_scores_missing_items_and_ties():
    # Equal scores in a run count 1 each; an item missing from a run gets 0 from it.
    assert relative_score([[("a", 3.0), ("b", 3.0)], [("c", 0.9), ("a", 0.1)]]) == [("a", 1.0), ("b", 1.0), ("c", 1.0)]
    assert [item for item, _ in relative_score([[("x", 2.0), ("y", 1.0)], [("y", 2.0), ("x", 1.0)]])] == ["x", "y"]
    assert relative_score([]) == [] and relative_score([[], [("only", 0.3)]]) == [("only", 1.0)]


def test_hybrid_basic_search_fuses_as_query_fusion_says(store):
    from corpusgraph.query.hybrid import basic_ranking, dense_hits, lexical_hits
    from corpusgraph.query.loaded import LoadedIndex
    from corpusgraph.query.question import parse_question
    from tests.support.query_fixtures import FakeEmbedder

    assert QuerySection().fusion == "relative_score"
    loaded = LoadedIndex(store)
    text = "Who mines copper near Grey Hollow?"
    question = parse_question(store, text, FakeEmbedder().embed([text])[0])
    dense = dense_hits(store, question.vector, 100)
    lexical = lexical_hits(loaded.retriever(), text, 100)
    assert dense and lexical
    for fusion, expected in (("relative_score", relative_score([dense, lexical])),
                             ("rrf", rrf([[u for u, _ in dense], [u for u, _ in lexical]]))):
        got = basic_ranking(loaded, question, QuerySection(fusion=fusion), 10)
        assert (got.method, got.unit_ids) == ("hybrid", [u for u, _ in expected[:10]]), fusion


@pytest.mark.parametrize("backend,path", [("tei", "/rerank"), ("vllm_score", "/score"), ("cohere", "/v1/rerank")])
def test_each_endpoint_shape_scores_every_passage_in_order(backend, path):
    with RerankServer() as srv:
        base = srv.base_url + ("/v1" if backend == "cohere" else "")
        scores = HttpReranker(backend, base, model="rr-model", api_key="k-1").rerank(QUERY, PASSAGES)
        assert len(scores) == 3 and max(range(3), key=scores.__getitem__) == 1  # the copper passage
        sent_path, body, auth = srv.requests[-1]
        assert sent_path == path and auth == "Bearer k-1"
        assert (body.get("texts") or body.get("text_2") or body.get("documents")) == PASSAGES


def test_an_endpoint_failure_or_a_short_answer_raises():
    with RerankServer() as srv:
        with pytest.raises(RuntimeError, match="HTTP 500"):
            HttpReranker("tei", srv.base_url).rerank(QUERY, ["fail: this one", "ok"])
        srv.short = True
        with pytest.raises(RuntimeError, match="scored 2 of 3"):
            HttpReranker("tei", srv.base_url).rerank(QUERY, PASSAGES)
    with pytest.raises(ValueError, match="api_base"):
        open_reranker(RerankSection(backend="tei"))
    assert open_reranker(RerankSection()) is None


def test_listwise_answers_are_parsed_defensively():
    assert parse_listwise('{"ranking": [2, 2, 9, 1]}', 3) == [2, 1]  # repeats and out-of-range dropped
    assert parse_listwise("I think [3] then [1]", 3) == [3, 1]  # prose: the numbers in order
    assert parse_listwise(None, 3) == [] and parse_listwise('{"ranking": "x"}', 3) == []


def test_the_chat_reranker_puts_named_passages_first_and_the_rest_in_given_order():
    chat = ScriptedChat(map_answer=lambda prompt: '{"ranking": [2]}')  # schema-constrained requests
    scores = ChatReranker(chat).rerank(QUERY, PASSAGES)
    assert sorted(range(3), key=lambda i: -scores[i]) == [1, 0, 2]
    request = chat.batches[-1][0]
    assert request.json_schema["properties"]["ranking"]["maxItems"] == 3 and "[2] Copper" in request.messages[-1]["content"]
    with pytest.raises(RuntimeError, match="named no passage"):
        ChatReranker(ScriptedChat(map_answer=lambda prompt: "no idea")).rerank(QUERY, PASSAGES)


class _Failing:
    model = "failing"

    def complete(self, requests):
        return [ChatResult(id=r.id, text=None, error="server down") for r in requests]


def test_basic_search_reports_which_ranking_ran_and_keeps_hybrid_when_the_reranker_fails(store):
    question = "Who mines copper near Grey Hollow?"
    dense = make_engine(store, ScriptedChat("ok [U1]."), basic="dense").ask(question, method="basic")
    hybrid = make_engine(store, ScriptedChat("ok [U1]."), basic="hybrid").ask(question, method="basic")
    assert dense.coverage["ranking"] == "dense" and hybrid.coverage["ranking"] == "hybrid"
    # The fusion is reported where a hybrid ranking ran, and only there.
    assert "fusion" not in dense.coverage and hybrid.coverage["fusion"] == "relative_score"
    by_rank = make_engine(store, ScriptedChat("ok [U1]."), basic="hybrid", fusion="rrf").ask(question, method="basic")
    assert by_rank.coverage["fusion"] == "rrf"
    with RerankServer() as srv:
        reranked = make_engine(store, ScriptedChat("ok [U1]."),
                               rerank={"backend": "tei", "api_base": srv.base_url}).ask(question, method="basic")
        assert reranked.coverage["ranking"] == "hybrid+rerank" and srv.requests
    broken = make_engine(store, ScriptedChat("ok [U1]."),
                         rerank={"backend": "tei", "api_base": "http://127.0.0.1:9"}).ask(question, method="basic")
    assert broken.coverage["ranking"] == "hybrid" and "rerank_error" in broken.coverage
    assert [c.unit_id for c in broken.citations] == [c.unit_id for c in hybrid.citations]
    local = make_engine(store, ScriptedChat("ok [U1]."), basic="hybrid").ask(question, method="local")
    assert local.coverage["basic_ranking"] == "hybrid" and local.coverage["basic_fusion"] == "relative_score"
    assert QuerySection().basic == "hybrid"
    from corpusgraph.query.answer import format_answer

    assert "ranked hybrid+rerank" in format_answer(reranked)
    assert "the reranker failed, hybrid order kept" in format_answer(broken)
    assert "guaranteed against basic search's hybrid ranking (relative_score fusion)" in format_answer(local)
    assert "ranked hybrid (rrf fusion)" in format_answer(by_rank)
