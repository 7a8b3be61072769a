"""`corpusgraph init DIR`: a project folder to start from, outside any checkout.

It writes DIR/settings.yaml (every key of every section: the preset's values as live lines, every
other key commented with its default and description, from the sections' own catalog), the prompts
as editable files under DIR/prompts/, DIR/.env with the ${VAR}s the settings read (mode 0600), a
.gitignore and an input folder. The settings name no `base:` file: they stand alone, so an upgrade
of the package never changes a project's behaviour behind its back.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import yaml

from corpusgraph.config import BUILTIN, Config, ConfigError, defaults_dir, load_config, read_layers, resolve_prompt_path
from corpusgraph.lazy import installed_version
from corpusgraph.sections.catalog import INTERNAL, REQUIRED, default_of, section_class, yaml_name

__all__ = ["PRESETS", "register", "init_project", "render_settings"]

# Preset name -> the shipped file it starts from, and what it is for (its comment in the settings).
PRESETS = {
    "embedded": ("local.yaml", "the embedded default: the bundled CPU models, Spark and Ray on this machine"),
    "openai": ("openai.yaml", "one OpenAI-compatible endpoint for chat and embeddings, Spark and Ray on this machine"),
    "cluster": ("cluster.yaml", "a cluster: spark-submit, a Ray cluster, object storage, a model server"),
}
WIDTH = 100
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _scalar(value: Any) -> str:
    """A value as one line of YAML (flow style for lists and mappings)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False, allow_unicode=True)
    return text.removesuffix("\n...\n").strip()


def _comment(text: str, pad: str) -> list[str]:
    if not text:
        return []
    return [f"{pad}# {line}" for line in textwrap.wrap(text, max(40, WIDTH - len(pad) - 2))]


def render_settings(live: dict, model: type = Config, pad: str = "", commented: bool = False) -> list[str]:
    """Lines of YAML for every key of `model`: those in `live` as values, the rest commented with
    their defaults; a section with no live key is commented as a whole."""
    lines: list[str] = []
    for name, field in model.model_fields.items():
        if not pad and name in INTERNAL:
            continue
        key = yaml_name(name, field)
        present = key in live or name in live
        value = live.get(key, live.get(name)) if present else None
        sub = section_class(field.annotation)
        mark = "# " if commented or not present else ""
        if sub is not None:
            inner = value if isinstance(value, dict) and value else {}
            if not pad:
                lines.append("")
            lines += _comment(field.description or "", pad)
            lines.append(f"{pad}{'# ' if commented or not inner else ''}{key}:")
            lines += render_settings(inner, sub, pad + "  ", commented or not inner)
            continue
        lines += _comment(field.description or "", pad)
        if present:
            lines.append(f"{pad}{mark}{key}: {_scalar(value)}")
        else:
            default = default_of(field)
            lines.append(f"{pad}# {key}: {'(required)' if default is REQUIRED else _scalar(default)}")
    return lines


def _prompt_fields(model: type = Config, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """(YAML path, default) of every key whose default is a shipped prompt."""
    found = []
    for name, field in model.model_fields.items():
        path = (*prefix, yaml_name(name, field))
        sub = section_class(field.annotation)
        if sub is not None:
            found += _prompt_fields(sub, path)
        elif isinstance(field.default, str) and field.default.startswith(BUILTIN):
            found.append((path, field.default))
    return found


def _get(data: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _put(data: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


def _env_template(settings_text: str) -> str:
    """A .env naming every ${VAR} the live lines read, each with its default when it has one."""
    found: dict[str, str | None] = {}
    for line in settings_text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for m in _VAR.finditer(line):
            found.setdefault(m.group(1), m.group(2))
    out = ["# Values of the ${VAR}s in settings.yaml. corpusgraph reads this file beside the settings; a variable",
           "# set in the environment wins. Keys live here, never in settings.yaml: keep this file private (0600).", ""]
    if not found:
        out += ["# This preset reads no variable. With an endpoint (llm.backend: openai), for example:",
                "# LLM_API_KEY=", "# LLM_API_BASE=https://api.openai.com/v1"]
    for var, default in found.items():
        out.append(f"# default: {default}" if default is not None else "# required")
        out.append(f"{var}=" if default is None else f"# {var}=")
    return "\n".join(out) + "\n"


def _write(path: Path, text: str, force: bool, mode: int | None = None) -> bool:
    if path.exists() and not force:
        return False
    path.write_text(text, encoding="utf-8")
    if mode is not None:
        path.chmod(mode)
    return True


def init_project(directory: str | Path, preset: str = "embedded", source: str | Path | None = None,
                 sample: bool = False, force: bool = False) -> list[Path]:
    """Write the project folder; returns the files written. Refuses a folder that already holds
    settings.yaml unless force (prompts and .env are then rewritten too)."""
    root = Path(directory)
    settings = root / "settings.yaml"
    if settings.exists() and not force:
        raise ConfigError(f"{settings} exists: pass --force to overwrite it (and the prompts and .env beside it)")
    if source is not None:
        origin, what = Path(source), f"--from {source}"
    else:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
        origin, what = defaults_dir() / PRESETS[preset][0], f"preset {preset}: {PRESETS[preset][1]}"
    live = read_layers(origin)  # the file and its base chain, ${VAR}s kept as written
    _check(origin, yaml.safe_dump(live))  # a key the sections do not know fails here, before anything is written
    root.mkdir(parents=True, exist_ok=True)
    (root / "prompts").mkdir(exist_ok=True)
    (root / "input").mkdir(exist_ok=True)
    written: list[Path] = []
    # Every prompt the settings use becomes an editable copy the settings point at.
    for path, default in _prompt_fields():
        value = _get(live, path) or default
        src = resolve_prompt_path(origin.resolve().parent, value)
        if not src.is_file():
            raise ConfigError(f"{origin}: prompt {'.'.join(path)} = {value!r}: no such file {src}")
        dest = root / "prompts" / src.name
        if _write(dest, src.read_text(encoding="utf-8"), force):
            written.append(dest)
        _put(live, path, f"prompts/{src.name}")
    for extra in sorted((defaults_dir() / "prompts").glob("*.txt")):  # eval's judge, named by an option
        if not (root / "prompts" / extra.name).exists() and _write(root / "prompts" / extra.name, extra.read_text(), force):
            written.append(root / "prompts" / extra.name)
    if source is None and preset != "cluster":
        live.setdefault("ingest", {})["inputs"] = ["input"]  # relative to the folder a run starts in: DIR
    head = [f"# corpusgraph {installed_version()} project settings ({what}).",
            "# Every key is listed: a live line is this project's choice, a commented one shows the default and",
            "# what it means (uncomment a section's header with its key). Paths are relative to the folder a",
            "# command runs in (run them in this folder); prompt files are relative to this file. ${VAR}s come",
            "# from the environment or from .env beside this file. Reference: docs/reference/configuration.md."]
    text = "\n".join(head + render_settings(live)) + "\n"
    settings.write_text(text, encoding="utf-8")
    written.insert(0, settings)
    if _write(root / ".env", _env_template(text), force, mode=0o600):
        written.append(root / ".env")
    if _write(root / ".gitignore", ".env\nwork/\n", force):
        written.append(root / ".gitignore")
    if sample:
        docs = Path(__file__).resolve().parent.parent / "samples" / "freight" / "docs"
        for doc in sorted(docs.iterdir()):
            if doc.is_file():
                shutil.copyfile(doc, root / "input" / doc.name)
    _check(settings, text)
    return written


def _check(settings: Path, text: str) -> None:
    """The file loads (every ${VAR} in `text` given a stand-in): a preset or --from file that the
    sections refuse fails at init, not at a user's first run."""
    # Only a variable without a default gets one; the others take theirs (a stand-in could be no
    # valid choice of a field, e.g. llm.profile).
    required = {m.group(1) for m in _VAR.finditer(text) if m.group(2) is None}
    load_config(settings, env={name: "x" for name in required})


def cmd_init(args) -> int:
    written = init_project(args.dir, args.preset, args.source, sample=args.sample, force=args.force)
    for path in written:
        print(f"wrote {path}")
    copied = sum(1 for p in (Path(args.dir) / "input").iterdir() if p.is_file())
    inputs = f"{copied} sample documents in input/" if args.sample else "put your documents in input/"
    try:  # Spark needs the Delta jars: a checkout's, or fetched once by setup --jars
        from corpusgraph.cli.setup import spark_jars_dir

        spark_jars_dir(str(Path(args.dir) / "jars"))
    except (ConfigError, ModuleNotFoundError):
        print("first: corpusgraph setup --jars   (Spark's Delta and s3a jars, fetched once)")
    print(f"next: cd {args.dir} && corpusgraph index   ({inputs}), then corpusgraph query \"your question\"")
    return 0


def register(sub) -> None:
    """Add `corpusgraph init` to the command line's subparsers."""
    sp = sub.add_parser("init", help="write a project folder: settings.yaml with every key, prompts, .env, input/")
    sp.add_argument("dir", help="project folder (created if missing)")
    sp.add_argument("--preset", default="embedded", choices=list(PRESETS),
                    help="embedded (bundled CPU models), openai (one OpenAI-compatible endpoint) or cluster")
    sp.add_argument("--from", dest="source", metavar="FILE",
                    help="start from this config file (and its base chain) instead of a preset")
    sp.add_argument("--sample", action="store_true", help="copy the bundled sample corpus into input/")
    sp.add_argument("--force", action="store_true", help="overwrite settings.yaml, the prompts and .env")
    sp.set_defaults(func=cmd_init)
