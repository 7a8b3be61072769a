"""The corpusgraph query service: `create_app(settings) -> FastAPI` (DESIGN.md section 2).

Names resolve on first use, so importing `serving` (as the CLI does to offer `serve`) loads
neither FastAPI nor the query engine. This package never imports pyspark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["create_app", "ServiceSettings"]

_WHERE = {
    "create_app": "serving.app",
    "ServiceSettings": "serving.settings",
}

if TYPE_CHECKING:  # for type checkers and IDEs only; never executed
    from serving.app import create_app
    from serving.settings import ServiceSettings


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
