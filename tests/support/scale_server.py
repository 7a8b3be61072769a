"""A scripted OpenAI-compatible server for scale runs, answering from a synthetic world's truth.

A benchmark harness, never a product default. It loads the ground truth that
synthetic_corpus.py wrote (truth/entities.parquet, truth/relationships.parquet) and answers
every prompt of the index pipeline from the texts in the request:

- extraction (one text, or a pack "Text 1:", "Text 2:", ... with one object per text): the
  world's surface forms written in each text (found by a token-tuple lookup keyed on the first
  word, longest form first), as written, with the world's type; a description from the text's
  "About X: ..." sentence or the world relationships it states; and the world relationships
  whose both ends are among the listed names. Lists stop at the schema's maxItems, so a dense
  text is left for gleaning;
- gleaning (the request lists what was already extracted): the names not yet listed, and the
  relationships that touch them;
- description summaries, community reports: built from the descriptions or context lines given;
- adjudication ("same" / "reason"): with --adjudicate oracle, the truth (both names belong to one
  entity); with never, always "not the same";
- POST /v1/embeddings: a deterministic unit vector per input of --dim dimensions: a hash of the
  normalised text seeds a random part, and each world entity named in the text adds its own
  fixed direction, so texts about one entity are near neighbours.

Chat and embeddings each take a fixed latency in a fixed number of slots (the rest queue).
Usage counts are cl100k tokens, so token accounting through `llm_calls` is real arithmetic.

    python tests/support/scale_server.py --truth work/scale/corpus/truth [--port 0] [--dim 64]

The first stdout line is the base URL (".../v1"). GET /stats returns what was served by kind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from aiohttp import web

try:
    from tests.support.child_server import ChildServer, run_server, serve_forever
    from tests.support.resolution_set import normalised
    from tests.support.synthetic_corpus import RELATIONS
except ImportError:  # run as a script: put the repository root on sys.path
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.support.child_server import ChildServer, run_server, serve_forever
    from tests.support.resolution_set import normalised
    from tests.support.synthetic_corpus import RELATIONS

_TOKEN = re.compile(r"\w+|[^\w\s]")
_ABOUT = re.compile(r"About (?P<name>[^:\n]+): (?P<fact>[^\n]+?)\.(?= |\n|$)")
_FOUND_LINE = re.compile(r"(?m)^Text (\d+): (.*)$")
_FOUND_ITEM = re.compile(r"(.+?) \(([A-Z]+)\)(?:, |$)")
GLEAN_MARK = "Already extracted:"


class Lexicon:
    """The world's surface forms and relationships, for finding what a text states."""

    def __init__(self, truth: Path | str):
        import pyarrow.parquet as pq

        ents = pq.read_table(Path(truth) / "entities.parquet", columns=["entity", "name", "type", "forms"])
        rels = pq.read_table(Path(truth) / "relationships.parquet", columns=["source", "target", "kind"])
        self.names = ents.column("name").to_pylist()
        self.types = ents.column("type").to_pylist()
        self.forms: dict[tuple[str, ...], int] = {}
        self.lengths: dict[str, list[int]] = defaultdict(list)
        self.by_norm: dict[str, int] = {}
        for e, forms in zip(ents.column("entity").to_pylist(), ents.column("forms").to_pylist()):
            for f in forms:
                toks = tuple(_TOKEN.findall(f))
                if toks and toks not in self.forms:
                    self.forms[toks] = e
                    if len(toks) not in self.lengths[toks[0]]:
                        self.lengths[toks[0]].append(len(toks))
                self.by_norm.setdefault(normalised(f), e)
        for lens in self.lengths.values():
            lens.sort(reverse=True)
        kinds = {r[0]: i for i, r in enumerate(RELATIONS)}
        # Edges by their (unordered) pair of ends, each with its row number: a text's answer looks
        # up the pairs among the few entities it names, so its cost does not grow with the world.
        # (Walking every edge of each named entity did: a Zipf-popular entity has thousands in a
        # 50k-entity world, and the single-threaded server became the extract stage's bottleneck.)
        self.pairs: dict[tuple[int, int], list[tuple[int, int, int, int]]] = defaultdict(list)
        for i, (s, t, k) in enumerate(zip(*(rels.column(c).to_pylist() for c in ("source", "target", "kind")))):
            self.pairs[(min(s, t), max(s, t))].append((i, s, t, kinds[k]))

    def edges_among(self, e: int, others) -> list[tuple[int, int, int]]:
        """(src, dst, kind) of every world edge between e and one of `others` (e itself included),
        in the relationships table's order."""
        found = [edge for o in set(others) | {e} for edge in self.pairs.get((min(e, o), max(e, o)), ())]
        return [(s, t, k) for _, s, t, k in sorted(found)]

    def edges_within(self, present) -> dict[int, list[tuple[int, int, int]]]:
        """edges_among(e, present) for every e of `present` at once: each pair of the text's
        entities is looked up once (the answer and each description asked per entity, k^2 each)."""
        ids = sorted(set(present))
        found: dict[int, list] = {e: [] for e in ids}
        pairs = self.pairs
        for i, a in enumerate(ids):
            for b in ids[i:]:
                edges = pairs.get((a, b))
                if edges:
                    found[a].extend(edges)
                    if b != a:
                        found[b].extend(edges)
        return {e: [(s, t, k) for _, s, t, k in sorted(edges)] for e, edges in found.items()}

    def find(self, text: str) -> list[tuple[str, int]]:
        """(surface as written, entity) for every form in the text, in order, longest first."""
        tokens = list(_TOKEN.finditer(text))
        words = [m[0] for m in tokens]
        lengths, forms = self.lengths, self.forms
        out, n, i = [], len(words), 0
        # Only words that open some form are looked at (a few per sentence).
        for j in [j for j, w in enumerate(words) if w in lengths]:
            if j < i:
                continue  # inside the form found last
            for length in lengths[words[j]]:
                e = forms.get(tuple(words[j:j + length])) if j + length <= n else None
                if e is not None:
                    out.append((text[tokens[j].start():tokens[j + length - 1].end()], e))
                    i = j + length
                    break
        return out

    def entity_of(self, name: str) -> int | None:
        return self.by_norm.get(normalised(name))


def _props(schema: dict, name: str) -> dict:
    return (schema.get("properties") or {}).get(name) or {}


def _cap(schema: dict, default: int) -> int:
    return int(schema.get("maxItems") or default)


def extraction(lex: Lexicon, text: str, schema: dict, already: set[str] | None = None) -> dict:
    """One text's answer: entities not in `already` (casefolded names) up to maxItems, and the
    world relationships between listed names (touching a new one, when gleaning)."""
    ent_s, rel_s = _props(schema, "entities"), _props(schema, "relationships")
    allowed = set(_props(ent_s.get("items") or {}, "type").get("enum") or [])
    already = already or set()
    mentions = lex.find(text)
    first_surface: dict[int, str] = {}
    for surface, e in mentions:
        first_surface.setdefault(e, surface)
    abouts = {m.group("name").casefold(): m.group("fact") for m in _ABOUT.finditer(text)}
    present = set(first_surface)
    among = lex.edges_within(present)
    entities, new, seen = [], set(), set()
    for surface, e in mentions:
        key = surface.casefold()
        if key in seen or key in already or (allowed and lex.types[e] not in allowed):
            continue
        seen.add(key)
        if len(entities) >= _cap(ent_s, 5):
            continue
        entities.append({"name": surface[:80], "type": lex.types[e],
                         "description": _describe(lex, e, surface, abouts, first_surface, among[e])})
        new.add(e)
    listed = {e for s, e in mentions if s.casefold() in already} | new
    rels, done = [], set()
    for e in sorted(new):
        for s, t, k in among[e]:
            if s in listed and t in listed and s != t and (s, t, k) not in done and s in present and t in present:
                done.add((s, t, k))
                if len(rels) < _cap(rel_s, 5):
                    a, b = first_surface[s], first_surface[t]
                    rels.append({"source": a[:80], "target": b[:80], "description": RELATIONS[k][4].format(a=a, b=b)[:120],
                                 "strength": 1 + (s * 31 + t) % 10})
    return {"entities": entities, "relationships": rels}


def _describe(lex: Lexicon, e: int, surface: str, abouts: dict, first_surface: dict, edges) -> str:
    """edges: lex.edges_among(e, first_surface)."""
    fact = abouts.get(surface.casefold())
    if fact:
        return fact[:120]
    said = [RELATIONS[k][4].format(a=first_surface[s], b=first_surface[t])
            for s, t, k in edges if s in first_surface and t in first_surface]
    return "; ".join(said)[:120] or f"{lex.types[e].lower()} named in the text"


def split_user(user: str) -> tuple[list[str], dict[int, set[str]] | None]:
    """(numbered texts, or the whole message; names already found per text number when gleaning)."""
    body, found = user, None
    if GLEAN_MARK in user:
        body, rest = user.split(GLEAN_MARK, 1)
        found = {int(m.group(1)): {x.group(1).casefold() for x in _FOUND_ITEM.finditer(m.group(2))}
                 for m in _FOUND_LINE.finditer(rest)}
    parts = re.split(r"(?m)^Text \d+:\n", body)
    return ([p.strip() for p in parts[1:]] or [body.strip()]), found


def report(context: str, schema: dict) -> dict:
    lines = [ln[2:] for ln in context.splitlines() if ln.startswith("- ")]
    heads = [ln.split(" (")[0].split(":")[0] for ln in lines[:2]] or ["an empty community"]
    n = _cap(_props(schema, "findings"), 3)
    rels = [ln for ln in lines if " -> " in ln] or lines
    return {"title": ("Community around " + " and ".join(heads))[:120], "summary": " ".join(lines)[:400],
            "findings": [{"summary": ln[:160], "explanation": ln[:250]} for ln in rels[:n]],
            "rating": float(min(10, len(lines))), "rating_explanation": f"{len(lines)} items in the context"}


def summary(user: str, schema: dict) -> dict:
    text = user.split("Descriptions:", 1)[-1].strip()
    limit = int(_props(schema, "description").get("maxLength") or 400)
    return {"description": (text[:limit].rsplit(" ", 1)[0] if len(text) > limit else text) or "no description"}


def verdict(lex: Lexicon, user: str, mode: str) -> dict:
    names = re.findall(r"(?m)^Name: (.*)$", user)
    ids = [lex.entity_of(n) for n in names[:2]]
    same = mode == "oracle" and len(ids) == 2 and ids[0] is not None and ids[0] == ids[1]
    return {"same": same, "reason": "one entity in the truth" if same else "different entities"}


def minimal(schema: dict):
    t = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if t == "object":
        return {k: minimal(v) for k, v in (schema.get("properties") or {}).items() if k in (schema.get("required") or [])}
    return [] if t == "array" else False if t == "boolean" else schema.get("minimum", 0) if t in ("integer", "number") else ""


def answer_for(lex: Lexicon, body: dict, adjudicate: str = "oracle") -> tuple[str, dict | str]:
    """(kind, answer object) for one chat request."""
    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema") or {}
    messages = body.get("messages") or []
    user = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    props = schema.get("properties") or {}
    if "entities" in props and "relationships" in props:
        texts, found = split_user(user)
        return ("glean" if found is not None else "extract"), extraction(lex, texts[0], schema, (found or {}).get(1))
    if props and all(k.isdigit() for k in props):
        texts, found = split_user(user)
        out = {k: extraction(lex, texts[int(k) - 1] if int(k) <= len(texts) else "", v, (found or {}).get(int(k)))
               for k, v in props.items()}
        return ("glean" if found is not None else "extract"), out
    if "title" in props and "findings" in props:
        return "report", report(user, schema)
    if set(props) == {"description"}:
        return "summary", summary(user, schema)
    if "same" in props:
        return "adjudicate", verdict(lex, user, adjudicate)
    return "other", (minimal(schema) if schema else "ok")


def embed(lex: Lexicon, text: str, dim: int) -> list[float]:
    """A unit vector: a text-hash random part plus one fixed direction per entity named."""
    norm = " ".join(text.casefold().split())
    seed = int.from_bytes(hashlib.blake2b(norm.encode("utf-8"), digest_size=8).digest(), "little")
    v = np.random.default_rng(seed).standard_normal(dim)
    v /= np.linalg.norm(v) or 1.0
    ents = [e for _, e in lex.find(text)]
    if ents:
        topic = sum(np.random.default_rng([e, 7]).standard_normal(dim) for e in set(ents))
        v = 0.6 * v + 0.8 * topic / (np.linalg.norm(topic) or 1.0)
        v /= np.linalg.norm(v) or 1.0
    return [round(float(x), 6) for x in v]


# cl100k's pre-tokeniser starts a new piece at every space that follows a non-space character
# (none of its patterns holds a space after its first character, except runs of whitespace, which
# cannot start on a non-space), and BPE never merges across pieces: so a text's count is the sum
# of its parts' counts, split before each such space. Parts repeat (words, with their space), so
# counting them once each and remembering the count costs a dictionary look-up per word, where
# encoding every answer and prompt whole was 44% of this server's CPU at 100k documents.
# A space after a newline starts a part too when a non-space stands on each side ("x\n y": the
# newline ends its own piece, or the punctuation piece before it): the units of a packed prompt
# begin "Text 2:\n " + text. Texts with any other space after whitespace take the general split.
_PART = re.compile(r"(?<=\S)(?= )")
_SPACE_AFTER_SPACE = re.compile(r"[^\S\n] |(?<=\s)\n |\n (?!\S)")


_ASCII_SPACE_PAIRS = ("  ", "\n ", "\t ", "\r ", "\x0b ", "\x0c ")


def _maybe_space_after_space(text: str) -> bool:
    """False only where _SPACE_AFTER_SPACE cannot match: each of its matches holds a whitespace
    character then a space, and an ASCII text has only six whitespace characters (substring
    tests in C; the regex's search took a sixth of the server's time)."""
    return not text.isascii() or any(pair in text for pair in _ASCII_SPACE_PAIRS)


class TokenCounter:
    """Exact cl100k token counts (the product's tokens.count_tokens) of texts, part by part,
    with each part's count kept (up to `limit` parts, then started afresh)."""

    def __init__(self, limit: int = 2_000_000):
        from corpusgraph.tokens import get_encoding

        self.encoding, self.limit = get_encoding("cl100k_base"), limit
        self.spaced: dict[str, int] = {}  # word -> count of " " + word
        self.whole: dict[str, int] = {}  # a text's first part, or a part of the general split
        self.seen: dict[str, int] = {}  # whole texts that recur (repeated)

    def _count(self, table: dict[str, int], keys: list[str], texts) -> int:
        counts = list(map(table.get, keys))
        if None in counts:
            if len(table) > self.limit:
                table.clear()
            for i, n in enumerate(counts):
                if n is None:
                    counts[i] = table[keys[i]] = len(self.encoding.encode_ordinary(texts(keys[i])))
        return sum(counts)

    def repeated(self, text: str) -> int:
        """The count of a text that recurs whole (a system prompt: the same for every call of a
        pass), kept per text (up to 256 texts, then started afresh)."""
        n = self.seen.get(text)
        if n is None:
            if len(self.seen) >= 256:
                self.seen.clear()
            n = self.seen[text] = self(text)
        return n

    def __call__(self, text: str) -> int:
        if not _maybe_space_after_space(text) or _SPACE_AFTER_SPACE.search(text) is None:
            # Every space starts a part (the common case, one C split).
            first, *words = text.split(" ")
            return self._count(self.whole, [first], str) + self._count(self.spaced, words, lambda w: " " + w)
        return self._count(self.whole, _PART.split(text), str)


def make_app(lex: Lexicon, *, chat_latency_s: float = 0.0, chat_slots: int = 64, embed_latency_s: float = 0.0,
             embed_slots: int = 16, dim: int = 64, adjudicate: str = "oracle", log: Path | None = None) -> web.Application:
    """log: a file that gets one line per chat answer sent (the sha256 of the request body), the
    record of what was paid for: a body twice in it was answered twice."""
    served: dict[str, int] = defaultdict(int)
    _tokens = TokenCounter()
    paid = open(log, "a", buffering=1) if log is not None else None  # noqa: SIM115 (open for the app's life)
    peak = {"chat": 0, "embeddings": 0}
    busy = {"chat": 0, "embeddings": 0}
    slots = {"chat": asyncio.Semaphore(chat_slots), "embeddings": asyncio.Semaphore(embed_slots)}

    async def in_slot(kind: str, latency: float):
        async with slots[kind]:
            busy[kind] += 1
            peak[kind] = max(peak[kind], busy[kind])
            try:
                if latency > 0:
                    await asyncio.sleep(latency)
            finally:
                busy[kind] -= 1

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        await in_slot("chat", chat_latency_s)
        kind, obj = answer_for(lex, body, adjudicate)
        content = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
        served[kind] += 1
        if paid is not None:
            paid.write(hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest() + "\n")
        prompt = sum((_tokens.repeated if m.get("role") == "system" else _tokens)(m.get("content") or "") + 4
                     for m in body.get("messages") or []) + 3
        out = _tokens(content)
        return web.json_response({
            "id": f"scale-{sum(served.values())}", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out},
        })

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        if not all(isinstance(x, str) for x in inputs):
            return web.json_response({"error": {"message": "input must be strings"}}, status=400)
        await in_slot("embeddings", embed_latency_s)
        served["embeddings"] += 1
        served["embedded_texts"] += len(inputs)
        data = [{"object": "embedding", "index": i, "embedding": embed(lex, t, dim)} for i, t in enumerate(inputs)]
        n = sum(_tokens(t) for t in inputs)
        return web.json_response({"object": "list", "model": body.get("model"), "data": data,
                                  "usage": {"prompt_tokens": n, "total_tokens": n}})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"served": dict(served), "max_in_flight": peak, "in_flight": dict(busy)})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted-scale", "object": "model"}]})

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    return app


@contextlib.contextmanager
def running(truth: Path | str, *args: str):
    """This server in a child process on a free port; yields the ChildServer (base_url, get_json)."""
    with ChildServer(__file__, "--truth", str(truth), "--port", "0", *args) as server:
        yield server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--truth", required=True, help="the corpus's truth/ folder (synthetic_corpus.py)")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--chat-latency-s", type=float, default=0.0)
    p.add_argument("--chat-slots", type=int, default=64)
    p.add_argument("--embed-latency-s", type=float, default=0.0)
    p.add_argument("--embed-slots", type=int, default=16)
    p.add_argument("--dim", type=int, default=64, help="embedding dimension")
    p.add_argument("--adjudicate", choices=["oracle", "never"], default="oracle")
    p.add_argument("--log", default=None, help="file for one line per chat answer sent (sha256 of the request)")
    a = p.parse_args()
    if a.chat_slots < 1 or a.embed_slots < 1 or a.dim < 2:
        p.error("slots must be >= 1 and --dim >= 2")
    app = make_app(Lexicon(a.truth), chat_latency_s=a.chat_latency_s, chat_slots=a.chat_slots,
                   embed_latency_s=a.embed_latency_s, embed_slots=a.embed_slots, dim=a.dim, adjudicate=a.adjudicate,
                   log=Path(a.log) if a.log else None)
    run_server(serve_forever(app, a.port))


if __name__ == "__main__":
    main()
