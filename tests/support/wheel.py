"""The project's wheel, built as `pip wheel .` would build it, from a copy of the tracked files (and
the fetched web page library): setuptools builds in the source tree and would reuse a stale build/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def tracked(*paths: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *paths], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


def build_wheel(work: Path) -> Path:
    """Build into work/dist (no build isolation: the running venv's setuptools, no network)."""
    src, out = work / "src", work / "dist"
    for rel in tracked("pyproject.toml", "README.md", "LICENSE", "NOTICE", "lib", "serving", "conf"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    if (REPO / "serving" / "ui" / "vendor").is_dir():
        shutil.copytree(REPO / "serving" / "ui" / "vendor", src / "serving" / "ui" / "vendor")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(out), str(src)], check=True, capture_output=True, cwd=work)
    (found,) = out.glob("corpusgraph-*.whl")
    return found
