"""The resolve step through Delta and Ray with its LLM rounds on: adjudication of the ambiguous
band and description summaries against the real embedded server. The transform itself, on
in-memory frames, is tests/verbs/test_resolve.py."""

from __future__ import annotations

import pytest

from tests.support.resolve_fixtures import context
from tests.verbs.test_resolve import UNITS

pytestmark = pytest.mark.spark


@pytest.mark.llm
@pytest.mark.ray
def test_adjudication_and_summaries_on_the_real_model(spark, tmp_path):
    """The step end to end with LLM adjudication and summaries on: Ray actors, the embedded
    llama.cpp server, the response cache. The 135M model's verdicts are not judged; that each
    band pair gets a recorded verdict (ok or parse_error), and a re-run is all cache hits, is."""
    from corpusgraph.runner.pipeline import run_stage

    ctx = context(spark, tmp_path, UNITS, **{"resolve.llm_adjudication": "true", "resolve.band_low": "0.0",
                                             "resolve.summarise_descriptions": "true",
                                             "resolve.max_description_chars": "100"})
    try:
        res = run_stage(ctx, "resolve")
        assert res.rows["adjudicated"] >= 1 and res.rows["summarised"] >= 1
        assert res.usage is not None and res.usage.calls >= 2 and res.usage.errors == 0
        verdicts = ctx.spark.read.parquet(ctx.handoff("resolve", "adjudicate-out")).collect()
        assert len(verdicts) == res.rows["adjudicated"]
        assert all(v["status"] in ("ok", "parse_error") for v in verdicts)
        assert sum(v["status"] == "ok" for v in verdicts) >= len(verdicts) / 2  # the grammar holds
        long = [e for e in ctx.wh.read("entities").collect() if e["title"].lower().startswith("contoso pharm")
                and len(" ".join(e["aliases"])) > 0]
        assert long and all(0 < len(e["description"]) <= 100 for e in long)
        again = run_stage(ctx, "resolve")
        # The re-run pays for nothing: band verdicts are reused from resolve_pairs (the model is
        # not asked again) and the summaries come back from the response cache.
        assert again.rows["adjudicated"] == 0 and again.rows["adjudications_reused"] == res.rows["adjudicated"]
        assert again.usage is not None and again.usage.calls == 0 and again.usage.cache_hits >= res.rows["summarised"]
    finally:
        ctx.close()
