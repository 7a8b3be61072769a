"""Sphinx configuration of the documentation site (`make docs`; tests/unit/test_docs.py builds it
with warnings as errors). Pages are Markdown (MyST); the reference pages are generated here, from
the code, before every build (refgen.py)."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent / "lib"), str(DOCS.parent), str(DOCS)]

import refgen  # noqa: E402

refgen.write_all(DOCS)

project = "corpusgraph"
author = "the corpusgraph authors"
copyright = "2026, the corpusgraph authors"  # noqa: A001 (Sphinx's own name)
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_extra"]
html_theme = "furo"
html_title = "corpusgraph"
# openapi.json, beside the API page.
html_extra_path = ["_extra"]
# Anchors for headings down to ###, so pages can link to each other's sections.
myst_heading_anchors = 3
# No network at build time: nothing is fetched (no intersphinx).
