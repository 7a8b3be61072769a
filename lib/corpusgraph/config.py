"""Typed configuration: one pydantic section per concern, loaded from YAML overlays.

A config file may name a `base:` file (relative to itself) that it overlays; mappings merge
deeply, everything else replaces. `${VAR}` and `${VAR:-default}` are substituted from the
mapping the caller passes (the CLI passes the process environment; nothing here reads it).
Relative paths in `storage` and `ingest.inputs` resolve against the directory the run starts
in; prompt paths resolve against the config file's directory.
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
    "Config", "load_config", "ConfigError",
    "SparkSection", "RaySection", "BatchSection", "LLMSection", "BUNDLED_EMBEDDING_MODEL", "EmbeddingSection",
    "S3Section", "StorageSection", "TableInput", "IngestSection", "ChunkSection", "ExtractSection", "ResolveSection",
    "CommunitiesSection", "ReportsSection", "QuerySection", "RerankSection", "RetrievalSection", "GlobalSection",
    "DriftSection", "ServeKey", "ServeSection", "ConversationSection", "McpSection", "UiSection", "TelemetrySection",
    "ModelPrice", "EstimateSection", "UpdateSection",
]


class ConfigError(ValueError):
    """A configuration file that cannot be used, with the reason."""


class Config(Section):
    spark: SparkSection = Field(default_factory=SparkSection)
    ray: RaySection = Field(default_factory=RaySection)
    llm: LLMSection = Field(default_factory=LLMSection)
    embeddings: EmbeddingSection = Field(default_factory=EmbeddingSection)
    storage: StorageSection = Field(default_factory=StorageSection)
    ingest: IngestSection = Field(default_factory=IngestSection)
    chunk: ChunkSection = Field(default_factory=ChunkSection)
    extract: ExtractSection = Field(default_factory=ExtractSection)
    resolve: ResolveSection = Field(default_factory=ResolveSection)
    communities: CommunitiesSection = Field(default_factory=CommunitiesSection)
    reports: ReportsSection = Field(default_factory=ReportsSection)
    query: QuerySection = Field(default_factory=QuerySection)
    serve: ServeSection = Field(default_factory=ServeSection)
    estimate: EstimateSection = Field(default_factory=EstimateSection)
    update: UpdateSection = Field(default_factory=UpdateSection)
    conf_dir: str = Field(".", description="Directory of the config file; prompt paths resolve against it.")

    def prompt_path(self, relative: str) -> Path:
        return Path(self.conf_dir) / relative

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
