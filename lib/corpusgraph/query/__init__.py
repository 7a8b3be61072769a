"""Query side: basic, local, global and DRIFT search over a built index.

Names resolve on first use, so `import corpusgraph.query` loads neither FAISS nor delta-rs;
the service and the CLI pay for those only when they open an index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corpusgraph.lazy import lazy_exports

__all__ = ["IndexStore", "LoadedIndex", "QueryEngine", "Answer", "Citation", "format_answer"]

_WHERE = {
    "IndexStore": "corpusgraph.query.store",
    "LoadedIndex": "corpusgraph.query.loaded",
    "QueryEngine": "corpusgraph.query.engine",
    "Answer": "corpusgraph.query.answer",
    "Citation": "corpusgraph.query.answer",
    "format_answer": "corpusgraph.query.answer",
}

if TYPE_CHECKING:  # for type checkers and IDEs only; never executed
    from corpusgraph.query.answer import Answer, Citation, format_answer
    from corpusgraph.query.engine import QueryEngine
    from corpusgraph.query.loaded import LoadedIndex
    from corpusgraph.query.store import IndexStore


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, __all__)
