"""The MCP server (serving/mcp_server.py) through the `mcp` package's own client: over streamable
HTTP (the service under uvicorn in a thread, MCP mounted at /mcp/), in process, and as the
`corpusgraph mcp` child process over stdio.

The two-domain world and the echoing model of the access tests: with the public key every tool is
tried with every hidden id and name, and nothing of the vault comes back; errors for hidden ids
are word for word those for ids that never existed. The vault key finds the vault (the control).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from corpusgraph.config import Config, ServeSection
from serving.auth import Caller
from tests.support.access_world import (ADMIN, HIDDEN_FROM_PUBLIC, HIDDEN_NAMES, KEYS, PUBLIC, QUESTIONS, VAULT, leaks,
                                        said)
from tests.support.query_fixtures import DIM, REPO, EchoChat, build_two_domain_index, make_engine
from tests.support.service_thread import serve_in_thread, wait_ready

pytestmark = pytest.mark.unit

TOOLS = {"query", "context", "search_entities", "get_entity", "list_communities", "get_community", "get_unit"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp-world")
    return root, build_two_domain_index(root)


@pytest.fixture(scope="module")
def service(world):
    from corpusgraph.query.store import IndexStore
    from serving import create_app

    store = IndexStore(*world[1])
    app = create_app(Config(serve=ServeSection(api_keys=KEYS, mcp={"enabled": True})),
                     engine_factory=lambda _c: make_engine(store, EchoChat()))
    with serve_in_thread(app) as url:
        wait_ready(url)
        yield url, app


def _over_http(url: str, key: str | None, calls, **headers):
    """Run `calls(client)` against the MCP endpoint with these headers; its result."""
    async def run():
        sent = {"Authorization": f"Bearer {key}", **headers} if key else headers
        async with httpx2.AsyncClient(headers=sent, timeout=60) as http:
            async with Client(streamable_http_client(f"{url}/mcp/", http_client=http)) as client:
                return await calls(client)

    return asyncio.run(run())


def _text(result) -> str:
    """What a tool result says: its structured content without the caller's own question, or its
    error text."""
    if result.is_error:
        return result.content[0].text
    return said(json.dumps(result.structured_content))


async def _every_call(client) -> dict[str, str]:
    """Every tool with every hidden id and name, and every question through query and context."""
    out = {}
    calls = [("get_entity", {"entity_id": e}) for e in HIDDEN_FROM_PUBLIC["entities"] | {"e_mara", "never-existed"}]
    calls += [("get_community", {"community_id": c}) for c in HIDDEN_FROM_PUBLIC["communities"] | {"never-existed"}]
    calls += [("get_unit", {"unit_id": u}) for u in HIDDEN_FROM_PUBLIC["units"] | {"u1", "never-existed"}]
    calls += [("search_entities", {"text": n, "limit": 50}) for n in HIDDEN_NAMES]
    calls += [("list_communities", {"limit": 200}), ("list_communities", {"level": 0})]
    for q in QUESTIONS:
        calls += [("query", {"question": q, "method": m}) for m in ("basic", "local", "global", "drift")]
        calls += [("context", {"question": q, "method": m, "top_k": 50}) for m in ("basic", "local", "global")]
    for tool, args in calls:
        out[f"{tool} {json.dumps(args)}"] = _text(await client.call_tool(tool, args))
    return out


def test_the_tools_and_their_schemas_are_the_http_routes(service):
    from serving.models import CommunityDetail, CommunityPage, EntityDetail, EntityHits, UnitDetail
    from serving.routers.context import ServedContext
    from serving.routers.query import ServedAnswer
    from pydantic import TypeAdapter

    url, _ = service
    tools = _over_http(url, ADMIN, lambda c: c.list_tools())
    by_name = {t.name: t for t in tools.tools}
    assert set(by_name) == TOOLS
    models = {"query": TypeAdapter(ServedAnswer), "context": TypeAdapter(ServedContext),
              "search_entities": EntityHits, "get_entity": EntityDetail, "list_communities": CommunityPage,
              "get_community": CommunityDetail, "get_unit": UnitDetail}
    for name, model in models.items():
        schema = model.json_schema() if isinstance(model, TypeAdapter) else model.model_json_schema()
        assert set(by_name[name].output_schema["properties"]) == set(schema["properties"]), name
    assert by_name["query"].input_schema["properties"]["question"]["maxLength"] == 2000


def test_the_tools_answer_over_http(service):
    url, _ = service

    async def calls(client):
        hits = (await client.call_tool("search_entities", {"text": "mara"})).structured_content
        entity = (await client.call_tool("get_entity", {"entity_id": "e_mara"})).structured_content
        community = (await client.call_tool("get_community", {"community_id": "c1a"})).structured_content
        unit = (await client.call_tool("get_unit", {"unit_id": "u2"})).structured_content
        answer = await client.call_tool("query", {"question": "Who trained Tobin Hale?", "method": "basic"})
        context = (await client.call_tool("context", {"question": "Who trained Tobin Hale?"})).structured_content
        bad = await client.call_tool("query", {"question": ""})
        return hits, entity, community, unit, answer, context, bad

    hits, entity, community, unit, answer, context, bad = _over_http(url, ADMIN, calls)
    assert [h["entity_id"] for h in hits["entities"]] == ["e_mara"]
    assert entity["entity"]["title"] == "Mara Voss" and {n["entity_id"] for n in entity["neighbours"]} >= {"e_tobin"}
    assert community["report"]["title"] == "The Lumen Guild workshop"
    assert unit["unit"]["text"].startswith("Mara Voss trained Tobin Hale")
    assert not answer.is_error and answer.structured_content["method"] == "basic"
    assert answer.structured_content["citations"] and answer.structured_content["index_version"]
    assert context["method"] == "local" and context["units"][0]["tag"] == "U1" and context["llm_calls"] == 0
    assert bad.is_error  # validated as the HTTP route validates


def test_a_public_key_gets_nothing_of_the_vault_from_any_tool(service):
    url, app = service
    said_ = _over_http(url, PUBLIC, _every_call)
    hidden = {label: text for label, text in said_.items() if label.startswith(("get_entity", "get_community",
                                                                               "get_unit"))}
    found = {label: leaks(text) for label, text in said_.items() if leaks(text)}
    assert found == {}
    for tool, missing in (("get_entity", "no such entity in this index"),
                          ("get_community", "no such community in this index"),
                          ("get_unit", "no such text unit in this index")):
        never = hidden[f'{tool} {{"{tool.split("_")[1] if tool != "get_unit" else "unit"}_id": "never-existed"}}']
        assert never.endswith(missing)
        for label, text in hidden.items():
            if label.startswith(tool) and not label.endswith(('"e_mara"}', '"u1"}')):
                assert text == never, label  # the same words as for an id that never existed
    assert all(json.loads(t)["entities"] == [] for label, t in said_.items() if label.startswith("search_entities"))
    assert "Lumen Guild" in said_['get_entity {"entity_id": "e_mara"}']
    metrics = httpx.get(f"{url}/metrics").text
    assert 'corpusgraph_mcp_tool_calls_total{outcome="error",tool="get_entity"}' in metrics


def test_the_vault_key_finds_the_vault(service):
    url, _ = service
    said_ = _over_http(url, VAULT, _every_call)
    secrets = set().union(*(leaks(t) for t in said_.values()))
    assert {"qx-7731", "zephyrine", "corvin"} <= secrets
    assert "Corvin Thale" in said_['get_entity {"entity_id": "ev_corvin"}']


def test_http_refuses_before_mcp_sees_the_request(service):
    url, _ = service
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    r = httpx.post(f"{url}/mcp/", json=init)
    assert r.status_code == 401 and r.json()["detail"].startswith("missing API key")
    r = httpx.post(f"{url}/mcp/", json=init, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["detail"].startswith("wrong API key")
    r = httpx.post(f"{url}/mcp/", json=init, headers={"Authorization": f"Bearer {PUBLIC}",
                                                     "X-Access-Domains": "public,vault"})
    assert r.status_code == 403 and r.json() == {"detail": "this API key may not read domain(s) vault (X-Access-Domains)"}
    narrowed = _over_http(url, ADMIN, lambda c: c.call_tool("get_entity", {"entity_id": "ev_corvin"}),
                          **{"X-Access-Domains": "public"})
    assert narrowed.is_error and narrowed.content[0].text.endswith("no such entity in this index")


def test_in_process_a_tool_call_without_a_caller_fails_closed(service):
    from serving.mcp_server import NOT_AUTHENTICATED, build_mcp

    _, app = service

    async def run(server):
        async with Client(server) as client:
            return await client.call_tool("search_entities", {"text": "corvin"})

    refused = asyncio.run(run(build_mcp(app.state)))
    assert refused.is_error and refused.content[0].text.endswith(NOT_AUTHENTICATED)
    public = asyncio.run(run(build_mcp(app.state, launch_caller=Caller("public-app", frozenset({"public"})))))
    assert not public.is_error and public.structured_content["entities"] == []
    vault = asyncio.run(run(build_mcp(app.state, launch_caller=Caller("vault-app", frozenset({"vault"})))))
    assert [h["title"] for h in vault.structured_content["entities"]] == ["Corvin Thale"]


# -- `corpusgraph mcp` over stdio --------------------------------------------------------------------

def _stdio_params(world, tmp_path, embed_url: str, key_env: dict[str, str], *extra: str) -> StdioServerParameters:
    root, (wh, index_dir) = world
    keys = '[{name: public-app, key: "${CG_MCP_PUBLIC}", domains: [public]}, ' \
           '{name: vault-app, key: "${CG_MCP_VAULT}", domains: [vault]}]'
    sets = {"storage.warehouse": wh, "storage.index_dir": index_dir, "storage.cache_dir": str(tmp_path / "cache"),
            "llm.backend": "openai", "llm.api_base": "http://127.0.0.1:9/v1", "llm.max_retries": "0",
            "embeddings.backend": "openai", "embeddings.model": "fake-bow-64", "embeddings.api_base": embed_url,
            "serve.api_keys": keys}
    args = ["-m", "corpusgraph.cli.main", "mcp", "--conf", str(REPO / "conf" / "local.yaml"), *extra]
    args += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "CG_MCP_PUBLIC": "stdio-public",
           "CG_MCP_VAULT": "stdio-vault", **key_env}
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(REPO))


def test_the_stdio_command_acts_for_its_launch_key(world, tmp_path):
    from tests.support.embed_server import EmbedServer

    with EmbedServer(dim=DIM, model="fake-bow-64") as emb:
        params = _stdio_params(world, tmp_path, emb.base_url, {"MY_KEY": "stdio-public"}, "--api-key-env", "MY_KEY")

        async def run():
            async with Client(params) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                corvin = await client.call_tool("search_entities", {"text": "Corvin"})
                vault = await client.call_tool("get_entity", {"entity_id": "ev_vault"})
                mara = await client.call_tool("get_entity", {"entity_id": "e_mara"})
                ctx = await client.call_tool("context", {"question": QUESTIONS[0], "method": "basic", "top_k": 50})
                return tools, corvin, vault, mara, ctx

        begin = time.monotonic()
        tools, corvin, vault, mara, ctx = asyncio.run(asyncio.wait_for(run(), 120))
    assert tools == TOOLS and time.monotonic() > begin
    assert corvin.structured_content["entities"] == []
    assert vault.is_error and vault.content[0].text.endswith("no such entity in this index")
    assert mara.structured_content["entity"]["title"] == "Mara Voss"
    assert leaks(_text(ctx)) == [] and ctx.structured_content["units"]


def test_the_stdio_command_refuses_to_start_without_a_key_when_the_config_has_keys(world, tmp_path):
    params = _stdio_params(world, tmp_path, "http://127.0.0.1:9/v1", {})
    proc = subprocess.run([params.command, *params.args], cwd=params.cwd, env={**os.environ, **params.env},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "the config has API keys (serve.api_keys), so the tools need one" in proc.stderr
    wrong = _stdio_params(world, tmp_path, "http://127.0.0.1:9/v1", {"K": "not-a-key"}, "--api-key-env", "K")
    proc = subprocess.run([wrong.command, *wrong.args], cwd=wrong.cwd, env={**os.environ, **wrong.env},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "wrong API key" in proc.stderr
