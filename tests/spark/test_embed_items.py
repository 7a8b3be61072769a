"""The embed stage's item selection: which text each item is embedded with, and which items
are (re-)embedded. The embedding itself runs on Ray (tests/ray/test_one_cpu.py)."""

from __future__ import annotations

import hashlib

import pytest

from corpusgraph.stages.embed import embedding_items, pending_items
from corpusgraph.tables import spark_schema

pytestmark = pytest.mark.spark

MODEL = "all-MiniLM-L6-v2"


def _df(spark, name, rows):
    schema = spark_schema(name)
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema)


def _inputs(spark, docs):
    documents = _df(spark, "documents", [{"doc_id": d, "title": t, "text": "..."} for d, t in docs.items()])
    units = _df(spark, "text_units", [
        {"unit_id": "u1", "doc_id": "d1", "ordinal": 0, "text": "He was born in Lisbon."},
        {"unit_id": "u2", "doc_id": "d1", "ordinal": 1, "text": "He died in Porto."},
        {"unit_id": "u3", "doc_id": "d2", "ordinal": 0, "text": "No title here."},
        {"unit_id": "u4", "doc_id": "d3", "ordinal": 0, "text": "# Weekly note\nTrailer R-77 moved."},
        {"unit_id": "u5", "doc_id": "d4", "ordinal": 0, "text": "Film Journal International is a magazine."},
        {"unit_id": "u6", "doc_id": "missing", "ordinal": 0, "text": "Orphan unit."},
    ])
    entities = _df(spark, "entities", [{"entity_id": "e1", "title": "Lisbon", "description": "A city."}])
    reports = _df(spark, "community_reports", [
        {"community_id": "c1", "title": "T", "summary": "S", "findings": [], "status": "ok"},
        {"community_id": "c2", "title": "T2", "summary": "S2", "findings": [], "status": "error"},
    ])
    return units, entities, reports, documents


DOCS = {"d1": "Fernando Pessoa", "d2": "  ", "d3": "Weekly note", "d4": "Film Journal International"}


def test_units_are_embedded_with_their_document_title(spark):
    units, entities, reports, documents = _inputs(spark, DOCS)
    items = {(r["kind"], r["id"]): r for r in embedding_items(units, entities, reports, documents).collect()}
    text = {i: items[("text_unit", i)]["text"] for i in ("u1", "u2", "u3", "u4", "u5", "u6")}
    assert text["u1"] == "Fernando Pessoa\nHe was born in Lisbon."
    assert text["u2"] == "Fernando Pessoa\nHe died in Porto."  # every unit of the document, not just the first
    assert text["u3"] == "No title here."  # a blank title adds nothing
    assert text["u4"] == "# Weekly note\nTrailer R-77 moved."  # the title is already the first line
    assert text["u5"] == "Film Journal International\nFilm Journal International is a magazine."
    assert text["u6"] == "Orphan unit."  # no document row: the text alone
    assert items[("entity", "e1")]["text"] == "Lisbon: A city."
    assert ("community_report", "c1") in items and ("community_report", "c2") not in items
    assert len(items) == 8
    for r in items.values():  # the hash is of the text as embedded
        assert r["text_hash"] == hashlib.sha256(r["text"].encode("utf-8")).hexdigest()[:32]


def test_without_documents_units_keep_their_text(spark):
    units, entities, reports, _ = _inputs(spark, DOCS)
    items = {r["id"]: r["text"] for r in embedding_items(units, entities, reports).collect() if r["kind"] == "text_unit"}
    assert items["u1"] == "He was born in Lisbon."


def test_a_changed_title_or_text_is_embedded_again(spark):
    units, entities, reports, documents = _inputs(spark, DOCS)
    items = embedding_items(units, entities, reports, documents)
    # Vectors as an earlier build left them: units embedded without the title, the rest current.
    old = embedding_items(units, entities, reports)
    emb = _df(spark, "embeddings", [
        {"kind": r["kind"], "id": r["id"], "model": MODEL, "text_hash": r["text_hash"], "vector": [0.0]}
        for r in old.collect()])
    pending = {(r["kind"], r["id"]) for r in pending_items(items, emb, MODEL).collect()}
    assert pending == {("text_unit", "u1"), ("text_unit", "u2"), ("text_unit", "u5")}
    # Everything current: nothing to embed; another model: everything.
    emb_now = _df(spark, "embeddings", [
        {"kind": r["kind"], "id": r["id"], "model": MODEL, "text_hash": r["text_hash"], "vector": [0.0]}
        for r in items.collect()])
    assert pending_items(items, emb_now, MODEL).count() == 0
    assert pending_items(items, emb_now, "other-model").count() == 8
    # A retitled document: its units only.
    retitled = _inputs(spark, {**DOCS, "d1": "Pessoa"})[3]
    again = {r["id"] for r in pending_items(embedding_items(units, entities, reports, retitled), emb_now, MODEL).collect()}
    assert again == {"u1", "u2"}


def test_reading_long_units_in_windows_embeds_the_units_again_and_nothing_else(spark):
    units, entities, reports, documents = _inputs(spark, DOCS)
    cut = embedding_items(units, entities, reports, documents)
    emb = _df(spark, "embeddings", [
        {"kind": r["kind"], "id": r["id"], "model": MODEL, "text_hash": r["text_hash"], "vector": [0.0]}
        for r in cut.collect()])
    windowed = embedding_items(units, entities, reports, documents, unit_recipe="windows256")
    pending = {(r["kind"], r["id"]) for r in pending_items(windowed, emb, MODEL).collect()}
    assert pending == {(r["kind"], r["id"]) for r in cut.collect() if r["kind"] == "text_unit"}
    assert {r["text"] for r in windowed.collect()} == {r["text"] for r in cut.collect()}  # the text sent is the same
