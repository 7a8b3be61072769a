"""The jars outside a checkout: the lock is the checkout's jars/, a copy or a fetch is checked
against it before it is used, and the command line finds the jars where setup put them."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from corpusgraph.cli.main import main
from corpusgraph.cli.setup import spark_jars_dir
from corpusgraph.config import ConfigError
from corpusgraph.runner.jars import copy_jars, fetch_jars, find_jars_dir, lock_id, problems, read_lock
from tests.conftest import REPO

JARS = REPO / "jars"  # filled by `make setup` with Maven from conf/jars.pom.xml


def test_lock_is_the_checkouts_jars_and_pyprojects_pins():
    lock = read_lock()
    assert len(lock) == len({j.filename for j in lock}) >= 40
    assert problems(JARS, lock) == []  # the Maven-fetched set, file for file and digest for digest
    assert {p.name for p in JARS.glob("*.jar")} == {j.filename for j in lock}
    delta_pin = next(d for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
                     ["index"] if d.startswith("delta-spark=="))
    assert next(j for j in lock if j.artifact.startswith("delta-spark_")).version == delta_pin.split("==")[1]
    import pyspark

    hadoop = next(Path(pyspark.__file__).parent.joinpath("jars").glob("hadoop-client-api-*.jar")).name
    assert next(j for j in lock if j.artifact == "hadoop-aws").version == re.search(r"(\d+\.\d+\.\d+)", hadoop).group(1)


def test_copy_is_checked_and_a_tampered_jar_is_refused(tmp_path):
    lock = read_lock()
    source = tmp_path / "media"
    shutil.copytree(JARS, source)
    dest = tmp_path / "assets" / "jars" / lock_id(lock)
    copy_jars(source, dest, lock)
    assert problems(dest, lock) == [] and find_jars_dir(tmp_path / "assets", lock) == dest
    victim = source / lock[0].filename
    victim.write_bytes(victim.read_bytes() + b"x")
    other = tmp_path / "other"
    with pytest.raises(ValueError, match=f"{lock[0].filename}: SHA-256 differs"):
        copy_jars(source, other, lock)
    assert not other.exists() and not list(tmp_path.glob(".jars-*"))  # nothing half-made left behind


def test_command_line_finds_the_jars_or_names_the_command(tmp_path):
    env = {"CORPUSGRAPH_ASSETS": str(tmp_path / "assets")}
    empty = tmp_path / "no-jars"
    empty.mkdir()
    assert spark_jars_dir(str(JARS), env) == str(JARS)  # a checkout's jars/ as before
    with pytest.raises(ConfigError, match="corpusgraph setup --jars"):
        spark_jars_dir(str(empty), env)
    copy_jars(JARS, tmp_path / "assets" / "jars" / lock_id(read_lock()), read_lock())
    assert Path(spark_jars_dir(str(empty), env)) == tmp_path / "assets" / "jars" / lock_id(read_lock())


def test_setup_command_from_a_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CORPUSGRAPH_ASSETS", str(tmp_path / "assets"))
    assert main(["setup", "--jars", "--from", str(JARS)]) == 0
    dest = tmp_path / "assets" / "jars" / lock_id(read_lock())
    assert problems(dest, read_lock()) == []
    assert main(["setup", "--jars"]) == 0  # complete: nothing fetched, no network
    assert "nothing fetched" in capsys.readouterr().out


@pytest.mark.slow
def test_ivy_fetch_matches_the_lock(tmp_path):
    """Needs the network (Maven Central) and Java: the real fetch, byte for byte the locked set."""
    lock = read_lock()
    dest = fetch_jars(tmp_path / "jars", tmp_path / "ivy-cache", lock)
    assert problems(dest, lock) == []
