"""The whole index at scale on a synthetic corpus (issue 13), measured stage by stage.

For each size (CORPUSGRAPH_BENCH_SCALE_SIZES, comma-separated documents; default 10000):
synthetic_corpus.py writes (or reuses) a seeded corpus under work/scale/corpus-<n>; the
scripted scale server (scale_server.py) answers every chat prompt from that corpus's truth,
and its embeddings when the product has an OpenAI-compatible embedding backend; the real
pipeline (pipeline.run_index with a RunContext, real Spark local[2], Delta, Ray) builds the
index into a fresh warehouse under work/scale/run-<n>. Per stage: seconds, rows in and out,
peak RSS of the driver, the Spark JVM and the Ray processes (scale_measure.ProcessSampler),
bytes collected to the driver (when the product reports them, else null), LLM calls and
tokens (the StageResult usage that the run writes to llm_calls). Then pairwise resolution
precision and recall against the corpus's truth, and os.getloadavg() before and after.

The machine has 2 cores shared with other work: timings are under whatever load the load
averages show. Settings (env): CORPUSGRAPH_BENCH_SCALE_SEED (0), _DRIVER_MEMORY (6g),
_ACTORS (2), _CONCURRENCY (32 per actor), _BROADCAST (256m: spark.sql.autoBroadcastJoinThreshold,
see config_for), _CHAT_LATENCY_S (0), _ADJUDICATE (0: the ambiguous
band does not merge, as in test_resolution.py; 1: the server answers it from the truth),
_STAGES (default every stage; embed is left out, and said so, while the product has no
embedding backend to point at the server), _RESUME (1: keep the size's warehouse and LLM cache
from an earlier run that stopped, run only _STAGES on it, and merge those stages into the size's
entry; the earlier stages keep their figures, and the entry says which stages were resumed and
that cached answers from before the stop count as cache hits, not calls), _ENTITIES (the world's
size; default documents / 2, about 2 documents per entity. Set, the corpus and run folders are
corpus-<n>-w<entities> and run-<n>-w<entities>, and the entry goes to "entity_dense", not to
"sizes" and their linearity: an entity-dense corpus is how the local-context target's index of
>= 1M entities is built without ~2M documents), _RESOLVE (similarity, the default, or exact:
one entity per normalised name, a product option; the run folder is then run-<n>-exact and the
entry goes to "entity_dense" too), _SEED_FROM (a run folder of the same corpus, such as
run-1000000: a new run folder starts from its ingest, chunk and extract tables, hard-linked, so
an exact-resolved index of a size costs no second extraction; the entry says so, and only the
stages run count).

Writes tests/benchmarks/results/scale.json (merging: a size measured again replaces its entry).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import time
from pathlib import Path

import pytest

from tests.support import scale_server
from tests.support import synthetic_corpus
from tests.support.scale_measure import ProcessSampler, StageLog, resolution_pairs
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = REPO / "work" / "scale"
RESULTS = REPO / "tests" / "benchmarks" / "results" / "scale.json"
ENV = "CORPUSGRAPH_BENCH_SCALE_"
SIZES = [int(s) for s in os.environ.get(ENV + "SIZES", "10000").split(",") if s.strip()]
SEED = int(os.environ.get(ENV + "SEED", "0"))
WORLD = int(os.environ.get(ENV + "ENTITIES", "0")) or None
METHOD = os.environ.get(ENV + "RESOLVE", "similarity")
# The tables a run up to extract leaves, which _SEED_FROM carries over.
UPSTREAM_TABLES = ("documents", "text_units", "extractions", "quarantine")
ALL_STAGES = ["ingest", "chunk", "extract", "resolve", "communities", "reports", "embed"]


def embedding_overrides(base_url: str) -> dict[str, str] | None:
    """Config keys that send the embed stage to the scripted server, or None while the product's
    embedding section has no OpenAI-compatible backend."""
    from corpusgraph.config import Config

    for key in ("embeddings", "embedding"):
        field = Config.model_fields.get(key)
        if field is not None and "backend" in field.annotation.model_fields:
            names = field.annotation.model_fields
            out = {f"{key}.backend": "openai", f"{key}.model": "scripted-scale-embed"}
            out[f"{key}.api_base" if "api_base" in names else f"{key}.api_bases"] = \
                base_url if "api_base" in names else json.dumps([base_url])
            return out
    return None


def config_for(n: int, corpus, run_dir, base_url: str, inputs=None):
    """The run's config; `inputs` replaces the corpus's parquet folder (the update benchmark's)."""
    from corpusgraph.config import load_config

    adjudicate = os.environ.get(ENV + "ADJUDICATE", "0") == "1"
    overrides = {
        "storage.warehouse": str(run_dir / "wh"), "storage.index_dir": str(run_dir / "idx"),
        "storage.cache_dir": str(run_dir / "cache"),
        "ingest.inputs": json.dumps([str(inputs or corpus / "parquet")]),
        "spark.driver_memory": os.environ.get(ENV + "DRIVER_MEMORY", "6g"),
        # About one shuffle partition per 10k documents (~150k mentions): tasks stay in memory.
        "spark.shuffle_partitions": str(max(2, n // 10_000)),
        "ray.actors": os.environ.get(ENV + "ACTORS", "2"),
        "llm.backend": "openai", "llm.api_base": base_url, "llm.model": "scripted-scale",
        "llm.concurrency": os.environ.get(ENV + "CONCURRENCY", "32"), "llm.timeout_s": "300",
        # The default chunking and packing (local.yaml's are tuned for the bundled 135M model).
        "chunk.size_tokens": "300", "chunk.overlap_tokens": "40", "extract.units_per_call": "6",
        # A 300-token unit of this corpus names ~10-15 things; a real model would be given room.
        "extract.max_entities": "10", "extract.max_relationships": "10", "extract.max_tokens": "800",
        "resolve.method": METHOD, "resolve.llm_adjudication": "true" if adjudicate else "false",
    }
    emb = embedding_overrides(base_url)
    cfg = load_config(REPO / "conf" / "local.yaml", {**overrides, **(emb or {})})
    # Joins whose smaller side is under this are broadcast (Spark's default is 10 MB). At 1M
    # documents the per-node tables that resolve joins with the 47M candidate pairs (node
    # signatures, component labels, the mapping) are ~100 MB; under the default each of those
    # joins sorts the pairs. The bound, not the corpus, sets what the driver holds.
    cfg.spark.extra["spark.sql.autoBroadcastJoinThreshold"] = os.environ.get(ENV + "BROADCAST", "256m")
    return cfg, emb is not None


def start_spark(cfg, tmp):
    from corpusgraph.config import SparkSection
    from corpusgraph.runner.spark import build_spark

    section = SparkSection(**{**cfg.spark.model_dump(), "master": "local[2]", "jars_dir": str(REPO / "jars"),
                              "extra": {**cfg.spark.extra, "spark.sql.warehouse.dir": str(tmp / "spark-wh"),
                                        "spark.driver.extraJavaOptions": f"-Dderby.system.home={tmp}"}})
    session = build_spark(section, local_dirs=str(tmp / "local"))
    session.sparkContext.setLogLevel("ERROR")
    return session


def folder(kind: str, n: int) -> Path:
    """work/scale/<kind>-<n>, with -w<entities> for an entity-dense world (ENTITIES set) and, for a
    run, -<method> when resolve is not the default similarity."""
    suffix = f"-{METHOD}" if kind == "run" and METHOD != "similarity" else ""
    return ROOT / (f"{kind}-{n}" + (f"-w{WORLD}" if WORLD else "") + suffix)


def seed_warehouse(source: Path, run_dir: Path) -> None:
    """A new run's warehouse starting from another run's ingest, chunk and extract tables: data
    files hard-linked (Delta never rewrites one in place), each table's log copied, so commits in
    one warehouse never show in the other."""
    for name in UPSTREAM_TABLES:
        src, dst = source / "wh" / name, run_dir / "wh" / name
        if not (src / "_delta_log").is_dir():
            raise RuntimeError(f"{ENV}SEED_FROM: {src} is not a Delta table")
        shutil.copytree(src, dst, copy_function=os.link, ignore=shutil.ignore_patterns("_delta_log"))
        shutil.copytree(src / "_delta_log", dst / "_delta_log")


def rows_in_out(name: str, rows: dict, counts: dict, manifest: dict) -> tuple[int | None, int | None]:
    """What a stage read and wrote, in its own unit (documents, units, mentions, entities, ...)."""
    return {
        "ingest": (manifest["documents"], rows.get("documents")),
        "chunk": (counts.get("documents"), rows.get("text_units")),
        "extract": (rows.get("units"), rows.get("status_ok")),
        "resolve": (counts.get("mentions"), rows.get("entities")),
        "communities": (counts.get("entities"), rows.get("communities")),
        "reports": (counts.get("communities"), rows.get("status_ok")),
        "embed": (rows.get("embedded_now"), sum(v for k, v in rows.items() if k.endswith("_vectors")) or None),
    }.get(name, (None, None))


def table_counts(ctx) -> dict:
    from pyspark.sql import functions as F

    wh = ctx.wh
    out = {t: wh.read(t).count() for t in ("documents", "text_units", "extractions", "entities", "relationships",
                                            "communities", "community_reports", "embeddings")}
    out["mentions"] = wh.read("extractions").select(F.sum(F.size("entities"))).first()[0] or 0
    return out


def measure_size(n: int, stages: list[str]) -> dict:
    import ray

    from corpusgraph.runner.pipeline import run_index
    from corpusgraph.runner.run import RunContext

    corpus = folder("corpus", n)
    t0 = time.perf_counter()
    manifest = synthetic_corpus.ensure(corpus, n, SEED, **({"n_entities": WORLD} if WORLD else {}))
    gen_s = time.perf_counter() - t0
    run_dir = folder("run", n)
    resume = os.environ.get(ENV + "RESUME", "0") == "1"
    if resume and not (run_dir / "wh").is_dir():
        raise RuntimeError(f"{ENV}RESUME=1 but {run_dir / 'wh'} holds no warehouse to resume")
    seed_from = os.environ.get(ENV + "SEED_FROM")
    if not resume:
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        if seed_from:
            seed_warehouse(ROOT / seed_from, run_dir)
    server_args = ["--chat-latency-s", os.environ.get(ENV + "CHAT_LATENCY_S", "0"), "--chat-slots", "64",
                   "--dim", "64", "--adjudicate", "oracle"]
    load_before = os.getloadavg()
    info = {"documents": n, "seed": SEED, "manifest": manifest, "gen_s": gen_s, "load_before": load_before,
            "resumed": resume, "world_entities": WORLD, "seeded_from": seed_from if not resume else None}
    with scale_server.running(corpus / "truth", *server_args) as server:
        cfg, with_embed = config_for(n, corpus, run_dir, server.base_url)
        chosen = [s for s in stages if s != "embed" or with_embed]
        info["not_run_reason"] = None if with_embed or "embed" not in stages else \
            "embed: the product has no OpenAI-compatible embedding backend yet (embedding section without 'backend')"
        spark = start_spark(cfg, run_dir)
        sampler = ProcessSampler(server_pid=server.proc.pid)
        sampler.start()
        try:
            ctx = RunContext(cfg, spark)
            ctx.out = StageLog(sampler, on_stage_done=lambda: write_results(
                entry_from(info, stages, ctx.results, sampler, finished=False)))
            t_run = time.perf_counter()
            results = run_index(ctx, chosen)
            info["total_s"] = time.perf_counter() - t_run
            sampler.stage = "after"
            info["counts"] = table_counts(ctx)
            # A resumed run whose warehouse holds resolved entities measures them too.
            info["resolution"] = resolution_pairs(spark, ctx.wh, corpus / "truth") \
                if "resolve" in results or (resume and info["counts"]["entities"]) else None
            info["served"] = server.get_json("/stats")
        finally:
            sampler.stop()
            spark.stop()
            ray.shutdown()
    return entry_from(info, stages, results, sampler, finished=True)


def entry_from(info: dict, stages: list[str], results: dict, sampler: ProcessSampler, finished: bool) -> dict:
    """The results entry of one size, from the stage results so far (finished=False: a partial
    record written after each stage, without the table counts and resolution of the end)."""
    n, manifest, counts = info["documents"], info["manifest"], info.get("counts") or {}
    stages_out = {}
    for name, r in list(results.items()):
        rin, rout = rows_in_out(name, r.rows, counts, manifest)
        peaks = sampler.peaks.get(name, {})
        collected = r.rows.get("driver_collected_bytes", getattr(r, "driver_collected_bytes", None))
        u = r.usage
        stages_out[name] = {
            "seconds": round(r.seconds, 1), "rows_in": rin, "rows_out": rout,
            "driver_peak_mb": round(peaks.get("driver", 0), 1), "jvm_peak_mb": round(peaks.get("jvm", 0), 1),
            "ray_peak_mb": round(peaks.get("ray", 0), 1), "spark_python_peak_mb": round(peaks.get("spark_python", 0), 1),
            "server_peak_mb": round(peaks.get("server", 0), 1),
            "driver_collected_mb": None if collected is None else round(collected / 2**20, 3),
            "llm_calls": u.calls if u else 0, "llm_tokens_in": u.tokens_in if u else 0,
            "llm_tokens_out": u.tokens_out if u else 0, "llm_cache_hits": u.cache_hits if u else 0,
            "llm_errors": u.errors if u else 0, "seconds_per_1k_docs": round(r.seconds / n * 1000, 3),
            "rows": r.rows,
        }
    load_now = os.getloadavg()
    # What sets this run apart from the standard series (its world, its resolve method, its seed run).
    variant = {"world_entities": info["world_entities"]} if info.get("world_entities") else {}
    if METHOD != "similarity":
        variant["resolve_method"] = METHOD
    if info.get("seeded_from"):
        variant["seeded_from"] = f"work/scale/{info['seeded_from']} (its ingest, chunk and extract tables)"
    return {"documents": n, **variant, "seed": SEED, "resumed": info.get("resumed", False), "finished": finished,
            "stages": stages_out,
            "total_seconds": round(info["total_s"], 1) if finished else None,
            "not_run": [s for s in stages if s not in results],
            "not_run_reason": info.get("not_run_reason") if finished else
            "partial record, written after the last stage listed; the run had not finished then",
            "tables": counts or None, "resolution": info.get("resolution"), "server_served": info.get("served"),
            "corpus": {k: manifest[k] for k in ("entities", "relationships", "totals", "domains")},
            "generator_seconds": round(info["gen_s"], 1),
            "generator_reused": info["gen_s"] < 0.5 * manifest["seconds"]["total"],
            "loadavg_before": [round(x, 2) for x in info["load_before"]],
            "loadavg_after": [round(x, 2) for x in load_now], "memory_samples": sampler.samples}


def linearity(sizes: list[dict]) -> dict:
    """Seconds per document of each stage at each size over that at the next smaller size."""
    by_n = sorted(sizes, key=lambda s: s["documents"])
    out = {}
    for small, big in zip(by_n, by_n[1:]):
        ratios = {}
        for stage, b in big["stages"].items():
            a = small["stages"].get(stage)
            if stage in big.get("resumed_stages", []) + small.get("resumed_stages", []):
                continue  # a resumed stage's seconds cover only the part after the stop
            if a and a["seconds"] > 0:
                ratios[stage] = round((b["seconds"] / big["documents"]) / (a["seconds"] / small["documents"]), 2)
        out[f"{big['documents']}_vs_{small['documents']}"] = ratios
    return out


def merge_resumed(old: dict | None, entry: dict) -> dict:
    """A resumed size: the earlier entry's stages, then the stages run now (replacing any of the
    same name), with the totals of the whole index counted over both runs."""
    if old is None:
        return {**entry, "resumed_stages": list(entry["stages"])}
    stages = {**old["stages"], **entry["stages"]}
    finished = entry["finished"] and not [s for s in ALL_STAGES if s not in stages]
    merged = {**old, **{k: v for k, v in entry.items() if v is not None}, "stages": stages, "finished": finished,
              "resumed_stages": sorted(set(old.get("resumed_stages", [])) | set(entry["stages"]),
                                       key=ALL_STAGES.index),
              "not_run": [s for s in ALL_STAGES if s not in stages]}
    merged["total_seconds"] = round(sum(st["seconds"] for st in stages.values()), 1) if finished else None
    merged["not_run_reason"] = None if finished else entry.get("not_run_reason")
    merged["loadavg_before"] = old.get("loadavg_before")
    merged["loadavg_resumed"] = {"before": entry["loadavg_before"], "after": entry["loadavg_after"]}
    return merged


def same_run(a: dict, b: dict) -> bool:
    return a["documents"] == b["documents"] and a.get("world_entities") == b.get("world_entities") \
        and a.get("resolve_method", "similarity") == b.get("resolve_method", "similarity")


def list_key(entry: dict) -> str:
    """Where an entry is filed: "sizes" (the standard world, similarity resolve: the linearity
    series) or "entity_dense" (an entity-dense world, or another resolve method)."""
    return "entity_dense" if entry.get("world_entities") or entry.get("resolve_method", "similarity") != "similarity" \
        else "sizes"


def write_results(entry: dict) -> dict:
    """Merge a size's entry into scale.json: into "sizes", or "entity_dense" for an entity-dense
    world or another resolve method (list_key). Every other key of the file (the service's
    local-context figures, findings, notes of earlier reruns) is kept as it is."""
    old = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    key = list_key(entry)
    lists = {k: old.get(k, []) for k in ("sizes", "entity_dense")}
    before = next((s for s in lists[key] if same_run(s, entry)), None)
    if entry.pop("resumed", False):
        entry = merge_resumed(before, entry)
    if before and "estimate" in before:  # the dry run's figures (test_scale_estimate) stay with the size
        entry.setdefault("estimate", before["estimate"])
    lists[key] = sorted([s for s in lists[key] if not same_run(s, entry)] + [entry], key=lambda s: s["documents"])
    sizes = lists["sizes"]
    largest_resolved = max((s for s in sizes if s.get("resolution")), key=lambda s: s["documents"], default=None)
    out = {
        "sizes": sizes,
        "resolution": None if largest_resolved is None else
        {"documents": largest_resolved["documents"], **largest_resolved["resolution"]},
        "linearity_seconds_per_doc_ratio": linearity(sizes),
        **({"entity_dense": lists["entity_dense"]} if lists["entity_dense"] else {}),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other work (see loadavg_*), "
                   f"{round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB, Spark local[2], "
                   f"{platform.system()}",
        "notes": [
            "Timings are under load: the machine's 2 cores are shared with other work; loadavg_before/after "
            "per size are os.getloadavg() (1, 5, 15 min).",
            "driver_collected_mb is null where the product does not report bytes collected to the driver.",
            "ray_peak_mb sums RSS over every Ray process (raylet, GCS, workers): shared object-store pages "
            "count once per process that maps them, so it is an upper bound.",
            "LLM and embeddings: tests/support/scale_server.py (scripted from the corpus truth), not a model.",
            "local_context_* / entities / ann_recall_at_10: from test_service_scale.py on the largest finished "
            "index (see local_context).",
        ],
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    # Not this benchmark's: test_service_scale.py's local-context figures, test_scale_update.py's
    # update, the findings and reruns written beside the entries.
    out.update({k: v for k, v in old.items() if k not in out})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    return out


def test_scale_whole_index():
    stages = [s for s in os.environ.get(ENV + "STAGES", ",".join(ALL_STAGES)).split(",") if s]
    for n in SIZES:
        out = write_results(measure_size(n, stages))
        # merged with the earlier run when resumed
        this = {"documents": n, "world_entities": WORLD, "resolve_method": METHOD}
        entry = next(s for s in out[list_key(this)] if same_run(s, this))
        print(json.dumps({k: entry[k] for k in ("documents", "total_seconds", "resolution", "loadavg_before",
                                                "loadavg_after")}), flush=True)
        st = entry["stages"]
        if "ingest" in st:  # a run seeded from another's tables has no ingest of its own
            assert st["ingest"]["rows_out"] == n, st["ingest"]  # every generated document, none quarantined
        if "extract" in st:
            assert st["extract"]["rows"].get("status_ok") == st["extract"]["rows"]["units"], st["extract"]["rows"]
            assert st["extract"]["llm_errors"] == 0
        if entry["resolution"]:
            assert entry["resolution"]["mentions_not_in_world"] == 0
            assert 0 < entry["resolution"]["predicted_entities"]


def test_scale_estimate():
    """`corpusgraph estimate` (the dry run: ingest and chunk into a scratch warehouse, count, price)
    at each size of CORPUSGRAPH_BENCH_SCALE_ESTIMATE_SIZES (none by default), timed whole and
    recorded as the size's "estimate" entry, against the 15-minute target at 1M documents. Where
    the size was also indexed, its estimate stands beside the actual calls and tokens."""
    import ray

    from corpusgraph.runner.dry_run import run_estimate

    sizes = [int(s) for s in os.environ.get(ENV + "ESTIMATE_SIZES", "").split(",") if s.strip()]
    if not sizes:
        pytest.skip(f"set {ENV}ESTIMATE_SIZES (for example 1000000) to time the dry run")
    for n in sizes:
        corpus = ROOT / f"corpus-{n}"
        manifest = synthetic_corpus.ensure(corpus, n, SEED)
        run_dir = ROOT / f"estimate-{n}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        # No model is asked anything: the server only has to exist for the config to be complete.
        cfg, _ = config_for(n, corpus, run_dir, "http://127.0.0.1:9/v1")
        spark = start_spark(cfg, run_dir)
        sampler = ProcessSampler()
        sampler.start()
        sampler.stage = "estimate"
        load_before = os.getloadavg()
        try:
            t0 = time.perf_counter()
            est, _ = run_estimate(cfg, spark, out_dir=run_dir / "out")
            seconds = time.perf_counter() - t0
        finally:
            sampler.stop()
            spark.stop()
            ray.shutdown()
        peaks = sampler.peaks.get("estimate", {})
        entry = {"seconds": round(seconds, 1), "target_seconds_at_1m": 900,
                 "documents": est.documents, "units": est.units, "llm_calls": est.llm_calls,
                 "llm_tokens_in": est.llm_tokens_in, "llm_tokens_out": est.llm_tokens_out,
                 "sampling": est.sampling, "driver_peak_mb": round(peaks.get("driver", 0), 1),
                 "jvm_peak_mb": round(peaks.get("jvm", 0), 1),
                 "loadavg_before": [round(x, 2) for x in load_before],
                 "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
        old = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"sizes": []}
        size = next((s for s in old["sizes"] if s["documents"] == n), None)
        if size is None:
            size = {"documents": n, "seed": SEED, "finished": False, "stages": {}, "not_run": list(ALL_STAGES),
                    "not_run_reason": "only the dry run was measured at this size"}
            old["sizes"].append(size)
            old["sizes"].sort(key=lambda s: s["documents"])
        actual = size["stages"].get("extract")
        if actual:
            entry["actual_extract_calls"] = actual["llm_calls"]
            entry["actual_extract_tokens_in"] = actual["llm_tokens_in"]
        size["estimate"] = entry
        RESULTS.write_text(json.dumps(old, indent=2) + "\n")
        print(json.dumps({"documents": n, **{k: entry[k] for k in ("seconds", "units", "llm_calls")}}), flush=True)
        assert est.documents == manifest["documents"], (est.documents, manifest["documents"])
        assert est.units > 0 and est.llm_calls > 0
