"""Who is asking, decided once for every surface: the HTTP routes (deps.require_api_key), the MCP
server's HTTP transport (mcp_server.py) and its stdio launch (the `mcp` command).

`authenticate` is a pure function of the accepted keys, the rate limiter and what the request
offered; it returns the `Caller` or raises `AuthError` with the status, detail and headers every
surface answers with, word for word.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from serving.keys import ApiKeys, key_domains
from serving.limits import RateLimiter

__all__ = ["Caller", "AuthError", "authenticate", "narrow"]


@dataclass(frozen=True)
class Caller:
    """Who is asking: the key's name (for logs) and the domains it may read (None: all)."""

    name: str
    domains: frozenset[str] | None


@dataclass
class AuthError(Exception):
    status: int
    detail: str
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status}: {self.detail}"


_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def authenticate(accepted: ApiKeys, limiter: RateLimiter | None, offered: list[str | None],
                 narrowed: str | None = None) -> Caller:
    """The caller for the keys a request offered (Authorization: Bearer, X-API-Key; None where a
    header was absent), rate-limited once, narrowed by an X-Access-Domains value."""
    if not accepted:
        caller = Caller("anonymous", None)  # no keys configured: local use only (see ApiKeys)
    else:
        sent = [k for k in offered if k]
        keys = [k for k in (accepted.find(o) for o in sent) if k is not None]
        if not keys:
            why = "wrong API key" if sent else "missing API key"
            raise AuthError(401, f"{why}: send `Authorization: Bearer <key>` or `X-API-Key: <key>`", dict(_CHALLENGE))
        if len({k.name for k in keys}) > 1:
            raise AuthError(401, "two different API keys sent; send one", dict(_CHALLENGE))
        caller = Caller(keys[0].name, key_domains(keys[0]))
    if limiter is not None:
        wait = limiter.take(caller.name)
        if wait > 0:
            raise AuthError(429, "rate limit of this API key reached (the service's rate_limit_per_s); retry after "
                            "the Retry-After seconds", {"Retry-After": RateLimiter.retry_after(wait)})
    return narrow(caller, narrowed)


def narrow(caller: Caller, narrowed: str | None) -> Caller:
    """The caller limited to the comma-separated domains of `narrowed` (X-Access-Domains, or the
    `mcp` command's --domains); 403 for a domain the key may not read."""
    if narrowed is None:
        return caller
    wanted = frozenset(d.strip() for d in narrowed.split(",") if d.strip())
    if not wanted:
        raise AuthError(422, "X-Access-Domains names no domain; leave the header out to use all the key's")
    refused = sorted(wanted - caller.domains) if caller.domains is not None else []
    if refused:
        raise AuthError(403, f"this API key may not read domain(s) {', '.join(refused)} (X-Access-Domains)")
    return Caller(caller.name, wanted)
