"""A local conformance server per provider profile: it refuses what that provider documents as
refused, with the provider's status and error body (provider_rules.py, provider_rules_local.py),
and otherwise answers as tests/support/scripted_server.py does, so the real pipeline builds a
graph through it.

A test harness, never a product default.

    python tests/support/provider_server.py --profile openai --key sk-test --models gpt-test

Routes per profile: the OpenAI-compatible /v1/chat/completions and /v1/embeddings (and, for
openai, /v1/files and /v1/batches of the Batch API through batch_emulator.py, each line checked
by the same rules); Azure's /openai/deployments/{d}/chat/completions|embeddings?api-version=,
/openai/v1/chat/completions|embeddings, and /openai/files|batches?api-version=; TEI's
/v1/embeddings. GET /stats: {"requests", "refused", "ignored", "by_rule", "kinds" (a Batch API line's kind is "batch <kind>"), "refusals"}
(the first few refusals' bodies). The first stdout line is the base URL (".../v1", or the root
for azure_openai).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import Counter

from aiohttp import web

try:
    from tests.support import batch_emulator
    from tests.support.child_server import ChildServer, run_server
    from tests.support.embed_server import vector_for
    from tests.support.provider_rules import Call, Config
    from tests.support.provider_rules_local import IGNORES, RULES
    from tests.support.scripted_server import _tokens, answer_for
except ImportError:  # run as a script
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.support import batch_emulator
    from tests.support.child_server import ChildServer, run_server
    from tests.support.embed_server import vector_for
    from tests.support.provider_rules import Call, Config
    from tests.support.provider_rules_local import IGNORES, RULES
    from tests.support.scripted_server import _tokens, answer_for

EMBED_DIM = 16


def kind_of(body: dict) -> str:
    """What a chat request is for, read off its schema (for the results file's `kinds`)."""
    rf = body.get("response_format") or {}
    schema = (rf.get("json_schema") or {}).get("schema") or rf.get("schema") or rf.get("value") or {}
    props = set((schema.get("properties") or {}))
    user = next((m.get("content") or "" for m in reversed(body.get("messages") or []) if m.get("role") == "user"), "")
    if not props:
        return "answer"
    if props >= {"entities", "relationships"} or (props and all(k.isdigit() for k in props)):
        return "gleaning" if "Already extracted:" in str(user) else "extraction"
    for key, kind in (("same", "adjudication"), ("findings", "report"), ("points", "map"), ("follow_ups", "drift"),
                      ("verdict", "judge"), ("description", "summary"), ("score", "rate")):
        if key in props:
            return kind
    return "other"


class Conformance:
    """The rules of one profile and what they did."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.rules, self.ignores = RULES[cfg.profile], IGNORES[cfg.profile]
        self.stats = {"requests": 0, "refused": 0, "ignored": 0, "by_rule": Counter(), "kinds": set(),
                      "refusals": []}

    def judge(self, call: Call, kind: str) -> tuple[int, dict] | None:
        """The refusal of `call` (counted), or None; ignored fields are counted either way."""
        self.stats["requests"] += 1
        self.stats["kinds"].add(kind)
        for rule in self.rules:
            if call.kind in rule.kinds:
                got = rule.check(call, self.cfg)
                if got is not None:
                    self.stats["refused"] += 1
                    self.stats["by_rule"][rule.id] += 1
                    if len(self.stats["refusals"]) < 20:
                        self.stats["refusals"].append({"rule": rule.id, "kind": kind, "status": got[0], "body": got[1]})
                    return got
        for ign in self.ignores:
            if call.kind in ign.kinds and ign.check(call, self.cfg):
                self.stats["ignored"] += 1
                self.stats["by_rule"][ign.id] += 1
        return None

    def view(self) -> dict:
        return {**self.stats, "by_rule": dict(self.stats["by_rule"]), "kinds": sorted(self.stats["kinds"])}


def completion(body: dict) -> dict:
    content = answer_for(body, lexical_query=True)
    prompt = sum(_tokens(str(m.get("content") or "")) + 4 for m in body.get("messages") or []) + 3
    out = _tokens(content)
    return {"id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}}


def reason(answer: dict, limit: int, hidden: int) -> None:
    """`answer` as a reasoning model gives it: `hidden` reasoning tokens first, inside `limit`;
    when they and the answer do not fit, the answer is empty and finish_reason is "length"."""
    usage = answer["usage"]
    if limit and hidden + usage["completion_tokens"] > limit:
        answer["choices"][0].update(finish_reason="length", message={"role": "assistant", "content": ""})
        spent, hidden = limit, min(hidden, limit)
    else:
        spent = hidden + usage["completion_tokens"]
    usage.update(completion_tokens=spent, total_tokens=usage["prompt_tokens"] + spent,
                 completion_tokens_details={"reasoning_tokens": hidden})


def embeddings(body: dict) -> dict:
    texts = body.get("input")
    texts = texts if isinstance(texts, list) else [texts]
    data = [{"object": "embedding", "index": i, "embedding": vector_for(str(t), EMBED_DIM).tolist()}
            for i, t in enumerate(texts)]
    tokens = sum(len(str(t).split()) for t in texts)
    return {"object": "list", "model": body.get("model"), "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def make_app(cfg: Config, delay_s: float = 0.5) -> web.Application:
    conf = Conformance(cfg)
    azure = cfg.profile == "azure_openai"

    def call(request: web.Request, kind: str, body: dict) -> Call:
        return Call(kind, body, {k.lower(): v for k, v in request.headers.items()}, request.path,
                    dict(request.query), request.match_info.get("deployment"))

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        refused = conf.judge(call(request, "chat", body), kind_of(body))
        if refused is not None:
            return web.json_response(refused[1], status=refused[0])
        answer = completion(body)
        if cfg.reasoning_tokens and (request.match_info.get("deployment") or body.get("model")) in cfg.reasoning_models:
            reason(answer, int(body.get("max_completion_tokens") or 0), cfg.reasoning_tokens)
        return web.json_response(answer)

    async def embed(request: web.Request) -> web.Response:
        body = await request.json()
        refused = conf.judge(call(request, "embeddings", body), "embedding")
        if refused is not None:
            return web.json_response(refused[1], status=refused[0])
        return web.json_response(embeddings(body))

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in cfg.models]})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(conf.view())

    # The Batch API's own calls (files, batches) pass the credential and version rules first.
    @web.middleware
    async def gate(request: web.Request, handler):
        if "/files" in request.path or "/batches" in request.path:
            body = await request.json() if request.method == "POST" and request.path.endswith("/batches") else {}
            c = Call("batch_create", body, {k.lower(): v for k, v in request.headers.items()}, request.path,
                     dict(request.query))
            for rule in conf.rules:
                if "batch_create" in rule.kinds and (rule.id.endswith((".auth.key", ".auth.bearer", ".url.version"))
                                                      or request.path.endswith("/batches") and request.method == "POST"):
                    got = rule.check(c, cfg)
                    if got is not None:
                        conf.stats["requests"] += 1
                        conf.stats["refused"] += 1
                        conf.stats["by_rule"][rule.id] += 1
                        return web.json_response(got[1], status=got[0])
        return await handler(request)

    def line_check(body: dict):
        # A line's body meets the synchronous endpoint's rules; its credentials were the upload's.
        creds = {"api-key": cfg.key or ""} if azure else {"authorization": f"Bearer {cfg.key}"}
        path = "/openai/v1/chat/completions" if azure else "/v1/chat/completions"
        return conf.judge(Call("chat", body, creds, path), f"batch {kind_of(body)}")

    if cfg.profile in ("openai", "azure_openai", "openai_compatible"):
        # Azure's dated API lines name /chat/completions (AZURE_BATCH); its v1 API's the /v1 form (assumed)
        prefixes = (("/openai", "/chat/completions"), ("/openai/v1", "/v1/chat/completions")) if azure else \
            (("/v1", "/v1/chat/completions"),)
        def line_answer(body: dict, rid: str) -> dict:
            # A line's answer as the synchronous endpoint gives it, hidden reasoning included.
            answer = batch_emulator.completion(body, rid)
            if cfg.reasoning_tokens and body.get("model") in cfg.reasoning_models:
                reason(answer, int(body.get("max_completion_tokens") or 0), cfg.reasoning_tokens)
            return answer

        app = batch_emulator.make_app(delay_s, None, prefixes=prefixes, line_check=line_check, own_routes=False,
                                      middlewares=[gate], answer=line_answer)
    else:
        app = web.Application(client_max_size=64 * 1024 * 1024)
    if azure:
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", chat)
        app.router.add_post("/openai/deployments/{deployment}/embeddings", embed)
        app.router.add_post("/openai/v1/chat/completions", chat)
        app.router.add_post("/openai/v1/embeddings", embed)
    else:
        if cfg.profile != "tei":
            app.router.add_post("/v1/chat/completions", chat)
        app.router.add_post("/v1/embeddings", embed)
        app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    return app


async def _serve(app, port: int, azure: bool) -> None:
    import asyncio

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    root = f"http://127.0.0.1:{runner.addresses[0][1]}"
    print(root if azure else f"{root}/v1", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


class ProviderServer(ChildServer):
    """The server in a child process; `stats()` reads its counts. `root` is the URL without /v1."""

    def __init__(self, profile: str, *args: str):
        super().__init__(__file__, "--profile", profile, *args)
        self.root = self.base_url.removesuffix("/v1")

    def get_json(self, path: str, timeout: float = 30):
        import urllib.request

        with urllib.request.urlopen(self.root + path, timeout=timeout) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict:
        return self.get_json("/stats")


@contextlib.contextmanager
def running(profile: str, *args: str):
    with ProviderServer(profile, *args) as server:
        yield server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, choices=sorted(RULES))
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--key", default=None)
    p.add_argument("--models", default="m", help="comma-separated served models (Azure: deployments)")
    p.add_argument("--reasoning-models", default="")
    p.add_argument("--no-system-models", default="")
    p.add_argument("--fine-tuned-models", default="")
    p.add_argument("--api-versions", default=None, help="Azure: comma-separated dated api-versions it knows")
    p.add_argument("--tokens", default="", help="Azure: comma-separated Entra ID tokens it takes")
    p.add_argument("--context", type=int, default=32_768)
    p.add_argument("--reasoning-tokens", type=int, default=0, help="hidden reasoning per answer of a reasoning model")
    p.add_argument("--delay-s", type=float, default=0.5, help="Batch API: seconds until a batch completes")
    a = p.parse_args()
    split = lambda v: tuple(x for x in v.split(",") if x)  # noqa: E731
    cfg = Config(a.profile, a.key, split(a.models), split(a.reasoning_models), split(a.no_system_models),
                 split(a.fine_tuned_models), split(a.api_versions) if a.api_versions else Config.api_versions,
                 split(a.tokens), a.context, reasoning_tokens=a.reasoning_tokens)
    run_server(_serve(make_app(cfg, a.delay_s), a.port, a.profile == "azure_openai"))


if __name__ == "__main__":
    main()
