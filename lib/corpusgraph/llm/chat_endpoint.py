"""Where a stage or a command sends its chat requests: one context manager for every caller.

With `llm.backend: embedded` (for the whole run, or for the stage whose section `url` is given)
the endpoint is the bundled model served on localhost, started on first use (a run with nothing
to send never pays the start-up) and stopped on exit; with any other backend `url` is None (the
clients read the section's own endpoints) and nothing is started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from corpusgraph.config import LLMSection

__all__ = ["ChatEndpoint"]


class ChatEndpoint:
    """`with ChatEndpoint(cfg.llm, log_path) as ep: ep.url()`.

    url(section) returns the base URL the OpenAI-compatible clients call for `section` (a stage's
    llm section; default the one given here), or None where the section names its own endpoints.
    `log` is told when the embedded server starts, since that takes seconds and a person watching
    should know why. `prompt_states`: the embedded server keeps earlier requests' prompt states in
    up to `llm.prompt_cache_mb` (an index run, whose gleaning calls resume from them); the query
    side's requests share no more than a system prompt with each other, so it keeps none.
    """

    def __init__(self, llm: LLMSection, log_path: str | Path, log: Callable[[str], None] | None = None,
                 prompt_states: bool = False) -> None:
        self.llm = llm
        self.log_path = Path(log_path)
        self._log = log
        self._prompt_states = prompt_states
        self._server = None

    def url(self, section: LLMSection | None = None) -> str | None:
        llm = section or self.llm
        if llm.backend != "embedded":
            return None
        if self._server is None:
            from corpusgraph.llm.server import EmbeddedServer

            if self._log is not None:
                self._log(f"starting the embedded model server ({llm.model}, CPU)")
            server = EmbeddedServer(n_ctx=llm.n_ctx, model_alias=llm.model, log_path=self.log_path,
                                    n_threads=llm.threads or None,
                                    prompt_cache_mb=llm.prompt_cache_mb if self._prompt_states else 0)
            server.start()
            self._server = server
        return self._server.base_url

    @property
    def started(self) -> bool:
        """Whether this endpoint started a model server (and so has one to stop)."""
        return self._server is not None

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> "ChatEndpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
