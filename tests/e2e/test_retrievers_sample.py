"""The LangChain and LlamaIndex retrievers (the `retrievers` extra, pinned) on the sample index the
pipeline built (the shared e2e index): in process and through `corpusgraph serve`'s app over HTTP.
The retrievers must return the engine's own context (the same units, in order), each document
cited with its source file. Each single-fact question of the sample
(lib/corpusgraph/samples/freight/questions.jsonl) names the document that holds its answer; basic
search's eight units hold it for every one of them. (Local search's do not for q06, whose answer is
one record of records.jsonl: a retrieval question for tests/benchmarks/test_retrieval.py, not for the
retrievers.)"""

from __future__ import annotations

import json

import pytest

from corpusgraph.config import Config, load_config
from corpusgraph.integrations import LangChainRetriever, LlamaIndexRetriever
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

QUESTIONS = [json.loads(line) for line in (REPO / "lib" / "corpusgraph" / "samples" / "freight" / "questions.jsonl")
             .read_text().splitlines() if line.strip()]
SINGLE = [q for q in QUESTIONS if q["type"] == "single_fact"]


@pytest.fixture(scope="module")
def config(sample_index) -> Config:
    return load_config(REPO / "conf" / "local.yaml", sample_index.sets)


@pytest.fixture(scope="module")
def engine(config):
    from corpusgraph.query.open import open_query_engine

    return open_query_engine(config, None)


def _evidence_found(uris: list[str], question: dict) -> bool:
    return any(uri.endswith(e.removeprefix("docs/")) for e in question["evidence"] for uri in uris)


@pytest.mark.parametrize("method", ["basic", "local"])
def test_in_process_retrievers_return_each_answers_document_with_its_citation(engine, method):
    lc = LangChainRetriever(engine=engine, method=method, top_k=8)
    li = LlamaIndexRetriever(engine=engine, method=method, top_k=8)
    for q in SINGLE:
        docs, nodes = lc.invoke(q["question"]), li.retrieve(q["question"])
        units = engine.context(q["question"], method=method, top_k=8).units
        assert [d.id for d in docs if d.metadata["kind"] == "unit"] == [u["unit_id"] for u in units], q["id"]
        assert [n.node.node_id for n in nodes if n.node.metadata["kind"] == "unit"] == [u["unit_id"] for u in units]
        if method == "basic":
            assert _evidence_found([d.metadata["source_uri"] for d in docs], q), q["id"]
        assert all(d.page_content.strip() and d.metadata["doc_id"] and d.metadata["method"] == method for d in docs)


def test_retrievers_over_http_match_the_engine(config, engine):
    from serving import create_app
    from tests.support.service_thread import serve_in_thread, wait_ready

    with serve_in_thread(create_app(config, engine_factory=lambda _c: engine)) as base:
        wait_ready(base)
        for q in SINGLE[:3]:
            for method in ("basic", "local"):
                over_http = LangChainRetriever(url=base, method=method, top_k=8).invoke(q["question"])
                here = LangChainRetriever(engine=engine, method=method, top_k=8).invoke(q["question"])
                assert [d.id for d in over_http] == [d.id for d in here] and over_http, (q["id"], method)
                assert [d.metadata["source_uri"] for d in over_http] == [d.metadata["source_uri"] for d in here]
            nodes = LlamaIndexRetriever(url=base, method="basic", top_k=8).retrieve(q["question"])
            assert _evidence_found([n.node.metadata["source_uri"] for n in nodes], q), q["id"]
