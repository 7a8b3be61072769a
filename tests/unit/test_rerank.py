"""Basic search's ranking: reciprocal rank fusion, the rerankers against a real HTTP server of our
own (TEI, vLLM and Cohere-style shapes), the chat model as a listwise reranker (scripted here; the
real bundled model in tests/llm), and what basic search reports about the ranking that ran."""

from __future__ import annotations

import pytest

from corpusgraph.config import QuerySection, RerankSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.llm.rerank import ChatReranker, HttpReranker, open_reranker, parse_listwise
from corpusgraph.query.hybrid import rrf
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
    with RerankServer() as srv:
        reranked = make_engine(store, ScriptedChat("ok [U1]."),
                               rerank={"backend": "tei", "api_base": srv.base_url}).ask(question, method="basic")
        assert reranked.coverage["ranking"] == "hybrid+rerank" and srv.requests
    broken = make_engine(store, ScriptedChat("ok [U1]."),
                         rerank={"backend": "tei", "api_base": "http://127.0.0.1:9"}).ask(question, method="basic")
    assert broken.coverage["ranking"] == "hybrid" and "rerank_error" in broken.coverage
    assert [c.unit_id for c in broken.citations] == [c.unit_id for c in hybrid.citations]
    local = make_engine(store, ScriptedChat("ok [U1]."), basic="hybrid").ask(question, method="local")
    assert local.coverage["basic_ranking"] == "hybrid"
    assert QuerySection().basic == "hybrid"
    from corpusgraph.query.answer import format_answer

    assert "ranked hybrid+rerank" in format_answer(reranked)
    assert "the reranker failed, hybrid order kept" in format_answer(broken)
    assert "guaranteed against basic search's hybrid ranking" in format_answer(local)
