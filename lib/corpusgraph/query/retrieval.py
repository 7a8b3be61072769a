"""Graph retrieval: which text units a question needs, ranked (HippoRAG-2 style).

One graph holds entity nodes and passage (text unit) nodes: entity-entity edges from
`relationships`, entity-passage edges from each entity's `unit_ids`. A question puts restart
mass on two kinds of nodes:

- entities it names (exact title or alias matches, parsed once: query/question.py) and, when
  `entity_seeds` > 0, entities whose vectors are nearest the question's; each weighted by its
  specificity (1 / the number of passages it occurs in: a name found in three passages says
  more than one found in three hundred);
- passages that write an identifier the question writes (a word of letters and digits: trailer
  "R-77", booking "HQ-52910") where no entity it names holds it: extraction often makes no entity
  of such codes, dense vectors see them as a few word pieces and BM25 as separate words, yet they
  name one thing. Each is a seed as an entity is (specificity, support, trust), its restart mass
  spread over the passages writing it;
- passages, by a hybrid passage score: dense cosine (the text-unit FAISS index) fused with
  BM25 over the unit text and its document title, both min-max scaled over their candidates.
  Passage restart mass is at least `passage_weight` of the total (more where the entity seeds
  are poorly supported, see below), so passages steer the walk.

A unit is also linked to the entity named by its document's title (Wikipedia-style texts say
"it" where the title is meant). Personalised PageRank over that graph (sparse power iteration
in numpy) then scores every passage; multi-hop evidence that shares an entity with a seed passage rises, which plain
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
support; hubs, such as the one person in every chat log, give way to the passage scores) and as
far as their links reach the passages whose text names them (link coverage), and
the best passages by the passage score keep their places against the walk unless its choice is
stronger by a margin that shrinks as the seeds' support grows (the dense guarantee). Measured
recall on the dev sets, with the ablation of each step: tests/benchmarks/results/retrieval.json.

`GraphRetriever` builds the graph, BM25 and title index once per `IndexStore` (query/loaded.py's
LoadedIndex keeps it); a question costs a handful of sparse products over the edge list. The walk itself is
graph/walk.py's: above `max_walk_nodes` nodes it runs on the neighbourhood of the restart nodes
only (at most `walk_hops` hops). With damping 0.5 the mass `walk_hops` = 3 hops out is an eighth
of the restart mass and ranking near the seeds is what decides the top passages; it makes a
question's cost independent of the index size (tests/benchmarks/test_query_latency.py measures
it at 1M entities). BM25 and the titles are query/lexical.py's, the steps after the walk
query/hops.py's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from corpusgraph.config import RetrievalSection
from corpusgraph.graph.walk import WalkGraph
from corpusgraph.query import hops
from corpusgraph.query.columns import CsrMap
from corpusgraph.query.adaptive import entity_share, guarantee_margin, keep_dense, link_coverage, seed_support
from corpusgraph.query.lexical import Bm25, TitleIndex, identifiers
from corpusgraph.query.question import Question
from corpusgraph.query.store import IndexStore
from corpusgraph.text import clean_name, normalise_name, squashed

__all__ = ["GraphRetriever", "rank_units"]

# The most passages `GraphRetriever.mentions` reads to tell a name from its words apart; a cost
# bound (a name in 100,000 passages costs the same as one in 64), not a ranking setting.
MENTION_CHECKS = 64


def _minmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)


class _Ranks(Mapping):
    """id -> its place in a sorted id list, through the store table's positions (no second dict)."""

    def __init__(self, rows, rank_of_position: np.ndarray, ids: list[str]):
        self._rows, self._rank, self._ids = rows, rank_of_position, ids

    def __getitem__(self, key: str) -> int:
        i = self._rows.position(key)
        if i is None:
            raise KeyError(key)
        return int(self._rank[i])

    def get(self, key, default=None):
        i = self._rows.position(key)
        return default if i is None else int(self._rank[i])

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __iter__(self):
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def _sorted_ids(rows) -> tuple[list[str], np.ndarray, np.ndarray, _Ranks]:
    """A table's ids sorted, the row position of each rank, the rank of each row position, and
    the id -> rank mapping."""
    import pyarrow.compute as pc

    order = np.asarray(pc.sort_indices(rows.column(rows.key)).to_numpy(), dtype=np.int64) if len(rows) \
        else np.zeros(0, dtype=np.int64)
    ids = [rows.ids[i] for i in order.tolist()]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return ids, order, rank, _Ranks(rows, rank, ids)


class GraphRetriever:
    """The passage/entity graph, BM25 and id maps of one store, built once.

    Built from the store's columns and integer positions (columns.py), not row by row, so a
    million-document store builds it without a Python object per edge."""

    def __init__(self, store: IndexStore):
        self.store = store
        units, ents, docs = store.units, store.entities, store.docs
        self.unit_ids, by_rank, unit_rank, self.unit_index = _sorted_ids(units)
        self._by_rank = by_rank
        self.entity_ids, _, ent_rank, self.entity_index = _sorted_ids(ents)
        doc_by_rank = docs.positions_of(units.column("doc_id"))[by_rank]  # each unit's document, by rank
        self._doc_by_rank = doc_by_rank
        n_ent, n_unit = len(self.entity_ids), len(self.unit_ids)
        self.n = n_ent + n_unit
        # Entity-entity edges, in the relationships' order (no loops, both ends entities).
        src, dst = store.rel_ends
        ok = (src >= 0) & (dst >= 0) & (src != dst)
        rel_a, rel_b = ent_rank[src[ok]], ent_rank[dst[ok]]
        rel_w = store.relationships.numpy("weight", 1.0)[ok]
        # Entity-passage edges: each entity's own units, once each, by entity then unit.
        owners, members = ents.list_positions("unit_ids", units)
        keep = members >= 0
        linked = np.unique(ent_rank[owners[keep]] * max(n_unit, 1) + unit_rank[members[keep]])
        own_e, own_u = linked // max(n_unit, 1), linked % max(n_unit, 1)
        self.passages_of = np.bincount(own_e, minlength=n_ent).astype(np.float64)
        # A document's title names what its text is about, even where the text says "it": a unit
        # is also linked to the entity whose name is its document's title, when one was extracted.
        title_e, title_u = self._title_links(store, doc_by_rank, ent_rank, linked, n_unit)
        np.add.at(self.passages_of, title_e, 1.0)
        self.graph = WalkGraph(
            self.n,
            np.concatenate([rel_a, own_e, title_e]),
            np.concatenate([rel_b, n_ent + own_u, n_ent + title_u]),
            np.concatenate([rel_w, np.ones(len(own_e) + len(title_e))]),
        )
        # Above this many passages an entity is a hub for the entity bridge (unless configured).
        self.hub_passages = math.sqrt(max(n_unit, 1))
        self.bm25 = Bm25(self._unit_texts(store, by_rank, doc_by_rank), n_unit)
        self._mentions = np.full(n_ent, -1, dtype=np.int64)  # passages naming each entity (`mentions`), -1: not yet
        # The bridge steps (query/hops.py): documents by title, and each document's units.
        self.titles = TitleIndex(docs)
        self.units_of_doc = CsrMap(docs, doc_by_rank, by_rank, units)
        self.links = hops.PassageLinks(self.unit_ids, self.unit_index, units, self.units_of_doc, self.titles,
                                       self.graph, n_ent, self.passages_of, self.hub_passages)

    @staticmethod
    def _title_links(store: IndexStore, doc_by_rank: np.ndarray, ent_rank: np.ndarray, linked: np.ndarray,
                     n_unit: int) -> tuple[np.ndarray, np.ndarray]:
        """(entity rank, unit rank) of each title link not already an own-unit link, by unit rank
        then the entity's order among the title's names; `doc_by_rank`: each unit's document
        position, in unit rank order (-1: none)."""
        docs = store.docs
        doc_owner: list[int] = []
        doc_entity: list[int] = []
        for d, title in enumerate(docs.column("title").to_pylist()):
            for eid in store.names.get(normalise_name(clean_name(title)), ()) if title else ():
                e = store.entities.position(eid)
                if e is not None:
                    doc_owner.append(d), doc_entity.append(int(ent_rank[e]))
        if not doc_owner:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        per_doc = CsrMap(docs, np.asarray(doc_owner), np.asarray(doc_entity), store.entities)
        has = doc_by_rank >= 0
        d = np.maximum(doc_by_rank, 0)
        counts = np.where(has, per_doc.indptr[d + 1] - per_doc.indptr[d], 0)
        u = np.repeat(np.arange(len(d), dtype=np.int64), counts)
        starts = np.repeat(per_doc.indptr[d], counts)
        offsets = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        e = per_doc.members[starts + offsets]
        fresh = ~np.isin(e * max(n_unit, 1) + u, linked)
        return e[fresh], u[fresh]

    @staticmethod
    def _unit_texts(store: IndexStore, by_rank: np.ndarray, doc_by_rank: np.ndarray):
        """Each unit's document title and text, in rank order (`by_rank`: the unit positions,
        `doc_by_rank`: their documents' positions), a batch at a time."""
        titles = store.docs.column("title")
        text = store.units.column("text")
        for start in range(0, len(by_rank), 50_000):
            part = by_rank[start: start + 50_000]
            d = doc_by_rank[start: start + 50_000]
            doc_titles = titles.take(np.maximum(d, 0)).to_pylist() if len(titles) else [None] * len(part)
            for t, title, has in zip(text.take(part).to_pylist(), doc_titles, (d >= 0).tolist()):
                yield f"{(title if has else None) or ''}\n{t or ''}"

    def mentions(self, e: int) -> int:
        """About how many passages name entity `e` in their text (or their document's title):
        those holding every word of its name, spaced or run together (BM25's postings,
        `Bm25.rows_with_name`), less those where the words are not the name itself (its letters
        and digits in a row, case, spaces and punctuation aside), judged on at most
        MENTION_CHECKS of them spread evenly and scaled up; candidates no more than its links
        are counted unread. 0 for a name without a word. Kept per entity: the index does not
        change under a retriever."""
        known = int(self._mentions[e])
        if known >= 0:
            return known
        name = self.store.entities.value(self.entity_ids[e], "title") or ""
        rows = self.bm25.rows_with_name(name)
        count = 0 if rows is None else len(rows)
        # No more candidates than links: the links cover them all whatever reading them would
        # say (`link_coverage` is 1), so they are counted unread.
        if count > self.passages_of[e]:
            checked = rows[np.unique(np.linspace(0, len(rows) - 1, min(len(rows), MENTION_CHECKS)).astype(np.int64))]
            texts = self._unit_texts(self.store, self._by_rank[checked], self._doc_by_rank[checked])
            key = squashed(name)
            found = sum(1 for t in texts if key in squashed(t))
            count = round(len(rows) * found / len(checked))
        self._mentions[e] = count
        return count

    def passage_scores(self, question: Question, w: RetrievalSection) -> dict[int, float]:
        """Hybrid dense + BM25 score of the candidate passages (unit index -> score in [0, 1])."""
        q = np.asarray(question.vector, dtype=np.float32).reshape(1, -1)
        dense = {self.unit_index[u]: s for u, s in self.store.vectors("text_unit").search(q, w.candidates)[0]
                 if u in self.unit_index}
        bm = self.bm25.scores(question.text)
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

    def named_entities(self, question: Question) -> set[int]:
        """Indexes of the entities the question names."""
        return {self.entity_index[e] for e in question.named if e in self.entity_index}

    def entity_seeds(self, question: Question, w: RetrievalSection) -> dict[int, float]:
        """Entity index -> seed weight: entities the question names 1.0, nearest vectors their
        cosine; each scaled by specificity (1 / passages it occurs in)."""
        seeds: dict[int, float] = dict.fromkeys(self.named_entities(question), 1.0)
        if w.entity_seeds > 0 and len(self.entity_ids):
            q = np.asarray(question.vector, dtype=np.float32).reshape(1, -1)
            hits = self.store.vectors("entity").search(q, w.entity_seeds)[0]
            best = max((score for _, score in hits), default=0.0)
            for eid, score in hits:
                i = self.entity_index.get(eid)
                # Only near-best hits: a weak match of a rare entity would otherwise win on specificity.
                if i is not None and score > 0 and score >= w.entity_seed_ratio * best:
                    seeds[i] = max(seeds.get(i, 0.0), float(score))
        return {i: s / max(self.passages_of[i], 1.0) for i, s in seeds.items()}

    def identifier_passages(self, question: Question, w: RetrievalSection) -> dict[str, np.ndarray]:
        """Identifier -> indexes of the passages that write it (whole, case aside), for each
        identifier of the question (lexical.identifiers) that no entity it names already holds
        and whose words BM25 finds together in at most `candidates` passages (those are the ones
        read to see whether they write it whole: more is no longer specific, and reading them all
        would cost a question more than the rest of its ranking)."""
        names = [(self.store.entities.value(e, "title") or "").casefold() for e in question.named]
        out: dict[str, np.ndarray] = {}
        for code in identifiers(question.text):
            whole = re.compile(rf"(?<![\w-]){re.escape(code)}(?![\w-])", re.IGNORECASE)
            if any(whole.search(n) for n in names):
                continue
            rows = self.bm25.rows_with_name(code)
            if rows is None or not 0 < len(rows) <= w.candidates:
                continue
            texts = self._unit_texts(self.store, self._by_rank[rows], self._doc_by_rank[rows])
            found = np.array([r for r, t in zip(rows.tolist(), texts) if whole.search(t)], dtype=np.int64)
            if len(found):
                out[code] = found
        return out

    def rank(self, question: Question, w: RetrievalSection, limit: int,
             protected: Sequence[str] | None = None) -> list[tuple[str, float]]:
        """The `limit` best (unit_id, score) pairs for the question, best first. `protected`:
        basic search's ranking (query/hybrid.py), whose first `keep_dense` passages keep their
        places unless the graph's evidence beats them by the margin (adaptive.py); None: the
        passage score's ranking stands in for it."""
        if not self.unit_ids:
            return []
        n_ent = len(self.entity_ids)
        passages = self.passage_scores(question, w)
        if protected is not None and w.keep_dense > 0:
            # A protected passage outside the candidates (a reranker may lift one from far down)
            # still gets restart mass, the least a candidate has: the walk then scores it, and a
            # graph choice must beat that score, not an absent one.
            floor = min(passages.values(), default=1.0)
            for u in protected[: w.keep_dense]:
                i = self.unit_index.get(u)
                if i is not None and i not in passages:
                    passages[i] = floor
        seeds: dict = self.entity_seeds(question, w)
        # An identifier the question writes is a seed of its own, keyed by its text: its passages
        # stand where an entity's links do (the restart below spreads its mass over them).
        written = self.identifier_passages(question, w) if w.code_seeds else {}
        seeds.update({code: 1.0 / len(rows) for code, rows in written.items()})
        if seeds and passages and w.seed_support:
            score = np.zeros(len(self.unit_ids))
            score[list(passages)] = list(passages.values())
            support = seed_support({i: written[i] if i in written else self.passages_of_entity(i) for i in seeds},
                                   score, w.seed_support_scale)
            # Trust (the guarantee's) is how well the seeds agree with the question; the mass
            # the walk pours through their links also depends on how much of where they are
            # named those links reach (link coverage, adaptive.py).
            agreed = entity_share(seeds, support, w.passage_weight)
            trust = agreed / (1 - w.passage_weight) if w.passage_weight < 1 else 0.0
            if w.seed_coverage:
                support = {i: s if i in written else s * link_coverage(self.passages_of[i], self.mentions(i))
                           for i, s in support.items()}  # an identifier's passages are where it is written
            ent_share = entity_share(seeds, support, w.passage_weight)
        else:
            ent_share = (1 - w.passage_weight) if passages else 1.0
            trust = 1.0 if seeds else 0.0
        # The restart weights by node: entities first (0..n_ent-1), then passages.
        restart: dict[int, float] = {}
        if seeds:
            ent_total = sum(seeds.values())
            for i, s in seeds.items():
                if i in written:
                    for p in written[i].tolist():
                        restart[n_ent + p] = restart.get(n_ent + p, 0.0) + ent_share * s / ent_total / len(written[i])
                else:
                    restart[i] = ent_share * s / ent_total
        if passages:
            share = 1.0 - ent_share if seeds else 1.0
            p_total = sum(passages.values()) or 1.0
            for i, s in passages.items():
                restart[n_ent + i] = restart.get(n_ent + i, 0.0) + share * s / p_total
        if sum(restart.values()) <= 0:
            return []
        nodes, scores = self.graph.walk(np.fromiter(restart, dtype=np.int64, count=len(restart)),
                                        np.fromiter(restart.values(), dtype=np.float64, count=len(restart)),
                                        w.damping, w.iterations, w.max_walk_nodes, w.walk_hops)
        reached = (nodes >= n_ent) & (scores > 0)
        units, unit_scores = nodes[reached] - n_ent, scores[reached]
        order = np.lexsort((units, -unit_scores))[:limit]  # best first, ties by passage index
        ranked = [(self.unit_ids[i], float(v)) for i, v in zip(units[order].tolist(), unit_scores[order].tolist())]
        vectors = self.store.vectors("text_unit")
        named_units = hops.named_passages(self.links, vectors, question, w)
        if named_units:
            # Named documents first, with the top walk score; the walk's order after them.
            top = max((score for _, score in ranked), default=1.0)
            first = {u: top for u in named_units}
            ranked = list(first.items()) + [(u, score) for u, score in ranked if u not in first]
        ranked = hops.bridge(self.links, vectors, ranked, question.vector, w)
        ranked = hops.entity_bridge(self.links, vectors, ranked, question.vector, w, self.named_entities(question))
        if w.keep_dense > 0 and (passages or protected):
            # The guarantee, after every step: the walk's choices, named documents and bridged
            # passages (each carrying the score it was placed with) all face the same rule. A
            # walk on poorly supported seeds (trust near 0) needs the whole margin to move a
            # protected passage, a well supported one less.
            if protected is None:
                protected = [self.unit_ids[i] for i in sorted(passages, key=lambda i: (-passages[i], i))]
            guard = [u for u in protected if u in self.unit_index][: w.keep_dense]
            walked = dict(zip(units.tolist(), unit_scores.tolist()))
            evidence = {u: walked.get(self.unit_index[u], 0.0) for u in guard}
            ranked = keep_dense(ranked, guard, evidence, w.keep_dense, guarantee_margin(w) * (1.0 - trust))
            if w.keep_first and guard and ranked and ranked[0][0] != guard[0]:
                # The first place answers what the question's own words match best; the graph's
                # evidence is about what they do not say (the next hop), so it takes the places after.
                first = next(x for x in ranked if x[0] == guard[0])
                ranked = [first] + [x for x in ranked if x[0] != guard[0]]
        return ranked[:limit]

    def passages_of_entity(self, e: int) -> np.ndarray:
        """Unit indexes (into `unit_ids`) of the passages entity `e` is linked to."""
        linked = self.graph.neighbours(e)
        return linked[linked >= len(self.entity_ids)] - len(self.entity_ids)

    def neighbourhood_pagerank(self, reset: np.ndarray, w: RetrievalSection) -> np.ndarray:
        """The walk on the neighbourhood of the restart nodes alone, as on graphs above max_walk_nodes."""
        return self.graph.neighbourhood_pagerank(reset, w.damping, w.iterations, w.walk_hops, w.max_walk_nodes)


def rank_units(retriever: GraphRetriever, question: Question, weights: RetrievalSection, limit: int,
               protected: Sequence[str] | None = None) -> list[str]:
    """Unit ids for the question's context, best first (at most `limit`); `protected`: basic
    search's ranking, whose top places the ranking keeps unless the graph beats them by the margin."""
    return [u for u, _ in retriever.rank(question, weights, limit, protected)]
