"""The generated reference pages: every configuration key (from the sections' catalog), every
command and option (from the argparse parser) and the service's HTTP API (from its OpenAPI
document). docs/conf.py writes them before each build; tests/unit/test_docs.py checks that every
key and option is on them. The pages are build outputs, never committed (docs/.gitignore)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["config_reference", "cli_reference", "api_reference", "write_all", "GENERATED"]

GENERATED = ("reference/configuration.md", "reference/cli.md", "reference/api.md")


def _cell(text: str) -> str:
    """Text fit for one cell of a Markdown table: one line, pipes escaped, no raw HTML."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str) -> str:
    return "`" + " ".join(str(text).split()).replace("|", "\\|") + "`"


def config_reference() -> str:
    from corpusgraph.config import Config
    from corpusgraph.sections.catalog import REQUIRED, entries

    out = ["# Configuration reference", "",
           "Every key of the configuration, generated from the sections in `lib/corpusgraph/sections/` (the",
           "only place a default is stated). A settings file names only what differs from these defaults;",
           "`corpusgraph init` writes one with every key listed. Keys of a model inside a list read",
           "`a.b[].c`; inside a mapping, `a.b.<name>.c`.", ""]
    current = None
    for e in entries(Config):
        top = e.key.split(".")[0]
        if e.section and e.depth == 0:
            current = top
            out += ["", f"## `{top}`", "", _cell(e.description), "", "| key | type | default | description |",
                    "| --- | --- | --- | --- |"]
            continue
        assert current == top, e.key
        if e.section:
            out.append(f"| {_code(e.key)} | section | | {_cell(e.description)} |")
            continue
        default = "(required)" if e.default is REQUIRED else json.dumps(e.default)
        out.append(f"| {_code(e.key)} | {_code(e.type)} | {_code(default)} | {_cell(e.description)} |")
    return "\n".join(out) + "\n"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | default | description |", "| --- | --- | --- |"]
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings) or action.dest
        if action.choices is not None and not action.option_strings:
            name += " {" + ",".join(map(str, action.choices)) + "}"
        elif action.choices is not None:
            name += " {" + ",".join(map(str, action.choices)) + "}"
        default = "" if action.default in (None, False, [], argparse.SUPPRESS) else _code(action.default)
        helptext = (action.help or "") % {"default": action.default, "prog": parser.prog} if action.help else ""
        rows.append(f"| {_code(name)} | {default} | {_cell(helptext)} |")
    return rows


def cli_reference() -> str:
    from corpusgraph.cli.main import build_parser

    parser = build_parser()
    out = ["# Command-line reference", "",
           "Generated from the command line's own definitions (`corpusgraph <command> --help` prints the same).",
           "Every command that reads a configuration takes `--conf` (default: `./settings.yaml`, else",
           "`./conf/local.yaml`) and `--set key=value` overrides of any key; `init` and `setup` read none.", "",
           "## `corpusgraph`", "", "```text", parser.format_usage().strip(), "```", ""]
    out += _options_table(parser)

    def walk(p: argparse.ArgumentParser, prefix: str) -> None:
        for name, sub in _subcommands(p).items():
            title = f"{prefix} {name}"
            out.extend(["", f"## `{title}`", "", _cell(_help_of(p, name)), "", "```text", sub.format_usage().strip(), "```", ""])
            out.extend(_options_table(sub))
            walk(sub, title)

    walk(parser, "corpusgraph")
    return "\n".join(out) + "\n"


def openapi() -> dict:
    from corpusgraph.config import Config, ServeKey
    from serving.app import create_app

    # One key, so the app does not warn that it would serve without authentication.
    cfg = Config()
    cfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={"api_keys": [
        ServeKey(name="docs", key="docs-only-key", domains=["*"])]})})
    return create_app(cfg).openapi()


def api_reference(spec: dict) -> str:
    out = ["# HTTP API reference", "", f"The query service (`corpusgraph serve`), version {spec['info']['version']}:",
           "generated from its OpenAPI document, which the service itself serves at `/openapi.json` (and as",
           "pages at `/docs`). The full document is [openapi.json](../_extra/openapi.json).", ""]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            out += [f"## `{method.upper()} {path}`", "", _cell(op.get("summary", "")), ""]
            if op.get("description"):
                out += [_cell(op["description"]), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | description |", "| --- | --- | --- | --- |"]
                out += [f"| {_code(p['name'])} | {p['in']} | {p.get('required', False)} | {_cell(p.get('description', ''))} |"
                        for p in params]
                out.append("")
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                ref = content.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1]
                out += [f"Request body: `{media}`" + (f", schema `{ref}`" if ref else ""), ""]
            codes = ", ".join(f"{code} ({_cell(r.get('description', ''))})" for code, r in op.get("responses", {}).items())
            out += [f"Responses: {codes}", ""]
    return "\n".join(out).rstrip() + "\n"


def write_all(docs: Path) -> list[Path]:
    """Write the generated pages (and openapi.json beside the API page) under docs/."""
    spec = openapi()
    pages = dict(zip(GENERATED, (config_reference(), cli_reference(), api_reference(spec))))
    written = []
    for rel, text in pages.items():
        path = docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:  # unchanged pages keep their time: no rebuild
            path.write_text(text)
        written.append(path)
    extra = docs / "_extra"
    extra.mkdir(exist_ok=True)
    (extra / "openapi.json").write_text(json.dumps(spec, indent=1))
    return written
