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
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Config", "load_config", "ConfigError"]


class ConfigError(ValueError):
    """A configuration file that cannot be used, with the reason."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SparkSection(_Section):
    master: str = Field("local[*]", description="Spark master URL; ignored under spark-submit.")
    app_name: str = Field("corpusgraph", description="Spark application name.")
    jars_dir: str = Field("jars", description="Folder holding the Delta (and GraphFrames) jars fetched by `make setup`.")
    driver_memory: str = Field("4g", description="spark.driver.memory for local mode.")
    shuffle_partitions: int = Field(8, ge=1, description="spark.sql.shuffle.partitions; small for one machine.")
    extra: dict[str, str] = Field(default_factory=dict, description="Any other spark.* settings, passed as is.")


class RaySection(_Section):
    address: str | None = Field(None, description="Ray cluster address (ray://host:10001 or 'auto'); null starts a local Ray.")
    num_cpus: int | None = Field(2, description="CPUs for a local Ray; ignored when address is set.")
    actors: int = Field(1, ge=1, description="LLM worker actors per stage.")


class LLMSection(_Section):
    backend: Literal["embedded", "openai"] = Field(
        "embedded",
        description="embedded: corpusgraph starts the bundled SmolLM2-135M on localhost (proves the path, "
        "poor graphs). openai: any OpenAI-compatible endpoint (vllm serve, OpenAI, llama.cpp, Ollama).",
    )
    model: str = Field("smollm2", description="Model name sent to the endpoint; part of every cache key.")
    api_base: str | None = Field(None, description="Endpoint base URL ending in /v1; unused for embedded. "
                                 "Shorthand for a one-element api_bases.")
    api_bases: list[str] = Field(
        default_factory=list,
        description="Several endpoints (e.g. one vLLM server per GPU node), all serving `model`; each request "
        "goes to the one with the fewest requests in flight, and one that refuses connections is avoided "
        "for a short backoff. Set this or api_base, not both; unused for embedded.",
    )
    api_key: str | None = Field(None, description="Bearer key; use ${VAR} in YAML, never a literal secret.")
    n_ctx: int = Field(4096, description="Context window of the embedded server.")
    concurrency: int = Field(2, ge=1, description="Requests in flight per worker actor (over all its endpoints); "
                             "the cluster keeps concurrency x ray.actors in flight.")
    max_in_flight_per_endpoint: int | None = Field(
        None, ge=1,
        description="Cap on requests in flight to any one endpoint, per worker actor (per process); the cap a "
        "server sees is this x ray.actors. null: only `concurrency` applies.",
    )
    tokens_per_minute: int | None = Field(
        None, ge=1,
        description="Token budget per endpoint per minute, per worker actor (per process): each request is "
        "charged its estimated prompt tokens + max_tokens, corrected by the reported usage. The budget a "
        "server sees is this x ray.actors. null: no budget.",
    )
    timeout_s: float = Field(180.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(3, ge=0, description="Retries on 429, 5xx and timeouts, with backoff and jitter.")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature; 0 keeps runs repeatable.")
    usd_per_1k_in: float = Field(0.0, ge=0.0, description="Price of 1,000 input tokens (0 for local models).")
    usd_per_1k_out: float = Field(0.0, ge=0.0, description="Price of 1,000 output tokens.")

    @model_validator(mode="after")
    def _one_way_to_name_endpoints(self) -> "LLMSection":
        if self.api_base and self.api_bases:
            raise ValueError("set llm.api_base (one endpoint) or llm.api_bases (several), not both")
        if len(set(self.api_bases)) != len(self.api_bases) or not all(u.strip() for u in self.api_bases):
            raise ValueError("llm.api_bases must list distinct, non-empty URLs")
        return self

    def endpoint_urls(self) -> list[str]:
        """The configured endpoints: api_bases, or api_base alone (empty when neither is set)."""
        return list(self.api_bases) if self.api_bases else ([self.api_base] if self.api_base else [])


class EmbeddingSection(_Section):
    model: str = Field("all-MiniLM-L6-v2", description="Embedding model; the bundled one runs in numpy on CPU.")
    batch_size: int = Field(32, ge=1, description="Texts per forward pass.")
    max_tokens: int = Field(256, ge=8, description="Word pieces kept per text.")


class StorageSection(_Section):
    warehouse: str = Field("work/warehouse", description="Folder (or URI) holding the Delta tables.")
    index_dir: str = Field("work/index", description="Folder for FAISS files.")
    cache_dir: str = Field("work/cache", description="LLM response cache and Spark-to-Ray hand-off files.")


class IngestSection(_Section):
    inputs: list[str] = Field(default_factory=list, description="Files or folders to ingest (.txt, .md, .jsonl, .parquet).")
    access_domain: str = Field("default", description="Domain given to documents that do not name one.")
    max_bytes: int = Field(5_000_000, ge=1, description="Larger inputs go to quarantine as oversized.")
    text_field: str = Field("text", description="Field holding the text in JSON-lines and Parquet inputs.")
    id_field: str = Field("id", description="Field holding a source id in JSON-lines and Parquet inputs.")
    title_field: str = Field("title", description="Field holding a title in JSON-lines and Parquet inputs.")


class ChunkSection(_Section):
    size_tokens: int = Field(300, ge=16, description="Tokens per text unit.")
    overlap_tokens: int = Field(40, ge=0, description="Tokens shared by consecutive units.")
    encoding: str = Field("cl100k_base", description="tiktoken encoding used to count tokens.")


class ExtractSection(_Section):
    entity_types: list[str] = Field(
        default_factory=lambda: ["ORGANIZATION", "PERSON", "LOCATION", "EVENT", "PRODUCT"],
        description="Closed list of entity types; the schema allows no others.",
    )
    prompt: str = Field("prompts/extract.txt", description="Prompt file, relative to the config file.")
    max_entities: int = Field(5, ge=1, description="maxItems for entities per unit (small models repeat without it).")
    max_relationships: int = Field(5, ge=0, description="maxItems for relationships per unit.")
    max_tokens: int = Field(500, ge=32, description="Answer token limit per call (the schema bounds every string and array below it).")


class ResolveSection(_Section):
    strip_suffixes: list[str] = Field(
        default_factory=lambda: ["inc", "ltd", "llc", "gmbh", "plc", "corp", "co", "sa", "bv"],
        description="Legal suffixes dropped when normalising a name for exact merging.",
    )
    max_description_chars: int = Field(1200, ge=100, description="Merged descriptions are cut at this length.")


class CommunitiesSection(_Section):
    max_cluster_size: int = Field(10, ge=2, description="Communities above this size split into the next level.")
    max_levels: int = Field(4, ge=1, description="Deepest level produced.")
    seed: int = Field(42, description="Leiden seed; with sorted edges it makes communities repeatable.")
    resolution: float = Field(1.0, gt=0, description="Modularity resolution.")


class ReportsSection(_Section):
    prompt: str = Field("prompts/report.txt", description="Prompt file, relative to the config file.")
    min_size: int = Field(2, ge=1, description="Communities smaller than this get no report.")
    max_input_tokens: int = Field(1500, ge=100, description="Context budget per report.")
    max_tokens: int = Field(500, ge=32, description="Answer token limit per report.")
    max_findings: int = Field(5, ge=1, description="maxItems for findings.")


class QuerySection(_Section):
    prompt_answer: str = Field("prompts/answer.txt", description="Answer prompt, relative to the config file.")
    prompt_map: str = Field("prompts/global_map.txt", description="Global map prompt.")
    prompt_reduce: str = Field("prompts/global_reduce.txt", description="Global reduce prompt.")
    top_k_units: int = Field(5, ge=1, le=50, description="Text units retrieved by basic search.")
    top_k_entities: int = Field(5, ge=1, le=50, description="Seed entities for local search.")
    max_context_tokens: int = Field(1800, ge=200, description="Context budget for an answer.")
    global_level: int = Field(0, ge=0, description="Community level that global search maps over.")
    max_tokens: int = Field(300, ge=16, description="Answer token limit.")


class Config(_Section):
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
    conf_dir: str = Field(".", description="Directory of the config file; prompt paths resolve against it.")

    def prompt_path(self, relative: str) -> Path:
        return Path(self.conf_dir) / relative

    def fingerprint(self) -> str:
        """A short hash of the effective config, recorded with each run."""
        dumped = json.dumps(self.model_dump(exclude={"llm": {"api_key"}}), sort_keys=True)
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
    data.setdefault("conf_dir", str(conf_dir))
    try:
        return Config.model_validate(data)
    except Exception as exc:  # pydantic's message names every bad field
        raise ConfigError(f"invalid configuration ({path}): {exc}") from exc
