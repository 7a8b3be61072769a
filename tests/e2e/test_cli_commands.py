"""Every command README documents, through the real command line (`corpusgraph` in a subprocess):
index, query with each method (auto, basic, local, global, drift), serve (/readyz, /v1/query),
estimate, update (with --verbose), prompt-tune, tables, export (graphml, neo4j, parquet) and
report; the progress index prints, and Ray's and Spark's own progress output only with --verbose.

The index and the estimate are the session's shared sample index (tests/e2e/conftest.py:
`corpusgraph index`, then `corpusgraph estimate`, over the freight sample with the scripted
server); every other command but update reads it. The update test copies that index (tables, FAISS
files, response cache) and adds a document of its own to the copy. Each command's stdout and stderr are kept
under the session's tmp folder (logs/); `-s` prints each command's seconds.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import REFUSED, SAMPLE, SAMPLE_DOCUMENTS
from tests.support.cli import Cli
from tests.support.http_probe import free_port, http_json, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.ray]

# The document the update test adds to (a copy of) the sample index: it names a new carrier beside
# a hub and a carrier the sample already has.
NEW_NAME = "oderbruck-email-2026-06.md"
NEW_DOCUMENT = """# Email: Oderbruck Freight takes over the Gdansk reefer run

From: planning@halvard-quist.example
Date: 2 June 2026

Oderbruck Freight starts the weekly reefer run from the Gdansk hub to the Milan hub on 8 June 2026,
taking it over from Brightwater Haulage after two late collections in May. Trailer R-91 is assigned.
"""
# Ray Data's operator progress ("MapBatches(_LLMWorker): 0/1", "Queued blocks: ...") and its INFO
# lines, Spark's console progress bar ("[Stage 3:==>  (1 + 1) / 2]"): off unless --verbose.
NOISE = ("MapBatches(_LLMWorker): ", "Running Dataset", "Starting execution of Dataset", "Queued blocks", "[Stage ")


@pytest.fixture(scope="module")
def cli(sample_index):
    return sample_index.cli


@pytest.fixture(scope="module")
def indexed(sample_index):
    return sample_index.index


def _summary_rows(stdout: str) -> dict[str, str]:
    """stage -> its line of the end-of-run summary."""
    return {line.split()[0]: line for line in stdout.splitlines() if line and line.split()[0] in
            {"ingest", "chunk", "extract", "resolve", "communities", "reports", "embed", "total"}}


def _row_value(line: str, key: str) -> int:
    return int(re.search(rf"\b{key}=(\d+)", line).group(1))


def test_index_prints_a_bar_per_stage_in_its_units_and_the_summary(cli, indexed):
    rows = _summary_rows(indexed.stdout)
    assert set(rows) == {"ingest", "chunk", "extract", "resolve", "communities", "reports", "embed", "total"}
    assert _row_value(rows["ingest"], "documents") == SAMPLE_DOCUMENTS
    assert _row_value(rows["ingest"], "quarantined") == len(REFUSED)
    assert "LLM calls" in indexed.stdout and "tokens in" in indexed.stdout
    err = indexed.stderr
    shown = "\n".join(ln for ln in err.splitlines() if "Spark job" not in ln)[-6000:]  # for a failure's message
    # The LLM stage: one closing line per level, each level's communities all done, adding up to
    # what the stage sent; the embed stage likewise in vectors.
    levels = re.findall(r"^\[corpusgraph\] reports, level (\d+): (\d+)/(\d+) communities \(100%\), "
                        r"[\d.,]+ communities/(?:s|min), done in \S+$", err, re.M)
    assert levels and all(done == total for _, done, total in levels), shown
    assert sum(int(done) for _, done, _ in levels) == _row_value(rows["reports"], "sent") > 0, shown
    vectors = re.findall(r"^\[corpusgraph\] embed: (\d+)/(\d+) vectors \(100%\), .+, done in \S+$", err, re.M)
    assert [(int(a), int(b)) for a, b in vectors] == [(_row_value(rows["embed"], "embedded_now"),) * 2], shown
    # The Spark-only stages in theirs: ingest in files read, chunk in documents read (from Spark's
    # SQL metrics), communities in Leiden levels (at most communities.max_levels, lowered to those built).
    def closing(label: str, unit: str) -> list[tuple[int, int]]:
        return [(int(a), int(b)) for a, b in re.findall(
            rf"^\[corpusgraph\] {re.escape(label)}: (\d+)/(\d+) {unit} \(100%\), .+, done in \S+$", err, re.M)]

    files = len(list(SAMPLE.iterdir())) + len(REFUSED)
    assert closing("ingest", "files") == [(files, files)], shown
    assert closing("chunk", "documents") == [(SAMPLE_DOCUMENTS, SAMPLE_DOCUMENTS)], shown
    levels_built = _row_value(rows["communities"], "levels")
    assert closing("communities (Leiden)", "levels") == [(levels_built, levels_built)], shown
    for noise in NOISE:
        assert noise not in err, f"{noise!r} in the output of index without --verbose"
    assert cli.table("documents").num_rows == SAMPLE_DOCUMENTS


def test_tables_lists_every_table_with_rows_and_version(cli, indexed):
    from corpusgraph.tables import TABLES

    out = cli("tables").stdout
    listed = {m.group(1): (int(m.group(2)), int(m.group(3)))
              for m in re.finditer(r"^(\S+)\s+(\d+) rows\s+version (\d+)$", out, re.M)}
    assert set(listed) == set(TABLES)
    assert listed["documents"][0] == SAMPLE_DOCUMENTS
    assert listed["entities"][0] == cli.table("entities").num_rows > 0
    assert listed["communities"][0] > 0 and listed["community_reports"][0] > 0


def _ask(cli, method: str, question: str) -> dict:
    out = cli("query", "--method", method, "--json", question).stdout
    return json.loads(out)


def _entity_names(cli) -> list[str]:
    """Names of two well-connected entities of the index, longest first (spaCy found them)."""
    ents = cli.table("entities").to_pylist()
    ents.sort(key=lambda e: (-(e.get("degree") or 0), e["title"]))
    return [e["title"] for e in ents if len(e["title"]) > 4][:2]


@pytest.mark.parametrize("method", ["basic", "local"])
def test_query_basic_and_local_cite_indexed_units(cli, indexed, method):
    a, b = _entity_names(cli)
    answer = _ask(cli, method, f"What does {a} have to do with {b}?")
    assert answer["method"] == method and answer["error"] is None
    assert answer["citations"]
    units = {r["unit_id"]: r["doc_id"] for r in cli.table("text_units").select(["unit_id", "doc_id"]).to_pylist()}
    for c in answer["citations"]:
        assert units[c["unit_id"]] == c["doc_id"]
    assert answer["coverage"] and answer["llm_calls"] >= 1 and answer["tokens_in"] > 0


def test_query_global_maps_community_reports(cli, indexed):
    answer = _ask(cli, "global", "What are the recurring problems across the hubs?")
    assert answer["method"] == "global" and answer["error"] is None
    cov = answer["coverage"]
    # Coverage is counted from the index: every report of it, and its documents.
    assert cov["reports_in_index"] == cli.table("community_reports").num_rows > 0
    assert cov["documents_in_index"] == SAMPLE_DOCUMENTS
    assert 1 <= cov["reports_mapped"] <= cov["reports_in_index"]
    assert answer["details"]["map_calls"] >= 1 and answer["llm_calls"] >= answer["details"]["map_calls"]


def test_query_drift_is_accepted_and_answers(cli, indexed):
    a, b = _entity_names(cli)
    answer = _ask(cli, "drift", f"How did {a} affect {b}?")
    assert answer["method"] == "drift" and answer["error"] is None
    assert answer["llm_calls"] >= 1 and answer["coverage"]


def test_query_auto_routes_and_says_why_in_plain_text(cli, indexed):
    a, _ = _entity_names(cli)
    out = cli("query", f"What is {a}?", "What are the recurring themes across the documents?").stdout
    methods = re.findall(r"^Method: (\w+) \((.+)\)$", out, re.M)
    assert [m for m, _ in methods] == ["local", "global"], out
    assert a in methods[0][1] and "corpus-wide wording" in methods[1][1]
    assert out.count("Tokens: ") == 2 and "cost: $" in out


def test_serve_answers_readyz_and_queries_then_stops(cli, indexed):
    port = free_port()
    log = open(cli.root / "serve.log", "w")
    service = subprocess.Popen(cli.argv("serve", "--port", str(port), "--log-level", "info"), cwd=cli.root,
                               env=cli.env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        ready = wait_ready(base, service, cli.root / "serve.log")
        assert set(ready["tables"]) >= {"entities", "text_units", "community_reports"}, ready
        a, b = _entity_names(cli)
        status, headers, answer = http_json(f"{base}/v1/query", {"question": f"What does {a} have to do with {b}?",
                                                                 "method": "local"})
        assert status == 200, answer
        assert answer["method"] == "local" and answer["citations"] and answer["coverage"]
        assert headers.get("X-Index-Version") == answer["index_version"] is not None
        status, _, problem = http_json(f"{base}/v1/query", {"question": "x", "method": "nonsense"})
        assert status == 422 and "method" in json.dumps(problem)
    finally:
        service.terminate()
        try:
            code = service.wait(timeout=60)
        except subprocess.TimeoutExpired:
            service.kill()
            raise
        log.close()
    # A graceful stop: uvicorn finishes serving, then re-raises the SIGTERM it caught (exit -15).
    log_text = (cli.root / "serve.log").read_text()
    assert code in (0, -signal.SIGTERM) and "Finished server process" in log_text, log_text[-4000:]


def test_estimate_prices_the_build_and_draws_the_chart(cli, indexed, sample_index):
    # --calibrate N (the real model on N sampled units) is left out: it runs four more stages and
    # a Ray of its own, more than this file's budget; test_cli_readme.py checks that it parses.
    est = json.loads(sample_index.estimate.stdout)
    assert est == json.loads((sample_index.estimate_dir / "estimate.json").read_text())
    # The same corpus as the build: its documents, and as many units as the build chunked.
    assert est["documents"] == SAMPLE_DOCUMENTS and est["units"] == cli.table("text_units").num_rows
    assert {s["stage"] for s in est["stages"]} >= {"extract", "reports", "embed"}
    assert {"gpt-4o-mini", "gpt-4.1"} <= set(est["usd"])  # dollars per model of estimate.prices
    assert (sample_index.estimate_dir / "estimate.svg").read_text().lstrip().startswith("<")
    # The dry run wrote one row to the warehouse it was pointed at, in `runs`, and nothing else.
    runs = cli.table("runs").to_pylist()
    assert sorted(r["kind"] for r in runs) == ["estimate", "index"]
    (row,) = [r for r in runs if r["kind"] == "estimate"]
    assert row["status"] == "ok" and json.loads(row["stage_counts"])["units"] == est["units"]


def test_prompt_tune_writes_an_editable_prompt_folder(cli, indexed):
    out_dir = cli.root / "tuned"
    out = cli("prompt-tune", "--out", str(out_dir), "--n", "4").stdout
    assert re.search(rf"sampled \d+ units of text_units at {re.escape(cli.sets['storage.warehouse'])}", out), out
    written = re.findall(r"^wrote (.+)$", out, re.M)
    assert written and all(Path(p).is_file() for p in written)
    assert (out_dir / "entity_types.yaml").is_file()


def test_export_graphml_neo4j_and_parquet(cli, indexed):
    import igraph

    n_entities = cli.table("entities").num_rows
    g_dir, n_dir, p_dir = cli.root / "graphml", cli.root / "neo4j", cli.root / "parquet"
    cli("export", "--format", "graphml", "--out", str(g_dir))
    graph = igraph.Graph.Read_GraphML(str(g_dir / "graph.graphml"))
    assert graph.vcount() == n_entities and "community_L0" in graph.vs.attributes()
    out = cli("export", "--format", "neo4j", "--out", str(n_dir)).stdout
    assert "neo4j-admin database import full" in out and (n_dir / "neo4j-import.sh").is_file()
    cli("export", "--format", "parquet", "--out", str(p_dir))
    import pyarrow.parquet as pq

    assert pq.read_metadata(p_dir / "entities.parquet").num_rows == n_entities


def test_report_writes_one_html_page(cli, indexed):
    out_dir = cli.root / "report"
    cli("report", "--out", str(out_dir))
    page = (out_dir / "index.html").read_text()
    assert "plotly" in page.lower() and len(page) > 100_000  # plotly.js is inside the page


@pytest.fixture(scope="module")
def updatable(sample_index, tmp_path_factory):
    """A copy of the shared sample index (warehouse, FAISS files, response cache) for `update` to
    change: the shared one is read-only, and building another index for this test alone would cost
    a whole `corpusgraph index`. Delta logs name their files relative to the table, so a copied
    table is a table. The inputs are the shared index's own folder, read (never written) where its
    documents' source_uri point, plus a folder of this test's for the new document."""
    root = tmp_path_factory.mktemp("cli-update")
    src = sample_index.cli.root
    for name in ("wh", "idx", "cache"):
        shutil.copytree(src / name, root / name)
    (root / "new").mkdir()
    sets = {**sample_index.sets, "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
            "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{sample_index.inputs}, {root / 'new'}]"}
    return Cli(root, sets)


def test_update_extracts_only_the_new_document_and_verbose_brings_ray_output_back(updatable):
    before_units = updatable.table("text_units").num_rows
    before_docs = updatable.table("documents").num_rows
    (updatable.root / "new" / NEW_NAME).write_text(NEW_DOCUMENT)
    done = updatable("update", "--verbose")
    rows = _summary_rows(done.stdout)
    assert done.stdout.splitlines()[0].endswith("(update)")  # the summary of an update run
    new_units = updatable.table("text_units").num_rows - before_units
    assert new_units > 0 and _row_value(rows["extract"], "sent") == new_units
    assert updatable.table("documents").num_rows == before_docs + 1
    # --verbose: Ray Data's own log lines are back beside corpusgraph's bars.
    assert "Starting execution of Dataset" in done.stderr
    assert re.search(r"^\[corpusgraph\] embed: (\d+)/\1 vectors \(100%\)", done.stderr, re.M)
