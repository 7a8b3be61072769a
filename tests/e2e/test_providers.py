"""The real pipeline against each provider profile's conformance server (tests/support/
provider_server.py): index, update, every query method and, where the provider has one, the Batch
API, with 0 requests refused and 0 fields silently dropped.

The default tier drives one profile (Azure OpenAI on its v1 API with an Entra ID token from a
command) through an index and every query method on 3 documents. The slow tier drives every profile
through index, update and queries, plus the Batch backend on OpenAI and Azure (dated API), and
writes tests/benchmarks/results/providers.json:
{"profiles": {"<profile>": {"requests", "refused", "ignored", "kinds"}}, "rules_tested": n}.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.pipeline import run_index, run_update
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO
from tests.support.provider_server import ProviderServer

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.ray]

RESULTS = REPO / "tests" / "benchmarks" / "results" / "providers.json"
KEY = "sk-conformance-0001"
DOCS = {
    "valencia.md": "Brightwater Haulage moved trailer R-77 from Valencia to Milan. Giulia Sarti runs the Milan dock.",
    "fenmore.md": "Fenmore Foods complained to Halvard Quist about spoiled cheese. Fenmore Foods ships from Gdansk.",
    "kestrel.txt": "Kestrel Logistics opened a depot in Leipzig. Kestrel Logistics hired Anton Weber in Leipzig.",
}
ADDED = ("nordlicht.md", "Nordlicht Shipping signed with Halvard Quist in Hamburg. Nordlicht Shipping sails to Milan.")
QUESTIONS = {"basic": "Who runs the Milan dock?", "local": "Where did Kestrel Logistics open a depot?",
             "global": "What are the main themes across the hubs?", "drift": "How do the shipping firms connect?",
             "auto": "Who moved trailer R-77?"}
# The embedding server beside each chat profile (TGI serves no embeddings: TEI is its companion).
EMBED_PROFILE = {"tgi": "tei", "llama_cpp": "llama_cpp"}


def _inputs(root: Path) -> Path:
    docs = root / "in"
    docs.mkdir(parents=True)
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    return docs


def _overrides(root: Path, docs: Path, profile: str, chat_url: str, embed_url: str, **extra) -> dict[str, str]:
    azure = profile == "azure_openai"
    out = {
        "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
        "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{docs}]",
        "chunk.size_tokens": "60", "chunk.overlap_tokens": "6",
        "llm.backend": "openai", "llm.profile": profile, "llm.api_base": chat_url, "llm.api_key": KEY,
        "llm.model": "m", "llm.concurrency": "4", "llm.batch.poll_s": "0.2",
        "embeddings.backend": "openai", "embeddings.profile": EMBED_PROFILE.get(profile, profile),
        "embeddings.api_base": embed_url, "embeddings.api_key": KEY, "embeddings.model": "m",
        "extract.units_per_call": "2", "resolve.method": "exact", "resolve.max_description_chars": "100",
        "ray.actors": "1", "ray.num_cpus": "2",
    }
    if azure:
        out.update({"llm.azure.api_version": "2024-10-21", "embeddings.azure.api_version": "2024-10-21"})
    out.update(extra)
    return out


def _ask_all(cfg) -> dict[str, object]:
    from corpusgraph.query.open import open_query_engine

    engine = open_query_engine(cfg, None)
    answers = {m: engine.ask(q, method=m) for m, q in QUESTIONS.items()}
    for method, a in answers.items():
        assert a.error is None and a.answer.strip(), (method, a.error)
    return answers


def _servers(profile: str, *args: str):
    chat = ProviderServer(profile, "--key", KEY, "--models", "m", *args)
    embed_profile = EMBED_PROFILE.get(profile, profile)
    embed = chat if embed_profile == profile else ProviderServer(embed_profile, "--key", KEY, "--models", "m")
    return chat, embed


def _stop(chat, embed) -> None:
    chat.stop()
    if embed is not chat:
        embed.stop()


def _url(server, profile: str) -> str:
    return server.root if profile in ("azure_openai",) else server.base_url


def _merge(*stats: dict) -> dict:
    return {"requests": sum(s["requests"] for s in stats), "refused": sum(s["refused"] for s in stats),
            "ignored": sum(s["ignored"] for s in stats), "kinds": sorted({k for s in stats for k in s["kinds"]}),
            "refusals": [r for s in stats for r in s["refusals"]][:5]}


def drive(spark, root: Path, profile: str, *, update: bool = True, batch: bool = False, server_args=(),
          **extra) -> dict:
    """Index (and update) the 3 documents and ask every query method through `profile`'s
    server(s); the servers' merged stats."""
    docs = _inputs(root)
    chat, embed = _servers(profile, *server_args)
    try:
        over = _overrides(root, docs, profile, _url(chat, profile), _url(embed, EMBED_PROFILE.get(profile, profile)),
                          **({"llm.backend": "openai_batch"} if batch else {}), **extra)
        cfg = load_config(REPO / "conf" / "local.yaml", over)
        first = RunContext(cfg, spark)
        run_index(first)
        assert first.results["extract"].usage.calls > 0 and not first.results["extract"].usage.errors
        if update:
            (docs / ADDED[0]).write_text(ADDED[1])
            (docs / "kestrel.txt").unlink()
            run_update(RunContext(cfg, spark, kind="update"))
        _ask_all(cfg)
        stats = [chat.stats()] + ([embed.stats()] if embed is not chat else [])
    finally:
        _stop(chat, embed)
    return _merge(*stats)


def test_azure_v1_with_an_entra_token_command_through_index_and_every_query(spark, tmp_path):
    """The default tier's profile check: Azure OpenAI's v1 API, a bearer token from a command."""
    command = f"{sys.executable} -c \"print('tok-entra-1')\""
    stats = drive(spark, tmp_path, "azure_openai", update=False, server_args=("--tokens", "tok-entra-1"),
                  **{"llm.azure.api_version": "v1", "embeddings.azure.api_version": "v1",
                     "llm.azure.auth": "entra", "llm.azure.ad_token_command": command})
    assert stats["refused"] == 0 and stats["ignored"] == 0, stats["refusals"]
    assert {"extraction", "report", "embedding", "answer", "rate"} <= set(stats["kinds"])


def _runs(cfg) -> dict:
    from deltalake import DeltaTable

    from corpusgraph.tables import table_path

    return {r["run_id"]: r for r in DeltaTable(table_path(cfg.storage.warehouse, "runs")).to_pyarrow_table().to_pylist()}


def test_a_refused_stage_stops_the_run_with_the_providers_message(spark, tmp_path):
    """The issue's first target: every extraction refused (a wrong key) stops the run at extract,
    with the provider's message once with its count, the fix, and the reason in `runs`."""
    from deltalake import DeltaTable

    from corpusgraph.runner.failures import StageFailed
    from corpusgraph.tables import table_path

    docs = _inputs(tmp_path)
    with ProviderServer("openai", "--key", KEY, "--models", "m") as srv:
        over = _overrides(tmp_path, docs, "openai", srv.base_url, srv.base_url, **{"llm.api_key": "sk-wrong-0042"})
        cfg = load_config(REPO / "conf" / "local.yaml", over)
        logged = []
        ctx = RunContext(cfg, spark)
        ctx.log = logged.append
        with pytest.raises(StageFailed, match=r"extract: .* LLM calls of extract .*failed \(every call\)"):
            run_index(ctx)
        refused = srv.stats()["refused"]
    assert "ingest" in ctx.results and "resolve" not in ctx.results  # stopped before building on nothing
    text = "\n".join(logged)
    assert "Incorrect API key provided: sk-...0042" in text and "fix: the endpoint refused the key" in text
    shown = [ln for ln in "\n".join(logged).splitlines() if ln.lstrip().startswith("x") and "Incorrect API key" in ln]
    assert shown == [f"  x{refused}: HTTP 401: Incorrect API key provided: sk-...0042. You can find your API key at "
                     "https://platform.openai.com/account/api-keys."]  # once per distinct message, with its count
    run = _runs(cfg)[ctx.run_id]
    failure = json.loads(run["stage_counts"])["_failure"]
    assert run["status"] == "failed" and failure["stage"] == "extract" and "Incorrect API key" in failure["reason"]
    calls = {c["stage"]: c for c in DeltaTable(table_path(cfg.storage.warehouse, "llm_calls")).to_pyarrow_table()
             .to_pylist() if c["run_id"] == ctx.run_id}
    assert calls["extract"]["errors"] == calls["extract"]["calls"] == refused > 0


def test_the_preflight_stops_the_run_before_its_first_stage(spark, tmp_path):
    """A reasoning model the config does not flag: the preflight's extraction request is refused,
    the run stops before ingest with the provider's message and the fix."""
    from corpusgraph.runner.failures import StageFailed

    docs = _inputs(tmp_path)
    with ProviderServer("openai", "--key", KEY, "--models", "o3", "--reasoning-models", "o3") as srv:
        over = _overrides(tmp_path, docs, "openai", srv.base_url, srv.base_url,
                          **{"llm.model": "o3", "llm.reasoning": "false", "embeddings.model": "o3"})
        ctx = RunContext(load_config(REPO / "conf" / "local.yaml", over), spark)
        ctx.preflight = True
        with pytest.raises(StageFailed, match="temperature.*fix: this model takes only the default temperature"):
            run_index(ctx)
        assert srv.stats()["refused"] >= 1
    assert ctx.results == {}
    assert json.loads(_runs(ctx.cfg)[ctx.run_id]["stage_counts"])["_failure"]["stage"] == "preflight"


CHAT_PROFILES = ("openai", "azure_openai", "vllm", "ollama", "llama_cpp", "tgi", "openai_compatible")


@pytest.mark.slow
def test_every_profile_through_the_pipeline_refuses_nothing(spark, tmp_path):
    from tests.unit.support.test_conformance_rules import CASES, IGNORE_CASES

    t0 = time.perf_counter()
    profiles: dict[str, dict] = {}
    for profile in CHAT_PROFILES:
        profiles[profile] = drive(spark, tmp_path / profile, profile)
    for profile in ("openai", "azure_openai"):
        profiles[f"{profile} (batch API)"] = drive(spark, tmp_path / f"{profile}-batch", profile, update=False,
                                                   batch=True)
    report = {
        "profiles": {p: {k: s[k] for k in ("requests", "refused", "ignored", "kinds")} for p, s in profiles.items()},
        "rules_tested": len(CASES) + len(IGNORE_CASES),
        "what": "the 3-document sample through index, update (one document added, one removed) and every query "
                "method (basic, local, global with dynamic selection, drift, auto), each profile's conformance "
                "server as chat and embeddings endpoint (TEI's beside TGI); the Batch API runs index the same way "
                "with llm.backend openai_batch (Azure on a dated api-version, deployment URLs)",
        "seconds": round(time.perf_counter() - t0, 1),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    bad = {p: s["refusals"] for p, s in profiles.items() if s["refused"] or s["ignored"]}
    assert not bad, bad
    assert all(s["requests"] > 0 for s in profiles.values())
