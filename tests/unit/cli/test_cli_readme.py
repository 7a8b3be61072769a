"""README's commands against the argparse definitions: every `corpusgraph ...` command line it
shows parses (each alternative of an `a|b|c` choice, with the optional parts given), and every
option it names in backticks exists on some command. Whether each command then works is
tests/e2e/test_cli_commands.py's job."""

from __future__ import annotations

import argparse
import itertools
import re
import shlex

import pytest

from corpusgraph.cli.main import build_parser
from tests.conftest import REPO

# README and the documentation pages written by hand (the generated reference pages are left out:
# they come from the parser itself).
GENERATED = {"configuration.md", "cli.md", "api.md"}
PAGES = [REPO / "README.md"] + sorted(p for p in (REPO / "docs").rglob("*.md")
                                      if not (p.parent.name == "reference" and p.name in GENERATED))
README = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
# Options of other programs that README quotes: neo4j-admin's ("Exporting the graph"), the
# databricks CLI's and jobs/ray_on_spark.py's ("Databricks"), docker's and buildah's (docs/how-to/docker.md),
# pip's (docs/how-to/install.md, docker.md).
OTHER_TOOLS = {"--array-delimiter", "--multiline-fields", "--overwrite-destination", "--var", "--ray-workers",
               "--build-arg", "--no-deps", "--secret", "--isolation", "--use-pep517"}
PLACEHOLDERS = {"N": "2", "DIR": "/tmp/out", "F": "/tmp/keys", "A,B": "ops,finance", "a,b": "ingest,chunk", '"..."': "a question"}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _documented_lines() -> list[str]:
    """Every corpusgraph command line README shows: the table's and the prose's code spans and
    the shell blocks' `.venv/bin/corpusgraph ...` lines."""
    spans = [s.replace("\\|", "|") for s in re.findall(r"`(corpusgraph [a-z-]+[^`]*)`", README)]
    for line in re.findall(r"\.venv/bin/(corpusgraph [^&\n\\]+)", README):
        spans.append(re.sub(r"\s+#.*$", "", line).strip())  # a shell comment after the command
    return sorted(set(spans))


def _argvs(line: str) -> list[list[str]]:
    """The argv lists one documented line stands for: each choice alternative, optional parts in."""
    line = line.replace("[", " ").replace("]", " ")
    words = shlex.split(line.replace('"..."', "QUESTION"), posix=True)[1:]
    options: list[list[str]] = []
    for w in words:
        w = {"QUESTION": "a question"}.get(w, w)
        w = PLACEHOLDERS.get(w, w)
        options.append(w.split("|") if "|" in w and not w.startswith("--") else [w])
    return [list(choice) for choice in itertools.product(*options)]


@pytest.mark.parametrize("line", _documented_lines())
def test_every_documented_command_line_parses(line):
    parser = build_parser()
    if len(line.split()) == 2:  # a command named in prose: it must exist
        assert line.split()[1] in _subparsers(parser), line
        return
    for argv in _argvs(line):
        try:
            args = parser.parse_args(argv)
        except SystemExit:  # argparse refused it: README documents what the CLI does not take
            pytest.fail(f"README's `{line}` as {argv} is refused by the command line")
        assert args.command == argv[0]


def test_every_backticked_option_exists_on_some_command():
    parser = build_parser()
    known = {o for action in parser._actions for o in action.option_strings}  # --version, --help
    for sp in _subparsers(parser).values():
        for action in sp._actions:
            known.update(action.option_strings)
    named = {m.group(1) for m in re.finditer(r"`(--[a-z][a-z0-9-]*)", README)}
    missing = sorted(named - known - OTHER_TOOLS)
    assert not missing, f"README names options no corpusgraph command has: {missing} (another program's? OTHER_TOOLS)"


def test_the_query_methods_are_the_engines():
    from corpusgraph.query.engine import METHODS

    query = _subparsers(build_parser())["query"]
    method = next(a for a in query._actions if "--method" in a.option_strings)
    assert set(method.choices) == set(METHODS)
    assert f"--method {'|'.join(['auto', 'basic', 'local', 'global', 'drift'])}" in README.replace("\\|", "|")


def test_every_command_takes_conf_and_set():
    for name, sp in _subparsers(build_parser()).items():
        options = {o for a in sp._actions for o in a.option_strings}
        if name in ("init", "setup"):  # they read no config: init writes one, setup fetches files for any
            assert "--from" in options and "--conf" not in options
            continue
        assert {"--conf", "--set"} <= options, name
