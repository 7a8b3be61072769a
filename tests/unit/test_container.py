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


def test_image_fetches_the_makefiles_cytoscape_pin():
    """The page's graph library is not in the build context (.dockerignore): the image fetches the
    very tarball `make ui-vendor` pins, checked against the same integrity."""
    makefile = (REPO / "Makefile").read_text()
    version = re.search(r"^CYTOSCAPE := cytoscape@([\d.]+)$", makefile, re.M).group(1)
    integrity = re.search(r"^CYTOSCAPE_INTEGRITY := (sha512-\S+)$", makefile, re.M).group(1)
    assert f"registry.npmjs.org/cytoscape/-/cytoscape-{version}.tgz" in DOCKERFILE
    assert f"want = '{integrity}'" in DOCKERFILE
    assert "serving/ui/vendor" in (REPO / ".dockerignore").read_text().split()


def test_every_download_step_takes_the_build_secrets():
    """Behind a TLS-intercepting proxy the CA comes as a build secret (the Dockerfile's header): each
    RUN that reaches PyPI or npm mounts `ca`, the one that runs Ivy (Java) mounts `java-cacerts`."""
    runs = [args for op, args in _instructions() if op == "RUN"]
    fetching = [r for r in runs if re.search(r"pip (install|wheel)|urlopen", r)]
    assert len(fetching) >= 4
    for run in fetching:
        assert run.startswith("--mount=type=secret,id=ca,target=/run/build-ca/ca.pem"), run
        assert "PIP_CERT=/run/build-ca/ca.pem" in run
    ivy = [r for r in runs if "setup --jars" in r]
    assert ivy and all(r.startswith("--mount=type=secret,id=java-cacerts,") for r in ivy)
    # A bind mount over the system bundle breaks ca-certificates' own set-up: no step relies on one.
    assert "PIP_CERT=/etc/ssl" not in DOCKERFILE


def test_compose_named_volumes_are_writable_folders_in_the_image():
    """A new named volume takes the owner and mode of the image's folder at its mount point; the
    image makes each one 1777, so the service writes there as 10001 or as CORPUSGRAPH_UID."""
    named = set(COMPOSE.get("volumes") or {})
    mounts = {v.split(":")[1] for s in COMPOSE["services"].values() for v in s["volumes"] if v.split(":")[0] in named}
    assert mounts
    for path in mounts:
        assert DOCKERFILE.count(f"install -d -m 1777 {path}") == 2, path  # serve and full


def test_container_tier_is_a_make_target_outside_the_default_tier():
    markers = PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("container:") for m in markers)
    makefile = (REPO / "Makefile").read_text()
    target = re.search(r"^test-container:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert target and "-m container" in target.group(1) and "test_container_images.py" in target.group(1)
    test = (REPO / "tests" / "e2e" / "test_container_images.py").read_text()
    assert "pytest.mark.slow" in test and "pytest.mark.container" in test  # `make test` runs -m "not slow"
    assert "pytest.skip" not in test and "pytest.fail" in test  # no engine: a failure, never a skip
