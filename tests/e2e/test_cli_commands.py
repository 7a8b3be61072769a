"""Every command README documents, through the real command line (`corpusgraph` in a subprocess):
index, query with each method (auto, basic, local, global, drift), serve (/readyz, /v1/query),
estimate, update (with --verbose), prompt-tune, tables, export (graphml, neo4j, parquet) and
report; the progress index prints, and Ray's and Spark's own progress output only with --verbose.

One index per session, built by `corpusgraph index` from sample documents (freight) with the
fast extraction path (spaCy, no LLM) and the deterministic scripted server
(tests/support/scripted_server.py, a test harness) for reports and queries; every other
command reads or extends that warehouse, and the dry run runs beside the build. The update test
runs last: it adds a held-back sample document to the same warehouse. Each command's stdout and
stderr are kept under the session's tmp folder (logs/); `-s` prints each command's seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from corpusgraph.tables import table_path
from tests.support import scripted_server
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.ray]

SAMPLE = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"
# A few sample documents that share hubs, carriers and trailers; the last is held back for update.
DOCS = ["valencia-weekly-2026-w12.md", "milan-weekly-2026-w14.md", "brightwater-email-2026-05.md",
        "fenmore-complaint-2026-07.md", "milan-incident-2026-07-22.txt", "valencia-incident-r52-2026-06.md"]
HELD_BACK = "vistula-email-2026-05.md"
CLI = Path(sys.executable).with_name("corpusgraph")
# Ray Data's operator progress ("MapBatches(_LLMWorker): 0/1", "Queued blocks: ...") and its INFO
# lines, Spark's console progress bar ("[Stage 3:==>  (1 + 1) / 2]"): off unless --verbose.
NOISE = ("MapBatches(_LLMWorker): ", "Running Dataset", "Starting execution of Dataset", "Queued blocks", "[Stage ")


class Cli:
    """`corpusgraph <command> --conf local.yaml --set ...` against the session's warehouse."""

    def __init__(self, root: Path, llm_url: str):
        self.root = root
        self.inputs = root / "in"
        self.sets = {
            "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
            "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{self.inputs}]",
            "llm.backend": "openai", "llm.api_base": llm_url, "llm.model": "scripted", "llm.concurrency": "8",
            "extract.method": "fast", "resolve.method": "exact",
            # The commands run in `root`: Spark's spark-warehouse/ and derby.log land there too.
            "spark.master": "local[2]", "spark.driver_memory": "2g", "spark.jars_dir": str(REPO / "jars"),
        }
        # Plain progress lines (stderr is not a terminal here) every second instead of every 15 s.
        self.env = {**os.environ, "CORPUSGRAPH_PROGRESS_INTERVAL_S": "1"}
        self.runs = 0

    def argv(self, command: str, *args: str, sets: dict[str, str] | None = None) -> list[str]:
        pairs = [a for k, v in {**self.sets, **(sets or {})}.items() for a in ("--set", f"{k}={v}")]
        return [str(CLI), command, "--conf", str(REPO / "conf" / "local.yaml"), *pairs, *args]

    def start(self, command: str, *args: str, sets: dict[str, str] | None = None) -> "Running":
        """Start a command; its stdout and stderr go to <root>/logs."""
        self.runs += 1
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        out, err = logs / f"{self.runs:02d}-{command}.out", logs / f"{self.runs:02d}-{command}.err"
        argv = self.argv(command, *args, sets=sets)
        with open(out, "w") as o, open(err, "w") as e:
            proc = subprocess.Popen(argv, cwd=self.root, env=self.env, stdout=o, stderr=e)
        return Running(command, argv, proc, out, err)

    def __call__(self, command: str, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
        """Run a command to its end (exit 0 or the test fails with its stderr)."""
        return self.start(command, *args).wait(timeout)

    def table(self, name: str):
        from deltalake import DeltaTable

        return DeltaTable(table_path(self.sets["storage.warehouse"], name)).to_pyarrow_table()


class Running:
    def __init__(self, command, argv, proc, out: Path, err: Path):
        self.command, self.argv, self.proc, self.out, self.err = command, argv, proc, out, err
        self.started = time.monotonic()

    def wait(self, timeout: float = 1200) -> subprocess.CompletedProcess:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        print(f"corpusgraph {self.command}: {time.monotonic() - self.started:.1f}s")  # with -s: where the time goes
        done = subprocess.CompletedProcess(self.argv, code, self.out.read_text(), self.err.read_text())
        assert code == 0, f"corpusgraph {self.command} exited {code}:\n{done.stderr[-4000:]}"
        return done


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    with scripted_server.running() as url:
        c = Cli(root, url)
        c.inputs.mkdir()
        for name in DOCS:
            shutil.copy(SAMPLE / name, c.inputs / name)
        yield c


# The dry run needs no index: it runs beside the build (its own warehouse, so the two never
# write one `runs` table at once), which hides most of its time under the build's.
ESTIMATE_SETS = {"storage.warehouse": "wh-estimate", "storage.cache_dir": "cache-estimate"}


@pytest.fixture(scope="module")
def estimating(cli):
    out_dir = cli.root / "estimate"
    sets = {k: str(cli.root / v) for k, v in ESTIMATE_SETS.items()}
    running = cli.start("estimate", "--out", str(out_dir), "--json", sets=sets)
    yield out_dir, sets["storage.warehouse"], running
    if running.proc.poll() is None:  # its test was not run
        running.proc.kill()
        running.proc.wait()


@pytest.fixture(scope="module")
def indexed(cli, estimating):
    return cli("index")


def _summary_rows(stdout: str) -> dict[str, str]:
    """stage -> its line of the end-of-run summary."""
    return {line.split()[0]: line for line in stdout.splitlines() if line and line.split()[0] in
            {"ingest", "chunk", "extract", "resolve", "communities", "reports", "embed", "total"}}


def _row_value(line: str, key: str) -> int:
    return int(re.search(rf"\b{key}=(\d+)", line).group(1))


def test_index_prints_a_bar_per_stage_in_its_units_and_the_summary(cli, indexed):
    rows = _summary_rows(indexed.stdout)
    assert set(rows) == {"ingest", "chunk", "extract", "resolve", "communities", "reports", "embed", "total"}
    assert _row_value(rows["ingest"], "documents") == len(DOCS)
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

    assert closing("ingest", "files") == [(len(DOCS), len(DOCS))], shown
    assert closing("chunk", "documents") == [(len(DOCS), len(DOCS))], shown
    levels_built = _row_value(rows["communities"], "levels")
    assert closing("communities (Leiden)", "levels") == [(levels_built, levels_built)], shown
    for noise in NOISE:
        assert noise not in err, f"{noise!r} in the output of index without --verbose"
    assert cli.table("documents").num_rows == len(DOCS)


def test_tables_lists_every_table_with_rows_and_version(cli, indexed):
    from corpusgraph.tables import TABLES

    out = cli("tables").stdout
    listed = {m.group(1): (int(m.group(2)), int(m.group(3)))
              for m in re.finditer(r"^(\S+)\s+(\d+) rows\s+version (\d+)$", out, re.M)}
    assert set(listed) == set(TABLES)
    assert listed["documents"][0] == len(DOCS)
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
    assert cov["documents_in_index"] == len(DOCS)
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, body: dict | None = None):
    """(status, headers (case-insensitive), JSON body) of a GET, or of a POST of `body`."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.headers, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read() or b"{}")


def test_serve_answers_readyz_and_queries_then_stops(cli, indexed):
    port = _free_port()
    log = open(cli.root / "serve.log", "w")
    service = subprocess.Popen(cli.argv("serve", "--port", str(port), "--log-level", "info"), cwd=cli.root,
                               env=cli.env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # a wait for start-up, not a measurement
        while True:
            assert service.poll() is None, (cli.root / "serve.log").read_text()[-4000:]
            try:
                status, _, ready = _get(f"{base}/readyz")
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "serve never became ready"
            time.sleep(0.5)
        assert set(ready["tables"]) >= {"entities", "text_units", "community_reports"}, ready
        a, b = _entity_names(cli)
        status, headers, answer = _get(f"{base}/v1/query", {"question": f"What does {a} have to do with {b}?",
                                                             "method": "local"})
        assert status == 200, answer
        assert answer["method"] == "local" and answer["citations"] and answer["coverage"]
        assert headers.get("X-Index-Version") == answer["index_version"] is not None
        status, _, problem = _get(f"{base}/v1/query", {"question": "x", "method": "nonsense"})
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


def test_estimate_prices_the_build_and_draws_the_chart(cli, indexed, estimating):
    # --calibrate N (the real model on N sampled units) is left out: it runs four more stages and
    # a Ray of its own, more than this file's budget; test_cli_readme.py checks that it parses.
    from deltalake import DeltaTable

    out_dir, warehouse, running = estimating
    est = json.loads(running.wait().stdout)
    assert est == json.loads((out_dir / "estimate.json").read_text())
    # The same corpus as the build: its documents, and as many units as the build chunked.
    assert est["documents"] == len(DOCS) and est["units"] == cli.table("text_units").num_rows
    assert {s["stage"] for s in est["stages"]} >= {"extract", "reports", "embed"}
    assert {"gpt-4o-mini", "gpt-4.1"} <= set(est["usd"])  # dollars per model of estimate.prices
    assert (out_dir / "estimate.svg").read_text().lstrip().startswith("<")
    runs = DeltaTable(table_path(warehouse, "runs")).to_pyarrow_table().to_pylist()
    assert [r["kind"] for r in runs] == ["estimate"]


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


def test_update_extracts_only_the_new_document_and_verbose_brings_ray_output_back(cli, indexed):
    before_units = cli.table("text_units").num_rows
    shutil.copy(SAMPLE / HELD_BACK, cli.inputs / HELD_BACK)
    done = cli("update", "--verbose")
    rows = _summary_rows(done.stdout)
    assert done.stdout.splitlines()[0].endswith("(update)")  # the summary of an update run
    new_units = cli.table("text_units").num_rows - before_units
    assert new_units > 0 and _row_value(rows["extract"], "sent") == new_units
    assert cli.table("documents").num_rows == len(DOCS) + 1
    # --verbose: Ray Data's own log lines are back beside corpusgraph's bars.
    assert "Starting execution of Dataset" in done.stderr
    assert re.search(r"^\[corpusgraph\] embed: (\d+)/\1 vectors \(100%\)", done.stderr, re.M)
