"""reports.per_domain: the context of each domain's report of a mixed community, on the two-domain
world of the query tests (query_fixtures.py), read by Spark from the Delta tables it writes.

By hand: c0a (lantern makers + the cartel) and c1b (Port Keel, the treaty) have members named
in both domains; c0b, c1a, c1c and the vault's own communities do not; c1d has one member
(under reports.min_size). Port Keel's units span both domains, so no per-domain context may
show its merged description; the cartel's and the bribe edge's evidence is vault-only.
"""

from __future__ import annotations

import pytest

from corpusgraph.config import ReportsSection
from corpusgraph.tables import table_path
from tests.support.query_fixtures import VAULT_SECRETS, build_two_domain_index

pytestmark = pytest.mark.spark

PORT_DESCRIPTION = "Harbour town, home of the Lumen Guild"


def _contexts(spark, tmp_path, level):
    from corpusgraph.stages.reports import domain_level_inputs

    wh, _ = build_two_domain_index(tmp_path)
    read = {n: spark.read.format("delta").load(table_path(wh, n))
            for n in ("communities", "entities", "relationships", "text_units", "documents")}
    rows = domain_level_inputs(read["communities"], read["entities"], read["relationships"], read["text_units"],
                               read["documents"], level, ReportsSection(), "fp").collect()
    return {(r["community_id"], r["domain"]): r for r in rows}


def test_each_domain_of_a_mixed_community_gets_a_context_of_its_own_text(spark, tmp_path):
    level0 = _contexts(spark, tmp_path / "l0", 0)
    assert set(level0) == {("c0a", "public"), ("c0a", "vault")}
    public, vault = level0[("c0a", "public")]["context"], level0[("c0a", "vault")]["context"]
    assert not [s for s in VAULT_SECRETS if s in public.lower()], public
    assert "Mara Voss (PERSON): Founder of the Lumen Guild" in public  # a public-only entity keeps its description
    assert "Mara Voss founded the Lumen Guild." in public and "Source texts:" in public
    assert "- Port Keel (LOCATION)\n" in public + "\n" and PORT_DESCRIPTION not in public  # merged: name only
    # The vault's report reads the cartel, the bribe edge and the bribe text, and nothing public.
    assert "Obsidian Cartel (ORGANIZATION): Smugglers who bribe with moonpearls" in vault
    assert "- Obsidian Cartel -> Port Keel [weight 2]: The cartel bribes Port Keel's harbour master" in vault
    assert "harbour master of Port Keel with moonpearls" in vault  # uv_bribe's text
    assert "Mara Voss" not in vault and PORT_DESCRIPTION not in vault and "moonpearls." in vault
    assert level0[("c0a", "public")]["built_from"] != level0[("c0a", "vault")]["built_from"]

    level1 = _contexts(spark, tmp_path / "l1", 1)
    assert set(level1) == {("c1b", "public"), ("c1b", "vault")}
    assert "Saltmarsh Treaty (EVENT): Agreement" in level1[("c1b", "public")]["context"]
    assert "Saltmarsh" not in level1[("c1b", "vault")]["context"]  # the treaty is public text only
