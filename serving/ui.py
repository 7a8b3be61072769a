"""The web page (serving/ui/): static files at serve.ui.path, under a strict Content-Security-Policy.

The files hold no corpus data, so they need no key; every piece of data the page shows comes from
the /v1 routes with the key the user types in (kept in the tab's sessionStorage only). Corpus
strings reach the page's DOM as text, never as markup, and the policy allows scripts, styles and
connections to this origin only: no inline script, no CDN.

The graph-drawing library, Cytoscape.js, is not part of the repository: `make ui-vendor` (run by
`make setup`) fetches the pinned version from the npm registry, checks its integrity hash, and puts
its one file under serving/ui/vendor/ (git-ignored; a built wheel carries it as package data).
Without it the page says so and draws no graph.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.staticfiles import StaticFiles

__all__ = ["UI_DIR", "VENDOR_FILE", "CYTOSCAPE_VERSION", "CYTOSCAPE_SHA256", "mount_ui", "vendor_ok", "CSP"]

log = logging.getLogger(__name__)

UI_DIR = Path(__file__).resolve().parent / "ui"
VENDOR_FILE = UI_DIR / "vendor" / "cytoscape.min.js"
# The pins of the Makefile's ui-vendor target: the npm tarball's integrity is checked there; this
# is the sha256 of the one file taken from it (dist/cytoscape.min.js of cytoscape 3.35.0).
CYTOSCAPE_VERSION = "3.35.0"
CYTOSCAPE_SHA256 = "71fa9ebec21a7ca2c40cff6aacc30d1f6464e363662ad4b2c197e1adc770cd94"

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def vendor_ok() -> bool:
    """Whether the pinned Cytoscape.js file is in place, byte for byte."""
    return VENDOR_FILE.is_file() and hashlib.sha256(VENDOR_FILE.read_bytes()).hexdigest() == CYTOSCAPE_SHA256


class _UiFiles(StaticFiles):
    async def get_response(self, path: str, scope):
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        # The page changes with the service's version; a stale app.js against new routes helps nobody.
        response.headers["Cache-Control"] = "no-cache"
        return response


def mount_ui(app: FastAPI, path: str) -> None:
    """The page at `path`/ and a redirect to it from `/`."""
    if not VENDOR_FILE.is_file():
        log.warning("the web page's graph library is missing (%s): run `make ui-vendor`; the page will say so",
                    VENDOR_FILE.relative_to(UI_DIR.parent.parent) if VENDOR_FILE.is_relative_to(UI_DIR.parent.parent)
                    else VENDOR_FILE)
    app.mount(path, _UiFiles(directory=UI_DIR, html=True), name="ui")

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse(f"{path}/")
