"""The chat model as a listwise reranker, against the real bundled model (llama.cpp's server).

What is checked is the path, not the 135M model's judgement: the schema grammar makes the answer
parse, every passage gets a score, and basic search reports hybrid+rerank with the call counted
in the answer's cost (or, where the model's answer named no passage, hybrid with the reason).
"""

from __future__ import annotations

import pytest

from corpusgraph.config import LLMSection, QuerySection
from corpusgraph.llm import EmbeddedServer, open_chat_model
from corpusgraph.llm.rerank import ChatReranker
from tests.support.query_fixtures import REPO, FakeEmbedder, build_tiny_index

pytestmark = [pytest.mark.llm, pytest.mark.slow]  # two calls to the CPU model


def test_the_chat_model_reranks_listwise(tmp_path):
    from corpusgraph.query.engine import QueryEngine
    from corpusgraph.query.store import IndexStore

    store = IndexStore(*build_tiny_index(tmp_path))
    with EmbeddedServer(log_path=tmp_path / "server.log") as server:
        chat = open_chat_model(LLMSection(backend="embedded"), tmp_path / "cache", base_url=server.base_url)
        passages = ["The Iron Coast Company mines copper near Grey Hollow.", "Winter storms flood the valley.",
                    "The guild makes glass lanterns."]
        scores = ChatReranker(chat).rerank("Who mines copper?", passages)
        assert len(scores) == 3 and len(set(scores)) == 3  # a strict order over every passage
        section = QuerySection(max_tokens=60, top_k_units=3, rerank={"backend": "chat", "candidates": 4})
        answer = QueryEngine(store, chat, FakeEmbedder(), section, REPO / "conf").ask(
            "Who mines copper near Grey Hollow?", method="basic")
        assert answer.coverage["ranking"] in ("hybrid+rerank", "hybrid")
        if answer.coverage["ranking"] == "hybrid":
            assert answer.coverage["rerank_error"]
        assert answer.llm_calls == 2  # the rerank call and the answer, both metered
