"""The Delta and s3a jars outside a checkout: the pinned set (the shipped jars.lock), where a
complete copy is, and fetching one.

A checkout's `make setup` fills ./jars with Maven; an installed corpusgraph has no such folder.
`corpusgraph setup --jars` fetches the locked files with the Ivy jar that pyspark ships (no Maven,
no new dependency), each without its dependencies, from Ivy's built-in Maven Central resolver (or
the user's own Ivy settings: a mirror), checks every SHA-256 against the lock, and only then moves
the folder into place, so a half-fetched folder is never taken for a complete one. Nothing here
reads the environment: the command line says where the assets folder is.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from corpusgraph.config import defaults_dir

__all__ = ["LockedJar", "read_lock", "lock_id", "problems", "copy_jars", "fetch_jars", "find_jars_dir", "ivy_jar"]

COMPLETE = ".complete"


@dataclass(frozen=True)
class LockedJar:
    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:  # as Maven's dependency:copy and the Ivy retrieve pattern below name it
        return f"{self.artifact}-{self.version}.jar"


def read_lock(path: Path | None = None) -> list[LockedJar]:
    path = path or defaults_dir() / "jars.lock"
    jars = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        coord, _, digest = line.partition(" ")
        parts = coord.split(":")
        if len(parts) != 3 or len(digest.strip()) != 64:
            raise ValueError(f"{path}:{n}: expected `group:artifact:version sha256`, got {line!r}")
        jars.append(LockedJar(*parts, digest.strip()))
    return jars


def lock_id(lock: list[LockedJar]) -> str:
    """12 hex digits naming the locked set: a new lock gets a new folder, never a mixed one."""
    return hashlib.sha256("\n".join(f"{j.filename} {j.sha256}" for j in lock).encode()).hexdigest()[:12]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def problems(folder: Path, lock: list[LockedJar]) -> list[str]:
    """What keeps `folder` from being the locked set: missing files and wrong digests."""
    out = []
    for jar in lock:
        path = folder / jar.filename
        if not path.is_file():
            out.append(f"missing {jar.filename}")
        elif _sha256(path) != jar.sha256:
            out.append(f"{jar.filename}: SHA-256 differs from the lock")
    return out


def _install(staged: Path, dest: Path, lock: list[LockedJar]) -> Path:
    """Check the staged folder and rename it into place (a half-written dest never exists)."""
    bad = problems(staged, lock)
    if bad:
        raise ValueError(f"the fetched jars do not match the lock ({len(bad)}): " + "; ".join(bad[:5]))
    (staged / COMPLETE).write_text(lock_id(lock) + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    staged.rename(dest)
    return dest


def copy_jars(source: Path, dest: Path, lock: list[LockedJar]) -> Path:
    """The locked files copied from a folder (a checkout's jars/, media on a host with no network)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=".jars-", dir=dest.parent))
    try:
        for jar in lock:
            if (source / jar.filename).is_file():
                shutil.copy2(source / jar.filename, staged / jar.filename)
        return _install(staged, dest, lock)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def ivy_jar() -> Path:
    """The Ivy jar pyspark ships (pyspark/jars/ivy-*.jar)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("fetching jars needs pyspark (its Ivy): pip install 'corpusgraph[index]'")
    found = sorted(Path(list(spec.submodule_search_locations)[0], "jars").glob("ivy-*.jar"))
    if not found:
        raise FileNotFoundError("pyspark's jars folder has no ivy-*.jar")
    return found[-1]


# Ivy's ibiblio resolver with no root is its built-in Maven Central one; no host is named here.
_SETTINGS = """<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers><ibiblio name="central" m2compatible="true"/></resolvers>
</ivysettings>
"""


def _ivy_module(lock: list[LockedJar]) -> str:
    deps = "\n".join(f"    <dependency org={quoteattr(j.group)} name={quoteattr(j.artifact)} rev={quoteattr(j.version)} "
                     'transitive="false"/>' for j in lock)
    return ('<ivy-module version="2.0">\n  <info organisation="corpusgraph" module="corpusgraph-jars"/>\n'
            f"  <dependencies>\n{deps}\n  </dependencies>\n</ivy-module>\n")


def fetch_jars(dest: Path, cache: Path, lock: list[LockedJar], *, java: str = "java",
               ivy_settings: Path | None = None, timeout_s: float = 1800) -> Path:
    """The locked jars fetched with Ivy into dest (checked, then moved into place)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".jars-", dir=dest.parent))
    try:
        (work / "ivy.xml").write_text(_ivy_module(lock))
        settings = ivy_settings or work / "ivysettings.xml"
        if ivy_settings is None:
            settings.write_text(_SETTINGS)
        staged = work / "jars"
        staged.mkdir()
        cmd = [java, "-jar", str(ivy_jar()), "-settings", str(settings), "-ivy", str(work / "ivy.xml"),
               "-cache", str(cache), "-retrieve", f"{staged}/[artifact]-[revision](-[classifier]).[ext]",
               "-types", "jar", "-sync"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"Ivy could not fetch the jars (exit {done.returncode}):\n{tail}")
        return _install(staged, dest, lock)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def find_jars_dir(assets: Path, lock: list[LockedJar]) -> Path | None:
    """The assets folder's copy of this lock when `setup --jars` completed it; None otherwise."""
    fetched = assets / "jars" / lock_id(lock)
    if (fetched / COMPLETE).is_file() and (fetched / COMPLETE).read_text().strip() == lock_id(lock):
        return fetched
    return None
