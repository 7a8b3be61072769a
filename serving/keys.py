"""Who may ask the query service: its API keys, each bound to access domains.

The keys come from the config's `serve` section (`api_keys`, and `api_key_file` read here)
and from whoever starts the service (the `serve` command's --api-key and --api-key-file).
Every other setting is the `serve` section itself (corpusgraph.config.ServeSection); nothing
here reads the environment.
"""

from __future__ import annotations

import hmac
import os
import stat
from pathlib import Path
from typing import Iterable

from corpusgraph.config import ServeKey, ServeSection

__all__ = ["ALL_DOMAINS", "ApiKeys", "ServeKey", "key_domains", "read_key_file"]

ALL_DOMAINS = "*"


class ApiKeys:
    """The keys accepted as `Authorization: Bearer <key>` or `X-API-Key: <key>` on /v1/*.

    None at all means no authentication and every domain open: for local use only, never on an
    interface others can reach.
    """

    def __init__(self, keys: Iterable[ServeKey] = ()) -> None:
        self.keys: tuple[ServeKey, ...] = tuple(keys)
        values = [k.key.get_secret_value() for k in self.keys]
        if len(set(values)) != len(values):
            raise ValueError("the same API key is given twice; each key must be bound to one set of domains")
        names = [k.name for k in self.keys]
        if len(set(names)) != len(names):
            raise ValueError(f"API key names must be distinct (they label logs and metrics): {sorted(names)}")

    @classmethod
    def for_service(cls, serve: ServeSection, extra: Iterable[ServeKey] = ()) -> "ApiKeys":
        """The `serve` section's keys, then its key file's, then `extra` (e.g. the command line's)."""
        keys = list(serve.api_keys)
        if serve.api_key_file:
            keys += read_key_file(serve.api_key_file)
        return cls([*keys, *extra])

    def __bool__(self) -> bool:
        return bool(self.keys)

    def __repr__(self) -> str:  # names only: reprs end up in logs
        return f"ApiKeys({[k.name for k in self.keys]!r})"

    def find(self, offered: str) -> ServeKey | None:
        """The key matching `offered`, compared in constant time against every key (the time taken
        does not tell a caller how much of a key matched, nor which key)."""
        found = None
        for key in self.keys:
            if hmac.compare_digest(offered.encode(), key.key.get_secret_value().encode()):
                found = key
        return found

    def domain_sets(self) -> set[frozenset[str]]:
        """The distinct domain sets the keys are bound to (all-domain keys left out)."""
        return {frozenset(k.domains) for k in self.keys if ALL_DOMAINS not in k.domains}


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
