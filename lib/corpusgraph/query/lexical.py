"""Lexical matching of a question: word tokens, BM25 over the passages, document titles named.

The two lexical signals of local ranking (query/retrieval.py): BM25 is half of the passage
score (with the dense cosine), and a document the question or a passage names by its title is
evidence the walk cannot see (query/hops.py follows it).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

__all__ = ["tokenize", "Bm25", "TitleIndex"]

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


def _core_title(title: str) -> str:
    """A title without its trailing qualifier: "In Love and War (1987 film)" -> "In Love and War"."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()


def _contains(words: tuple[str, ...], part: tuple[str, ...]) -> bool:
    """Whether `part` occurs in `words` as a contiguous run."""
    n = len(part)
    return n > 0 and any(words[i : i + n] == part for i in range(len(words) - n + 1))


class TitleIndex:
    """Documents by their title's words, for finding the titles a text names.

    Titles are looked up as whole word runs: by first word, the run lengths to try, then the
    run itself, so a common first word ("Dispatch 1" ... "Dispatch 200000") costs one lookup per
    length, not one per title."""

    def __init__(self, docs: Mapping[str, Mapping]):
        self.docs: dict[tuple[str, ...], list[str]] = defaultdict(list)
        self.lengths: dict[str, set[int]] = defaultdict(set)
        self.words: dict[str, tuple[str, ...]] = {}
        for doc_id, doc in docs.items():
            words = tuple(_TOKEN.findall(_core_title(doc.get("title") or "").casefold()))
            self.words[doc_id] = words
            if words and not all(t in _STOP for t in words):
                self.docs[words].append(doc_id)
                self.lengths[words[0]].add(len(words))

    def titles_in(self, text: str, own_doc: str | None = None) -> list[str]:
        """Documents whose (qualifier-free) title `text` contains as whole words, in order of
        first mention; `own_doc` and documents whose title lies inside its title excluded."""
        own = self.words.get(own_doc, ()) if own_doc is not None else ()
        words = _TOKEN.findall(text.casefold())
        found: dict[str, None] = {}
        for k, word in enumerate(words):
            for length in self.lengths.get(word, ()):
                title = tuple(words[k : k + length])
                if title in self.docs and not _contains(own, title):
                    for doc_id in self.docs[title]:
                        if doc_id != own_doc:
                            found.setdefault(doc_id)
        return list(found)
