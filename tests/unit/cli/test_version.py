"""`corpusgraph --version` prints the version pyproject.toml states (through the installed
metadata), so the number is written once."""

from __future__ import annotations

import tomllib

import pytest

from corpusgraph.cli.main import main
from tests.conftest import REPO


def test_version_is_pyprojects(capsys):
    stated = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"corpusgraph {stated}"


def test_service_reports_the_same_version():
    from corpusgraph import __version__
    from serving.app import create_app
    from corpusgraph.config import Config

    assert create_app(Config()).version == __version__ != "0+unknown"
