"""The corpusgraph query service: `create_app(config) -> FastAPI`.

Names resolve on first use, so importing `serving` (as the CLI does to offer `serve`) loads
neither FastAPI nor the query engine. This package never imports pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corpusgraph.lazy import lazy_exports

__all__ = ["create_app", "ApiKeys"]

_WHERE = {
    "create_app": "serving.app",
    "ApiKeys": "serving.keys",
}

if TYPE_CHECKING:  # for type checkers and IDEs only; never executed
    from serving.app import create_app
    from serving.keys import ApiKeys


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, __all__)
