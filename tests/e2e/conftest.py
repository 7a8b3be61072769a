"""The e2e tier's one shared index, built once per session through the real command line.

`sample_index` is the freight sample (lib/corpusgraph/samples/freight) plus three inputs ingest
refuses (empty, binary, an unsupported format), indexed by `corpusgraph index` with the
deterministic scripted server (tests/support/scripted_server.py) for every LLM call, then priced
by `corpusgraph estimate` into the same warehouse. Every test that only reads an index uses it:
the commands (query, serve, tables, export, report, prompt-tune), the report page, the explore and
estimate notebooks. It is read-only: the fixture checks at the end of the session that no table
changed version. Tests that must build (a rerun that pays nothing, updates, the quickstart
notebook) build corpora of three or four documents of their own; the CLI's update test updates a
copy of this index.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.cli import Cli

SAMPLE = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"
# Documents of the sample: one per file, one per line of a JSON-lines file.
SAMPLE_DOCUMENTS = sum(len([ln for ln in f.read_text().splitlines() if ln.strip()]) if f.suffix == ".jsonl" else 1
                       for f in SAMPLE.iterdir())
# The inputs ingest refuses, and the reason it records for each.
REFUSED = {"empty.txt": ("empty", b""), "scan.txt": ("binary", b"\x00\x01PK\x03\x04 not text"),
           "slides.key": ("unsupported_format", b"a format ingest does not read")}


@dataclass
class SampleIndex:
    cli: Cli  # commands against the shared warehouse: read-only ones only
    inputs: Path
    index: subprocess.CompletedProcess  # `corpusgraph index`
    estimate: subprocess.CompletedProcess  # `corpusgraph estimate --out <estimate_dir> --json`
    estimate_dir: Path

    @property
    def sets(self) -> dict[str, str]:
        return self.cli.sets

    @property
    def warehouse(self) -> str:
        return self.cli.sets["storage.warehouse"]


def sample_sets(root: Path, llm_url: str) -> dict[str, str]:
    """The --set values of the shared index (over conf/local.yaml)."""
    return {
        "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
        "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{root / 'in'}]",
        "llm.backend": "openai", "llm.api_base": llm_url, "llm.model": "scripted", "llm.concurrency": "8",
        # Prices, so that the report's LLM panel and the summary show dollars.
        "llm.usd_per_1k_in": "0.00015", "llm.usd_per_1k_out": "0.0006",
        # Resolution by its rules alone: two Ray rounds fewer (adjudication, summaries); the
        # rounds themselves are tested on their own (tests/verbs/test_resolve.py, tests/e2e/test_update.py).
        "resolve.llm_adjudication": "false", "resolve.summarise_descriptions": "false",
        "spark.master": "local[2]", "spark.driver_memory": "2g", "spark.jars_dir": str(REPO / "jars"),
    }


def _versions(warehouse: str) -> dict[str, int]:
    from deltalake import DeltaTable

    from corpusgraph.tables import TABLES, table_path

    out = {}
    for name in TABLES:
        path = Path(table_path(warehouse, name))
        if path.exists():
            out[name] = DeltaTable(str(path)).version()
    return out


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory, scripted_url) -> SampleIndex:
    root = tmp_path_factory.mktemp("sample-index")
    inputs = root / "in"
    shutil.copytree(SAMPLE, inputs)
    for name, (_, data) in REFUSED.items():
        (inputs / name).write_bytes(data)
    cli = Cli(root, sample_sets(root, scripted_url))
    index = cli("index")
    estimate_dir = root / "estimate"
    estimate = cli("estimate", "--out", str(estimate_dir), "--json")
    built = _versions(cli.sets["storage.warehouse"])
    yield SampleIndex(cli, inputs, index, estimate, estimate_dir)
    # Shared read-only: a test that wrote to it changed what the others saw.
    assert _versions(cli.sets["storage.warehouse"]) == built, "a test wrote to the shared sample index"

