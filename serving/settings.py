"""What the query service serves, who may ask, and the limits it puts on callers.

The settings are plain values handed in by whoever starts the service (the `serve` command, a
test, an embedding application); nothing here reads the environment. A config file is loaded
with the `${VAR}` values the caller passes in `config_env`, or the caller passes a loaded
`Config` and the file is never read here. Every default is the config's `serve` section's
(corpusgraph.config.ServeSection), stated once there.
"""

from __future__ import annotations

import hmac
import os
import stat
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from corpusgraph.config import Config, ServeKey, ServeSection, load_config
from corpusgraph.query.engine import MAX_QUESTION_CHARS

__all__ = ["ServiceSettings", "ServeKey", "ALL_DOMAINS", "read_key_file"]

ALL_DOMAINS = "*"
_SERVE = ServeSection()  # the defaults


def _default(name: str) -> Any:
    return getattr(_SERVE, name)


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
    api_keys: list[ServeKey] = Field(
        default_factory=list,
        description="Keys accepted as `Authorization: Bearer <key>` or `X-API-Key: <key>` on /v1/*, each bound "
        "to access domains. A plain string is a key for all domains. Empty means no authentication at all "
        "and every domain open: for local use only, never on an interface others can reach.",
    )
    max_question_chars: int = Field(
        _default("max_question_chars"), ge=1, le=MAX_QUESTION_CHARS,
        description="Longer questions are refused with 422 (the engine's limit is the ceiling).",
    )
    max_top_k: int = Field(
        _default("max_top_k"), ge=1, le=50,
        description="Largest `top_k` (units for basic, seed entities for local) a request may ask for.",
    )
    max_level: int = Field(_default("max_level"), ge=0, description="Largest community `level` a request may name.")
    max_page_size: int = Field(_default("max_page_size"), ge=1, description="Most rows one listing returns.")
    request_timeout_s: float = Field(_default("request_timeout_s"), gt=0,
                                     description="A question not answered within this many seconds gets 504.")
    max_concurrent_queries: int = Field(_default("max_concurrent_queries"), ge=1,
                                        description="Questions worked on at once (worker threads).")
    max_body_bytes: int = Field(_default("max_body_bytes"), ge=1, description="Larger request bodies get 413.")
    body_timeout_s: float = Field(_default("body_timeout_s"), gt=0,
                                  description="A request body not in within this many seconds gets 408.")
    rate_limit_per_s: float = Field(_default("rate_limit_per_s"), ge=0,
                                    description="Requests per second per API key on /v1 routes; 0: no limit.")
    rate_limit_burst: int = Field(_default("rate_limit_burst"), ge=1, description="The token bucket's size.")
    cors_origins: list[str] = Field(default_factory=list, description="Origins allowed by CORS; none: closed.")
    admin_key: SecretStr | None = Field(None, description="Key for POST /admin/reload; None: the endpoint is off.")
    reload_poll_s: float = Field(_default("reload_poll_s"), ge=0,
                                 description="Seconds between checks for a new index version; 0: no polling.")

    @field_validator("api_keys", mode="before")
    @classmethod
    def _plain_keys_read_everything(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [
            {"name": f"key-{i}", "key": k, "domains": [ALL_DOMAINS]} if isinstance(k, (str, SecretStr)) else k
            for i, k in enumerate(value, 1)
        ]

    @model_validator(mode="after")
    def _check(self) -> "ServiceSettings":
        if self.config is None and not self.config_path:
            raise ValueError("give either config (a loaded Config) or config_path (a config file)")
        values = [k.key.get_secret_value() for k in self.api_keys]
        if len(set(values)) != len(values):
            raise ValueError("the same API key is given twice; each key must be bound to one set of domains")
        names = [k.name for k in self.api_keys]
        if len(set(names)) != len(names):
            raise ValueError(f"API key names must be distinct (they label logs and metrics): {sorted(names)}")
        return self

    @classmethod
    def from_config(cls, config: Config, **chosen: Any) -> "ServiceSettings":
        """Settings from the config's `serve` section; `chosen` (e.g. command-line values) wins."""
        serve = config.serve
        keys = list(serve.api_keys)
        if serve.api_key_file:
            keys += read_key_file(serve.api_key_file)
        fields = ("max_question_chars", "max_top_k", "max_level", "max_page_size", "request_timeout_s",
                  "max_concurrent_queries", "max_body_bytes", "body_timeout_s", "rate_limit_per_s",
                  "rate_limit_burst", "cors_origins", "admin_key", "reload_poll_s")
        values: dict[str, Any] = {name: getattr(serve, name) for name in fields}
        values.update(chosen)
        values["api_keys"] = keys + list(values.get("api_keys", []))
        return cls(config=config, **values)

    def resolve_config(self) -> Config:
        """The configuration to serve: the one given, or config_path loaded now."""
        if self.config is not None:
            return self.config
        return load_config(self.config_path, self.config_overrides, env=self.config_env)

    def find_key(self, offered: str) -> ServeKey | None:
        """The key matching `offered`, compared in constant time against every key (the time taken
        does not tell a caller how much of a key matched, nor which key)."""
        found = None
        for key in self.api_keys:
            if hmac.compare_digest(offered.encode(), key.key.get_secret_value().encode()):
                found = key
        return found

    def domain_sets(self) -> set[frozenset[str]]:
        """The distinct domain sets the keys are bound to (all-domain keys left out)."""
        return {frozenset(k.domains) for k in self.api_keys if ALL_DOMAINS not in k.domains}


def key_domains(key: ServeKey) -> frozenset[str] | None:
    """The domains a key may read; None for all."""
    return None if ALL_DOMAINS in key.domains else frozenset(key.domains)


def read_key_file(path: str) -> list[ServeKey]:
    """Keys from a file of `KEY DOMAIN[,DOMAIN...]` (or `KEY *`) lines; # starts a comment line.

    A line without domains is refused: a key bound to nothing by mistake must not read everything.
    So is a file that users other than its owner may read or write (like ssh with a private key).
    Errors name the line, never the key.
    """
    _check_private(path)
    keys = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{number}: expected `KEY DOMAIN[,DOMAIN...]` or `KEY *`")
        domains = [d.strip() for d in parts[1].split(",") if d.strip()]
        if not domains:
            raise ValueError(f"{path}:{number}: no domains after the key")
        keys.append(ServeKey(name=f"{Path(path).name}:{number}", key=parts[0], domains=domains))
    return keys


def _check_private(path: str) -> None:
    """Refuse a key file that its group or other users may access: they could read every key."""
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(
            f"API key file {path} is accessible by other users (mode {stat.S_IMODE(mode):04o}); "
            f"the service refuses it: run `chmod 600 {path}`"
        )
