"""Where a request to an endpoint goes and how it proves who sends it: URLs and credentials per
profile, Azure OpenAI's included.

Azure OpenAI (learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle):
- the v1 API (`api_version: v1`, the default here): `{endpoint}/openai/v1/chat/completions`, the
  deployment name as the body's `model`, no monthly api-version (`preview` adds
  `?api-version=preview` for preview features);
- the dated API (`api_version: 2024-10-21` and the like):
  `{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...`; files and
  batches at `{endpoint}/openai/files|batches?api-version=...`.
Credentials: an `api-key: <key>` header, or `Authorization: Bearer <Entra ID token>` for the scope
https://cognitiveservices.azure.com/.default (how-to/managed-identity). The token comes from a
TokenSource: a fixed token, a command that prints one (`az account get-access-token ...`), or a
provider callable; it is cached and fetched again five minutes before it expires.
"""

from __future__ import annotations

import base64
import importlib
import json
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from corpusgraph.llm.profiles import Profile

__all__ = ["Route", "TokenSource", "TokenError", "AZURE_SCOPE", "azure_uses_v1", "azure_version_at_least"]

AZURE_SCOPE = "https://cognitiveservices.azure.com/.default"
_REFRESH_BEFORE_S = 300.0  # fetch a new token this long before the old one expires
_UNKNOWN_EXPIRY_S = 600.0  # a token whose expiry cannot be read is reused this long


class TokenError(RuntimeError):
    """No Entra ID token could be had; the message names the source and its error."""


def azure_uses_v1(api_version: str | None) -> bool:
    return (api_version or "v1") in ("v1", "preview", "latest")


def azure_version_at_least(api_version: str | None, floor: str) -> bool:
    """Whether a dated api-version (YYYY-MM-DD[-preview]) is from `floor`'s date or later; the v1
    API always is."""
    if azure_uses_v1(api_version):
        return True
    return str(api_version)[:10] >= floor[:10]


@dataclass(frozen=True)
class Route:
    """URLs of one endpoint kind. `base` (what a client is given) is the endpoint URL: for the
    OpenAI-compatible profiles the URL ending in /v1, for Azure the resource endpoint
    (https://NAME.openai.azure.com; a trailing /openai or /openai/v1 is tolerated)."""

    profile: Profile
    api_version: str | None = None  # Azure only
    deployment: str | None = None  # Azure only: the deployment of the dated API's paths

    def _azure_root(self, base: str) -> str:
        root = base.rstrip("/")
        for tail in ("/openai/v1", "/openai"):
            if root.endswith(tail):
                root = root[: -len(tail)]
        return root

    def _query(self) -> str:
        v = self.api_version or "v1"
        return "" if v in ("v1", "latest") else f"?api-version={v}"

    def chat_url(self, base: str) -> str:
        return self._kind_url(base, "chat/completions")

    def embed_url(self, base: str) -> str:
        return self._kind_url(base, "embeddings")

    def _kind_url(self, base: str, kind: str) -> str:
        if self.profile.auth != "azure":
            return f"{base.rstrip('/')}/{kind}"
        root = self._azure_root(base)
        if azure_uses_v1(self.api_version):
            return f"{root}/openai/v1/{kind}{self._query()}"
        return f"{root}/openai/deployments/{self.deployment}/{kind}{self._query()}"

    def api_url(self, base: str, path: str) -> str:
        """A Files or Batches API URL (`path` like "/files" or "/batches/ID")."""
        if self.profile.auth != "azure":
            return f"{base.rstrip('/')}{path}"
        root = self._azure_root(base)
        prefix = "/openai/v1" if azure_uses_v1(self.api_version) else "/openai"
        return f"{root}{prefix}{path}{self._query()}"

    def static_headers(self, api_key: str | None, entra: bool) -> dict[str, str]:
        """Headers every request carries: the key as a bearer token, Azure's api-key header, or
        nothing (an Entra token is added per request; no key: no header)."""
        if not api_key or entra:
            return {}
        if self.profile.auth == "azure":
            return {"api-key": api_key}
        return {"Authorization": f"Bearer {api_key}"}


@dataclass
class TokenSource:
    """An Entra ID bearer token, cached. Exactly one of: `token` (fixed), `command` (prints a token,
    or JSON with accessToken and expiresOn/expires_on), `provider` ("module:callable" returning a
    token string or an object with .token and .expires_on; "azure-identity" for azure.identity's
    DefaultAzureCredential, an optional package). Pickles as its settings only."""

    token: str | None = None
    command: str | None = None
    provider: str | None = None
    scope: str = AZURE_SCOPE
    timeout_s: float = 60.0
    _held: tuple[str, float] | None = field(default=None, repr=False)
    _lock: Any = field(default=None, repr=False)
    _credential: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        given = [x for x in (self.token, self.command, self.provider) if x]
        if len(given) != 1:
            raise ValueError("an Entra ID token source takes exactly one of a token, a token command or a provider")
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"token": self.token, "command": self.command, "provider": self.provider, "scope": self.scope,
                "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def fresh(self) -> str | None:
        """The cached token while it is good for more than five minutes, else None (no call)."""
        held = self._held
        if held is not None and held[1] - time.time() > _REFRESH_BEFORE_S:
            return held[0]
        return None

    def get(self) -> str:
        """A token good for at least five more minutes (blocking: may run the command)."""
        with self._lock:
            held = self.fresh()
            if held is not None:
                return held
            token, expires = self._fetch()
            self._held = (token, expires)
            return token

    def invalidate(self) -> None:
        """Forget the cached token (the endpoint refused it): the next get() fetches a new one."""
        with self._lock:
            self._held = None

    def _fetch(self) -> tuple[str, float]:
        if self.token:
            return self.token, _expiry(self.token)
        if self.command:
            try:
                done = subprocess.run(shlex.split(self.command), capture_output=True, text=True, timeout=self.timeout_s)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise TokenError(f"the token command {self.command!r} could not run: {exc}") from exc
            if done.returncode != 0:
                raise TokenError(f"the token command {self.command!r} failed (exit {done.returncode}): "
                                 f"{(done.stderr or done.stdout).strip()[:300]}")
            return _parse_command_output(done.stdout)
        return self._from_provider()

    def _from_provider(self) -> tuple[str, float]:
        if self._credential is None:
            self._credential = _load_provider(self.provider or "", self.scope)
        got = self._credential()
        if isinstance(got, str):
            return got, _expiry(got)
        token = getattr(got, "token", None)
        if not isinstance(token, str) or not token:
            raise TokenError(f"the token provider {self.provider!r} returned {type(got).__name__}, not a token")
        expires = getattr(got, "expires_on", None)
        return token, float(expires) if isinstance(expires, (int, float)) else _expiry(token)


def _load_provider(spec: str, scope: str) -> Callable[[], Any]:
    if spec == "azure-identity":
        try:
            from azure.identity import DefaultAzureCredential  # optional: pip install azure-identity
        except ImportError as exc:
            raise TokenError("llm.azure.ad_token_provider 'azure-identity' needs the azure-identity package "
                             "(pip install azure-identity); or set ad_token_command") from exc
        credential = DefaultAzureCredential()
        return lambda: credential.get_token(scope)
    module, _, name = spec.partition(":")
    if not module or not name:
        raise TokenError(f"llm.azure.ad_token_provider {spec!r}: write 'package.module:function' or 'azure-identity'")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise TokenError(f"llm.azure.ad_token_provider {spec!r} could not be loaded: {exc}") from exc
    return fn


def _parse_command_output(out: str) -> tuple[str, float]:
    text = out.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = {}
        token = data.get("accessToken") or data.get("access_token") or data.get("token")
        if isinstance(token, str) and token:
            for key in ("expires_on", "expiresOn"):
                value = data.get(key)
                if isinstance(value, (int, float)) or (isinstance(value, str) and value.isdigit()):
                    return token, float(value)
            return token, _expiry(token)
    if not text or any(c.isspace() for c in text):
        raise TokenError(f"the token command printed no token (got {text[:60]!r}...)")
    return text, _expiry(text)


def _expiry(token: str) -> float:
    """The `exp` claim of a JWT (Entra tokens are JWTs), else a short reuse window from now."""
    parts = token.split(".")
    if len(parts) == 3:
        try:
            pad = parts[1] + "=" * (-len(parts[1]) % 4)
            exp = json.loads(base64.urlsafe_b64decode(pad.encode("ascii"))).get("exp")
            if isinstance(exp, (int, float)):
                return float(exp)
        except (ValueError, UnicodeDecodeError):
            pass
    return time.time() + _UNKNOWN_EXPIRY_S
