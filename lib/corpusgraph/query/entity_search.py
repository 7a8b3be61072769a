"""Finding entities by name as someone types it: the web page's search box and the MCP tool.

Over a store's normalised titles and aliases (`IndexStore.names`, so a restricted view finds only
the entities it holds): names equal to what was typed first, then names starting with it, then
names whose words start with each typed word ("voss" finds "Mara Voss", "ma vo" too); within a
tier the best connected entities first (degree in the store), then by title and id. The sorted
name and word lists are built once per store, on first use, under a lock, as the retriever is.
"""

from __future__ import annotations

import threading
import weakref
from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING

from corpusgraph.text import normalise_name

if TYPE_CHECKING:
    from corpusgraph.query.store import IndexStore

__all__ = ["EntityMatch", "search_entities", "MAX_SCAN"]

# Entries read past the first match of a prefix, so a one-letter query over a million names costs
# a bounded scan (its best matches by degree may then be missed; typing more finds them).
MAX_SCAN = 20_000
_TIERS = ("exact", "prefix", "words")


@dataclass(frozen=True)
class EntityMatch:
    entity_id: str
    matched: str  # the normalised name that matched (a title or an alias)
    how: str  # exact, prefix or words


class _NameIndex:
    def __init__(self, store: IndexStore) -> None:
        self.keys = sorted(store.names)
        self.words = sorted({(w, key) for key in self.keys for w in key.split()})
        self.names = store.names


_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _index(store: IndexStore) -> _NameIndex:
    with _LOCK:
        built = _BUILT.get(store)
        if built is None:
            built = _BUILT[store] = _NameIndex(store)
        return built


def _prefixed(items: list, prefix, key=lambda x: x):
    start = bisect_left(items, prefix)
    for item in items[start: start + MAX_SCAN]:
        if not key(item).startswith(key(prefix)):
            break
        yield item


def search_entities(store: IndexStore, text: str, limit: int = 10) -> list[EntityMatch]:
    """Entities whose names match `text`, best first, at most `limit`."""
    query = normalise_name(text)
    if not query or limit <= 0:
        return []
    index = _index(store)
    tiers: dict[str, dict[str, str]] = {t: {} for t in _TIERS}  # tier -> entity id -> matched name
    for eid in index.names.get(query, ()):
        tiers["exact"].setdefault(eid, query)
    for key in _prefixed(index.keys, query):
        for eid in index.names[key]:
            tiers["prefix"].setdefault(eid, key)
    tokens = query.split()
    for _, key in _prefixed(index.words, (tokens[0], ""), key=lambda pair: pair[0]):
        words = key.split()
        if all(any(w.startswith(t) for w in words) for t in tokens):
            for eid in index.names[key]:
                tiers["words"].setdefault(eid, key)
    seen: set[str] = set()
    out: list[EntityMatch] = []
    for tier in _TIERS:
        found = [e for e in tiers[tier] if e not in seen and e in store.entities]

        def rank(eid: str):
            return (-store.degree(eid), store.entities.value(eid, "title") or "", eid)

        for eid in sorted(found, key=rank):
            seen.add(eid)
            out.append(EntityMatch(eid, tiers[tier][eid], tier))
            if len(out) >= limit:
                return out
    return out
