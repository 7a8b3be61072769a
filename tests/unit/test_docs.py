"""The documentation: the site builds with no warning, the generated references hold every
configuration key and every command-line option, the results page links every results file,
README stays short, and every relative link in README and the pages resolves."""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys

import pytest

from corpusgraph.cli.main import build_parser
from corpusgraph.config import Config
from corpusgraph.sections.catalog import entries
from tests.conftest import REPO

DOCS = REPO / "docs"
_spec = importlib.util.spec_from_file_location("refgen", DOCS / "refgen.py")
refgen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(refgen)


def test_site_builds_with_warnings_as_errors(tmp_path):
    # The docs extra (Sphinx, MyST, furo) is in `make setup`; a missing one fails here, as any dependency.
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d",
                           str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "reference/configuration.html", "reference/cli.html", "reference/api.html",
                 "results.html", "openapi.json"):
        assert (tmp_path / "html" / page).is_file(), page


def test_every_key_has_a_description_and_is_on_the_reference():
    page = refgen.config_reference()
    keys = list(entries(Config))
    assert len(keys) > 300
    assert [e.key for e in keys if not e.description.strip()] == []
    assert [e.key for e in keys if f"`{e.key}`" not in page] == []


def test_every_option_has_help_and_is_on_the_reference():
    page = refgen.cli_reference()

    def parsers(p: argparse.ArgumentParser, name: str):
        yield name, p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, sp in action.choices.items():
                    yield from parsers(sp, f"{name} {sub}")

    seen = 0
    for name, parser in parsers(build_parser(), "corpusgraph"):
        assert f"## `{name}`" in page, name
        section = page.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                continue
            flag = action.option_strings[0] if action.option_strings else action.dest
            assert action.help, f"{name} {flag} has no help text"
            assert flag in section, f"{name} {flag} is not on the CLI reference"
            seen += 1
    assert seen > 50


def test_api_reference_lists_every_path():
    spec = refgen.openapi()
    page = refgen.api_reference(spec)
    for path, methods in spec["paths"].items():
        for method in methods:
            assert f"`{method.upper()} {path}`" in page


def test_results_page_links_every_results_file():
    page = (DOCS / "results.md").read_text()
    for f in sorted((REPO / "tests" / "benchmarks" / "results").iterdir()):
        assert f"](../tests/benchmarks/results/{f.name})" in page, f.name


def test_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


def test_relative_links_resolve():
    pages = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if path == "../_extra/openapi.json":  # written by the build itself (refgen.write_all)
                continue
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []
