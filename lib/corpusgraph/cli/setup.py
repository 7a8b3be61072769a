"""`corpusgraph setup --jars`: the Delta and s3a jars for an installed corpusgraph (runner/jars.py).

A checkout has ./jars from `make setup`; elsewhere the jars go into the assets folder
($CORPUSGRAPH_ASSETS, else $XDG_CACHE_HOME/corpusgraph, else ~/.cache/corpusgraph), where every
Spark session the command line starts finds them when spark.jars_dir holds none.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

__all__ = ["register", "assets_dir", "spark_jars_dir"]


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


def cmd_setup(args) -> int:
    from corpusgraph.runner.jars import copy_jars, fetch_jars, lock_id, problems, read_lock

    if not args.jars:
        raise ValueError("nothing to set up: pass --jars")
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
                        "s3a jars for Spark")
    sp.add_argument("--jars", action="store_true", help="the locked Delta and s3a jars (conf/jars.lock), checked by "
                    "SHA-256, into the assets folder ($CORPUSGRAPH_ASSETS, else ~/.cache/corpusgraph)")
    sp.add_argument("--dest", metavar="DIR", help="put them here instead (then set spark.jars_dir to it)")
    sp.add_argument("--from", dest="source", metavar="DIR", help="copy them from this folder (e.g. a checkout's jars/) "
                    "instead of fetching")
    sp.add_argument("--ivy-settings", metavar="FILE", help="Ivy settings of your own (a mirror) instead of Maven Central")
    sp.set_defaults(func=cmd_setup)
