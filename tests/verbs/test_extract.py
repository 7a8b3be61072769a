"""extract's Spark side on small in-memory frames: which rows are due for a gleaning round and
how they are packed (stages/extract/llm.py), as the extract step reads them, without Delta."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

pytestmark = pytest.mark.spark


def test_gleaning_packs_only_the_rows_whose_prior_looks_incomplete(spark):
    """glean_candidates + packs_from(only_incomplete): the packs that needs_gleaning, applied to
    each row and then packed, gives (the rule is applied inside the packing pass)."""
    from corpusgraph.config import ExtractSection
    from corpusgraph.stages.extract.glean import needs_gleaning
    from corpusgraph.stages.extract.llm import PRIOR_COLUMNS, glean_candidates, pack_batch, packs_from
    from corpusgraph.tables import spark_schema

    sec = ExtractSection(max_entities=2, max_relationships=2, glean_min_missing=2, units_per_call=3)
    ent = lambda n: {"name": n, "type": "ORGANIZATION", "description": "d"}  # noqa: E731
    texts = {
        "u1": "Castor Haulage met Orion Freight and Vega Lines in Porto.",  # two names uncovered
        "u2": "Castor Haulage runs the night shift.",  # covered
        "u3": "Castor Haulage, Orion Freight.",  # entity list at maxItems
        "u4": "Nothing here.",  # a stop note: no further rounds
        "u5": "Vega Lines and Orion Freight and Castor Haulage and Lyra Ports.",  # other prompt: not mine
    }
    rows = {"u1": [ent("Castor Haulage")], "u2": [ent("Castor Haulage")],
            "u3": [ent("Castor Haulage"), ent("Orion Freight")], "u4": [], "u5": []}
    now = datetime.now(timezone.utc)
    extractions = spark.createDataFrame([
        {"unit_id": u, "prompt_hash": "p" if u != "u5" else "other", "model": "m", "status": "ok",
         "entities": rows[u], "relationships": [], "claims": [], "tokens_in": 1, "tokens_out": 1, "gleanings": 0,
         "error": "gleaning found nothing new" if u == "u4" else None, "raw": "{}", "run_id": "r",
         "extracted_at": now} for u in texts], schema=spark_schema("extractions"))
    units = spark.createDataFrame([(u, t, len(t.split())) for u, t in texts.items()], "unit_id string, text string, n_tokens int")
    candidates = glean_candidates(extractions, units, sec, "p", "m", 1).coalesce(1)
    packs = [r.asDict(recursive=True) for r in packs_from(candidates, sec, 1, with_prior=True,
                                                           only_incomplete=True).collect()]
    # The reference: the rule row by row, then the same packing.
    every = [r.asDict(recursive=True) for r in candidates.collect()]
    due = [r for r in every if needs_gleaning(r["text"], r["prior"], sec)]
    expected = pack_batch(due, sec, 1, ["unit_id", "text", "n_tokens", "prior"]).to_pylist()
    assert sorted(r["unit_id"] for r in every) == ["u1", "u2", "u3", "u4"]
    assert sorted(u["unit_id"] for p in packs for u in p["units"]) == ["u1", "u3"]
    assert [p["pack_id"] for p in packs] == [p["pack_id"] for p in expected]
    assert [[u["prior"]["entities"] for u in p["units"]] for p in packs] == \
        [[u["prior"]["entities"] for u in p["units"]] for p in expected]
    assert set(PRIOR_COLUMNS) <= set(packs[0]["units"][0]["prior"])
