"""What the query service serves and the limits it puts on callers.

The settings are plain values handed in by whoever starts the service (the `serve` command, a
test, an embedding application); nothing here reads the environment. A config file is loaded
with the `${VAR}` values the caller passes in `config_env`, or the caller passes a loaded
`Config` and the file is never read here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from corpusgraph.config import Config, load_config
from corpusgraph.query.engine import MAX_QUESTION_CHARS

__all__ = ["ServiceSettings"]

# QuerySection caps top_k_units and top_k_entities at 50; a caller's top_k above that would
# fail the section's own validation, so the service never offers more.
_TOP_K_CEILING = 50


class ServiceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    config: Config | None = Field(None, description="A loaded configuration; when set, config_path is not read.")
    config_path: str | None = Field(None, description="Config file to load at start-up (e.g. conf/local.yaml).")
    config_overrides: dict[str, str] = Field(
        default_factory=dict, description="Dotted overrides applied to config_path, as `--set` takes them."
    )
    config_env: dict[str, str] = Field(
        default_factory=dict,
        description="Values for ${VAR} in config_path. The CLI passes the process environment; "
        "nothing in the service reads it.",
    )
    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="Keys accepted as `Authorization: Bearer <key>` or `X-API-Key: <key>` on /v1/query. "
        "Empty means no authentication at all: for local use only, on 127.0.0.1, never on an "
        "interface others can reach.",
    )
    max_question_chars: int = Field(
        MAX_QUESTION_CHARS, ge=1, le=MAX_QUESTION_CHARS,
        description="Longer questions are refused with 422 (the engine's own limit is the ceiling).",
    )
    max_top_k: int = Field(
        _TOP_K_CEILING, ge=1, le=_TOP_K_CEILING,
        description="Largest `top_k` (units for basic, seed entities for local) a request may ask for.",
    )
    request_timeout_s: float = Field(
        180.0, gt=0,
        description="A question not answered within this many seconds gets 504. The bundled CPU model "
        "on 2 cores takes 10-60 s per LLM call and global search makes several.",
    )
    max_concurrent_queries: int = Field(
        4, ge=1,
        description="Questions worked on at once (worker threads); later ones wait their turn, and a "
        "wait counts against request_timeout_s.",
    )

    @model_validator(mode="after")
    def _one_config_source(self) -> "ServiceSettings":
        if self.config is None and not self.config_path:
            raise ValueError("give either config (a loaded Config) or config_path (a config file)")
        return self

    def resolve_config(self) -> Config:
        """The configuration to serve: the one given, or config_path loaded now."""
        if self.config is not None:
            return self.config
        return load_config(self.config_path, self.config_overrides, env=self.config_env)

    def key_values(self) -> list[str]:
        return [key.get_secret_value() for key in self.api_keys]
