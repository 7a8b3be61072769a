"""The Dockerfile and compose.yaml, checked without a container engine (none runs on this
machine): every command compose runs parses with the real command line, every extra the image
installs exists, every file it copies is in the repository, its entry point is the package's
command, and the build context leaves out what must not travel."""

from __future__ import annotations

import re
import shlex
import tomllib

import yaml

from corpusgraph.cli.main import build_parser
from tests.conftest import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(l for l in DOCKERFILE.splitlines() if not l.lstrip().startswith("#")))
    return [(m.group(1).upper(), m.group(2)) for m in re.finditer(r"^(\w+)\s+(.*)$", text, re.M)]


def test_compose_commands_are_real_commands():
    services = COMPOSE["services"]
    assert {"index", "serve"} <= set(services)
    assert services["index"]["profiles"] == ["index"] and services["index"]["restart"] == "no"  # one-shot
    for name, service in services.items():
        args = build_parser().parse_args(service["command"])  # SystemExit on anything the CLI refuses
        assert args.command == name
        assert service["working_dir"] == "/project"  # where `corpusgraph init` wrote settings.yaml
    assert any(v.endswith(":ro") for v in services["serve"]["volumes"])


def test_dockerfile_installs_real_extras_and_copies_real_files():
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    steps = _instructions()
    installed = re.findall(r"corpusgraph-\*\.whl\)\[([a-z,]+)\]", DOCKERFILE)
    assert installed and all(set(group.split(",")) <= extras for group in installed)
    targets = {args.split()[-1] for op, args in steps if op == "FROM" and " AS " in args.upper()}
    assert {"serve", "full"} <= targets
    for op, args in steps:
        if op == "COPY" and "--from=" not in args:
            for source in shlex.split(args)[:-1]:
                assert (REPO / source).exists(), source
    entry = [args for op, args in steps if op == "ENTRYPOINT"]
    assert entry and all(e == f'["{next(iter(PYPROJECT["project"]["scripts"]))}"]' for e in entry)
    # The images run the same pins as the Makefile: pyspark and llama-cpp-python as pyproject pins them.
    extras = PYPROJECT["project"]["optional-dependencies"]
    pins = [re.sub(r"\[[^]]*\]", "", d) for group in extras.values() for d in group]  # extras of a pin dropped
    for pinned in re.findall(r"(pyspark==[\d.]+|llama-cpp-python==[\d.]+)", DOCKERFILE):
        assert any(p.startswith(pinned) for p in pins), pinned


def test_build_context_leaves_out_environments_and_indexes():
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".venv", "jars", "work", ".git"} <= ignored
    copied = {shlex.split(args)[0] for op, args in _instructions() if op == "COPY" and "--from=" not in args}
    assert not copied & ignored
