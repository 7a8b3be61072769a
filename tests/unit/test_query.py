"""Query methods over a tiny made-up world: the Saltreach coast, its guild, company and treaty.

The world, its warehouse builder, the fake embedder and the scripted chat model live in
query_fixtures.py, shared with the service tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from corpusgraph.config import QuerySection
from corpusgraph.query.question import parse_question
from corpusgraph.tokens import count_tokens
from tests.support.query_fixtures import REPO, ScriptedChat, fake_embed
from tests.support.query_fixtures import make_engine as engine

pytestmark = pytest.mark.unit


# -- store ---------------------------------------------------------------------------------


def test_store_lookups_and_deleted_documents(store):
    assert set(store.adjacency["e_tobin"]) == {"r2", "r10"}
    assert store.names["lumen guild"] == ["e_lumen"]
    assert sorted(store.reports_by_level) == [0, 1] and "c1d" not in store.reports
    assert "d9" not in store.docs and "u9" not in store.units  # deleted document: never shown
    assert store.match_names("Did the Iron Coast Company pay Ilsa Brand?") == ["e_iron", "e_ilsa"]


def test_row_types_name_the_table_contracts_columns():
    from corpusgraph.query.rows import ROW_TYPES
    from corpusgraph.query.store import _DOC_COLUMNS
    from corpusgraph.tables import table

    for name, row in ROW_TYPES.items():
        columns = _DOC_COLUMNS if name == "documents" else table(name).schema.names
        assert set(row.__annotations__) == set(columns), name


def test_nulls_are_filled_with_the_one_meaning_of_their_table():
    from corpusgraph.query.rows import filled

    rel, = filled("relationships", [{"rel_id": "r", "source_id": "a", "target_id": "b", "description": None,
                                     "weight": None, "unit_ids": None}])
    assert rel["weight"] == 1.0 and rel["unit_ids"] == []  # one mention, whose strength is at least 1
    report, = filled("community_reports", [{"community_id": "c", "rating": None, "findings": None}])
    assert report["rating"] == 0.0 and report["findings"] == []
    claim, = filled("claims", [{"claim_id": "k", "object_id": None}])
    assert claim["object_id"] is None  # no object: none, not a default


def test_missing_table_names_it_and_the_fix(tmp_path):
    from corpusgraph.query.store import IndexMissingError, IndexStore

    with pytest.raises(IndexMissingError, match=r"documents.*corpusgraph index"):
        IndexStore(str(tmp_path / "nowhere"), str(tmp_path / "faiss"))


# -- basic -----------------------------------------------------------------------------------


def test_basic_cites_the_retrieved_units_cited_tag_first(store):
    question = "Do winter storms halt the copper mines?"
    qv = fake_embed([question])[0]
    unit_matrix = fake_embed([store.units[u]["text"] for u in sorted(store.units)])
    expected = [sorted(store.units)[i] for i in np.argsort(-(unit_matrix @ qv))[:3]]
    chat = ScriptedChat(answer="The storms halt the mines [U2].")
    answer = engine(store, chat, top_k_units=3).ask(question, method="basic")

    cited = [c.unit_id for c in answer.citations]
    assert sorted(cited) == sorted(expected)
    prompt = chat.batches[0][0].messages[-1]["content"]
    tagged = re.findall(r"\[U(\d)\] \(from ([^)]*)\)", prompt)
    assert cited[0] == next(u for u in expected if store.docs[store.units[u]["doc_id"]]["title"] == tagged[1][1])
    assert question in prompt and answer.method == "basic" and answer.error is None
    assert (answer.llm_calls, answer.tokens_in, answer.tokens_out) == (1, 100, 10)
    assert answer.usd == pytest.approx(0.1 + 0.02)
    assert answer.citations[0].source_uri.startswith("file:///corpus/")


def test_top_k_and_domains_apply_to_one_call_only(store):
    e = engine(store, ScriptedChat(answer="x"))
    one = e.ask("Do winter storms halt the copper mines?", method="basic", top_k=1)
    assert len(one.citations) == 1 and e.section.top_k_units == 5  # QuerySection's default, untouched
    assert len(e.ask("Do winter storms halt the copper mines?", method="basic").citations) == 5
    with pytest.raises(ValueError, match="top_k_units"):
        e.ask("Anything?", method="basic", top_k=51)  # the section's bound: at most 50
    nothing = e.ask("Do winter storms halt the copper mines?", method="basic", domains=["no-such-domain"])
    assert nothing.citations == [] and e.store.domains is None


# -- local -----------------------------------------------------------------------------------


def test_local_context_has_neighbour_relationships_and_seed_units(store):
    from corpusgraph.query.loaded import LoadedIndex
    from corpusgraph.query.local import build_local_context

    question = "Who taught Tobin Hale?"
    asked = parse_question(store, question, fake_embed([question])[0], titles=LoadedIndex(store).retriever().titles)
    ctx = build_local_context(LoadedIndex(store), asked, QuerySection(top_k_entities=1))
    assert ctx.seed_ids == ["e_tobin"]  # named in the question, ahead of any vector hit
    assert "e_mara" in ctx.entity_ids  # the 1-hop neighbour
    assert {"r2", "r1"} <= set(ctx.rel_ids)  # seed-neighbour edge, and the edge among neighbours
    assert "Mara Voss trained Tobin Hale" in ctx.text and "Mara Voss founded the Lumen Guild" in ctx.text
    assert ctx.unit_ids[0] == "u2"  # the seed's unit supporting the most selected entities and edges
    assert "u9" not in ctx.unit_ids  # its document was deleted
    assert ctx.rel_ids.index("r2") < ctx.rel_ids.index("r1")  # edges on the seed rank first
    assert "c0a" in ctx.community_ids and ctx.community_ids[0].startswith("c0")  # lowest level first
    assert ctx.tokens == count_tokens(ctx.text) <= QuerySection().max_context_tokens


def test_local_context_respects_a_small_budget(store):
    from corpusgraph.query.loaded import LoadedIndex
    from corpusgraph.query.local import build_local_context

    question = "What did Mara Voss and Ilsa Brand agree in Port Keel?"
    loaded = LoadedIndex(store)
    asked = parse_question(store, question, fake_embed([question])[0], titles=loaded.retriever().titles)
    roomy = build_local_context(loaded, asked, QuerySection(max_context_tokens=4000))
    tight = build_local_context(loaded, asked, QuerySection(max_context_tokens=200))
    assert roomy.tokens > 400  # so the small budget really has to cut
    assert count_tokens(tight.text) <= 200 and sum(tight.section_tokens.values()) <= 200
    assert tight.unit_ids and len(tight.unit_ids) < len(roomy.unit_ids)


def test_a_local_question_has_its_names_matched_once(store, monkeypatch):
    asked = []
    match = store.match_names
    monkeypatch.setattr(store, "match_names", lambda text: asked.append(text) or match(text))
    for method in ("local", "auto"):  # auto: the router and local search share the one match
        asked.clear()
        answer = engine(store, ScriptedChat(answer="x")).ask("Who taught Tobin Hale?", method=method)
        assert answer.method == "local" and asked == ["Who taught Tobin Hale?"]


def test_local_answer_cites_context_and_relationship_units(store):
    chat = ScriptedChat(answer="Mara Voss trained him [R1].")
    answer = engine(store, chat, top_k_entities=1).ask("Who taught Tobin Hale?", method="local")
    cited = [c.unit_id for c in answer.citations]
    assert cited[0] == "u2"  # the unit behind the cited relationship [R1] comes first
    assert {"u1", "u2"} <= set(cited) and "u9" not in cited
    assert answer.method == "local" and answer.llm_calls == 1 and len(chat.batches) == 1


# -- global ----------------------------------------------------------------------------------

POINTS = {  # report title -> (description, score)
    "The Lumen Guild workshop": ("Lantern making passes from master to apprentice.", 90),
    "Treaty town": ("Port Keel is where disputes are settled.", 40),
    "Company leadership": ("Nothing relevant.", 0),
}


def _map_answer(broken: str | None = None):
    def answer(prompt: str) -> str:
        found = re.findall(r"Report (\d+): (.+)", prompt)
        if any(title == broken for _, title in found):
            return "Sure! Here are some points: lanterns, copper"
        points = [{"description": POINTS[t][0], "score": POINTS[t][1], "reports": [int(n)]} for n, t in found]
        return json.dumps({"points": points})

    return answer


def test_global_maps_each_chunk_in_one_batch_and_reduces_best_points(store):
    chat = ScriptedChat(answer="Craft passes down [P1].", map_answer=_map_answer())
    answer = engine(store, chat, max_context_tokens=200).ask("What are the main themes?", method="global", level=1)

    map_batch, reduce_batch = chat.batches
    assert len(map_batch) >= 2 and all(r.json_schema for r in map_batch)  # several chunks, one batch
    seen = [t for r in map_batch for _, t in re.findall(r"Report (\d+): (.+)", r.messages[-1]["content"])]
    assert sorted(seen) == sorted(POINTS)  # every level-1 report in exactly one chunk
    for r in map_batch:
        reports = r.messages[-1]["content"].split("Reports:\n", 1)[1].split("\n\nQuestion:", 1)[0]
        assert count_tokens(reports) <= 200
    reduce_prompt = reduce_batch[0].messages[-1]["content"]
    assert "[P1] (importance 90) Lantern making" in reduce_prompt
    assert reduce_prompt.index("importance 90") < reduce_prompt.index("importance 40")
    assert "Nothing relevant" not in reduce_prompt  # score 0 dropped
    assert answer.details["level"] == 1 and answer.details["map_failed"] == 0
    assert answer.llm_calls == len(map_batch) + 1 and answer.tokens_in == 100 * answer.llm_calls
    cited = [c.unit_id for c in answer.citations]
    assert set(cited) == {"u1", "u2", "u5", "u7"} and len(cited) <= 10


def test_global_skips_and_counts_a_malformed_map_answer(store):
    chat = ScriptedChat(answer="Disputes end in Port Keel.", map_answer=_map_answer(broken="The Lumen Guild workshop"))
    answer = engine(store, chat, max_context_tokens=200).ask("What are the main themes?", method="global", level=1)
    assert answer.details["map_failed"] == 1 and answer.error is None
    reduce_prompt = chat.batches[-1][0].messages[-1]["content"]
    assert "Port Keel is where disputes" in reduce_prompt and "Lantern making" not in reduce_prompt


def test_global_falls_back_to_the_deepest_level_below(store):
    chat = ScriptedChat(map_answer=_map_answer())
    answer = engine(store, chat).ask("What are the main themes?", method="global", level=5)
    assert answer.details["level"] == 1


# -- router and validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "question, method",
    [
        ("What are the main themes across these stories?", "global"),
        ("What recurring trends show up overall?", "global"),
        ("What are the recurring themes around the Lumen Guild?", "global"),
        ("Who founded the Lumen Guild?", "local"),
        ("What are the main allies of Mara Voss?", "local"),
        ("When do the floods stop the work in the valley?", "basic"),
    ],
)
def test_router(store, question, method):
    from corpusgraph.query.engine import route

    chosen, reason = route(store, question)
    assert chosen == method and reason


def test_auto_fills_route_reason(store):
    answer = engine(store, ScriptedChat()).ask("Who founded the Lumen Guild?")
    assert answer.method == "local" and "Lumen Guild" in answer.route_reason


@pytest.mark.parametrize("question", ["", "   ", "x" * 5000])
def test_bad_questions_raise(store, question):
    with pytest.raises(ValueError):
        engine(store, ScriptedChat()).ask(question)


def test_bad_method_raises(store):
    with pytest.raises(ValueError, match="method"):
        engine(store, ScriptedChat()).ask("Who founded the Lumen Guild?", method="magic")


# -- pure helpers ----------------------------------------------------------------------------


def test_fill_prompt_leaves_json_and_data_braces_alone_and_refuses_missing_values():
    from corpusgraph.query.answer import fill_prompt

    out = fill_prompt('{"points": []} {question}', question="why {context}?")
    assert out == '{"points": []} why {context}?'
    with pytest.raises(KeyError, match="other"):  # a prompt naming a value the code never fills
        fill_prompt("{question} {other}", question="q")


def test_format_answer_lists_numbered_citations():
    from corpusgraph.query.answer import Answer, Citation, format_answer

    text = format_answer(Answer("q", "It is so.", "local", [Citation("u1", "d1", "file:///a.txt", "A")],
                                tokens_in=120, tokens_out=8, usd=0.5, route_reason="names known entities"))
    lines = text.splitlines()
    assert lines[0] == "It is so."
    assert "Method: local (names known entities)" in lines
    assert "[1] doc d1 (A, file:///a.txt) unit u1" in lines
    assert "120 in" in lines[-1] and "$0.5000" in lines[-1]
    assert json.dumps(Answer("q", "a", "basic").to_dict())


def test_package_import_is_lazy():
    code = (
        "import sys, corpusgraph.query as q; "
        "assert 'deltalake' not in sys.modules and 'faiss' not in sys.modules; "
        "assert q.Answer and q.format_answer; "
        "assert 'faiss' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(REPO / "lib")})
