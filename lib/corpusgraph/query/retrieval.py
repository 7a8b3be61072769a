"""Graph retrieval: which text units a question needs, ranked (HippoRAG-2 style).

One graph holds entity nodes and passage (text unit) nodes: entity-entity edges from
`relationships`, entity-passage edges from each entity's `unit_ids`. A question puts restart
mass on two kinds of nodes:

- entities it names (exact title or alias matches, `IndexStore.match_names`) and, when
  `entity_seeds` > 0, entities whose vectors are nearest the question's; each weighted by its
  specificity (1 / the number of passages it occurs in: a name found in three passages says
  more than one found in three hundred);
- passages, by a hybrid passage score: dense cosine (the text-unit FAISS index) fused with
  BM25 over the unit text and its document title, both min-max scaled over their candidates.
  Passage restart mass is at least `passage_weight` of the total (more where the entity seeds
  are poorly supported, see below), so passages steer the walk.

A unit is also linked to the entity named by its document's title (Wikipedia-style texts say
"it" where the title is meant). Personalised PageRank over that graph (sparse power iteration in numpy) then scores every
passage; multi-hop evidence that shares an entity with a seed passage rises, which plain
vector search cannot do. The final ranking is the PPR score, with three steps after it:
documents the question names by title put their passage nearest the question first
(`title_seeds`); each of the top `bridge_from` passages is followed by the passage, among
those of the documents it names by title, that best answers what it leaves out (the walk alone
spreads a passage's mass over every entity it names, so the one document the question needs
next rarely made the top five); and after the top `entity_bridge_from` passages come, for each,
the best passage sharing a not-too-common entity with it that the question does not name (the
hop through an answer: Signmark's passage says Finland, the currency question needs the markka's
passage).

How much the walk counts is decided per question from the index (query/adaptive.py): entity
seeds get restart mass as far as the passages they occur in score well on the question (seed
support; hubs, such as the one person in every chat log, give way to the passage scores), and
the best passages by the passage score keep their places against the walk unless its choice is
stronger by a margin that shrinks as the seeds' support grows (the dense guarantee). Measured
recall on the dev sets, with the ablation of each step: tests/benchmarks/results/retrieval.json.

`GraphRetriever` builds the arrays once per `IndexStore` (`IndexStore.retriever` keeps it); a query
costs a handful of sparse products over the edge list. Above `max_walk_nodes` nodes the walk runs
on the neighbourhood of the restart nodes only (grown hop by hop from a CSR adjacency, at most
`walk_hops` hops and `max_walk_nodes` nodes), with transition weights still normalised by each
node's full out-weight, so mass that would leave the neighbourhood is dropped rather than bent
back in. With damping 0.5 the mass `walk_hops` = 3 hops out is an eighth of the restart mass and
ranking near the seeds is what decides the top passages; it makes a query's cost independent of
the index size (tests/benchmarks/test_query_latency.py measures it at 1M entities).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import TYPE_CHECKING, Sequence

import numpy as np

from corpusgraph.config import RetrievalSection
from corpusgraph.query.adaptive import entity_share, keep_dense, seed_support
from corpusgraph.text import clean_name, normalise_name

if TYPE_CHECKING:  # the store imports this module when it builds its retriever
    from corpusgraph.query.store import IndexStore

__all__ = ["Bm25", "tokenize", "personalized_pagerank", "GraphRetriever", "rank_units"]

_TOKEN = re.compile(r"\w+")
# Words that carry no topic: BM25 would otherwise pay them a little for every passage.
_STOP = frozenset(
    "a an and are as at be been but by did do does for from had has have he her his how i if in into is it its "
    "of on or she so than that the their them then there these they this those to was were what when where "
    "which who whom whose why will with you your".split()
)


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without stop words."""
    return [t for t in _TOKEN.findall((text or "").casefold()) if t not in _STOP]


class Bm25:
    """Okapi BM25 over a fixed list of texts, with postings as numpy arrays per term."""

    def __init__(self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.n = len(texts)
        postings: dict[str, dict[int, int]] = defaultdict(dict)
        lengths = np.zeros(self.n, dtype=np.float32)
        for i, text in enumerate(texts):
            tokens = tokenize(text)
            lengths[i] = len(tokens)
            for t in tokens:
                postings[t][i] = postings[t].get(i, 0) + 1
        self.avg_len = float(lengths.mean()) if self.n else 0.0
        norm = k1 * (1 - b + b * lengths / max(self.avg_len, 1e-9))
        self._terms: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for t, docs in postings.items():
            rows = np.fromiter(docs.keys(), dtype=np.int64, count=len(docs))
            tf = np.fromiter(docs.values(), dtype=np.float32, count=len(docs))
            idf = math.log(1 + (self.n - len(docs) + 0.5) / (len(docs) + 0.5))
            self._terms[t] = (rows, (idf * tf * (k1 + 1) / (tf + norm[rows])).astype(np.float32))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every text for the query (0 where no term matches)."""
        out = np.zeros(self.n, dtype=np.float32)
        for t in set(tokenize(query)):
            hit = self._terms.get(t)
            if hit is not None:
                out[hit[0]] += hit[1]
        return out


def personalized_pagerank(
    src: np.ndarray, dst: np.ndarray, weight: np.ndarray, n: int, reset: np.ndarray, damping: float,
    iterations: int = 30, tol: float = 1e-7, out_weight: np.ndarray | None = None,
) -> np.ndarray:
    """PPR over a directed weighted edge list (give both directions for an undirected graph).

    p = (1 - d) r + d (P^T p), P row-normalised; mass at nodes with no out-edge restarts, so
    p always sums to 1. `out_weight` (per node) normalises instead of the edges' own sums: a
    walk on part of a graph passes each node's full out-weight, so mass bound outside the part
    is dropped rather than bent back in.
    """
    r = np.asarray(reset, dtype=np.float64)
    total = r.sum()
    if total <= 0:
        return np.zeros(n)
    r = r / total
    out_w = np.bincount(src, weights=weight, minlength=n) if out_weight is None else out_weight
    step = np.divide(weight, out_w[src], out=np.zeros_like(weight, dtype=np.float64), where=out_w[src] > 0)
    dangling = out_w == 0
    p = r.copy()
    for _ in range(iterations):
        moved = np.bincount(dst, weights=p[src] * step, minlength=n)
        nxt = (1 - damping) * r + damping * (moved + p[dangling].sum() * r)
        if np.abs(nxt - p).sum() < tol:
            return nxt
        p = nxt
    return p


def _core_title(title: str) -> str:
    """A title without its trailing qualifier: "In Love and War (1987 film)" -> "In Love and War"."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()


def _contains(words: tuple[str, ...], part: tuple[str, ...]) -> bool:
    """Whether `part` occurs in `words` as a contiguous run."""
    n = len(part)
    return n > 0 and any(words[i : i + n] == part for i in range(len(words) - n + 1))


def _minmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)


class GraphRetriever:
    """The passage/entity graph, BM25 and id maps of one store, built once."""

    def __init__(self, store: IndexStore):
        self.store = store
        self.unit_ids = sorted(store.units)
        self.entity_ids = sorted(store.entities)
        self.unit_index = {u: i for i, u in enumerate(self.unit_ids)}
        self.entity_index = {e: i for i, e in enumerate(self.entity_ids)}
        n_ent = len(self.entity_ids)
        self.n = n_ent + len(self.unit_ids)
        src, dst, w = [], [], []
        for rel in store.relationships.values():
            a, b = self.entity_index.get(rel["source_id"]), self.entity_index.get(rel["target_id"])
            if a is None or b is None or a == b:
                continue
            src.append(a), dst.append(b), w.append(float(rel.get("weight") or 1.0))
        self.passages_of = np.zeros(n_ent, dtype=np.float64)
        linked: list[set[str]] = []
        for e, eid in enumerate(self.entity_ids):
            own = {u for u in store.entities[eid].get("unit_ids") or () if u in self.unit_index}
            linked.append(own)
            units = sorted(self.unit_index[u] for u in own)
            self.passages_of[e] = len(units)
            for u in units:
                src.append(e), dst.append(n_ent + u), w.append(1.0)
        # A document's title names what its text is about, even where the text says "it": a unit
        # is also linked to the entity whose name is its document's title, when one was extracted.
        for u, unit_id in enumerate(self.unit_ids):
            title = (store.docs.get(store.units[unit_id]["doc_id"]) or {}).get("title") or ""
            for eid in store.names.get(normalise_name(clean_name(title)), ()) if title else ():
                e = self.entity_index.get(eid)
                if e is not None and unit_id not in linked[e]:
                    src.append(e), dst.append(n_ent + u), w.append(1.0)
                    self.passages_of[e] += 1
        s, d = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        weight = np.asarray(w, dtype=np.float64)
        # Undirected: every edge both ways.
        self.src, self.dst = np.concatenate([s, d]), np.concatenate([d, s])
        self.weight = np.concatenate([weight, weight])
        # CSR adjacency (edges sorted by source) for the neighbourhood walk on large graphs.
        order = np.argsort(self.src, kind="stable")
        self.csr_dst, self.csr_w = self.dst[order], self.weight[order]
        self.indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.src, minlength=self.n), out=self.indptr[1:])
        self.out_w = np.bincount(self.src, weights=self.weight, minlength=self.n)
        # Above this many passages an entity is a hub for the entity bridge (unless configured).
        self.hub_passages = math.sqrt(max(len(self.unit_ids), 1))
        self.bm25 = Bm25([self._unit_text(u) for u in self.unit_ids])
        # Bridge step: the documents by title, and each document's units.
        # Titles are looked up as whole word runs: by first word, the run lengths to try, then
        # the run itself, so a common first word ("Dispatch 1" ... "Dispatch 200000") costs one
        # lookup per length, not one per title.
        self.title_docs: dict[tuple[str, ...], list[str]] = defaultdict(list)
        self.title_lengths: dict[str, set[int]] = defaultdict(set)
        self.title_words: dict[str, tuple[str, ...]] = {}
        for doc_id, doc in store.docs.items():
            words = tuple(_TOKEN.findall(_core_title(doc.get("title") or "").casefold()))
            self.title_words[doc_id] = words
            if words and not all(t in _STOP for t in words):
                self.title_docs[words].append(doc_id)
                self.title_lengths[words[0]].add(len(words))
        self.units_of_doc: dict[str, list[str]] = defaultdict(list)
        for unit_id in self.unit_ids:
            self.units_of_doc[store.units[unit_id]["doc_id"]].append(unit_id)

    def mentioned_documents(self, unit_id: str) -> list[str]:
        """Documents whose title the unit's text contains as whole words, in order of first
        mention. A title's trailing "(...)" qualifier is not required. Its own document does not
        count, nor does one whose title is part of its own document's title (a passage of "Act
        of War: Direct Action" naming its game mentions "Direct action" only by the way)."""
        unit = self.store.units[unit_id]
        return self.titles_in(unit.get("text") or "", unit["doc_id"])

    def titles_in(self, text: str, own_doc: str | None = None) -> list[str]:
        """Documents whose (qualifier-free) title `text` contains as whole words, in order of
        first mention; `own_doc` and documents whose title lies inside its title excluded."""
        own = self.title_words.get(own_doc, ()) if own_doc is not None else ()
        words = _TOKEN.findall(text.casefold())
        found: dict[str, None] = {}
        for k, word in enumerate(words):
            for length in self.title_lengths.get(word, ()):
                title = tuple(words[k : k + length])
                if title in self.title_docs and not _contains(own, title):
                    for doc_id in self.title_docs[title]:
                        if doc_id != own_doc:
                            found.setdefault(doc_id)
        return list(found)

    def named_passages(self, question: str, question_vector: np.ndarray, w: RetrievalSection) -> list[str]:
        """For each of the first `title_seeds` documents the question names by title, its unit
        nearest the question, if that cosine reaches `title_min_score`: a question that names a
        document ("Who directed Maximum Overdrive?") is about it, however the walk ranks it."""
        if w.title_seeds <= 0:
            return []
        vectors = self.store.vectors("text_unit")
        q = np.asarray(question_vector, dtype=np.float32).reshape(-1)
        out = []
        for doc_id in self.titles_in(question)[: w.title_seeds]:
            units = self.units_of_doc.get(doc_id)
            if units:
                cos = vectors.vectors(units) @ q
                best = int(np.argmax(cos))
                if cos[best] >= w.title_min_score:
                    out.append(units[best])
        return out

    def bridge(self, ranked: list[tuple[str, float]], question_vector: np.ndarray,
               w: RetrievalSection) -> list[tuple[str, float]]:
        """After each of the first `bridge_from` passages, the best passage among those of the
        documents it mentions by title: the second hop of a bridge question ("the director of
        the film shot in X") is named in the first hop's text, while the question itself may
        share few words with it. Best is the highest cosine with the question less
        `bridge_novelty` times the cosine with the passage that led there (the next hop should
        add what that passage lacks, not repeat it), among those whose cosine with the question
        reaches `bridge_min_score`. A bridged passage takes the score of the passage that led to
        it; one ranked lower moves up, one already placed above is not taken again."""
        if w.bridge_from <= 0 or not ranked:
            return ranked
        q = np.asarray(question_vector, dtype=np.float32).reshape(-1)
        out: dict[str, float] = {}
        for i, (unit_id, score) in enumerate(ranked):
            out.setdefault(unit_id, score)
            if i >= w.bridge_from:
                continue
            cands = [u for d in self.mentioned_documents(unit_id) for u in self.units_of_doc.get(d, ())
                     if u not in out]
            best = self._next_hop(unit_id, cands, q, w.bridge_min_score, w.bridge_novelty)
            if best is not None:
                out[best] = score
        return list(out.items())

    def _next_hop(self, unit_id: str, cands: list[str], q: np.ndarray, floor: float, novelty: float) -> str | None:
        """The candidate with the highest cosine with the question less `novelty` times its cosine
        with `unit_id` (the passage that led there), among those whose cosine with the question
        reaches `floor`; None when there is none."""
        if not cands:
            return None
        vectors = self.store.vectors("text_unit")
        cand_vectors = vectors.vectors(cands)
        cos = cand_vectors @ q
        choice = np.where(cos >= floor, cos - novelty * (cand_vectors @ vectors.vectors([unit_id])[0]), -np.inf)
        best = int(np.argmax(choice))
        return cands[best] if np.isfinite(choice[best]) else None

    def entity_bridge(self, ranked: list[tuple[str, float]], question_vector: np.ndarray, w: RetrievalSection,
                      named: set[int] = frozenset()) -> list[tuple[str, float]]:
        """After the first `entity_bridge_from` passages, for each of them the best passage that
        shares an entity with it: where the next hop is reached through an entity the first hop
        states rather than a title it names (Signmark's passage says Finland; the currency
        question needs the Finnish markka's passage, which mentions Finland). Entities the
        question names (`named`, entity indexes) are not followed, nor entities in more than
        `entity_bridge_max_passages` passages (a hub links everything; by default the square
        root of the number of passages, so the limit grows with the corpus). The choice is the title
        bridge's (cosine with the question less `bridge_novelty` times the cosine with the
        passage before), with its own floor `entity_bridge_min_score`: an entity link is weaker
        evidence than a title. Bridged passages go after the passages they came from, with
        their scores, and are not taken again further down; the first passages keep their
        places."""
        k = w.entity_bridge_from
        if k <= 0 or not ranked:
            return ranked
        n_ent = len(self.entity_ids)
        q = np.asarray(question_vector, dtype=np.float32).reshape(-1)
        head = ranked[:k]
        taken = {u for u, _ in head}
        hub = self.hub_passages if w.entity_bridge_max_passages is None else w.entity_bridge_max_passages
        extra: list[tuple[str, float]] = []
        for unit_id, score in head:
            node = n_ent + self.unit_index[unit_id]
            own_doc = self.store.units[unit_id]["doc_id"]
            found: set[int] = set()
            for e in self.csr_dst[self.indptr[node]: self.indptr[node + 1]]:
                if e < n_ent and e not in named and self.passages_of[e] <= hub:
                    linked = self.csr_dst[self.indptr[e]: self.indptr[e + 1]]
                    found.update((linked[linked >= n_ent] - n_ent).tolist())
            cands = [u for u in (self.unit_ids[i] for i in sorted(found))
                     if u not in taken and self.store.units[u]["doc_id"] != own_doc]
            best = self._next_hop(unit_id, cands, q, w.entity_bridge_min_score, w.bridge_novelty)
            if best is not None:
                taken.add(best)
                extra.append((best, score))
        return head + extra + [(u, s) for u, s in ranked[k:] if u not in taken]

    def _unit_text(self, unit_id: str) -> str:
        unit = self.store.units[unit_id]
        title = (self.store.docs.get(unit["doc_id"]) or {}).get("title") or ""
        return f"{title}\n{unit.get('text') or ''}"

    def passage_scores(self, question: str, question_vector: np.ndarray, w: RetrievalSection) -> dict[int, float]:
        """Hybrid dense + BM25 score of the candidate passages (unit index -> score in [0, 1])."""
        q = np.asarray(question_vector, dtype=np.float32).reshape(1, -1)
        dense = {self.unit_index[u]: s for u, s in self.store.vectors("text_unit").search(q, w.candidates)[0]
                 if u in self.unit_index}
        bm = self.bm25.scores(question)
        k = min(w.candidates, bm.size)
        top_bm = np.argpartition(-bm, k - 1)[:k] if k < bm.size else np.arange(bm.size)
        lexical = {int(i): float(bm[i]) for i in top_bm if bm[i] > 0}
        cands = sorted(set(dense) | set(lexical))
        if not cands:
            return {}
        d = _minmax(np.array([dense.get(i, min(dense.values(), default=0.0)) for i in cands]))
        lx = np.array([lexical.get(i, 0.0) for i in cands])
        lx = lx / lx.max() if lx.max() > 0 else lx
        fused = w.dense_weight * d + (1 - w.dense_weight) * lx
        return dict(zip(cands, fused.tolist()))

    def named_entities(self, question: str) -> set[int]:
        """Indexes of the entities the question names (`IndexStore.match_names`)."""
        return {self.entity_index[e] for e in self.store.match_names(question) if e in self.entity_index}

    def entity_seeds(self, question: str, question_vector: np.ndarray, w: RetrievalSection,
                     named: set[int] | None = None) -> dict[int, float]:
        """Entity index -> seed weight: named entities (`named`, found in the question when not
        given) 1.0, nearest vectors their cosine; each scaled by specificity (1 / passages it
        occurs in)."""
        seeds: dict[int, float] = dict.fromkeys(self.named_entities(question) if named is None else named, 1.0)
        if w.entity_seeds > 0 and len(self.entity_ids):
            q = np.asarray(question_vector, dtype=np.float32).reshape(1, -1)
            hits = self.store.vectors("entity").search(q, w.entity_seeds)[0]
            best = max((score for _, score in hits), default=0.0)
            for eid, score in hits:
                i = self.entity_index.get(eid)
                # Only near-best hits: a weak match of a rare entity would otherwise win on specificity.
                if i is not None and score > 0 and score >= w.entity_seed_ratio * best:
                    seeds[i] = max(seeds.get(i, 0.0), float(score))
        return {i: s / max(self.passages_of[i], 1.0) for i, s in seeds.items()}

    def rank(self, question: str, question_vector: np.ndarray, w: RetrievalSection, limit: int) -> list[tuple[str, float]]:
        """The `limit` best (unit_id, score) pairs for the question, best first."""
        if not self.unit_ids:
            return []
        n_ent = len(self.entity_ids)
        passages = self.passage_scores(question, question_vector, w)
        named_entities = self.named_entities(question)
        seeds = self.entity_seeds(question, question_vector, w, named_entities)
        reset = np.zeros(self.n)
        if seeds and passages and w.seed_support:
            score = np.zeros(len(self.unit_ids))
            score[list(passages)] = list(passages.values())
            support = seed_support({i: self.passages_of_entity(i) for i in seeds}, score, w.seed_support_scale)
            ent_share = entity_share(seeds, support, w.passage_weight)
            trust = ent_share / (1 - w.passage_weight) if w.passage_weight < 1 else 0.0
        else:
            ent_share = (1 - w.passage_weight) if passages else 1.0
            trust = 1.0 if seeds else 0.0
        if seeds:
            ent_total = sum(seeds.values())
            for i, s in seeds.items():
                reset[i] = ent_share * s / ent_total
        if passages:
            share = 1.0 - ent_share if seeds else 1.0
            p_total = sum(passages.values()) or 1.0
            for i, s in passages.items():
                reset[n_ent + i] += share * s / p_total
        if reset.sum() <= 0:
            return []
        if self.n <= w.max_walk_nodes:
            scores = personalized_pagerank(self.src, self.dst, self.weight, self.n, reset, w.damping, w.iterations)
        else:
            scores = self.neighbourhood_pagerank(reset, w)
        unit_scores = scores[n_ent:]
        order = np.argsort(-unit_scores, kind="stable")[:limit]
        ranked = [(self.unit_ids[i], float(unit_scores[i])) for i in order if unit_scores[i] > 0]
        if w.keep_dense > 0 and passages:
            # The dense guarantee against the walk; a walk on poorly supported seeds (trust near
            # 0) needs the whole margin to move a protected passage, a well supported one less.
            best = sorted(passages, key=lambda i: (-passages[i], i))[: w.keep_dense]
            dense = [self.unit_ids[i] for i in best]
            evidence = {u: float(unit_scores[self.unit_index[u]]) for u in dense}
            ranked = keep_dense(ranked, dense, evidence, w.keep_dense, w.keep_dense_margin * (1.0 - trust))
        named_units = self.named_passages(question, question_vector, w)
        if named_units:
            # Named documents first, with the top walk score; the walk's order after them.
            top = max((score for _, score in ranked), default=1.0)
            first = {u: top for u in named_units}
            ranked = list(first.items()) + [(u, score) for u, score in ranked if u not in first]
        ranked = self.bridge(ranked, question_vector, w)
        ranked = self.entity_bridge(ranked, question_vector, w, named_entities)
        return ranked[:limit]

    def passages_of_entity(self, e: int) -> np.ndarray:
        """Unit indexes (into `unit_ids`) of the passages entity `e` is linked to."""
        linked = self.csr_dst[self.indptr[e]: self.indptr[e + 1]]
        return linked[linked >= len(self.entity_ids)] - len(self.entity_ids)

    def _out_positions(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions in the CSR arrays of every out-edge of `nodes`, and each one's out-degree."""
        starts = self.indptr[nodes]
        counts = self.indptr[nodes + 1] - starts
        firsts = np.cumsum(counts) - counts
        positions = np.repeat(starts - firsts, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        return positions, counts

    def neighbourhood(self, seeds: np.ndarray, hops: int, cap: int) -> np.ndarray:
        """The seeds and the nodes within `hops` of them, grown a whole hop at a time while the
        total stays within `cap` (a hop that would pass it is not taken)."""
        inside = np.zeros(self.n, dtype=bool)
        inside[seeds] = True
        parts, frontier, total = [seeds], seeds, seeds.size
        for _ in range(hops):
            positions, _ = self._out_positions(frontier)
            found = self.csr_dst[positions]
            # Distinct new nodes, sorted, by marking them: next to a hub the raw list runs to
            # millions of ids, where np.unique's hashing took ~0.1 s a question at 100k documents.
            fresh = np.zeros(self.n, dtype=bool)
            fresh[found[~inside[found]]] = True
            found = np.flatnonzero(fresh)
            if found.size == 0 or total + found.size > cap:
                break
            inside[found] = True
            parts.append(found)
            frontier, total = found, total + found.size
        return np.concatenate(parts)

    def neighbourhood_pagerank(self, reset: np.ndarray, w: RetrievalSection) -> np.ndarray:
        """PPR restricted to the neighbourhood of the restart nodes; zero elsewhere."""
        seeds = np.flatnonzero(reset)
        nodes = self.neighbourhood(seeds, w.walk_hops, max(w.max_walk_nodes, seeds.size))
        local = np.full(self.n, -1, dtype=np.int64)
        local[nodes] = np.arange(nodes.size)
        positions, counts = self._out_positions(nodes)
        src = np.repeat(np.arange(nodes.size, dtype=np.int64), counts)
        dst = local[self.csr_dst[positions]]
        keep = dst >= 0
        out = np.zeros(self.n)
        out[nodes] = personalized_pagerank(src[keep], dst[keep], self.csr_w[positions][keep], nodes.size,
                                           reset[nodes], w.damping, w.iterations, out_weight=self.out_w[nodes])
        return out


def rank_units(store: IndexStore, question: str, question_vector: np.ndarray, weights: RetrievalSection,
               limit: int) -> list[str]:
    """Unit ids for the question's context, best first (at most `limit`)."""
    return [u for u, _ in store.retriever().rank(question, question_vector, weights, limit)]
