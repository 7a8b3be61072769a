"""What every `corpusgraph` subcommand shares: the --conf/--set options and loading the config
they name. The main command line (cli/main.py) and the subcommands registered from other packages
(serve, export, report) import this, so none of them imports the CLI itself."""

from __future__ import annotations

import argparse
import os
from typing import Sequence

from corpusgraph.config import Config, ConfigError, load_config

__all__ = ["add_config_options", "config_from_args", "overrides"]


def add_config_options(sp: argparse.ArgumentParser,
                       example: str = "override a config value, e.g. --set chunk.size_tokens=200 (repeatable)") -> None:
    """--conf FILE and repeatable --set KEY=VALUE on a subcommand's parser."""
    sp.add_argument("--conf", default="conf/local.yaml", help="config file (default: conf/local.yaml)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=example)


def overrides(pairs: Sequence[str]) -> dict[str, str]:
    """`--set` values as the dotted overrides load_config takes."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = value
    return out


def config_from_args(args: argparse.Namespace) -> Config:
    """The config --conf and --set name."""
    # The command line is the one place that hands the process environment to ${VAR} substitution.
    return load_config(args.conf, overrides(args.set), env=os.environ)
