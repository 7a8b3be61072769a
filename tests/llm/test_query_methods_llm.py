"""Dynamic global search and DRIFT against the real bundled model, on the Saltreach test world.

The 135M model's answers are weak; what is checked is the path: ratings come back parsed
through the schema grammar, selection and the follow-up rounds run, and every answer carries
citations to real units, its method, tokens and calls. Small limits keep it to about a dozen calls.
"""

from __future__ import annotations

import pytest

from corpusgraph.config import LLMSection, QuerySection
from corpusgraph.llm import EmbeddedServer, open_chat_model
from tests.support.query_fixtures import REPO, FakeEmbedder, build_tiny_index

pytestmark = [pytest.mark.llm, pytest.mark.slow]  # a dozen calls to the CPU model: minutes on 2 busy cores


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from corpusgraph.query.engine import QueryEngine
    from corpusgraph.query.store import IndexStore

    tmp = tmp_path_factory.mktemp("llm-query")
    store = IndexStore(*build_tiny_index(tmp))
    with EmbeddedServer(log_path=tmp / "server.log") as server:
        chat = open_chat_model(LLMSection(backend="embedded", concurrency=2), tmp / "cache", base_url=server.base_url)
        # the bundled model's context budget (conf/local.yaml): the default is sized for real models
        section = QuerySection(max_tokens=120, max_context_tokens=1800,
                               drift={"breadth": 2, "depth": 1, "primer_reports": 2})
        yield QueryEngine(store, chat, FakeEmbedder(), section, REPO / "conf")


def test_dynamic_global_with_the_real_model(engine):
    answer = engine.ask("What are the main themes across these stories?", method="global")
    d = answer.details
    assert answer.method == "global" and d["selection"] == "dynamic"
    assert d["rated"] >= 2 and d["rating_failed"] < d["rated"]  # the grammar made ratings parse
    assert answer.llm_calls == d["rated"] + d["map_calls"] + (1 if d["points_kept"] else 0)
    assert answer.tokens_in > 0 and answer.tokens_out > 0
    if d["points_kept"]:
        assert answer.answer and answer.citations
        assert all(c.unit_id in engine.store.units for c in answer.citations)


def test_drift_with_the_real_model(engine):
    answer = engine.ask("How did Mara Voss shape the Lumen Guild?", method="drift")
    d = answer.details
    assert answer.method == "drift" and d["primer_source"] == "report_vectors" and d["rounds"] >= 1
    assert 1 <= len(d["follow_ups"]) <= 2
    assert answer.llm_calls == 1 + len(d["follow_ups"]) + (0 if answer.error else 1)
    assert answer.tokens_in > 0 and answer.citations
    assert all(c.unit_id in engine.store.units for c in answer.citations)
