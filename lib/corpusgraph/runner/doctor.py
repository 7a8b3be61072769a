"""`corpusgraph doctor` and the index's preflight: one tiny request of each kind a run makes, built
by the real builders (the extraction pack schema, a resolution verdict, a report, a description
summary, an answer, a global map and rating, an embedding; a gleaning round sends the extraction's
schema and settings, so the extraction check covers it), sent to each stage's endpoint and model
with the cache off, and a line per kind: accepted, or the provider's own message and the setting
that fixes it (llm/fixes.py). Nothing is written anywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from corpusgraph.config import Config, LLMSection
from corpusgraph.llm.base import ChatModel, ChatRequest, ChatResult
from corpusgraph.llm.fixes import fix_for

__all__ = ["Check", "run_checks", "format_checks", "preflight", "window_warnings", "silent_window_overflows",
           "KINDS"]

_TEXT = ("Halvard & Quist moved trailer R-77 from the Valencia hub to the Milan hub on 3 March. "
         "Giulia Sarti, the dock lead in Milan, said Brightwater Haulage collected it late.")
_CONTEXT = ("Entities:\n- Halvard & Quist (ORGANIZATION): a freight forwarder\n- Milan hub (LOCATION): a depot\n"
            "Relationships:\n- Halvard & Quist -> Milan hub: runs the depot")
# kind -> the stage whose endpoint and model it runs on
KINDS = {"extract": "extract", "adjudicate": "resolve", "summary": "resolve", "report": "reports", "answer": "query",
         "map": "query", "rate": "query", "judge": "judge", "embed": "embed"}


@dataclass
class Check:
    kind: str
    where: str  # "<model> @ <endpoint> [<profile>]"
    ok: bool
    seconds: float
    message: str = ""
    fix: str | None = None


def _requests(cfg: Config, kind: str, llm: LLMSection) -> list[ChatRequest]:
    """The kind's probe, as its stage builds it."""
    from corpusgraph.prompts import load_prompt
    from corpusgraph.query.global_map import map_schema, rate_schema

    if kind == "extract":
        from corpusgraph.stages.extract.llm import build_pack_request, extract_identity

        sec = cfg.extract
        prompts = extract_identity(sec, cfg.prompt_path, llm.model)[0]
        # The largest pack the config makes: its schema is what a strict provider checks.
        return [build_pack_request("doctor-extract", [_TEXT] * sec.units_per_call, prompts, sec, llm.temperature)]
    if kind == "adjudicate":
        from corpusgraph.stages.resolve.llm import AdjudicateTask

        task = AdjudicateTask(cfg.resolve, load_prompt(cfg.prompt_path(cfg.resolve.prompt_adjudicate)), llm.temperature)
        return task.requests([{"a": "doctor-a", "b": "doctor-b", "score": 0.5,
                               "a_name": "Milan hub", "a_type": "LOCATION", "a_desc": "A depot of Halvard & Quist.",
                               "a_neighbours": "Halvard & Quist", "b_name": "Milan depot", "b_type": "LOCATION",
                               "b_desc": "Where trailer R-77 arrived.", "b_neighbours": "Trailer R-77"}])
    if kind == "summary":
        from corpusgraph.stages.resolve.llm import SummariseTask

        task = SummariseTask(cfg.resolve, load_prompt(cfg.prompt_path(cfg.resolve.prompt_summarise)), llm.temperature)
        return task.requests([{"entity_id": "doctor-summary", "title": "Milan hub", "type": "LOCATION",
                               "text": "A depot of Halvard & Quist.\nWhere trailer R-77 arrived."}])
    if kind == "report":
        from corpusgraph.stages.reports import ReportTask

        task = ReportTask(cfg.reports, load_prompt(cfg.prompt_path(cfg.reports.prompt)), llm.model, llm.temperature)
        return task.requests([{"community_id": "doctor-report", "context": _CONTEXT}])
    question = "Who moved trailer R-77?"
    if kind == "answer" or kind == "judge":
        return [ChatRequest(id=f"doctor-{kind}", messages=({"role": "user", "content": f"{_CONTEXT}\n\nQuestion: "
                                                                                        f"{question}"},),
                            max_tokens=cfg.query.max_tokens)]
    if kind == "map":
        return [ChatRequest(id="doctor-map", messages=({"role": "user", "content": f"Report 1: {_CONTEXT}\n\n"
                                                                                   f"Question: {question}"},),
                            max_tokens=cfg.query.max_tokens, json_schema=map_schema())]
    if kind == "rate":  # the smallest budget a run sends: where a reasoning model's answer comes back empty
        return [ChatRequest(id="doctor-rate", messages=({"role": "user", "content": f"Report: {_CONTEXT}\n"
                                                                                    f"Question: {question}"},),
                            max_tokens=16, json_schema=rate_schema())]
    raise ValueError(f"unknown check {kind!r}")


def _describe(llm: LLMSection, url: str | None) -> str:
    from corpusgraph.llm.factory import chat_endpoint

    urls = [url] if url else llm.endpoint_urls()
    try:
        profile = chat_endpoint(llm, urls).profile.name
    except ValueError:
        profile = llm.profile or "?"
    return f"{llm.model} @ {urls[0] if urls else '(no endpoint)'} [{profile}]"


def _chat_check(cfg: Config, kind: str, llm: LLMSection, url: str | None) -> Check:
    from corpusgraph.llm.factory import open_chat_model

    where = _describe(llm, url)
    t0 = time.perf_counter()
    try:
        model: ChatModel = open_chat_model(llm.model_copy(update={"cache": False, "max_retries": min(llm.max_retries, 1)}),
                                           cfg.storage.cache_dir, base_url=url)
        results = model.complete(_requests(cfg, kind, llm))
    except Exception as exc:  # a setting that cannot even build a client (a token command that fails, ...)
        return Check(kind, where, False, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}",
                     fix_for(None, None, None, str(exc)))
    seconds = time.perf_counter() - t0
    bad: ChatResult | None = next((r for r in results if r.error), None)
    if bad is None:
        return Check(kind, where, True, seconds)
    return Check(kind, where, False, seconds, bad.error or "", fix_for(bad.status, bad.error_code, bad.error_param,
                                                                        bad.error))


def _embed_check(cfg: Config) -> Check:
    from corpusgraph.llm.embedders import open_embedder

    sec = cfg.embeddings
    where = f"{sec.model} @ {(sec.endpoint_urls() or [f'bundled, in process ({sec.runtime})'])[0]}"
    t0 = time.perf_counter()
    try:
        vec = open_embedder(sec.model_copy(update={"cache": False}), None).embed(["doctor"])
    except Exception as exc:
        fix = fix_for(None, None, None, str(exc))
        return Check("embed", where, False, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}",
                     fix.replace("llm.", "embeddings.") if fix else None)
    return Check("embed", where, True, time.perf_counter() - t0, f"{vec.shape[1]} dimensions")


def run_checks(cfg: Config, kinds: list[str], url_for: Callable[[LLMSection], str | None]) -> list[Check]:
    """One check per kind. url_for(section): the embedded server's URL for a section whose backend
    is embedded (ChatEndpoint.url), else None."""
    out = []
    for kind in kinds:
        if kind == "embed":
            out.append(_embed_check(cfg))
            continue
        llm = cfg.llm.for_stage(KINDS[kind])
        out.append(_chat_check(cfg, kind, llm, url_for(llm)))
    return out


def window_warnings(cfg: Config) -> list[str]:
    """Settings whose largest request passes the stage model's context window (prompt text
    allowance included): the server would refuse it, or (Ollama) cut it without a word."""
    return [text for text, _ in _window_overflows(cfg)]


def silent_window_overflows(cfg: Config) -> list[str]:
    """The window_warnings of stages whose endpoint cuts a longer prompt without an error (Ollama):
    the preflight stops the run on these, since nothing later would show the damage."""
    return [text for text, silent in _window_overflows(cfg) if silent]


def _window_overflows(cfg: Config) -> list[tuple[str, bool]]:
    from corpusgraph.llm.factory import PROMPT_ALLOWANCE, context_window, endpoint_profile

    out = []
    ex = cfg.extract
    wants = {"extract": (ex.pack_tokens + ex.units_per_call * ex.max_tokens, "extract.pack_tokens + "
                         "extract.units_per_call x extract.max_tokens") if ex.method == "llm" else None,
             "reports": None, "query": None}  # reports and query contexts are cut to fit (llm/factory.fit_context)
    for stage, want in wants.items():
        if want is None:
            continue
        llm = cfg.llm.for_stage(stage)
        window = context_window(llm)
        if want[0] + PROMPT_ALLOWANCE > window:
            silent = llm.backend in ("openai", "openai_batch") and endpoint_profile(llm).cuts_silently
            out.append((f"{stage}: {want[1]} = {want[0]} tokens plus about {PROMPT_ALLOWANCE} of prompt pass the "
                        f"model's context window ({window}): set llm.context_window to the model's, or lower them"
                        + (" (this endpoint cuts a longer prompt without an error)" if silent else ""), silent))
    return out


def format_checks(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        head = f"{c.kind:<8} {c.where}"
        if c.ok:
            lines.append(f"{head}  ok  {c.seconds:.2f} s" + (f"  ({c.message})" if c.message else ""))
        else:
            lines.append(f"{head}  REFUSED  {c.seconds:.2f} s\n         {c.message}"
                         + (f"\n         fix: {c.fix}" if c.fix else ""))
    return "\n".join(lines)


def run_kinds(cfg: Config, stages: list[str]) -> list[str]:
    """The kinds of requests a run of these stages makes."""
    kinds = []
    if "extract" in stages and cfg.extract.method == "llm":
        kinds.append("extract")
    if "resolve" in stages and cfg.resolve.method == "similarity" and cfg.resolve.llm_adjudication:
        kinds.append("adjudicate")
    if "resolve" in stages and cfg.resolve.summarise_descriptions:
        kinds.append("summary")
    if "reports" in stages:
        kinds.append("report")
    if "embed" in stages and cfg.embeddings.backend == "openai":
        kinds.append("embed")
    return kinds


def preflight(cfg: Config, stages: list[str], url_for: Callable[[LLMSection], str | None], log) -> None:
    """The index's check before it pays for a stage: the kinds its LLM stages make, on endpoints
    that are not the embedded model; a refusal stops the run (StageFailed) with the doctor lines."""
    from corpusgraph.runner.failures import StageFailed

    kinds = [k for k in run_kinds(cfg, stages)
             if k == "embed" or cfg.llm.for_stage(KINDS[k]).backend in ("openai", "openai_batch")]
    if not cfg.llm.preflight or not kinds:
        return
    log(f"preflight: one request of each kind ({', '.join(kinds)}) before the run pays for any")
    for warning in window_warnings(cfg):
        log(f"  warning: {warning}")
    cut = silent_window_overflows(cfg)
    if cut:
        raise StageFailed("preflight", f"{cut[0]}; the run stops before paying for prompts that would be cut "
                          "(llm.preflight: false skips this check)")
    checks = run_checks(cfg, kinds, url_for)
    for line in format_checks(checks).splitlines():
        log("  " + line)
    refused = [c for c in checks if not c.ok]
    if refused:
        c = refused[0]
        raise StageFailed("preflight", f"the endpoint refused the {c.kind} request: {c.message}"
                          + (f" -- fix: {c.fix}" if c.fix else "") + " (llm.preflight: false skips this check)")
