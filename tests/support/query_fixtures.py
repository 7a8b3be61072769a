"""A tiny made-up world for query tests: the Saltreach coast, its guild, company and treaty.

Shared by the query and service tests. The warehouse is written with delta-rs from the schemas
in tables.py, the vector indexes with vectors.write_index from a bag-of-words fake embedder, and
the chat model is scripted: it records every batch it is sent and answers from canned text, so
a test can see the exact prompts a method built. Not a test module: pytest collects nothing here.
"""

from __future__ import annotations

import json
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

    def stream(self, request, on_delta):
        """The answer `complete` gives, handed on in pieces as a model streams it: a few words at a
        time (a line at a time for long texts, such as the echo of a whole prompt)."""
        result = self.complete([request])[0]
        text = result.text or ""
        for piece in re.findall(r"[^\n]*\n|[^\n]+$" if len(text) > 200 else r"\S+\s*", text):
            on_delta(piece)
        return result


def _write(warehouse: Path, name: str, rows: list[dict]) -> None:
    from deltalake import write_deltalake

    write_deltalake(table_path(str(warehouse), name), pa.Table.from_pylist(rows, schema=TABLES[name].schema))


CLAIMS = [
    dict(claim_id="k1", subject_id="e_iron", object_id="e_grey", type="POLLUTION", status="SUSPECTED",
         description="Mine runoff from the company may spoil the bay.", start=None, end=None, unit_id="u8"),
]


def build_tiny_index(root: Path) -> tuple[str, str]:
    """Write the Saltreach world's Delta tables and FAISS files under `root`; returns (warehouse, index_dir).
    Every document is in domain "default"; d9 is marked deleted."""
    return build_index(root, DOCS, ENTITIES, RELS, CLAIMS, COMMUNITIES, REPORTS,
                       domains=dict.fromkeys(DOCS, "default"), deleted={"d9"})


def build_index(root: Path, docs, entities, rels, claims, communities, reports, *, domains, deleted=frozenset(),
                domain_reports=None):
    """Write a world (shaped like the module's constants) under `root`. A document `dX` has one
    unit `uX`; `domains` maps each document id to its access domain; `domain_reports` maps
    (community id, domain) to (title, summary, rating), written as community_domain_reports."""
    from corpusgraph.storage.vectors import write_index

    wh, index_dir = root / "warehouse", root / "faiss"
    now = datetime(2024, 1, 1, tzinfo=timezone.utc)
    _write(wh, "documents", [
        dict(doc_id=d, source_uri=f"file:///corpus/{d}.txt", title=title, text=text, content_hash=d,
             access_domain=domains[d], metadata="{}", ingested_at=now, deleted=(d in deleted))
        for d, (title, text) in docs.items()
    ])
    units = [
        dict(unit_id="u" + d[1:], doc_id=d, ordinal=0, text=text, n_tokens=count_tokens(text), char_start=0,
             char_end=len(text))
        for d, (_, text) in docs.items()
    ]
    _write(wh, "text_units", units)
    degree = {e: sum(e in (s, t) for s, t, *_ in rels.values()) for e in entities}
    _write(wh, "entities", [
        dict(entity_id=e, title=t, type=ty, description=de, aliases=[], unit_ids=u, frequency=len(u), degree=degree[e])
        for e, (t, ty, de, u) in entities.items()
    ])
    _write(wh, "relationships", [
        dict(rel_id=r, source_id=s, target_id=t, description=de, weight=w, unit_ids=u)
        for r, (s, t, de, w, u) in rels.items()
    ])
    _write(wh, "claims", claims)
    _write(wh, "communities", [
        dict(community_id=c, level=lvl, parent_id=p, entity_ids=es, unit_ids=us, size=len(es), graph_version="g1",
             modularity=0.4, rel_ids=[r for r, (s, t, *_) in rels.items() if s in es and t in es])
        for c, (lvl, p, es, us) in communities.items()
    ])
    _write(wh, "community_reports", [
        dict(community_id=c, level=communities[c][0], title=t, summary=s, rating=rt, rating_explanation="",
             findings=[{"summary": a, "explanation": b} for a, b in _FINDINGS], built_from="entities",
             status="ok", error=None, model="test", tokens_in=0, tokens_out=0)
        for c, (t, s, rt) in reports.items()
    ])
    if domain_reports:
        _write(wh, "community_domain_reports", [
            dict(community_id=c, domain=d, level=communities[c][0], title=t, summary=s, rating=rt,
                 rating_explanation="", findings=[{"summary": a, "explanation": b} for a, b in _FINDINGS],
                 built_from="entities", status="ok", error=None, model="test", tokens_in=0, tokens_out=0)
            for (c, d), (t, s, rt) in domain_reports.items()
        ])
    write_index(str(index_dir), "text_unit", [u["unit_id"] for u in units], fake_embed([u["text"] for u in units]),
                FakeEmbedder.model)
    entity_texts = [f"{t}: {de}" for t, _, de, _ in entities.values()]
    write_index(str(index_dir), "entity", list(entities), fake_embed(entity_texts), FakeEmbedder.model)
    write_index(str(index_dir), "community_report", list(reports), fake_embed([s for _, s, _ in reports.values()]),
                FakeEmbedder.model)
    return str(wh), str(index_dir)


def make_engine(store, chat, **section):
    """A QueryEngine over `store` with the fake embedder and priced at $1 / $2 per 1k tokens."""
    from corpusgraph.query.engine import QueryEngine

    return QueryEngine(store, chat, FakeEmbedder(), QuerySection(**section), REPO / "conf",
                       usd_per_1k_in=1.0, usd_per_1k_out=2.0)


# -- two access domains: the Saltreach world is "public"; a "vault" domain holds secrets ----------
#
# Vault documents hold facts found nowhere in the public ones. Some of the graph mixes the two the
# way a real extraction would: Port Keel is also named in a vault document (so the merged entity,
# its edges and every community holding it mix domains), a vault document supports an edge between
# two public entities and a claim about one, and the level-0 Lumen community takes in the cartel.
VAULT_DOCS = {
    "dv_ledger": ("Cartel ledger", "Corvin Thale leads the Obsidian Cartel. The cartel hides its gold in the "
                  "Zephyrine Vault, whose door code is QX-7731."),
    "dv_bribe": ("Harbour bribes", "The Obsidian Cartel bribed the harbour master of Port Keel with moonpearls."),
    "dv_crates": ("Smuggling route", "Cartel gold travels from the Lumen Guild to the Iron Coast Company hidden "
                  "in copper crates marked QX-7731."),
}
VAULT_ENTITIES = {
    "ev_corvin": ("Corvin Thale", "PERSON", "Leader of the Obsidian Cartel.", ["uv_ledger"]),
    "ev_cartel": ("Obsidian Cartel", "ORGANIZATION", "Smugglers who bribe with moonpearls and hide gold.",
                  ["uv_ledger", "uv_bribe", "uv_crates"]),
    "ev_vault": ("Zephyrine Vault", "LOCATION", "Cartel vault; door code QX-7731.", ["uv_ledger"]),
}
VAULT_RELS = {
    "rv_leads": ("ev_corvin", "ev_cartel", "Corvin Thale leads the Obsidian Cartel.", 3.0, ["uv_ledger"]),
    "rv_hides": ("ev_cartel", "ev_vault", "The cartel hides gold in the Zephyrine Vault (code QX-7731).", 2.0,
                 ["uv_ledger"]),
    "rv_bribes": ("ev_cartel", "e_port", "The cartel bribes Port Keel's harbour master with moonpearls.", 2.0,
                  ["uv_bribe"]),
    # Both ends public, the evidence from the vault.
    "rv_smuggle": ("e_lumen", "e_iron", "Cartel gold moves from the guild to the company in crates QX-7731.", 5.0,
                   ["uv_crates"]),
}
VAULT_CLAIMS = [
    dict(claim_id="kv_launder", subject_id="e_iron", object_id=None, type="SMUGGLING", status="SUSPECTED",
         description="The company moves Obsidian Cartel gold in copper crates QX-7731.", start=None, end=None,
         unit_id="uv_crates"),
]
# Strings (lower case) and ids a public-only key must never see in any response.
VAULT_SECRETS = ("qx-7731", "moonpearl", "zephyrine", "obsidian", "corvin", "cartel", "vault", "smuggl")


def two_domain_world():
    """(docs, entities, rels, claims, communities, reports, domains) of the public + vault index."""
    docs = {**DOCS, **VAULT_DOCS}
    entities = dict(ENTITIES)
    title, kind, description, units = entities["e_port"]
    # The merged Port Keel carries vault text: it mixes domains.
    entities["e_port"] = (title, kind, description + " Its harbour master takes moonpearls.", units + ["uv_bribe"])
    entities.update(VAULT_ENTITIES)
    rels = {**RELS, **VAULT_RELS}
    communities = dict(COMMUNITIES)
    level, parent, members, units = communities["c0a"]
    communities["c0a"] = (level, parent, members + ["ev_cartel"], units + ["uv_bribe"])  # mixed
    communities.update({
        "cv_vault": (0, None, ["ev_corvin", "ev_vault"], ["uv_ledger"]),
        "cv_inner": (1, "cv_vault", ["ev_corvin", "ev_vault"], ["uv_ledger"]),
    })
    reports = dict(REPORTS)
    reports["c0a"] = ("Lanterns and the Obsidian Cartel", "The guild, the harbour and the cartel's moonpearl bribes.", 8.0)
    reports.update({
        "cv_vault": ("The Zephyrine Vault", "Corvin Thale's cartel keeps its gold behind door code QX-7731.", 9.5),
        "cv_inner": ("Vault keepers", "Corvin Thale alone knows the Zephyrine Vault code QX-7731.", 9.0),
    })
    domains = {**dict.fromkeys(DOCS, "public"), **dict.fromkeys(VAULT_DOCS, "vault")}
    return docs, entities, rels, CLAIMS + VAULT_CLAIMS, communities, reports, domains


# Per-domain reports (reports.per_domain) of the two communities that mix domains: c0a (the cartel
# joined the lantern makers) and c1b (Port Keel is also named in a vault document). Each is
# written as the stage would write it, from its own domain's units, entities and relationships.
DOMAIN_REPORTS = {
    ("c0a", "public"): ("Lantern makers of Port Keel", "The Lumen Guild, its founder Mara Voss and the harbour town.", 8.0),
    ("c0a", "vault"): ("Cartel at the harbour", "The Obsidian Cartel bribes Port Keel's harbour master with moonpearls.",
                       7.0),
    ("c1b", "public"): ("Treaty town", "Port Keel hosted the signing of the Saltmarsh Treaty and holds the lantern "
                        "festival.", 6.0),
    ("c1b", "vault"): ("Bribed harbour", "Port Keel's harbour master takes moonpearls from the cartel.", 5.0),
}


def build_two_domain_index(root: Path, per_domain: bool = False) -> tuple[str, str]:
    """The two-domain world; with `per_domain`, also DOMAIN_REPORTS."""
    docs, entities, rels, claims, communities, reports, domains = two_domain_world()
    return build_index(root, docs, entities, rels, claims, communities, reports, domains=domains, deleted={"d9"},
                       domain_reports=DOMAIN_REPORTS if per_domain else None)


class EchoChat(ScriptedChat):
    """A model that repeats everything it is shown: a plain answer is the prompt itself, and a JSON
    answer fills its schema with the prompt (every string is the prompt, every number the top of
    its range). Whatever reaches the model reaches the response body, so a search of the body
    finds any leak into a context, whichever method built it."""

    def complete(self, requests):
        self.batches.append(list(requests))
        out = []
        for r in requests:
            prompt = r.messages[-1]["content"]
            text = json.dumps(_fill_schema(r.json_schema, prompt)) if r.json_schema else prompt
            out.append(ChatResult(id=r.id, text=text, tokens_in=100, tokens_out=10))
        return out


def _fill_schema(schema: dict, text: str):
    kind = schema.get("type")
    if kind == "object":
        return {name: _fill_schema(sub, text) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [_fill_schema(schema.get("items") or {}, text)]
    if kind in ("integer", "number"):
        top = schema.get("maximum", 90)
        return int(top) if kind == "integer" else float(top)
    if kind == "boolean":
        return True
    return (schema.get("enum") or [text])[0]


def rows_store(*, units, docs, entities, relationships, names=None, vectors=None, match_names=None):
    """An IndexStore built from row dicts (IndexStore.from_rows), for ranking tests that need a
    handful of units and entities; `names`, `vectors` and `match_names` replace the store's own."""
    from corpusgraph.query.store import IndexStore

    store = IndexStore.from_rows(units=units, docs=docs, entities=entities, relationships=relationships)
    if names is not None:
        store.names = names
    if vectors is not None:
        store.vectors = vectors
    if match_names is not None:
        store.match_names = match_names
    return store
