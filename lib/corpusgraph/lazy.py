"""Lazy package exports: a name is imported from its module on first use.

Packages whose modules pull heavy dependencies (FAISS, delta-rs, FastAPI) export their public
names through this, so `import corpusgraph.query` or `import serving` stays cheap.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping, Sequence

__all__ = ["lazy_exports", "installed_version"]


def installed_version(distribution: str = "corpusgraph") -> str:
    """The installed distribution's version (pyproject.toml's, through its metadata): the package's
    __version__, `corpusgraph --version` and the service's OpenAPI version all read this one."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


def lazy_exports(package: str, where: Mapping[str, str], public: Sequence[str]) -> tuple[Callable, Callable]:
    """(__getattr__, __dir__) for a package: `where` maps each public name to its module."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        vars(sys.modules[package])[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(public))

    return __getattr__, __dir__
