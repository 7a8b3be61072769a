"""The wheel is the checkout's package: every module, every sample file and the default config and
prompts (conf/ shipped as corpusgraph.defaults), nothing else; unpacked anywhere, it finds its
defaults in itself, not in a checkout."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from setuptools import find_namespace_packages

from tests.conftest import REPO
from tests.support.wheel import build_wheel, tracked as _tracked

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# Fetched by `make ui-vendor`, never committed: the wheel takes its files when they are there.
NOT_PACKAGES = {"serving.ui.vendor"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_every_folder_of_the_package_is_listed():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {p for p in find_namespace_packages(str(REPO / "lib"), include=["corpusgraph*"]) if "__pycache__" not in p}
    found |= {p for p in find_namespace_packages(str(REPO), include=["serving*"]) if "__pycache__" not in p}
    found |= {"corpusgraph.defaults", "corpusgraph.defaults.prompts"}  # conf/, mapped by package-dir
    assert listed == found - NOT_PACKAGES


def test_wheel_holds_the_checkout_and_nothing_else(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {p.removeprefix("lib/") for p in _tracked("lib/corpusgraph", "serving") if not p.endswith("/.gitignore")}
    expected |= {"corpusgraph/defaults/" + p.removeprefix("conf/") for p in _tracked("conf/*.yaml", "conf/prompts", "conf/jars.lock")}
    assert expected - names == set(), "tracked files missing from the wheel"
    dist_info = {n for n in names if ".dist-info/" in n}
    vendor = {n for n in names if n.startswith("serving/ui/vendor/")}  # present when `make ui-vendor` ran
    assert names - expected - dist_info - vendor == set(), "files in the wheel that the checkout does not track"
    assert {n.rsplit("/", 1)[-1] for n in dist_info if "/licenses/" in n} == {"LICENSE", "NOTICE"}
    assert not any(n.startswith(("tests/", "jars/", "conf/", "corpusgraph/defaults/databricks")) for n in names)


def test_unpacked_wheel_reads_its_own_defaults(wheel, tmp_path):
    """A wheel is a zip of what pip installs: unpacked into a folder first on sys.path, outside any
    checkout, the config loads with no file and every default prompt resolves inside that folder."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import json, corpusgraph, corpusgraph.config as c\n"
        "cfg = c.load_config(None)\n"
        "paths = [cfg.prompt_path(v) for v in (cfg.extract.prompt, cfg.reports.prompt, cfg.query.prompt_answer,"
        " cfg.query.global_.prompt_map, cfg.query.drift.prompt)]\n"
        "print(json.dumps({'package': corpusgraph.__file__, 'defaults': str(c.defaults_dir()),"
        " 'prompts': [str(p) for p in paths if p.is_file()]}))\n"
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    out = json.loads(subprocess.run([sys.executable, "-c", probe], cwd=work, env=env, capture_output=True, text=True,
                                    check=True).stdout)
    assert Path(out["package"]).is_relative_to(site)
    assert out["defaults"] == str(site / "corpusgraph" / "defaults")
    assert len(out["prompts"]) == 5 and all(Path(p).is_relative_to(site) for p in out["prompts"])


def test_wheel_metadata_extras(wheel):
    """The serve extra (and the core under it) names nothing of Spark, Ray or spaCy; index is the
    pipeline plus Spark and Delta; the never-imported packages are gone."""
    meta = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    lines = zipfile.ZipFile(wheel).read(meta).decode().splitlines()
    extras = {line.split(": ", 1)[1] for line in lines if line.startswith("Provides-Extra: ")}
    assert extras == {"serve", "pipeline", "index", "embedded", "all", "docs", "bench", "mcp", "retrievers", "otel", "test"}
    requires = [line.split(": ", 1)[1] for line in lines if line.startswith("Requires-Dist: ")]

    def names(extra: str | None) -> set[str]:
        marker = f'extra == "{extra}"'
        chosen = [r for r in requires if (marker in r if extra else "extra ==" not in r)]
        return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in chosen}

    serving = names(None) | names("serve")
    assert not serving & {"pyspark", "delta-spark", "ray", "spacy", "igraph", "numba", "pandas", "llama-cpp-python"}
    assert {"fastapi", "uvicorn", "deltalake", "faiss-cpu"} <= serving
    assert names("index") == {"corpusgraph", "pyspark", "delta-spark"}
    assert {"ray", "spacy", "igraph"} <= names("pipeline")
    assert not (names(None) | set().union(*(names(e) for e in extras))) & {"leidenalg", "graphframes-py"}
