"""The scale benchmark's synthetic corpus generator and scripted server (tests/benchmarks)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.support import scale_server
from tests.support import synthetic_corpus
from tests.conftest import REPO

N_DOCS = 300


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    manifest = synthetic_corpus.generate(out, N_DOCS, seed=3, shard_docs=100, jsonl=True)
    docs = pq.read_table(out / "parquet").to_pylist()
    ents = pq.read_table(out / "truth" / "entities.parquet").to_pylist()
    rels = pq.read_table(out / "truth" / "relationships.parquet").to_pylist()
    shards = sorted(str(p) for p in (out / "truth").glob("statements-*.parquet"))
    statements = pq.ParquetDataset(shards).read().to_pylist()
    return {"out": out, "manifest": manifest, "docs": docs, "ents": ents, "rels": rels, "statements": statements}


@pytest.fixture(scope="module")
def lex(corpus):
    return scale_server.Lexicon(corpus["out"] / "truth")


def test_columns_shards_and_domains(corpus):
    out, docs = corpus["out"], corpus["docs"]
    assert len(docs) == N_DOCS and len({d["id"] for d in docs}) == N_DOCS
    assert sorted(p.name for p in (out / "parquet").iterdir()) == ["docs-00000.parquet", "docs-00001.parquet",
                                                                   "docs-00002.parquet"]
    assert set(docs[0]) == {"id", "title", "text", "access_domain"}
    domains = Counter(d["access_domain"] for d in docs)
    assert set(domains) <= set(synthetic_corpus.DOMAINS) and len(domains) >= 3
    jsonl = [json.loads(line) for p in sorted((out / "jsonl").iterdir()) for line in p.read_text().splitlines()]
    assert jsonl == docs


def test_ingest_reads_id_title_and_domain(corpus):
    from corpusgraph.config import IngestSection
    from corpusgraph.stages.ingest.files import parse_file

    path = corpus["out"] / "parquet" / "docs-00000.parquet"
    data = path.read_bytes()
    rows = parse_file(str(path), data, len(data), IngestSection(access_domain="nobody"))
    first = corpus["docs"][0]
    assert [r["outcome"] for r in rows] == ["document"] * 100
    assert rows[0]["source_uri"].endswith("#" + first["id"])
    assert rows[0]["access_domain"] == first["access_domain"] and rows[0]["title"] == first["title"]


def test_same_seed_same_corpus_other_seed_other(corpus, tmp_path):
    again = synthetic_corpus.generate(tmp_path / "a", N_DOCS, seed=3, shard_docs=100)
    other = synthetic_corpus.generate(tmp_path / "b", N_DOCS, seed=4, shard_docs=100)
    assert pq.read_table(tmp_path / "a" / "parquet").to_pylist() == corpus["docs"]
    assert pq.read_table(tmp_path / "b" / "parquet").column("text").to_pylist() != [d["text"] for d in corpus["docs"]]
    assert again["totals"] == corpus["manifest"]["totals"] and other["totals"] != again["totals"]


def test_lengths_spread_between_50_and_3000_tokens(tmp_path):
    from corpusgraph.tokens import count_tokens

    synthetic_corpus.generate(tmp_path, 1500, seed=5, shard_docs=1500)
    n = np.array([count_tokens(t) for t in pq.read_table(tmp_path / "parquet").column("text").to_pylist()])
    assert n.min() >= 40 and n.max() <= 3300, (n.min(), n.max())
    p10, p90 = np.percentile(n, [10, 90])
    assert p90 / p10 >= 4, (p10, p90)  # a long tail, not one size


def test_every_statement_is_written_in_its_document(corpus):
    text = {d["id"]: d["text"] for d in corpus["docs"]}
    forms = [e["forms"] for e in corpus["ents"]]
    rels = corpus["rels"]
    for s in corpus["statements"]:
        a = forms[s["a"]][s["a_form"]]
        assert a in text[s["doc"]]
        if s["rel"] >= 0:
            r = rels[s["rel"]]
            assert (r["source"], r["target"]) == (s["a"], s["b"])
            b = forms[s["b"]][s["b_form"]]
            templates = synthetic_corpus.RELATIONS[[x[0] for x in synthetic_corpus.RELATIONS].index(r["kind"])][3]
            assert any(t.format(a=a, b=b) in text[s["doc"]] for t in templates), (a, b, r["kind"])


def test_variants_facts_joining_across_documents_and_zipf(corpus):
    st = [s for s in corpus["statements"] if s["rel"] >= 0]
    written = Counter()
    for s in corpus["statements"]:
        written[(s["a"], s["a_form"])] += 1
    forms_used = Counter(e for e, _ in written)
    assert sum(1 for e, k in forms_used.items() if k >= 2) >= 50  # entities written under several forms
    # A -> B stated in one document and B -> C in another: a fact that joins across documents.
    as_target = {(s["b"], s["doc"]) for s in st}
    joins = [s for s in st if any((s["a"], d) in as_target for d in {x["doc"] for x in st} - {s["doc"]})][:1]
    assert joins
    counts = Counter([s["a"] for s in corpus["statements"]] + [s["b"] for s in st])
    v = np.array(sorted(counts.values(), reverse=True), dtype=float)[:300]
    slope = np.polyfit(np.log(np.arange(1, len(v) + 1)), np.log(v), 1)[0]
    assert -1.6 < slope < -0.5, slope


def test_world_keeps_hard_negatives_apart():
    from tests.support.resolution_set import normalised

    w = synthetic_corpus.build_world(3000, seed=1)
    owner = {}
    for i, forms in enumerate(w.forms):
        for f in forms:
            assert owner.setdefault(normalised(f), i) == i  # no form names two entities
    names = set(w.names)
    arms = [n for n in names if any(n.endswith(" " + r) and n.rsplit(" ", 1)[0] in names for r in ("EMEA", "Labs", "Europe"))]
    assert arms  # a company and its regional arm, both entities
    assert {"PERSON", "ORGANIZATION", "LOCATION", "PRODUCT", "EVENT"} <= set(w.types)


def test_lexicon_finds_what_the_truth_says(corpus, lex):
    forms = [e["forms"] for e in corpus["ents"]]
    doc = corpus["docs"][7]
    found = {e for _, e in lex.find(doc["text"])}
    stated = {s["a"] for s in corpus["statements"] if s["doc"] == doc["id"]} | \
             {s["b"] for s in corpus["statements"] if s["doc"] == doc["id"] and s["b"] >= 0}
    assert stated <= found
    assert all(any(f in doc["text"] for f in forms[e]) for e in found)


def test_edges_among_are_the_world_edges_between_the_named_in_table_order(corpus, lex):
    from tests.support.synthetic_corpus import RELATIONS

    kinds = {r[0]: i for i, r in enumerate(RELATIONS)}
    rels = corpus["rels"]
    busiest = max({r["source"] for r in rels}, key=lambda e: sum(e in (r["source"], r["target"]) for r in rels))
    partners = [r["target"] if r["source"] == busiest else r["source"] for r in rels
                if busiest in (r["source"], r["target"])]
    others = set(partners[::2]) | {len(corpus["ents"]) - 1}  # every other partner, and one maybe unlinked
    scanned = [(r["source"], r["target"], kinds[r["kind"]]) for r in rels
               if {r["source"], r["target"]} <= others | {busiest} and busiest in (r["source"], r["target"])]
    assert len(scanned) >= 2
    assert lex.edges_among(busiest, others) == scanned
    assert lex.edges_among(busiest, set()) == [e for e in scanned if e[0] == e[1]]


def _pack_request(texts, section, priors=None):
    from corpusgraph.config import load_config
    from corpusgraph.llm.openai_http import request_body
    from corpusgraph.prompts import load_prompt
    from corpusgraph.stages.extract.llm import ExtractPrompts, build_pack_request

    cfg = load_config(REPO / "conf" / "local.yaml")
    prompts = ExtractPrompts(load_prompt(cfg.prompt_path(cfg.extract.prompt)),
                             load_prompt(cfg.prompt_path(cfg.extract.prompt_continue)))
    req = build_pack_request("p", texts, prompts, section, priors=priors)
    body = request_body("scripted", req)  # openai_compatible: the schema with every bound kept
    return {"messages": body["messages"], "response_format": body["response_format"]}


def test_extraction_answers_parse_and_gleaning_adds_only_new_names(corpus, lex):
    from corpusgraph.config import ExtractSection
    from corpusgraph.llm.base import ChatResult
    from corpusgraph.stages.extract.parse import split_pack_answer

    section = ExtractSection(max_entities=4, max_relationships=4)
    texts = [d["text"][:1500] for d in corpus["docs"][10:13]]
    kind, obj = scale_server.answer_for(lex, _pack_request(texts, section))
    assert kind == "extract"
    rows = split_pack_answer(ChatResult(id="p", text=json.dumps(obj)), 3, section, texts)
    assert all(r["status"] == "ok" and r["error"] is None for r in rows), [r["error"] for r in rows]
    for text, row in zip(texts, rows):
        truth = {lex.names[e] for _, e in lex.find(text)}
        assert row["entities"] and all(lex.names[lex.entity_of(e["name"])] in truth for e in row["entities"])
        assert all(e["type"] == lex.types[lex.entity_of(e["name"])] for e in row["entities"])
    assert any(r["relationships"] for r in rows)
    kind, again = scale_server.answer_for(lex, _pack_request(texts, section, priors=rows))
    assert kind == "glean"
    for k, row in enumerate(rows, start=1):
        before = {e["name"].casefold() for e in row["entities"]}
        new = {e["name"].casefold() for e in again[str(k)]["entities"]}
        assert not before & new
        written = {s.casefold() for s, _ in lex.find(texts[k - 1])}
        assert new == set(list(dict.fromkeys(s.casefold() for s, _ in lex.find(texts[k - 1])
                                               if s.casefold() not in before))[:4]) and new <= written


def test_edges_within_equals_edges_among_for_each_named_entity(corpus, lex):
    for d in corpus["docs"][:40]:
        present = {e for _, e in lex.find(d["text"])}
        among = lex.edges_within(present)
        assert set(among) == present and all(among[e] == lex.edges_among(e, present) for e in present)


def test_token_counts_by_parts_equal_whole_counts(corpus, lex):
    """The server's usage (TokenCounter, parts split where cl100k always starts a piece) equals
    counting each text whole: on random texts made of the characters that decide piece bounds,
    and on real prompts and answers, packed and gleaning."""
    import random

    from corpusgraph.config import ExtractSection
    from corpusgraph.tokens import count_tokens

    counter = scale_server.TokenCounter(limit=500)  # small: the cache is also started afresh on the way
    rng = random.Random(3)
    alphabet = [" ", " ", "  ", "\n", "\r", "\t", "\x0b", "\x0c", "\u00a0", "a", "The", ".", ",", "7", "42", "'s", "é", ":", "{", '"']
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert counter(text) == count_tokens(text), repr(text)
        assert counter.repeated(text) == count_tokens(text), repr(text)  # kept whole, once seen
    section = ExtractSection(max_entities=4, max_relationships=4)
    texts = [d["text"][:1500] for d in corpus["docs"][20:26]]
    body = _pack_request(texts, section)
    _, first = scale_server.answer_for(lex, body)
    rows = [{"entities": first[str(k)]["entities"]} for k in range(1, 7)]
    glean = _pack_request(texts, section, priors=rows)
    for text in [m["content"] for b in (body, glean) for m in b["messages"]] + [json.dumps(first, ensure_ascii=False)]:
        assert counter(text) == count_tokens(text)


def test_report_summary_and_adjudication(corpus, lex):
    from corpusgraph.config import ReportsSection, ResolveSection
    from corpusgraph.llm.base import ChatResult
    from corpusgraph.stages.reports import parse_report, report_schema
    from corpusgraph.stages.resolve.llm import adjudication_schema, parse_summary, parse_verdict, summary_schema

    ctx = "Entities:\n- Contoso (ORGANIZATION): a firm\n- Paris (LOCATION): a city\n\nRelationships:\n" \
          "- Contoso -> Paris [weight 3]: Contoso is based in Paris"
    kind, rep = scale_server.answer_for(lex, {"messages": [{"role": "user", "content": ctx}],
                                              "response_format": {"type": "json_object", "schema": report_schema(ReportsSection())}})
    parsed = parse_report(ChatResult(id="c", text=json.dumps(rep)), ReportsSection())
    assert kind == "report" and parsed["status"] == "ok" and "Contoso" in parsed["title"]
    sec = ResolveSection(max_description_chars=100)
    body = {"messages": [{"role": "user", "content": "Descriptions:\n" + "works in freight. " * 20}],
            "response_format": {"type": "json_object", "schema": summary_schema(sec)}}
    kind, summ = scale_server.answer_for(lex, body)
    summary = parse_summary(ChatResult(id="e", text=json.dumps(summ)), sec)
    # The schema carries no maxLength (llama.cpp's server dies on a long one): the parser cuts.
    assert kind == "summary" and summary["status"] == "ok" and summ["description"]
    assert 0 < len(summary["summary"]) <= 100
    ent = next(e for e in corpus["ents"] if len(e["forms"]) >= 3)
    other = next(e for e in corpus["ents"] if e["entity"] != ent["entity"])

    def ask(a, b, mode="oracle"):
        user = f"First:\nName: {a}\nType: X\n\nSecond:\nName: {b}\nType: X"
        _, v = scale_server.answer_for(lex, {"messages": [{"role": "user", "content": user}], "response_format":
                                             {"type": "json_object", "schema": adjudication_schema()}}, mode)
        return parse_verdict(ChatResult(id="a", text=json.dumps(v)))["same"]

    assert ask(ent["forms"][0], ent["forms"][2]) is True
    assert ask(ent["forms"][0], other["name"]) is False
    assert ask(ent["forms"][0], ent["forms"][2], "never") is False


def test_embeddings_are_deterministic_unit_vectors_near_by_entity(corpus, lex):
    ent = next(e for e in corpus["ents"] if e["type"] == "ORGANIZATION")
    a = np.array(scale_server.embed(lex, f"{ent['name']} is based somewhere.", 32))
    b = np.array(scale_server.embed(lex, f"Staff of {ent['name']} were told in a memo.", 32))
    c = np.array(scale_server.embed(lex, "Nothing unusual was recorded during the visit.", 32))
    assert a.shape == (32,) and abs(np.linalg.norm(a) - 1) < 1e-4
    assert np.array_equal(a, np.array(scale_server.embed(lex, f"{ent['name']}  is based   SOMEWHERE.", 32)))
    assert a @ b > 0.5 > abs(a @ c)


def _post(url, body, timeout=30):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def test_server_over_http_with_latency_and_slots(corpus):
    args = ["--chat-latency-s", "0.3", "--chat-slots", "1", "--dim", "16"]
    with scale_server.running(corpus["out"] / "truth", *args) as server:
        text = corpus["docs"][0]["text"]
        emb = _post(server.base_url + "/embeddings", {"model": "m", "input": [text, "plain words"]})
        assert [len(d["embedding"]) for d in emb["data"]] == [16, 16] and emb["usage"]["prompt_tokens"] > 0
        body = {"model": "m", "messages": [{"role": "user", "content": "Text 1:\n" + text}],
                "response_format": {"type": "json_object", "schema": {"type": "object", "properties": {
                    "entities": {"type": "array", "maxItems": 3}, "relationships": {"type": "array", "maxItems": 3}}}}}
        t0 = time.perf_counter()
        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda _: _post(server.base_url + "/chat/completions", body), range(3)))
        elapsed = time.perf_counter() - t0
        assert elapsed >= 0.85  # one slot: three requests of 0.3 s each, one after another
        first = json.loads(answers[0]["choices"][0]["message"]["content"])
        assert 1 <= len(first["entities"]) <= 3 and answers[0]["usage"]["prompt_tokens"] > 100
        stats = server.get_json("/stats")
        assert stats["served"]["extract"] == 3 and stats["max_in_flight"]["chat"] == 1
        assert stats["served"]["embedded_texts"] == 2
    assert re.match(r"http://127\.0\.0\.1:\d+/v1$", server.base_url)
