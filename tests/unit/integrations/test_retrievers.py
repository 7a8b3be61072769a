"""The LangChain and LlamaIndex retrievers (corpusgraph.integrations) against the real libraries
(pinned in the `retrievers` extra): over HTTP to the service (uvicorn in a thread) and in process,
on the two-domain world. A public key's documents hold nothing of the vault; the vault key's hold
its ledger (the control); a refusal raises rather than returning an empty list."""

from __future__ import annotations

import asyncio
import json

import pytest

from corpusgraph.config import Config, ServeSection
from corpusgraph.integrations import LangChainRetriever, LlamaIndexRetriever, ServiceError
from tests.support.access_world import KEYS, PUBLIC, QUESTIONS, VAULT, leaks
from tests.support.query_fixtures import EchoChat, build_two_domain_index, make_engine

pytestmark = pytest.mark.unit

QUESTION = "Who trained Tobin Hale?"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from corpusgraph.query.store import IndexStore

    return IndexStore(*build_two_domain_index(tmp_path_factory.mktemp("retrievers")))


@pytest.fixture(scope="module")
def url(world):
    from serving import create_app
    from tests.support.service_thread import serve_in_thread, wait_ready

    app = create_app(Config(serve=ServeSection(api_keys=KEYS)), engine_factory=lambda _c: make_engine(world, EchoChat()))
    with serve_in_thread(app) as base:
        wait_ready(base)
        yield base


def _langchain_text(docs) -> str:
    return json.dumps([[d.id, d.page_content, d.metadata] for d in docs])


def _llama_text(nodes) -> str:
    return json.dumps([[n.node.node_id, n.node.get_content(), n.node.metadata, n.score] for n in nodes])


def test_langchain_documents_carry_their_citation(url):
    docs = LangChainRetriever(url=url, api_key=PUBLIC, method="local").invoke(QUESTION)
    first = docs[0]
    assert first.id == "u2" and first.page_content.startswith("Mara Voss trained Tobin Hale")
    meta = first.metadata
    assert {k: meta[k] for k in ("unit_id", "doc_id", "tag", "rank", "method", "kind")} == {
        "unit_id": "u2", "doc_id": "d2", "tag": "U1", "rank": 1, "method": "local", "kind": "unit"}
    assert meta["title"] == "An apprentice" and meta["source_uri"].endswith("d2.txt") and meta["index_version"]
    assert meta["score"] == meta["similarity"]
    with_reports = LangChainRetriever(url=url, api_key=PUBLIC, include_reports=True).invoke(QUESTION)
    reports = [d for d in with_reports if d.metadata["kind"] == "report"]
    assert reports and all(d.id.startswith("report:") and d.metadata["community_id"] for d in reports)
    again = asyncio.run(LangChainRetriever(url=url, api_key=PUBLIC).ainvoke(QUESTION))
    assert [d.id for d in again] == [d.id for d in docs]


def test_llamaindex_nodes_carry_their_citation_and_score(url):
    nodes = LlamaIndexRetriever(url=url, api_key=PUBLIC, method="basic").retrieve(QUESTION)
    first = nodes[0]
    assert first.node.node_id == "u2" and first.node.get_content().startswith("Mara Voss trained Tobin Hale")
    assert first.node.metadata["doc_id"] == "d2" and first.score == first.node.metadata["similarity"]
    assert first.node.metadata["method"] == "basic"
    again = asyncio.run(LlamaIndexRetriever(url=url, api_key=PUBLIC, method="basic").aretrieve(QUESTION))
    assert [n.node.node_id for n in again] == [n.node.node_id for n in nodes]


def test_in_process_retrievers_read_the_engines_view(world):
    engine = make_engine(world, EchoChat())
    lc = LangChainRetriever(engine=engine, domains=["public"], method="local", top_k=50)
    li = LlamaIndexRetriever(engine=engine, domains=["public"], method="local", top_k=50)
    for question in QUESTIONS:
        assert leaks(_langchain_text(lc.invoke(question))) == []
        assert leaks(_llama_text(li.retrieve(question))) == []
    assert asyncio.run(lc.ainvoke(QUESTION))[0].id == "u2"
    vault = LangChainRetriever(engine=engine, domains=["vault"]).invoke(QUESTIONS[0])
    assert "dv_ledger" in {d.metadata["doc_id"] for d in vault}


@pytest.mark.parametrize("method", ["basic", "local", "global"])
def test_a_public_key_retrieves_nothing_of_the_vault_and_the_vault_key_does(url, method):
    for question in QUESTIONS:
        lc = LangChainRetriever(url=url, api_key=PUBLIC, method=method, top_k=50, include_reports=True)
        li = LlamaIndexRetriever(url=url, api_key=PUBLIC, method=method, top_k=50, include_reports=True)
        assert leaks(_langchain_text(lc.invoke(question))) == [], question
        assert leaks(_llama_text(li.retrieve(question))) == [], question
    vault = LangChainRetriever(url=url, api_key=VAULT, method=method, top_k=50, include_reports=True)
    found = set().union(*(leaks(_langchain_text(vault.invoke(q))) for q in QUESTIONS))
    assert {"zephyrine", "corvin"} <= found


def test_a_refusal_raises_with_the_services_words(url):
    with pytest.raises(ServiceError) as refused:
        LangChainRetriever(url=url, api_key=PUBLIC, domains=["public", "vault"]).invoke(QUESTION)
    assert refused.value.status == 403 and "may not read domain(s) vault" in refused.value.detail
    with pytest.raises(ServiceError) as wrong:
        LlamaIndexRetriever(url=url, api_key="not-a-key").retrieve(QUESTION)
    assert wrong.value.status == 401
    with pytest.raises(ValueError, match="one of them"):
        LangChainRetriever()
    with pytest.raises(ValueError, match="one of them"):
        LlamaIndexRetriever(url=url, engine=object())
