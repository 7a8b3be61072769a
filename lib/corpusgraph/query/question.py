"""A question parsed once: its text, its vector, and the entities and documents it names.

The router, local search (its seeds, its ranking, its coverage facts) and each DRIFT follow-up
read the same parse instead of matching the question's names again at every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from corpusgraph.query.lexical import TitleIndex
    from corpusgraph.query.store import IndexStore

__all__ = ["Question", "parse_question"]


@dataclass(frozen=True, eq=False)
class Question:
    text: str
    vector: np.ndarray | None = None  # the embedder's vector; None for global search, which needs none
    named: tuple[str, ...] = ()  # entity ids whose title or alias the text names, in order of mention
    titles: tuple[str, ...] = ()  # document ids whose title the text names, in order of mention


def parse_question(store: IndexStore, text: str, vector: np.ndarray | None = None, *,
                   named: Sequence[str] | None = None, titles: TitleIndex | None = None) -> Question:
    """`text` with the entities it names (`IndexStore.match_names`, unless `named` is given) and,
    where a title index is given, the documents it names by title (local ranking's first step)."""
    return Question(
        text=text,
        vector=vector,
        named=tuple(store.match_names(text) if named is None else named),
        titles=tuple(titles.titles_in(text)) if titles is not None else (),
    )
