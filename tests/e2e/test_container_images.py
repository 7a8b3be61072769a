"""The images of the Dockerfile, built for real with the container engine this machine has (docker
or buildah) and run: the `serve` image answers over HTTP from an index the checkout built (a
project folder made by `corpusgraph init`, mounted read-only as compose mounts it), and the `full`
image runs its entry point (`--version`, `init`).

`make test-container` runs this file (markers `slow` and `container`; the default tier leaves it
out). It fails, never skips, on a machine with neither engine: the make target is an explicit
request. CORPUSGRAPH_CONTAINER_BASE names the Debian 12 image to build from (default
debian:bookworm-slim; `make container-base` makes one with mmdebstrap where Docker Hub is out of
reach). The host's own trust stores go to the build as its `ca` and `java-cacerts` secrets (the
Dockerfile's header says why), so a build behind a TLS-intercepting proxy the host trusts works.
Where it ran and what it measured: docs/how-to/docker.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from serving.ui import CYTOSCAPE_SHA256
from tests.conftest import REPO
from tests.support.http_probe import free_port, http_json, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.e2e]
CORPUSGRAPH = Path(sys.executable).with_name("corpusgraph")
BASE = os.environ.get("CORPUSGRAPH_CONTAINER_BASE", "debian:bookworm-slim")
SAMPLE = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"
DOCUMENTS = ("antwerp-incident-2026-05-14.md", "rotterdam-incident-2026-05-05.md", "audit-memo-customs-q1.md")
SECRETS = {"ca": Path("/etc/ssl/certs/ca-certificates.crt"), "java-cacerts": Path("/etc/ssl/certs/java/cacerts")}
UID = 10001  # the images' user (Dockerfile useradd)


class Engine:
    """docker, or buildah where there is no docker (buildah runs no daemon; without runc or crun its
    RUN steps and containers use chroot isolation, which shares the host's network)."""

    def __init__(self):
        # A docker client without a daemon it can reach builds nothing (this machine has one such).
        docker = shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
        self.name = "docker" if docker else "buildah" if shutil.which("buildah") else None
        if self.name is None:
            pytest.fail("no container engine: neither a docker with a reachable daemon nor buildah; "
                        "`make test-container` needs one")
        self.chroot = self.name == "buildah" and not (shutil.which("runc") or shutil.which("crun"))

    def _isolation(self) -> list[str]:
        return ["--isolation", "chroot"] if self.chroot else []

    def build(self, target: str) -> str:
        tag = f"corpusgraph:{target}"
        verb = ["docker", "build"] if self.name == "docker" else ["buildah", "bud", *self._isolation(), "--layers"]
        secrets = [a for key, src in SECRETS.items() if src.is_file() for a in ("--secret", f"id={key},src={src}")]
        done = subprocess.run([*verb, "--build-arg", f"BASE={BASE}", *secrets, "--target", target, "-t", tag, "."],
                              cwd=REPO, capture_output=True, text=True, timeout=5400)
        assert done.returncode == 0, f"{' '.join(verb)} --target {target}:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
        return tag

    def config(self, image: str) -> dict:
        """The image's OCI config (Entrypoint, Cmd, User, WorkingDir)."""
        if self.name == "docker":
            out = subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True, check=True)
            return json.loads(out.stdout)[0]["Config"]
        out = subprocess.run(["buildah", "inspect", "--type", "image", image], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["OCIv1"]["config"]

    def start(self, image: str, args: list[str], *, user: int, mounts: list[str], log,
              entry: str | None = None) -> Container:
        """`image`'s entry point (or `entry`) with `args`, on the host's network, as `user`, with
        `mounts` (-v), in the image's working directory."""
        vols = [a for m in mounts for a in ("-v", m)]
        if self.name == "docker":
            name = f"corpusgraph-test-{os.getpid()}-{time.monotonic_ns()}"
            other = ["--entrypoint", entry] if entry else []
            # shm: Ray's object store, as compose.yaml's index job sizes it.
            proc = subprocess.Popen(["docker", "run", "--rm", "--name", name, "--network", "host", "--shm-size", "2g",
                                     "--user", str(user),
                                     *other, *vols, image, *args], stdout=log, stderr=subprocess.STDOUT)
            return Container(self, proc, name)
        # buildah names the container's host after its id and leaves that name out of /etc/hosts
        # (docker adds it): a fixed name that resolves, for the JVM's InetAddress.getLocalHost().
        ctr = subprocess.run(["buildah", "from", "--add-host", "corpusgraph:127.0.0.1", image], capture_output=True,
                             text=True, check=True).stdout.strip()
        config = self.config(image)
        entry = [entry] if entry else config.get("Entrypoint") or []  # buildah run takes the command whole
        workdir = config.get("WorkingDir") or "/"
        proc = subprocess.Popen(["buildah", "run", *self._isolation(), "--hostname", "corpusgraph", "--user", str(user),
                                 "--workingdir", workdir,
                                 *vols, ctr, "--", *entry, *args], stdout=log, stderr=subprocess.STDOUT)
        return Container(self, proc, ctr)

    def run(self, image: str, args: list[str], *, user: int = UID, mounts: list[str] = (),
            entry: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        """As `start`, to the command's end; its exit status and output (stdout and stderr)."""
        container = self.start(image, args, user=user, mounts=list(mounts), log=subprocess.PIPE, entry=entry)
        try:
            out, _ = container.proc.communicate(timeout=timeout)
        finally:
            container.remove()
        return subprocess.CompletedProcess(args, container.proc.returncode, out.decode(), "")


class Container:
    def __init__(self, engine: Engine, proc: subprocess.Popen, name: str):
        self.engine, self.proc, self.name = engine, proc, name

    def stop(self) -> int:
        if self.engine.name == "docker":
            subprocess.run(["docker", "stop", "-t", "30", self.name], capture_output=True)
        else:
            # buildah run answers SIGTERM by killing its command outright: the signal goes to the
            # command itself (with chroot isolation a process of this host), as docker stop sends it.
            import psutil

            inner = [p for p in psutil.Process(self.proc.pid).children(recursive=True) if not p.children()]
            assert inner, "buildah run has no command running"
            for process in inner:
                process.terminate()
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self.remove()

    def remove(self) -> None:
        if self.engine.name == "buildah":
            subprocess.run(["buildah", "rm", self.name], capture_output=True)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


def _llm_sets(url: str) -> list[str]:
    sets = {"llm.backend": "openai", "llm.api_base": url, "llm.model": "scripted", "llm.concurrency": "8"}
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def test_serve_image_answers_from_an_index_built_elsewhere(engine, tmp_path, scripted_url):
    image = engine.build("serve")
    config = engine.config(image)
    assert str(config.get("User")) == str(UID) and config.get("WorkingDir") == "/project"
    # The serve extra leaves the index side out: none of it is installed in the image.
    probe = engine.run(image, ["-c", "import importlib.util as u; print(sorted(m for m in ('pyspark', 'ray', 'spacy', "
                                     "'llama_cpp', 'delta') if u.find_spec(m)))"], entry="python")
    assert probe.returncode == 0 and probe.stdout.strip().splitlines()[-1] == "[]", probe.stdout
    # An index built by the checkout, in a project folder as `corpusgraph init` makes it.
    project = tmp_path / "project"
    subprocess.run([str(CORPUSGRAPH), "init", str(project)], check=True, capture_output=True)
    for name in DOCUMENTS:
        shutil.copy(SAMPLE / name, project / "input" / name)
    built = subprocess.run([str(CORPUSGRAPH), "index", *_llm_sets(scripted_url), "--set", "resolve.llm_adjudication=false",
                            "--set", "resolve.summarise_descriptions=false", "--set", "spark.master=local[2]",
                            "--set", "spark.driver_memory=2g", "--set", f"spark.jars_dir={REPO / 'jars'}"],
                           cwd=project, capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr[-4000:]
    # As compose runs it: the project read-only at /project, the cache on a folder of its own, the
    # image's user (the project handed to it, as CORPUSGRAPH_UID would name its owner).
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    serve = ["serve", "--host", "127.0.0.1", "--port", str(free_port()), "--log-level", "info",
             "--set", "storage.cache_dir=/cache", *_llm_sets(scripted_url)]
    mounts = [f"{project}:/project:ro", f"{cache}:/cache"]
    user = os.getuid()
    if user == 0:
        # As root, the project is root's and its .env 0600: the image's user is refused with a
        # message that says what to do, then the project is handed to that user.
        refused = engine.run(image, serve, mounts=mounts)
        assert refused.returncode != 0 and "CORPUSGRAPH_UID=0" in refused.stdout, refused.stdout[-3000:]
        subprocess.run(["chown", "-R", str(UID), str(project)], check=True)
        user = UID
    port = int(serve[serve.index("--port") + 1])
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        container = engine.start(image, serve, user=user, mounts=mounts, log=log)
        base = f"http://127.0.0.1:{port}"
        try:
            ready = wait_ready(base, container.proc, log_path)
            assert set(ready["tables"]) >= {"entities", "text_units", "community_reports"}, ready
            question = "What happened at the Antwerp hub, and what did the customs audit find?"
            status, _, context = http_json(f"{base}/v1/context", {"question": question, "method": "basic"})
            assert status == 200 and context["units"], context
            status, _, answer = http_json(f"{base}/v1/query", {"question": question, "method": "local"})
            assert status == 200 and answer["answer"].strip() and answer["citations"], answer
            # Cited from the project's own input, as the index recorded it outside the container.
            assert {Path(c["source_uri"].removeprefix("file:")).name for c in answer["citations"]} <= set(DOCUMENTS)
            status, _, page = http_json(f"{base}/v1/communities")
            assert status == 200 and page, page
            # The web page's graph library, fetched by the image's build (the repository has none).
            with urllib.request.urlopen(f"{base}/ui/vendor/cytoscape.min.js", timeout=60) as resp:
                assert hashlib.sha256(resp.read()).hexdigest() == CYTOSCAPE_SHA256
        finally:
            container.stop()
    text = log_path.read_text()
    assert "Finished server process" in text, text[-4000:]  # a graceful stop on SIGTERM


def test_full_image_runs_its_entry_point_and_compose_index_job(engine, tmp_path):
    image = engine.build("full")
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    done = engine.run(image, ["--version"])
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == f"corpusgraph {version}", done.stdout
    # The locked jars are in the image (fetched at build time, so no run needs the network).
    done = engine.run(image, ["setup", "--jars"])
    assert done.returncode == 0 and "nothing fetched" in done.stdout, done.stdout
    # `init --sample` writes a project into a mounted folder, as the how-to's first command does.
    out = tmp_path / "w"
    out.mkdir()
    out.chmod(0o777)
    done = engine.run(image, ["init", "/w/sample", "--sample"], mounts=[f"{out}:/w"])
    assert done.returncode == 0, done.stdout
    assert (out / "sample" / "settings.yaml").is_file() and len(list((out / "sample" / "input").iterdir())) > 3
    # compose's one-shot index job: the project on a volume at /project, the image's user, the
    # bundled model for the reports and the answer (three documents, fast extraction: minutes).
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o777)
    done = engine.run(image, ["init", "/project"], mounts=[f"{project}:/project"])
    assert done.returncode == 0, done.stdout
    for name in DOCUMENTS:
        shutil.copy(SAMPLE / name, project / "input" / name)
        (project / "input" / name).chmod(0o644)
    done = engine.run(image, ["index", "--set", "extract.method=fast", "--set", "resolve.summarise_descriptions=false",
                              "--set", "spark.master=local[2]", "--set", "spark.driver_memory=2g"],
                      mounts=[f"{project}:/project"], timeout=2400)
    assert done.returncode == 0, done.stdout[-5000:]
    done = engine.run(image, ["query", "--method", "basic", "--json", "What happened at the Antwerp hub?"],
                      mounts=[f"{project}:/project"], timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:]
    # stdout and stderr come merged: the answer is the indented JSON object printed last.
    start = re.search(r'^\{\n  "', done.stdout, re.M)
    assert start, done.stdout[-4000:]
    answer, _ = json.JSONDecoder().raw_decode(done.stdout, start.start())
    assert answer["answer"].strip() and answer["citations"], answer
    assert all(c["source_uri"].startswith("file:/project/input/") for c in answer["citations"]), answer["citations"]
