"""A tiny made-up world for query tests: the Saltreach coast, its guild, company and treaty.

Shared by the query and service tests. The warehouse is written with delta-rs from the schemas
in tables.py, the vector indexes with vectors.write_index from a bag-of-words fake embedder, and
the chat model is scripted: it records every batch it is sent and answers from canned text, so
a test can see the exact prompts a method built. Not a test module: pytest collects nothing here.
"""

from __future__ import annotations

import re
import zlib
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatResult
from corpusgraph.tables import TABLES, table_path
from corpusgraph.tokens import count_tokens

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


def build_tiny_index(root: Path) -> tuple[str, str]:
    """Write the Delta tables and FAISS files under `root`; returns (warehouse, index_dir)."""
    from corpusgraph.query.vectors import write_index

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



def make_engine(store, chat, **section):
    """A QueryEngine over `store` with the fake embedder and priced at $1 / $2 per 1k tokens."""
    from corpusgraph.query.engine import QueryEngine

    return QueryEngine(store, chat, FakeEmbedder(), QuerySection(**section), REPO / "conf",
                       usd_per_1k_in=1.0, usd_per_1k_out=2.0)
