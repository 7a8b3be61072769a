"""The steps after the walk: passages placed on evidence the walk cannot weigh.

The walk (graph/walk.py) spreads a passage's mass over every entity it names, so the one
document a question needs next rarely reaches the top five on the walk alone. Three steps of
local ranking (query/retrieval.py) follow named links instead: a document the question names by
title goes first (`named_passages`); a top passage is followed by the best passage of a
document it names by title (`bridge`), or of a not-too-common entity it states (`entity_bridge`).

The steps read the arrays the retriever builds once (`PassageLinks`) and the text-unit vectors,
never the retriever itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from corpusgraph.config import RetrievalSection
from corpusgraph.graph.walk import WalkGraph
from corpusgraph.query.columns import CsrMap, Rows
from corpusgraph.query.lexical import TitleIndex
from corpusgraph.query.question import Question

__all__ = ["PassageLinks", "named_passages", "bridge", "entity_bridge", "mentioned_documents"]


@dataclass(frozen=True)
class PassageLinks:
    """What the steps follow: passages by rank (`unit_ids`, `unit_index`: id -> rank), the units
    table, each document's units, the title index, the walk's graph (entities 0..n_entities-1,
    then passages), how many passages each entity is linked to, and the entity bridge's hub limit."""

    unit_ids: list[str]
    unit_index: Mapping[str, int]
    units: Rows
    units_of_doc: CsrMap
    titles: TitleIndex
    graph: WalkGraph
    n_entities: int
    passages_of: np.ndarray
    hub_passages: float


def mentioned_documents(links: PassageLinks, unit_id: str) -> list[str]:
    """Documents whose title the unit's text contains as whole words, in order of first
    mention. A title's trailing "(...)" qualifier is not required. Its own document does not
    count, nor does one whose title is part of its own document's title (a passage of "Act
    of War: Direct Action" naming its game mentions "Direct action" only by the way)."""
    unit = links.units[unit_id]
    return links.titles.titles_in(unit.get("text") or "", unit["doc_id"])


def named_passages(links: PassageLinks, vectors: Any, question: Question, w: RetrievalSection) -> list[str]:
    """For each of the first `title_seeds` documents the question names by title, its unit
    nearest the question, if that cosine reaches `title_min_score`: a question that names a
    document ("Who directed Maximum Overdrive?") is about it, however the walk ranks it."""
    if w.title_seeds <= 0:
        return []
    q = np.asarray(question.vector, dtype=np.float32).reshape(-1)
    out = []
    for doc_id in question.titles[: w.title_seeds]:
        units = links.units_of_doc.get(doc_id)
        if units:
            cos = vectors.vectors(units) @ q
            best = int(np.argmax(cos))
            if cos[best] >= w.title_min_score:
                out.append(units[best])
    return out


def bridge(links: PassageLinks, vectors: Any, ranked: list[tuple[str, float]], question_vector: np.ndarray,
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
        cands = [u for d in mentioned_documents(links, unit_id) for u in links.units_of_doc.get(d, ())
                 if u not in out]
        best = _next_hop(vectors, unit_id, cands, q, w.bridge_min_score, w.bridge_novelty)
        if best is not None:
            out[best] = score
    return list(out.items())


def _next_hop(vectors: Any, unit_id: str, cands: list[str], q: np.ndarray, floor: float,
              novelty: float) -> str | None:
    """The candidate with the highest cosine with the question less `novelty` times its cosine
    with `unit_id` (the passage that led there), among those whose cosine with the question
    reaches `floor`; None when there is none."""
    if not cands:
        return None
    cand_vectors = vectors.vectors(cands)
    cos = cand_vectors @ q
    choice = np.where(cos >= floor, cos - novelty * (cand_vectors @ vectors.vectors([unit_id])[0]), -np.inf)
    best = int(np.argmax(choice))
    return cands[best] if np.isfinite(choice[best]) else None


def entity_bridge(links: PassageLinks, vectors: Any, ranked: list[tuple[str, float]], question_vector: np.ndarray,
                  w: RetrievalSection, named: set[int] = frozenset()) -> list[tuple[str, float]]:
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
    n_ent, graph = links.n_entities, links.graph
    q = np.asarray(question_vector, dtype=np.float32).reshape(-1)
    head = ranked[:k]
    taken = {u for u, _ in head}
    hub = links.hub_passages if w.entity_bridge_max_passages is None else w.entity_bridge_max_passages
    extra: list[tuple[str, float]] = []
    for unit_id, score in head:
        node = n_ent + links.unit_index[unit_id]
        own_doc = links.units.value(unit_id, "doc_id")
        found: set[int] = set()
        for e in graph.neighbours(node):
            if e < n_ent and e not in named and links.passages_of[e] <= hub:
                linked = graph.neighbours(e)
                found.update((linked[linked >= n_ent] - n_ent).tolist())
        cands = [u for u in (links.unit_ids[i] for i in sorted(found))
                 if u not in taken and links.units.value(u, "doc_id") != own_doc]
        best = _next_hop(vectors, unit_id, cands, q, w.entity_bridge_min_score, w.bridge_novelty)
        if best is not None:
            taken.add(best)
            extra.append((best, score))
    return head + extra + [(u, s) for u, s in ranked[k:] if u not in taken]
