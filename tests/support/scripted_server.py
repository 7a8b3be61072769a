"""A deterministic OpenAI-compatible test server whose answers are derived from the request.

A test harness, never a product default. It stands in for a model where a test needs many
calls fast and repeatably, yet needs the graph to follow the documents: an extraction names the
capitalised phrases of the text (so adding or deleting a document adds or removes its
entities), links consecutive ones within a sentence, and a report summarises the context it was
given; a gleaning round (the request lists what was already extracted) gets empty lists,
since nothing was missed. Packed requests ("Text 1:", "Text 2:", ... with one object per text)
are answered per text. Any other JSON schema gets its minimal valid instance (false, the minimum, [], the first
enum value), except that with `--lexical-query` relevance ratings and global map requests are read
off the question's words (lexical_query.py). Usage counts are cl100k tokens of the messages and of the answer, so token
accounting through `llm_calls` is real arithmetic on real text.

    python tests/support/scripted_server.py [--port 0]

The first stdout line is the base URL (".../v1"). GET /stats returns {"served": n}.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import sys

from aiohttp import web

try:
    from tests.support.child_server import ChildServer, run_server, serve_forever
    from tests.support.lexical_query import answer as lexical_query_answer
except ImportError:  # run as a script: its own folder is on sys.path
    from child_server import ChildServer, run_server, serve_forever
    from lexical_query import answer as lexical_query_answer

_PHRASE = re.compile(r"\b[A-Z][\w&'-]*(?:\s+(?:of\s+|&\s+)?[A-Z][\w&'-]*){0,3}")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_COMMON = {"The", "A", "An", "This", "That", "It", "In", "On", "At", "For", "And", "But", "He", "She", "They", "We",
           "Its", "His", "Her", "Their", "Text", "As", "By", "Of", "To", "After", "Before", "When", "While"}


def _tokens(text: str) -> int:
    from corpusgraph.tokens import count_tokens

    return count_tokens(text)


def _props(schema: dict, name: str) -> dict:
    return (schema.get("properties") or {}).get(name) or {}


def _cut(text: str, schema: dict) -> str:
    return text[: int(schema.get("maxLength") or 200)]


def _extraction(text: str, schema: dict) -> dict:
    ent_s, rel_s = _props(schema, "entities"), _props(schema, "relationships")
    types = _props(ent_s.get("items") or {}, "type").get("enum") or ["ORGANIZATION"]
    entities, rels, seen = [], [], set()
    for sentence in _SENTENCE.findall(text):
        names = []
        for m in _PHRASE.finditer(sentence):
            name = m.group(0).strip()
            if name.split()[0] in _COMMON:
                name = " ".join(name.split()[1:])
            if len(name) < 3:
                continue
            names.append(name)
            if name.casefold() not in seen and len(entities) < int(ent_s.get("maxItems") or 5):
                seen.add(name.casefold())
                kind = types[int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(types)]
                entities.append({"name": name[:80], "type": kind, "description": _cut(sentence.strip(), {"maxLength": 120})})
        for a, b in zip(names, names[1:]):
            if a.casefold() != b.casefold() and len(rels) < int(rel_s.get("maxItems") or 5):
                rels.append({"source": a[:80], "target": b[:80], "description": _cut(sentence.strip(), {"maxLength": 120}),
                             "strength": 1 + len(sentence) % 10})
    return {"entities": entities, "relationships": rels}


def _texts(user: str) -> list[str]:
    """The numbered texts of an extract request ("Text 1:\n..."), or the whole message."""
    parts = re.split(r"(?m)^Text(?: \d+)?:\n", user)
    return [p.strip() for p in parts[1:]] or [user]


def _gleaning(user: str) -> bool:
    # A gleaning round lists what was already found; this model never misses anything, so it
    # answers empty lists, and gleaning stops after one round, as it would on a complete answer.
    return "Already extracted:" in user


def _report(context: str, schema: dict) -> dict:
    lines = [ln[2:] for ln in context.splitlines() if ln.startswith("- ")]
    first = lines[0].split(":")[0] if lines else "an empty community"
    n = int(_props(schema, "findings").get("maxItems") or 3)
    return {"title": f"Community around {first}"[:120], "summary": " ".join(lines)[:400],
            "findings": [{"summary": ln[:160], "explanation": ln[:250]} for ln in lines[:n]],
            "rating": float(min(10, len(lines))), "rating_explanation": f"{len(lines)} items in the context"}


def _minimal(schema: dict):
    t = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if t == "object":
        return {k: _minimal(v) for k, v in (schema.get("properties") or {}).items() if k in (schema.get("required") or [])}
    if t == "array":
        return []
    if t == "boolean":
        return False
    if t in ("integer", "number"):
        return schema.get("minimum", 0)
    return ""


def answer_for(body: dict, lexical_query: bool = False) -> str:
    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema") or fmt.get("value") or {}
    messages = body.get("messages") or []
    user = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    props = schema.get("properties") or {}
    if "entities" in props and "relationships" in props:  # one unit
        return json.dumps(_extraction(_texts(user)[0] if not _gleaning(user) else "", schema))
    if props and all(k.isdigit() for k in props):  # a pack: "1".."n", one unit object each
        texts = _texts(user)
        return json.dumps({k: _extraction("" if _gleaning(user) else texts[int(k) - 1] if int(k) <= len(texts) else "",
                                          v) for k, v in props.items()})
    if "title" in props and "findings" in props:
        return json.dumps(_report(user, schema))
    if lexical_query and (read := lexical_query_answer(user, schema)) is not None:
        return json.dumps(read)
    return json.dumps(_minimal(schema)) if schema else "ok"


def make_app(lexical_query: bool = False) -> web.Application:
    served = {"n": 0}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        content = answer_for(body, lexical_query)
        served["n"] += 1
        prompt = sum(_tokens(m.get("content") or "") + 4 for m in body.get("messages") or []) + 3
        return web.json_response({
            "id": f"scripted-{served['n']}", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": _tokens(content),
                      "total_tokens": prompt + _tokens(content)},
        })

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"served": served["n"]})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/stats", stats)
    return app


@contextlib.contextmanager
def running(*args: str):
    """This server in a separate process on a free port, for the `with` block; yields its base URL.
    `args` are extra command-line options (`--lexical-query`)."""
    with ChildServer(__file__, "--port", "0", *args) as server:
        yield server.base_url


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--lexical-query", action="store_true",
                   help="answer relevance ratings and global map requests by shared words (lexical_query.py)")
    args = p.parse_args()
    run_server(serve_forever(make_app(args.lexical_query), args.port))


if __name__ == "__main__":
    main()
