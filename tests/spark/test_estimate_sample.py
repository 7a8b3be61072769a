"""A dry run's prompt counting on a sample of units agrees with counting every unit, within the
bound it states (Spark, the real extract request builder and tokenizer)."""

from __future__ import annotations

import pytest

from corpusgraph.config import load_config
from corpusgraph.tables import spark_schema
from tests.conftest import REPO

pytestmark = pytest.mark.spark

WORDS = ("depot", "trailer", "Porto", "Lisbon", "pallets", "Castor", "Haulage", "shipped", "late", "night")


def test_sampled_counts_agree_with_exact_counts_within_their_bound(spark):
    from corpusgraph.estimate.count import ExtractCounting, count_units
    from corpusgraph.estimate.sample import count_prompt_tokens
    from corpusgraph.runner.dry_run import cost_sections

    # Packing up to 6 units per call (the default; local.yaml sends one), so that calls per unit vary from cluster to cluster.
    cfg = load_config(REPO / "conf" / "local.yaml", {"estimate.tokenizer": "tiktoken", "extract.units_per_call": "6"})
    rows = []
    for i in range(1200):
        n = 20 + (i * 37) % 180  # 20..199 words: a spread of unit lengths
        text = " ".join(WORDS[(i + k * 3) % len(WORDS)] for k in range(n)) + "."
        rows.append((f"u{i:04d}", "d1", i, text, n, 0, len(text), None, None, None))  # no pages, no section
    units = spark.createDataFrame(rows, spark_schema("text_units"))
    counting, seed = ExtractCounting.of(cost_sections(cfg), cfg.prompt_path), cfg.estimate.calibrate_seed
    exact = count_units(units, counting)
    counts, sampling = count_prompt_tokens(units, counting, seed, sample_units=300)
    assert sampling is not None and counts["units"] == exact["units"] == 1200
    assert counts["n_tokens"] == exact["n_tokens"]  # summed exactly, not sampled
    assert 150 <= sampling["units_counted"] <= 450 and sampling["packs_counted"] >= 20
    assert counts["requests"] == exact["requests"] == sampling["packs_total"]  # every unit is packed: calls exact
    for name in ("tokens_in", "text_tokens"):
        bound = sampling["relative_error_95"][name]
        assert 0 < bound < 0.2
        assert abs(counts[name] - exact[name]) <= bound * exact[name], name
    same, none = count_prompt_tokens(units, counting, seed, sample_units=0)
    assert none is None and same == exact  # 0: every unit, exactly as before
