"""Per-domain report contexts and the task that sends them (stages/reports.py), without Spark."""

from __future__ import annotations

import pytest

from corpusgraph.config import ReportsSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.prompts import load_prompt
from tests.support.query_fixtures import REPO

pytestmark = pytest.mark.unit


def test_a_domain_context_shows_merged_rows_by_name_only_then_the_domains_units():
    from corpusgraph.stages.reports import build_domain_context

    ents = [{"title": "Port Keel", "type": "LOCATION", "description": None, "degree": 3},
            {"title": "Obsidian Cartel", "type": "ORGANIZATION", "description": "Smugglers.", "degree": 1}]
    rels = [{"source": "Obsidian Cartel", "target": "Port Keel", "description": None, "weight": 2.0}]
    units = [{"unit_id": "u2", "text": "Second   text."}, {"unit_id": "u1", "text": "First text."}]
    text = build_domain_context(ents, rels, units, 500)
    assert text == ("Entities:\n- Port Keel (LOCATION)\n- Obsidian Cartel (ORGANIZATION): Smugglers.\n\n"
                    "Relationships:\n- Obsidian Cartel -> Port Keel [weight 2]\n\n"
                    "Source texts:\n- First text.\n- Second text.")
    tight = build_domain_context([], [], [{"unit_id": "u1", "text": "word " * 400}], 120)
    assert tight.startswith("Source texts:\n- word") and len(tight.split()) < 130


def test_the_domain_task_keys_requests_and_rows_by_community_and_domain():
    from corpusgraph.stages.reports import DomainReportTask

    task = DomainReportTask(ReportsSection(), load_prompt(REPO / "conf" / "prompts" / "report.txt"), "m", 0.0)
    rows = [{"community_id": "c0a", "domain": "public", "level": 0, "context": "ctx", "built_from": "h1"},
            {"community_id": "c0a", "domain": "vault", "level": 0, "context": "ctx", "built_from": "h2"}]
    requests = task.requests(rows)
    assert [r.id for r in requests] == ["c0a@public", "c0a@vault"]
    answer = '{"title": "T", "summary": "S", "findings": [], "rating": 4, "rating_explanation": "r"}'
    out = task.outputs(rows, [ChatResult(id=r.id, text=answer, tokens_in=7, tokens_out=3) for r in requests])
    assert [(o["community_id"], o["domain"], o["status"], o["tokens_in"]) for o in out] == [
        ("c0a", "public", "ok", 7), ("c0a", "vault", "ok", 7)]
    assert set(out[0]) == set(task.output_schema.names)


def test_the_estimate_counts_per_domain_reports_like_community_reports():
    from corpusgraph.config import load_config
    from corpusgraph.estimate.model import Rates, estimate_from_counts
    from corpusgraph.runner.dry_run import cost_sections

    cfg = load_config(REPO / "conf" / "local.yaml", {})
    cfg.extract.glean_rounds = 0
    counts = {"requests": 100, "tokens_in": 60_000, "text_tokens": 33_000, "n_tokens": 30_000, "units": 100}

    def reports(per_domain: bool, ratio):
        cfg.reports.per_domain = per_domain
        rates = Rates(extract_out_per_call=200, report_out_per_call=300, entities_per_unit=2.0, reports_per_entity=0.25,
                      report_context_tokens=800, domain_reports_per_report=ratio)
        return estimate_from_counts(counts, rates, cost_sections(cfg), documents=40, overhead=150,
                                    tokenizer="t").stage("reports")

    # 200 entities x 0.25 = 50 reports of (150 + 800 x 1.1) tokens in and 300 out; 0.4 per-domain
    # reports per report add 20 calls at the same price.
    assert (reports(False, 0.4).calls, reports(False, 0.4).tokens_in) == (50, 50 * 1030)
    on = reports(True, 0.4)
    assert (on.calls, on.tokens_in, on.tokens_out) == (70, 70 * 1030, 70 * 300) and "0.400 per-domain" in on.basis
    unmeasured = reports(True, None)
    assert unmeasured.calls == 50 and "not measured" in unmeasured.basis


def test_a_mixed_entity_is_called_by_the_form_the_domains_text_uses():
    from corpusgraph.stages.reports import domain_names

    ents = [{"entity_id": "e1", "title": "Usis Technologies", "aliases": ["Usis Tech", "Usis Tchnologies",
                                                                          "Usis Technologies PLC"],
             "mixed": True},
            {"entity_id": "e2", "title": "Geneva", "aliases": [], "mixed": False},
            {"entity_id": "e3", "title": "Hidden Name", "aliases": ["Other Form"], "mixed": True}]
    texts = ["usis tchnologies has its headquarters in Geneva.", "Usis Tchnologies grew.", "Usis Technologiesque"]
    # e1: the misspelt form is the domain's own (twice; the title and "Usis Tech" never occur as
    # whole words, only inside longer ones); e2 is single-domain;
    # e3's names do not occur in the domain's text, so it is left out (its title is another domain's word).
    assert domain_names(ents, texts) == {"e1": "Usis Tchnologies", "e2": "Geneva"}
