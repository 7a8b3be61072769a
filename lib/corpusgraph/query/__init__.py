"""Query side: basic, local and global search over a built index (DESIGN.md section 6).

Names resolve on first use, so `import corpusgraph.query` loads neither FAISS nor delta-rs;
the service and the CLI pay for those only when they open an index.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["IndexStore", "QueryEngine", "Answer", "Citation", "format_answer"]

_WHERE = {
    "IndexStore": "corpusgraph.query.store",
    "QueryEngine": "corpusgraph.query.engine",
    "Answer": "corpusgraph.query.answer",
    "Citation": "corpusgraph.query.answer",
    "format_answer": "corpusgraph.query.answer",
}

if TYPE_CHECKING:  # for type checkers and IDEs only; never executed
    from corpusgraph.query.answer import Answer, Citation, format_answer
    from corpusgraph.query.engine import QueryEngine
    from corpusgraph.query.store import IndexStore


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
