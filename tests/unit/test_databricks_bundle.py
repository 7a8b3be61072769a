"""conf/databricks/databricks.yml: every job's tasks point at what this repository has.

For each task of each job: its python_file is one of jobs/*.py; its parameters, with the bundle's
variables at their defaults, are accepted by that job script (its Ray-on-Spark options, then the
corpusgraph command line) and make a valid configuration from the named config file (unknown
keys are refused); its libraries (a requirements file) exist and pin what pyproject.toml pins;
its job cluster is defined, with the init script it names. Every variable used is declared with a
description and documented in docs/how-to/databricks.md.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

BUNDLE = REPO / "conf" / "databricks" / "databricks.yml"
VAR = re.compile(r"\$\{var\.([a-z_]+)\}")


@pytest.fixture(scope="module")
def bundle() -> dict:
    return yaml.safe_load(BUNDLE.read_text())


def _fill(value: str, variables: dict) -> str:
    """${var.x} at its default and ${workspace.file_path} as the repository (sync.paths: ../..)."""
    for _ in range(3):  # a default may name another variable
        value = VAR.sub(lambda m: str(variables[m.group(1)]["default"]), value)
    return value.replace("/Workspace${workspace.file_path}", str(REPO)).replace("${workspace.file_path}", str(REPO))


def _local(path: str) -> Path:
    """A path of the bundle: relative ones count from the folder of databricks.yml."""
    return Path(path) if path.startswith("/") else (BUNDLE.parent / path).resolve()


def _tasks(bundle):
    for job_key, job in bundle["resources"]["jobs"].items():
        for task in job["tasks"]:
            yield job_key, job, task


def _job_script(path: Path):
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"job_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # no __main__: defines COMMAND, runs nothing
    finally:
        sys.path.remove(str(path.parent))
    return module


def test_the_bundle_syncs_the_repository_and_defines_the_three_jobs(bundle):
    assert [_local(p) for p in bundle["sync"]["paths"]] == [REPO]
    scripts = {job: Path(t["spark_python_task"]["python_file"]).name for job, _, t in _tasks(bundle)}
    assert scripts == {"corpusgraph_index": "index.py", "corpusgraph_update": "update.py",
                       "corpusgraph_estimate": "estimate.py"}


def test_every_task_entry_point_and_its_parameters_exist_in_the_repository(bundle):
    from corpusgraph.cli.main import build_parser
    from corpusgraph.config import load_config

    variables = bundle["variables"]
    for job_key, job, task in _tasks(bundle):
        script = _local(task["spark_python_task"]["python_file"])
        assert script.is_file() and script.parent == REPO / "jobs", (job_key, script)
        module = _job_script(script)
        params = [_fill(str(p), variables) for p in task["spark_python_task"]["parameters"]]
        assert not [p for p in params if "${" in p], (job_key, params)
        options = sys.modules[module.run.__module__].parser()  # the script's own options (jobs/ray_on_spark.py)
        opts, rest = options.parse_known_args(params)
        args = build_parser().parse_args([module.COMMAND, "--submitted", *rest])  # SystemExit on an unknown option
        assert args.command == module.COMMAND == script.stem
        conf = Path(args.conf)
        assert conf.is_file() and conf.is_relative_to(REPO / "conf"), (job_key, conf)
        # Every --set names a real config key with a valid value (extra keys are refused).
        cfg = load_config(conf, dict(s.split("=", 1) for s in args.set), env={})
        assert cfg.storage.warehouse.startswith(variables["root"]["default"])
        assert cfg.ingest.inputs == [variables["inputs"]["default"]]
        if job_key != "corpusgraph_estimate":  # the dry run needs no Ray
            assert opts.ray_workers == int(variables["ray_workers"]["default"]) > 0
            assert cfg.ray.actors == opts.ray_workers


def _pins(lines) -> dict[str, str]:
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            name = re.match(r"[A-Za-z0-9_.-]+", line).group(0).lower().replace("_", "-")
            out[name] = line
    return out


def test_every_task_library_exists_and_pins_what_pyproject_pins(bundle):
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    # The core, the index pipeline and the service: [index] is [pipeline] + pyspark and delta-spark,
    # which are the Databricks Runtime's own.
    declared = _pins(project["dependencies"] + extras["pipeline"] + extras["serve"])
    runtime = {"pyspark", "delta-spark"}
    assert set(_pins(extras["index"])) == {"corpusgraph"} | runtime and "corpusgraph[pipeline]" in extras["index"]
    for job_key, _, task in _tasks(bundle):
        assert task["libraries"], job_key
        for lib in task["libraries"]:
            (kind, path), = lib.items()
            assert kind == "requirements", (job_key, lib)
            file = _local(path)
            assert file.is_file(), (job_key, file)
            pins = _pins(file.read_text().splitlines())
            assert pins == {k: v for k, v in declared.items() if k not in runtime}, file


def test_every_job_cluster_is_defined_with_its_init_script(bundle):
    variables = bundle["variables"]
    for job_key, job, task in _tasks(bundle):
        clusters = {c["job_cluster_key"]: c["new_cluster"] for c in job["job_clusters"]}
        cluster = clusters[task["job_cluster_key"]]
        for script in cluster.get("init_scripts", []):
            path = Path(_fill(script["workspace"]["destination"], variables))
            assert path.is_file() and path.read_text().startswith("#!/bin/bash"), (job_key, path)
        assert Path(_fill(cluster["spark_env_vars"]["CORPUSGRAPH_SRC"], variables)) == REPO
        assert int(variables["ray_workers"]["default"]) <= int(_fill(str(cluster["num_workers"]), variables))


def test_every_variable_is_declared_described_and_documented(bundle):
    text = BUNDLE.read_text()
    used = set(VAR.findall(text))
    declared = bundle["variables"]
    assert used <= set(declared), used - set(declared)
    assert set(declared) <= used, "a variable nothing uses"
    section = (REPO / "docs" / "how-to" / "databricks.md").read_text()  # the page that documents the bundle
    for name, var in declared.items():
        assert var.get("description") and "default" in var, name
        assert f"`{name}`" in section, f"docs/how-to/databricks.md does not document `{name}`"
