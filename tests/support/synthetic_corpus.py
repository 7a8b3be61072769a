"""A synthetic corpus of any size for the scale benchmark (issue 13), with its ground truth.

A benchmark harness, never product data. A seeded *world* of entities (people, organisations,
places, products from resolution_set.py's generator, with its name variants and hard negatives,
plus events made here) is linked by typed relationships (works for, based in, made by, held in,
...). Each document picks a focus entity by a Zipf law over the world, and states facts about it
and its neighbourhood as sentences: "J. Smith works for Contoso Traders Ltd." in one document,
"Contoso Traders is based in Rotterdam." in another, so facts join across documents. Names are
written as the canonical name or one of its variants; lengths are log-normal, clipped to 50-3,000
tokens; each document has one of several access domains.

    python -m tests.support.synthetic_corpus --documents 100000 --out work/scale/corpus-100k

Layout under the output folder:
  parquet/docs-NNNNN.parquet  id, title, text, access_domain (what ingest reads; zstd)
  jsonl/docs-NNNNN.jsonl      the same rows, when asked for (small sizes)
  truth/entities.parquet      entity (int), label, name, type, forms (name first, then variants),
                              facts, weight (the Zipf popularity)
  truth/relationships.parquet rel (int), source, target (entity ints), kind, sentence (its plain form)
  truth/statements-NNNNN.parquet  doc id, rel (-1 for an entity description), a, a_form, b, b_form
  manifest.json               parameters, counts, seconds

Everything is vectorised with numpy per shard; a shard is written and dropped before the next,
so memory stays at one shard plus the world. Shards draw from their own seeded generators, so a
shard's content depends only on (seed, shard), whatever the shard order or worker count.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.resolution_set import _entities, normalised, scale_vocab

DOMAINS = ("public", "finance", "legal", "operations")
DOMAIN_P = (0.55, 0.2, 0.15, 0.1)
EVENT_KIND = ["Trade Fair", "Logistics Forum", "Energy Summit", "Film Festival", "Marathon", "Tech Conference",
              "Book Fair", "Air Show", "Design Week", "Food Festival"]
# kind: (name, source type, target type, templates, plain form). {a} is the source, {b} the target.
RELATIONS = [
    ("works_for", "PERSON", "ORGANIZATION", ["{a} works for {b}.", "{a} joined {b} as a senior manager.",
                                             "{a} has been employed by {b} for several years."], "{a} works for {b}"),
    ("lives_in", "PERSON", "LOCATION", ["{a} lives in {b}.", "{a} moved to {b} last year."], "{a} lives in {b}"),
    ("attended", "PERSON", "EVENT", ["{a} attended the {b}.", "{a} gave a talk at the {b}."], "{a} attended {b}"),
    ("based_in", "ORGANIZATION", "LOCATION", ["{a} is based in {b}.", "{a} has its headquarters in {b}."],
     "{a} is based in {b}"),
    ("sponsored", "ORGANIZATION", "EVENT", ["{a} sponsored the {b}.", "{a} paid for the stands at the {b}."],
     "{a} sponsored {b}"),
    ("held_in", "EVENT", "LOCATION", ["The {a} took place in {b}.", "The {a} was held in {b}."], "{a} was held in {b}"),
    ("made_by", "PRODUCT", "ORGANIZATION", ["The {a} is made by {b}.", "{b} builds the {a}."], "{a} is made by {b}"),
    ("sold_in", "PRODUCT", "LOCATION", ["The {a} is sold in {b}.", "Shops in {b} stock the {a}."], "{a} is sold in {b}"),
    ("near", "LOCATION", "LOCATION", ["{a} lies near {b}.", "Trains run from {a} to {b} every hour."],
     "{a} lies near {b}"),
    ("arm_of", "ORGANIZATION", "ORGANIZATION", ["{a} is the regional arm of {b}."], "{a} is the regional arm of {b}"),
    ("sibling_of", "PERSON", "PERSON", ["{a} is a sibling of {b}."], "{a} is a sibling of {b}"),
]
# How many out-edges of each kind an entity of the source type gets: (kind, probability of one).
OUT_EDGES = {"PERSON": [(0, 1.0), (1, 0.8), (2, 0.3)], "ORGANIZATION": [(3, 1.0), (4, 0.2)],
             "EVENT": [(5, 1.0)], "PRODUCT": [(6, 1.0), (7, 0.4)], "LOCATION": [(8, 1.0)]}
DESCRIPTION = "About {a}: {fact}."
# Lower-case filler (one capitalised word at most, the first): no name-like runs in it.
FILLER = [
    "Figures for the quarter were published on schedule.", "The report was reviewed by the committee.",
    "Several questions remained open at the end of the meeting.", "Prices rose slightly over the period.",
    "Most of the work was finished before the deadline.", "A further review is planned for next year.",
    "The numbers were broadly in line with expectations.", "Local press covered the story in some detail.",
    "Demand was weaker than in the previous season.", "The plans were discussed at length by the board.",
    "Staff were told about the changes in a short memo.", "Nothing unusual was recorded during the visit.",
    "Observers noted a steady increase in traffic.", "The budget was approved after a brief debate.",
    "Costs were kept under control for most of the year.", "Some of the older equipment was replaced.",
    "The weather caused minor delays in the autumn.", "A small team handled the day to day operations.",
    "Feedback from customers was mostly positive.", "The agreement runs for an initial term of three years.",
    "Shipments were checked twice before they left.", "The new schedule takes effect next month.",
    "Records of the talks were kept for later reference.", "Interest in the programme grew steadily.",
    "It was the third such meeting this year.", "Officials declined to comment on the details.",
]
TOKENS_PER_SENTENCE = 12.0  # about what a sentence above is in cl100k tokens with a name or two
FACT_SHARE = 0.45  # of a document's sentences; the rest is filler


@dataclass
class World:
    labels: list[str]
    names: list[str]
    types: list[str]
    forms: list[list[str]]  # forms[i][0] is the canonical name
    facts: list[list[str]]
    weight: np.ndarray  # Zipf popularity, sums to 1
    rel_src: np.ndarray
    rel_dst: np.ndarray
    rel_kind: np.ndarray

    def __len__(self) -> int:
        return len(self.names)


def _filler_words() -> set[str]:
    text = " ".join(FILLER + [t for r in RELATIONS for t in r[3]] + [DESCRIPTION])
    return {w.casefold() for w in re.findall(r"\w+", text)}


def _events(n: int, rng: random.Random, places: list[str], taken: set[str]) -> list[tuple[str, list[str], list[str]]]:
    out = []
    tries = 0
    while len(out) < n and tries < n * 20:
        tries += 1
        city, kind, year = rng.choice(places), rng.choice(EVENT_KIND), rng.randrange(1995, 2026)
        name = f"{city} {kind} {year}"
        if normalised(name) in taken:
            continue
        variants = [f"{year} {city} {kind}", f"{city} {kind} of {year}", name.upper()]
        keep = [v for v in variants if normalised(v) not in taken]
        taken.update(normalised(x) for x in [name, *keep])
        facts = [f"{kind.lower()} held in {year}", f"event with {rng.randrange(2, 90)}00 visitors",
                 f"annual {kind.lower()} first run in {year - rng.randrange(1, 30)}"]
        out.append((name, keep, facts))
    return out


def build_world(n_entities: int, seed: int = 0, zipf_s: float = 1.0) -> World:
    """About n_entities entities with variants, typed relationships, and Zipf weights."""
    rng = random.Random(f"world{seed}")
    base = _entities(max(1, int(n_entities * 0.93)), rng, scale_vocab(seed))
    taken = {normalised(f) for e in base for f in [e.name, *e.variants]}
    places = [e.name for e in base if e.type == "LOCATION"] or ["Rotterdam"]
    events = _events(max(1, n_entities - len(base)), rng, places, taken)
    filler = _filler_words()

    def usable(form: str) -> bool:  # a lower-case form made of filler words would match filler
        return form != form.lower() or not all(w.casefold() in filler for w in re.findall(r"\w+", form))

    labels = [e.label for e in base] + [f"evt{i}" for i in range(len(events))]
    names = [e.name for e in base] + [n for n, _, _ in events]
    types = [e.type for e in base] + ["EVENT"] * len(events)
    forms = [[e.name] + [v for v in e.variants if usable(v)] for e in base] + [[n, *v] for n, v, _ in events]
    facts = [list(e.facts) for e in base] + [f for _, _, f in events]
    n = len(names)
    nrng = np.random.default_rng([seed, 1 << 20])
    ranks = nrng.permutation(n) + 1
    weight = 1.0 / ranks.astype(np.float64) ** zipf_s
    weight /= weight.sum()
    types_arr = np.array(types)
    by_type = {t: np.flatnonzero(types_arr == t) for t in {r[2] for r in RELATIONS}}
    src, dst, kind = [], [], []
    for stype, kinds in OUT_EDGES.items():
        members = np.flatnonzero(types_arr == stype)
        for k, p in kinds:
            targets = by_type.get(RELATIONS[k][2])
            if targets is None or not len(targets) or not len(members):
                continue
            chosen = members[nrng.random(len(members)) < p]
            w = weight[targets] / weight[targets].sum()
            tgt = targets[nrng.choice(len(targets), size=len(chosen), p=w)]
            ok = tgt != chosen
            src.append(chosen[ok]), dst.append(tgt[ok]), kind.append(np.full(int(ok.sum()), k))
    index = {lab: i for i, lab in enumerate(labels)}
    for i, lab in enumerate(labels):  # the generator's families: a regional arm, a sibling
        if lab[-1] in "rs" and lab[:-1] in index:
            src.append(np.array([i])), dst.append(np.array([index[lab[:-1]]]))
            kind.append(np.array([9 if lab[-1] == "r" else 10]))
    rel_src, rel_dst, rel_kind = (np.concatenate(x).astype(np.int32) for x in (src, dst, kind))
    return World(labels, names, types, forms, facts, weight, rel_src, rel_dst, rel_kind.astype(np.int8))


class _Incidence:
    """Edges touching each entity (CSR), for drawing a focus entity's facts."""

    def __init__(self, world: World):
        ends = np.concatenate([world.rel_src, world.rel_dst])
        edges = np.concatenate([np.arange(len(world.rel_src))] * 2)
        order = np.argsort(ends, kind="stable")
        self.edges = edges[order].astype(np.int32)
        self.ptr = np.zeros(len(world) + 1, dtype=np.int64)
        np.add.at(self.ptr, ends + 1, 1)
        self.ptr = np.cumsum(self.ptr)
        self.deg = np.diff(self.ptr)

    def draw(self, ents: np.ndarray, u: np.ndarray) -> np.ndarray:
        """One incident edge of each entity (-1 where it has none)."""
        d = self.deg[ents]
        pick = self.ptr[ents] + np.minimum((u * d).astype(np.int64), np.maximum(d - 1, 0))
        return np.where(d > 0, self.edges[np.minimum(pick, len(self.edges) - 1)], -1)


def _forms(world_nforms: np.ndarray, ents: np.ndarray, rng: np.random.Generator, canonical_p: float) -> np.ndarray:
    nf = world_nforms[ents]
    variant = 1 + (rng.random(len(ents)) * np.maximum(nf - 1, 1)).astype(np.int64)
    return np.where((rng.random(len(ents)) < canonical_p) | (nf <= 1), 0, np.minimum(variant, nf - 1)).astype(np.int32)


def doc_lengths(rng: np.random.Generator, n: int, median: float = 260.0, sigma: float = 0.9) -> np.ndarray:
    """Token lengths: log-normal around `median`, clipped to 50..3000."""
    return np.clip(rng.lognormal(np.log(median), sigma, n), 50, 3000).astype(np.int64)


def shard_arrays(world: World, inc: _Incidence, seed: int, shard: int, n_docs: int, first_doc: int,
                 median_tokens: float = 260.0, canonical_p: float = 0.45) -> dict:
    """The statements of one shard's documents, as arrays (no text yet)."""
    rng = np.random.default_rng([seed, shard])
    lengths = doc_lengths(rng, n_docs, median_tokens)
    sentences = np.maximum(2, np.rint(lengths / TOKENS_PER_SENTENCE)).astype(np.int64)
    n_facts = np.maximum(1, np.rint(sentences * FACT_SHARE)).astype(np.int64)
    focus = rng.choice(len(world), size=n_docs, p=world.weight)
    doc = np.repeat(np.arange(n_docs), n_facts)
    f = focus[doc]
    t = len(doc)
    edge = inc.draw(f, rng.random(t))
    hop = rng.random(t) < 0.5  # a neighbour's edge: facts two steps from the focus
    other = np.where(world.rel_src[edge] == f, world.rel_dst[edge], world.rel_src[edge])
    edge2 = inc.draw(other, rng.random(t))
    edge = np.where(hop & (edge2 >= 0), edge2, edge)
    desc = (rng.random(t) < 0.2) | (edge < 0)
    a = np.where(desc, np.where(rng.random(t) < 0.5, f, other), world.rel_src[edge])
    a = np.where(edge < 0, f, a)
    b = np.where(desc, -1, world.rel_dst[edge])
    nforms = np.array([len(x) for x in world.forms], dtype=np.int32)
    a_form = _forms(nforms, a, rng, canonical_p)
    b_form = np.where(b >= 0, _forms(nforms, np.maximum(b, 0), rng, canonical_p), -1)
    return {"lengths": lengths, "sentences": sentences, "n_facts": n_facts, "focus": focus, "doc": doc,
            "rel": np.where(desc, -1, edge).astype(np.int32), "a": a.astype(np.int32), "a_form": a_form,
            "b": b.astype(np.int32), "b_form": b_form.astype(np.int32),
            "template": rng.integers(0, 1 << 30, t), "filler": rng.integers(0, len(FILLER), int(sentences.sum())),
            "order": rng.random(int(sentences.sum())), "domain": rng.choice(len(DOMAINS), size=n_docs, p=DOMAIN_P),
            "first_doc": first_doc}


def _texts(world: World, s: dict, seed: int) -> tuple[list[str], list[str], list[str]]:
    """(ids, titles, texts) of a shard from its arrays: the only per-sentence Python loop."""
    ids, titles, texts = [], [], []
    starts = np.concatenate([[0], np.cumsum(s["n_facts"])])
    sent_starts = np.concatenate([[0], np.cumsum(s["sentences"])])
    rel_kind = world.rel_kind
    for d in range(len(s["n_facts"])):
        no = s["first_doc"] + d
        lo, hi = starts[d], starts[d + 1]
        facts = []
        for j in range(lo, hi):
            a = world.forms[s["a"][j]][s["a_form"][j]]
            r = s["rel"][j]
            if r < 0:
                fl = world.facts[s["a"][j]] or ["entity named in the records"]
                facts.append(DESCRIPTION.format(a=a, fact=fl[s["template"][j] % len(fl)]))
            else:
                tpl = RELATIONS[rel_kind[r]][3]
                facts.append(tpl[s["template"][j] % len(tpl)].format(a=a, b=world.forms[s["b"][j]][s["b_form"][j]]))
        ns = int(s["sentences"][d])
        fill = [FILLER[k] for k in s["filler"][sent_starts[d]:sent_starts[d] + max(0, ns - len(facts))]]
        keys = s["order"][sent_starts[d]:sent_starts[d] + len(facts) + len(fill)]
        body = [x for _, x in sorted(zip(keys, facts + fill), key=lambda p: p[0])]
        paras = [" ".join(body[i:i + 6]) for i in range(0, len(body), 6)]
        ids.append(f"d{seed}-{no:08d}")
        titles.append(f"{world.names[s['focus'][d]]}: record {no}")
        texts.append(f"Record {no}.\n\n" + "\n\n".join(paras))
    return ids, titles, texts


def world_tables(world: World) -> tuple[pa.Table, pa.Table]:
    ents = pa.table({"entity": pa.array(np.arange(len(world)), pa.int32()), "label": world.labels,
                     "name": world.names, "type": world.types, "forms": world.forms, "facts": world.facts,
                     "weight": world.weight})
    plain = [RELATIONS[k][4].format(a=world.names[a], b=world.names[b])
             for a, b, k in zip(world.rel_src.tolist(), world.rel_dst.tolist(), world.rel_kind.tolist())]
    rels = pa.table({"rel": pa.array(np.arange(len(world.rel_src)), pa.int32()), "source": world.rel_src,
                     "target": world.rel_dst, "kind": [RELATIONS[k][0] for k in world.rel_kind.tolist()],
                     "sentence": plain})
    return ents, rels


def generate(out: Path | str, n_docs: int, seed: int = 0, n_entities: int | None = None, shard_docs: int = 5000,
             jsonl: bool = False, median_tokens: float = 260.0) -> dict:
    """Write the corpus and its ground truth under `out`; returns the manifest."""
    t0 = time.perf_counter()
    out = Path(out)
    for sub in ("parquet", "truth") + (("jsonl",) if jsonl else ()):
        (out / sub).mkdir(parents=True, exist_ok=True)
    n_entities = n_entities or max(200, n_docs // 2)
    world = build_world(n_entities, seed)
    inc = _Incidence(world)
    ents, rels = world_tables(world)
    pq.write_table(ents, out / "truth" / "entities.parquet", compression="zstd")
    pq.write_table(rels, out / "truth" / "relationships.parquet", compression="zstd")
    t_world = time.perf_counter() - t0
    totals = {"documents": 0, "statements": 0, "sentences": 0, "approx_tokens": 0, "chars": 0}
    domains = dict.fromkeys(DOMAINS, 0)
    for shard, first in enumerate(range(0, n_docs, shard_docs)):
        n = min(shard_docs, n_docs - first)
        s = shard_arrays(world, inc, seed, shard, n, first, median_tokens)
        ids, titles, texts = _texts(world, s, seed)
        dom = [DOMAINS[k] for k in s["domain"].tolist()]
        table = pa.table({"id": ids, "title": titles, "text": texts, "access_domain": dom})
        pq.write_table(table, out / "parquet" / f"docs-{shard:05d}.parquet", compression="zstd")
        if jsonl:
            with open(out / "jsonl" / f"docs-{shard:05d}.jsonl", "w", encoding="utf-8") as fh:
                for row in table.to_pylist():
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        doc_ids = np.array(ids, dtype=object)[s["doc"]]
        pq.write_table(pa.table({"doc": pa.array(doc_ids, pa.string()), "rel": s["rel"], "a": s["a"],
                                 "a_form": s["a_form"], "b": s["b"], "b_form": s["b_form"]}),
                       out / "truth" / f"statements-{shard:05d}.parquet", compression="zstd")
        totals["documents"] += n
        totals["statements"] += len(s["doc"])
        totals["sentences"] += int(s["sentences"].sum())
        totals["approx_tokens"] += int(s["lengths"].sum())
        totals["chars"] += sum(map(len, texts))
        for k in dom:
            domains[k] += 1
    manifest = {"documents": n_docs, "seed": seed, "n_entities": n_entities, "entities": len(world),
                "relationships": int(len(world.rel_src)),
                "shard_docs": shard_docs, "shards": -(-n_docs // shard_docs), "median_tokens": median_tokens,
                "jsonl": jsonl, "totals": totals, "domains": domains,
                "seconds": {"world": round(t_world, 2), "total": round(time.perf_counter() - t0, 2)}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def ensure(out: Path | str, n_docs: int, seed: int = 0, **kw) -> dict:
    """The corpus under `out`, generated unless a complete one with these parameters is there."""
    path = Path(out) / "manifest.json"
    if path.is_file():
        m = json.loads(path.read_text())
        if m.get("documents") == n_docs and m.get("seed") == seed and \
                all(m.get(k) == v for k, v in kw.items() if k in m):
            return m
    return generate(out, n_docs, seed, **kw)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--documents", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--entities", type=int, default=None, help="world size (default: documents / 2, at least 200)")
    p.add_argument("--shard-docs", type=int, default=5000)
    p.add_argument("--jsonl", action="store_true", help="also write JSON-lines shards")
    a = p.parse_args()
    print(json.dumps(generate(a.out, a.documents, a.seed, a.entities, a.shard_docs, a.jsonl), indent=2))


if __name__ == "__main__":
    main()
