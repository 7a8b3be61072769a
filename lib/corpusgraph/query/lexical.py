"""Lexical matching of a question: word tokens, BM25 over the passages, document titles named.

The two lexical signals of local ranking (query/retrieval.py): BM25 is half of the passage
score (with the dense cosine), and a document the question or a passage names by its title is
evidence the walk cannot see (query/hops.py follows it).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from itertools import chain, islice
from typing import Iterable, Mapping

import numpy as np

__all__ = ["tokenize", "identifiers", "Bm25", "TitleIndex"]

_TOKEN = re.compile(r"\w+")
# Words that carry no topic: BM25 would otherwise pay them a little for every passage.
_STOP = frozenset(
    "a an and are as at be been but by did do does for from had has have he her his how i if in into is it its "
    "of on or she so than that the their them then there these they this those to was were what when where "
    "which who whom whose why will with you your".split()
)


# Bm25.rows_with_name: names of up to this many words are also looked up with neighbouring words
# run together (16 spellings at most); a cost bound, not a ranking setting.
RUN_TOGETHER_WORDS = 5


# An identifier: letters and digits in one word, parts joined by hyphens ("R-77", "HQ-52910",
# "IR-VLC-2026-014", "PS5"); an ordinal ("4th", "26th") is a number, not a name.
_IDENTIFIER = re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[^\W_]+(?:-[^\W_]+)*(?![\w-])")
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)", re.IGNORECASE)


def identifiers(text: str) -> list[str]:
    """The identifiers a text writes, each once, in order: words holding both letters and
    digits, hyphenated parts included (trailer "R-77", booking "HQ-52910"), ordinals left out.
    Word embeddings see them as a few word pieces and BM25 as separate tokens ("r", "77"), while
    to a reader they name one thing."""
    found = (m.group(0) for m in _IDENTIFIER.finditer(text or ""))
    return list(dict.fromkeys(i for i in found if not _ORDINAL.fullmatch(i)))


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without stop words."""
    return [t for t in _TOKEN.findall((text or "").casefold()) if t not in _STOP]


class Bm25:
    """Okapi BM25 over a fixed list of texts, with postings in compressed sparse row form.

    Built a batch of texts at a time: each batch's tokens are counted per (term, text) with
    numpy, so the postings of a million passages are three integer arrays, not a dict per term.
    `texts` may be any iterable when `n` says how many it yields."""

    def __init__(self, texts: Iterable[str], n: int | None = None, k1: float = 1.2, b: float = 0.75,
                 batch: int = 20_000):
        import pyarrow as pa

        self.k1, self.b = k1, b
        if n is None:
            texts = list(texts)
            n = len(texts)
        self.n = n
        vocab: dict[str, int] = {}
        lengths = np.zeros(n, dtype=np.float32)
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (term, text, tf) per batch
        it = iter(texts)
        for start in range(0, n, batch):
            tokens = [tokenize(t) for t in islice(it, batch)]
            counts = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
            lengths[start: start + len(tokens)] = counts
            if not counts.sum():
                continue
            encoded = pa.array(list(chain.from_iterable(tokens)), type=pa.string()).dictionary_encode()
            words = encoded.dictionary.to_pylist()
            to_global = np.fromiter((vocab.setdefault(w, len(vocab)) for w in words), dtype=np.int64,
                                    count=len(words))
            terms = to_global[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
            rows = np.repeat(np.arange(start, start + len(tokens), dtype=np.int64), counts)
            keys, tf = np.unique(terms * n + rows, return_counts=True)
            parts.append(((keys // n).astype(np.int32), (keys % n).astype(np.int32), tf.astype(np.float32)))
        self.avg_len = float(lengths.mean()) if self.n else 0.0
        norm = k1 * (1 - b + b * lengths / max(self.avg_len, 1e-9))
        self._vocab = vocab
        df = np.zeros(len(vocab), dtype=np.int64)
        for terms, _, _ in parts:
            df += np.bincount(terms, minlength=len(vocab))
        idf = np.array([math.log(1 + (self.n - d + 0.5) / (d + 0.5)) for d in df.tolist()], dtype=np.float64)
        self._indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(df, out=self._indptr[1:])
        self._rows = np.zeros(int(df.sum()), dtype=np.int32)
        self._scores = np.zeros(int(df.sum()), dtype=np.float32)
        filled = self._indptr[:-1].copy()  # next free slot of each term
        while parts:  # each batch's postings go to their terms' runs, texts in order
            terms, rows, tf = parts.pop(0)
            first = np.searchsorted(terms, terms, side="left")  # sorted by term within a batch
            slot = filled[terms] + (np.arange(len(terms)) - first)
            self._rows[slot] = rows
            self._scores[slot] = idf[terms].astype(np.float32) * tf * np.float32(k1 + 1) / (tf + norm[rows])
            filled += np.bincount(terms, minlength=len(vocab))

    def rows_with_all(self, text: str) -> np.ndarray | None:
        """Rows (text positions, ascending) whose tokens include every token of `text`; None
        when `text` has no token (only stop words or punctuation), empty when one is unknown."""
        terms = [self._vocab.get(t) for t in set(tokenize(text))]
        if not terms:
            return None
        if any(t is None for t in terms):
            return np.zeros(0, dtype=np.int32)
        # Each term's postings are ascending (texts in order), so the rarest term's rows are
        # looked up in the others by binary search, with no sort.
        runs = sorted((self._rows[self._indptr[t]: self._indptr[t + 1]] for t in terms), key=len)
        rows = runs[0]
        for run in runs[1:]:
            if not len(rows) or not len(run):
                return rows[:0]
            at = np.minimum(np.searchsorted(run, rows), len(run) - 1)
            rows = rows[run[at] == rows]
        return rows

    def rows_with_name(self, name: str) -> np.ndarray | None:
        """Rows that may name `name`: those holding its words, spaced as in the name or with
        neighbours run together ("ChaeSong-hwa" for "Chae Song-hwa", "LiHua" for "Li Hua", as
        chat logs and handles write names), each spelling's rows by `rows_with_all`, united. Names
        of more than RUN_TOGETHER_WORDS words are looked up as spaced only (2^(n-1) spellings).
        None when the name has no word."""
        words = tokenize(name)
        if not words:
            return None
        if len(words) > RUN_TOGETHER_WORDS:
            return self.rows_with_all(" ".join(words))
        found = [np.zeros(0, dtype=np.int32)]
        for joins in range(2 ** (len(words) - 1)):
            spelled = [words[0]]
            for i, w in enumerate(words[1:]):
                spelled[-1:] = [spelled[-1] + w] if joins >> i & 1 else [spelled[-1], w]
            found.append(self.rows_with_all(" ".join(spelled)))
        return np.unique(np.concatenate(found))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every text for the query (0 where no term matches)."""
        out = np.zeros(self.n, dtype=np.float32)
        for t in set(tokenize(query)):
            term = self._vocab.get(t)
            if term is not None:
                lo, hi = self._indptr[term], self._indptr[term + 1]
                out[self._rows[lo:hi]] += self._scores[lo:hi]
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
