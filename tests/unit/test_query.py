"""Query methods over a tiny made-up world: the Saltreach coast, its guild, company and treaty.

The warehouse is written with delta-rs from the schemas in tables.py, the vector indexes with
vectors.write_index from a bag-of-words fake embedder, and the chat model is scripted: it
records every batch it is sent and answers from canned text, so each test can see the exact
prompts a method built.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zlib
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatResult
from corpusgraph.tables import TABLES, table_path
from corpusgraph.tokens import count_tokens

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DIM = 64

DOCS = {
    "d1": (
        "Founding of the Lumen Guild",
        "The Lumen Guild was founded in Port Keel by Mara Voss. The guild makes glass lanterns for "
        "ships and homes along the coast."),
    "d2": (
        "An apprentice",
        "Mara Voss trained Tobin Hale as a lantern maker. Years later Tobin Hale led the guild "
        "workshop and taught the next apprentices."),
    "d3": (
        "The Iron Coast Company",
        "The Iron Coast Company mines copper near Grey Hollow. Its director is Ilsa Brand, who "
        "keeps the mines running all year."),
    "d4": (
        "Copper for lanterns",
        "The Iron Coast Company sells copper to the Lumen Guild. The guild uses the copper for "
        "lantern frames and hinges."),
    "d5": (
        "The Saltmarsh Treaty",
        "The Saltmarsh Treaty was signed in Port Keel by Ilsa Brand and Mara Voss. It ended the "
        "copper price dispute between company and guild."),
    "d6": (
        "Storm season",
        "Winter storms flood the valley every year and halt the copper mines for weeks. Miners wait"
        " in the village until the water drains."),
    "d7": (
        "Festival of lights",
        "Port Keel holds a lantern festival each spring. The harbour is lit by lanterns the Lumen "
        "Guild makes for the occasion."),
    "d8": (
        "Complaints at the harbour",
        "The fishers of Port Keel complain that mine runoff from Grey Hollow spoils the bay and "
        "drives the fish away."),
    "d9": (
        "Withdrawn note",
        "A withdrawn note about Tobin Hale that was deleted from the corpus and must never be "
        "cited."),
}
# entity id -> (title, type, description, unit ids)
ENTITIES = {
    "e_lumen": ("Lumen Guild", "ORGANIZATION",
        "A guild of lantern makers based in Port Keel.", ["u1", "u2", "u4", "u7"]),
    "e_mara": ("Mara Voss", "PERSON",
        "Founder of the Lumen Guild and signatory of the Saltmarsh Treaty.", ["u1", "u2", "u5"]),
    "e_tobin": ("Tobin Hale", "PERSON",
        "Lantern maker trained by Mara Voss; later led the guild workshop.", ["u2", "u9"]),
    "e_port": ("Port Keel", "LOCATION",
        "Harbour town, home of the Lumen Guild and the lantern festival.", ["u1", "u5", "u7", "u8"]),
    "e_iron": ("Iron Coast Company", "ORGANIZATION", "Copper mining company near Grey Hollow.", ["u3", "u4"]),
    "e_ilsa": ("Ilsa Brand", "PERSON", "Director of the Iron Coast Company.", ["u3", "u5"]),
    "e_grey": ("Grey Hollow", "LOCATION", "Valley where copper is mined.", ["u3", "u8"]),
    "e_treaty": ("Saltmarsh Treaty", "EVENT", "Agreement that ended the copper price dispute.", ["u5"]),
}
# rel id -> (source, target, description, weight, unit ids)
RELS = {
    "r1": ("e_mara", "e_lumen", "Mara Voss founded the Lumen Guild.", 3.0, ["u1"]),
    "r2": ("e_mara", "e_tobin", "Mara Voss trained Tobin Hale as a lantern maker.", 2.0, ["u2"]),
    "r3": ("e_lumen", "e_port", "The Lumen Guild is based in Port Keel.", 2.0, ["u1", "u7"]),
    "r4": ("e_iron", "e_lumen", "The Iron Coast Company sells copper to the Lumen Guild.", 2.0, ["u4"]),
    "r5": ("e_ilsa", "e_iron", "Ilsa Brand directs the Iron Coast Company.", 3.0, ["u3"]),
    "r6": ("e_iron", "e_grey", "The Iron Coast Company mines copper near Grey Hollow.", 2.0, ["u3"]),
    "r7": ("e_treaty", "e_mara", "Mara Voss signed the Saltmarsh Treaty.", 1.0, ["u5"]),
    "r8": ("e_treaty", "e_ilsa", "Ilsa Brand signed the Saltmarsh Treaty.", 1.0, ["u5"]),
    "r9": ("e_grey", "e_port", "Runoff from Grey Hollow spoils the bay of Port Keel.", 1.0, ["u8"]),
    "r10": ("e_tobin", "e_lumen", "Tobin Hale led the Lumen Guild workshop.", 1.0, ["u2"]),
}
# community id -> (level, parent, entity ids, unit ids)
COMMUNITIES = {
    "c0a": (0, None, ["e_lumen", "e_mara", "e_tobin", "e_port", "e_treaty"], ["u1", "u2", "u5", "u7"]),
    "c0b": (0, None, ["e_iron", "e_ilsa", "e_grey"], ["u3", "u4", "u6", "u8"]),
    "c1a": (1, "c0a", ["e_lumen", "e_mara", "e_tobin"], ["u1", "u2"]),
    "c1b": (1, "c0a", ["e_port", "e_treaty"], ["u5", "u7"]),
    "c1c": (1, "c0b", ["e_iron", "e_ilsa"], ["u3", "u4"]),
    "c1d": (1, "c0b", ["e_grey"], ["u8"]),
}
_FINDINGS = [
    ("The members share one trade", "Most of the people and groups here work with lanterns, copper or the harbour, "
     "and their fortunes rise and fall together through the seasons and the trading year."),
    ("Ties are old and personal", "Founders, apprentices and directors know each other by name and settle matters "
     "face to face, which keeps disputes short but makes every quarrel a family affair."),
]
# community id -> (title, summary, rating); c1d has no report (a single entity)
REPORTS = {
    "c0a": ("Lantern makers of Port Keel", "The Lumen Guild, its founder Mara Voss and the harbour town.", 8.0),
    "c0b": ("Copper miners of Grey Hollow", "The Iron Coast Company and its copper mines in the valley.", 7.0),
    "c1a": ("The Lumen Guild workshop",
            "Mara Voss founded the guild and trained Tobin Hale, who led its workshop.", 9.0),
    "c1b": ("Treaty town", "Port Keel hosted the signing of the Saltmarsh Treaty and holds the lantern festival.", 6.0),
    "c1c": ("Company leadership", "Ilsa Brand directs the Iron Coast Company and signed the treaty.", 5.0),
}


def fake_embed(texts) -> np.ndarray:
    """Bag of words hashed into 64 dimensions, L2-normalised: deterministic and dependency-free."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[i, zlib.crc32(word.encode()) % DIM] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1.0, norms)


class FakeEmbedder:
    model = "fake-bow-64"
    dim = DIM

    def __init__(self):
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return fake_embed(texts)


class ScriptedChat:
    """Records every batch; answers map requests (they carry a JSON schema) with `map_answer`
    and every other request with `answer`. Each result reports 100 tokens in, 10 out."""

    model = "scripted"

    def __init__(self, answer: str = "An answer.", map_answer=None):
        self.answer = answer
        self.map_answer = map_answer or (lambda prompt: '{"points": []}')
        self.batches: list[list] = []

    def complete(self, requests):
        self.batches.append(list(requests))
        out = []
        for r in requests:
            prompt = r.messages[-1]["content"]
            text = self.map_answer(prompt) if r.json_schema else self.answer
            out.append(ChatResult(id=r.id, text=text, tokens_in=100, tokens_out=10))
        return out


def _write(warehouse: Path, name: str, rows: list[dict]) -> None:
    from deltalake import write_deltalake

    write_deltalake(table_path(str(warehouse), name), pa.Table.from_pylist(rows, schema=TABLES[name].schema))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from corpusgraph.query.vectors import write_index

    root = tmp_path_factory.mktemp("index")
    wh, index_dir = root / "warehouse", root / "faiss"
    now = datetime(2024, 1, 1, tzinfo=timezone.utc)
    _write(wh, "documents", [
        dict(doc_id=d, source_uri=f"file:///corpus/{d}.txt", title=title, text=text, content_hash=d,
             access_domain="default", metadata="{}", ingested_at=now, deleted=(d == "d9"))
        for d, (title, text) in DOCS.items()
    ])
    units = [
        dict(unit_id="u" + d[1:], doc_id=d, ordinal=0, text=text, n_tokens=count_tokens(text), char_start=0,
             char_end=len(text))
        for d, (_, text) in DOCS.items()
    ]
    _write(wh, "text_units", units)
    degree = {e: sum(e in (s, t) for s, t, *_ in RELS.values()) for e in ENTITIES}
    _write(wh, "entities", [
        dict(entity_id=e, title=t, type=ty, description=de, aliases=[], unit_ids=u, frequency=len(u), degree=degree[e])
        for e, (t, ty, de, u) in ENTITIES.items()
    ])
    _write(wh, "relationships", [
        dict(rel_id=r, source_id=s, target_id=t, description=de, weight=w, unit_ids=u)
        for r, (s, t, de, w, u) in RELS.items()
    ])
    _write(wh, "claims", [
        dict(claim_id="k1", subject_id="e_iron", object_id="e_grey", type="POLLUTION", status="SUSPECTED",
             description="Mine runoff from the company may spoil the bay.", start=None, end=None, unit_id="u8"),
    ])
    _write(wh, "communities", [
        dict(community_id=c, level=lvl, parent_id=p, entity_ids=es, unit_ids=us, size=len(es), graph_version="g1",
             modularity=0.4, rel_ids=[r for r, (s, t, *_) in RELS.items() if s in es and t in es])
        for c, (lvl, p, es, us) in COMMUNITIES.items()
    ])
    _write(wh, "community_reports", [
        dict(community_id=c, level=COMMUNITIES[c][0], title=t, summary=s, rating=rt, rating_explanation="",
             findings=[{"summary": a, "explanation": b} for a, b in _FINDINGS], built_from="entities",
             status="ok", error=None, model="test", tokens_in=0, tokens_out=0)
        for c, (t, s, rt) in REPORTS.items()
    ])
    write_index(str(index_dir), "text_unit", [u["unit_id"] for u in units], fake_embed([u["text"] for u in units]),
                FakeEmbedder.model)
    entity_texts = [f"{t}: {de}" for t, _, de, _ in ENTITIES.values()]
    write_index(str(index_dir), "entity", list(ENTITIES), fake_embed(entity_texts), FakeEmbedder.model)
    write_index(str(index_dir), "community_report", list(REPORTS), fake_embed([s for _, s, _ in REPORTS.values()]),
                FakeEmbedder.model)
    return str(wh), str(index_dir)


@pytest.fixture(scope="module")
def store(built):
    from corpusgraph.query.store import IndexStore

    return IndexStore(*built)


def engine(store, chat, **section):
    from corpusgraph.query.engine import QueryEngine

    return QueryEngine(store, chat, FakeEmbedder(), QuerySection(**section), REPO / "conf",
                       usd_per_1k_in=1.0, usd_per_1k_out=2.0)


# -- store ---------------------------------------------------------------------------------


def test_store_lookups_and_deleted_documents(store):
    assert set(store.adjacency["e_tobin"]) == {"r2", "r10"}
    assert store.names["lumen guild"] == ["e_lumen"]
    assert sorted(store.reports_by_level) == [0, 1] and "c1d" not in store.reports
    assert "d9" not in store.docs and "u9" not in store.units  # deleted document: never shown
    assert store.match_names("Did the Iron Coast Company pay Ilsa Brand?") == ["e_iron", "e_ilsa"]


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


# -- local -----------------------------------------------------------------------------------


def test_local_context_has_neighbour_relationships_and_seed_units(store):
    from corpusgraph.query.local import build_local_context

    question = "Who taught Tobin Hale?"
    ctx = build_local_context(store, fake_embed([question])[0], question, QuerySection(top_k_entities=1))
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
    from corpusgraph.query.local import build_local_context

    question = "What did Mara Voss and Ilsa Brand agree in Port Keel?"
    qv = fake_embed([question])[0]
    roomy = build_local_context(store, qv, question, QuerySection(max_context_tokens=4000))
    tight = build_local_context(store, qv, question, QuerySection(max_context_tokens=200))
    assert roomy.tokens > 400  # so the small budget really has to cut
    assert count_tokens(tight.text) <= 200 and sum(tight.section_tokens.values()) <= 200
    assert tight.unit_ids and len(tight.unit_ids) < len(roomy.unit_ids)


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
        engine(store, ScriptedChat()).ask("Who founded the Lumen Guild?", method="drift")


# -- pure helpers ----------------------------------------------------------------------------


def test_fill_prompt_only_replaces_known_names():
    from corpusgraph.query.answer import fill_prompt

    out = fill_prompt('{"points": []} {question} {other}', question="why {context}?")
    assert out == '{"points": []} why {context}? {other}'


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
