"""Typed configuration: one pydantic section per concern, loaded from YAML overlays.

A config file may name a `base:` file (relative to itself) that it overlays; mappings merge
deeply, everything else replaces. `${VAR}` and `${VAR:-default}` are substituted from the
mapping the caller passes (the CLI passes the process environment; nothing here reads it).
Relative paths in `storage` and `ingest.inputs` resolve against the directory the run starts
in; prompt paths resolve against the config file's directory, and `builtin:prompts/x.txt` (the
sections' defaults) names the prompt shipped with the package (defaults_dir()).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import Field

from corpusgraph.sections.base import Section
from corpusgraph.sections.estimate import EstimateSection, ModelPrice, UpdateSection
from corpusgraph.sections.index import (
    ChunkSection,
    CommunitiesSection,
    ExtractSection,
    IngestSection,
    ReportsSection,
    ResolveSection,
    TableInput,
)
from corpusgraph.sections.query import (
    MOVED_QUERY_KEYS,
    DriftSection,
    GlobalSection,
    QuerySection,
    RerankSection,
    RetrievalSection,
)
from corpusgraph.sections.runtime import (
    BUNDLED_EMBEDDING_MODEL,
    BatchSection,
    EmbeddingSection,
    LLMSection,
    RaySection,
    S3Section,
    SparkSection,
    StorageSection,
)
from corpusgraph.sections.serve import (
    ConversationSection,
    McpSection,
    ServeKey,
    ServeSection,
    TelemetrySection,
    UiSection,
)

# The sections are imported from here by the rest of the code base, whichever module defines them.
__all__ = [
    "Config", "load_config", "read_layers", "ConfigError", "BUILTIN", "defaults_dir", "resolve_prompt_path",
    "SparkSection", "RaySection", "BatchSection", "LLMSection", "BUNDLED_EMBEDDING_MODEL", "EmbeddingSection",
    "S3Section", "StorageSection", "TableInput", "IngestSection", "ChunkSection", "ExtractSection", "ResolveSection",
    "CommunitiesSection", "ReportsSection", "QuerySection", "RerankSection", "RetrievalSection", "GlobalSection",
    "DriftSection", "ServeKey", "ServeSection", "ConversationSection", "McpSection", "UiSection", "TelemetrySection",
    "ModelPrice", "EstimateSection", "UpdateSection",
]


class ConfigError(ValueError):
    """A configuration file that cannot be used, with the reason."""


# A prompt path with this prefix names a file of the shipped defaults, not one beside the config.
BUILTIN = "builtin:"


def defaults_dir() -> Path:
    """The shipped defaults (the presets, prompts/, jars.lock). The checkout's conf/ is their only
    source: a wheel carries it as the package corpusgraph.defaults (pyproject's package-dir), and
    a source tree (PYTHONPATH=lib, or an editable install) reads conf/ itself."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "defaults", here.parent.parent / "conf"):
        if (candidate / "prompts").is_dir():
            return candidate
    raise ConfigError(f"corpusgraph's default config is missing: neither {here / 'defaults'} nor a checkout's conf/ "
                      "exists (a broken install: reinstall corpusgraph)")


def resolve_prompt_path(conf_dir: str | Path, value: str) -> Path:
    """A prompt setting as a file: `builtin:prompts/x.txt` in the shipped defaults, anything else
    relative to the config file's folder. No fallback from one to the other: a typo must fail."""
    if value.startswith(BUILTIN):
        return defaults_dir() / value[len(BUILTIN):]
    return Path(conf_dir) / value


class Config(Section):
    spark: SparkSection = Field(default_factory=SparkSection, description="The Spark session the index runs on.")
    ray: RaySection = Field(default_factory=RaySection, description="The Ray runtime the LLM and embedding work runs on.")
    llm: LLMSection = Field(default_factory=LLMSection, description="The chat model: the bundled one or an endpoint, "
                            "its limits and prices.")
    embeddings: EmbeddingSection = Field(default_factory=EmbeddingSection, description="Where vectors come from and "
                                         "which FAISS index holds them.")
    storage: StorageSection = Field(default_factory=StorageSection, description="Where the warehouse, the index "
                                    "files, the run folder and the cache live.")
    ingest: IngestSection = Field(default_factory=IngestSection, description="What is read: files, folders, tables.")
    chunk: ChunkSection = Field(default_factory=ChunkSection, description="How documents are cut into text units.")
    extract: ExtractSection = Field(default_factory=ExtractSection, description="Entities, relationships and claims "
                                    "from each unit.")
    resolve: ResolveSection = Field(default_factory=ResolveSection, description="Merging the mentions of one entity.")
    communities: CommunitiesSection = Field(default_factory=CommunitiesSection, description="Hierarchical Leiden "
                                            "communities of the entity graph.")
    reports: ReportsSection = Field(default_factory=ReportsSection, description="One report per community.")
    query: QuerySection = Field(default_factory=QuerySection, description="Answering questions: every method's "
                                "budgets and prompts.")
    serve: ServeSection = Field(default_factory=ServeSection, description="The query service (`corpusgraph serve`).")
    estimate: EstimateSection = Field(default_factory=EstimateSection, description="`corpusgraph estimate`: the dry "
                                      "run and its prices.")
    update: UpdateSection = Field(default_factory=UpdateSection, description="`corpusgraph update`: the incremental "
                                  "refresh.")
    conf_dir: str = Field(".", description="Directory of the config file; prompt paths resolve against it.")

    def prompt_path(self, relative: str) -> Path:
        return resolve_prompt_path(self.conf_dir, relative)

    def fingerprint(self) -> str:
        """A short hash of the effective config, recorded with each run."""
        dumped = json.dumps(self.model_dump(exclude={"llm": {"api_key"}, "serve": True}), sort_keys=True)
        return hashlib.sha256(dumped.encode()).hexdigest()[:16]


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _substitute(value: Any, env: Mapping[str, str], where: str) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, env, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, env, where) for v in value]
    if not isinstance(value, str):
        return value

    def repl(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: ${{{name}}} is not set and has no default")

    return _VAR.sub(repl, value)


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_layers(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: base chain loops back on itself")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    base = data.pop("base", None)
    if base:
        return _deep_merge(_read_layers(path.parent / base, seen + (path,)), data)
    return data


def read_layers(path: str | Path) -> dict:
    """A config file merged with its base chain, as written: ${VAR}s not substituted, nothing
    validated (corpusgraph init copies a preset's choices from it)."""
    return _read_layers(Path(path))


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = yaml.safe_load(value) if isinstance(value, str) else value


def _refuse_moved_keys(data: dict, path: str | Path | None) -> None:
    query = data.get("query")
    moved = [key for key in query if key in MOVED_QUERY_KEYS] if isinstance(query, dict) else []
    if moved:
        where = f" in {path}" if path is not None else ""
        renames = "; ".join(f"query.{key} is now query.{MOVED_QUERY_KEYS[key]}" for key in moved)
        raise ConfigError(f"the query section is nested by concern (retrieval, global, drift){where}: {renames}")


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Read a config file (and its base chain), apply dotted overrides, substitute ${VAR}s.

    overrides: {"chunk.size_tokens": "200", ...}; string values are parsed as YAML scalars.
    """
    data: dict = {}
    conf_dir = Path(".").resolve()
    if path is not None:
        data = _read_layers(Path(path))
        conf_dir = Path(path).resolve().parent
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    data = _substitute(data, env or {}, "config")
    _refuse_moved_keys(data, path)
    data.setdefault("conf_dir", str(conf_dir))
    try:
        return Config.model_validate(data)
    except Exception as exc:  # pydantic's message names every bad field
        raise ConfigError(f"invalid configuration ({path}): {exc}") from exc
