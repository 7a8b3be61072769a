"""The HTTP sessions (aiohttp) an OpenAIChatModel or OpenAIEmbedder sends through: per event loop
and endpoint, one per SLOTS_PER_CLIENT of the EndpointPool's slots.

Why sharded: the clients were httpx's until 2026-12-03, whose connection pool (httpcore 1.0) does
work quadratic in its number of connections for every request it starts or finishes; small
pools kept that cheap. aiohttp's connector has no such cost, and the shards stay: a session
per SLOTS_PER_CLIENT slots never holds more requests than connections, and a session talks to
one endpoint only, so its few connections are never closed to make room for another host's.

Why per loop: a session and its connections belong to the event loop that opened them. Batches that
overlap on one loop (the async Ray actor) share its clients, so connections outlive a batch;
the last batch out closes them, since a loop may end right after (`complete()` runs each batch
on a loop of its own).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Any, Callable

import aiohttp
import httpx

__all__ = ["SLOTS_PER_CLIENT", "ClientSet", "LoopClients"]

SLOTS_PER_CLIENT = 8

MakeClient = Callable[[str, int, ssl.SSLContext], aiohttp.ClientSession]  # (endpoint, max_connections, tls) -> client


class ClientSet:
    """One loop's clients, by (endpoint, shard of slots), made on first use."""

    def __init__(self, make: MakeClient, tls: Callable[[], ssl.SSLContext]) -> None:
        self._make = make
        self._tls = tls
        self.by_shard: dict[tuple[str, int], aiohttp.ClientSession] = {}
        self.users = 0  # batches on this loop using it

    def get(self, url: str, slot: int) -> aiohttp.ClientSession:
        key = (url, slot // SLOTS_PER_CLIENT)
        client = self.by_shard.get(key)
        if client is None:
            client = self.by_shard[key] = self._make(url, SLOTS_PER_CLIENT, self._tls())
        return client

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self.by_shard.values()), return_exceptions=True)


class LoopClients:
    """The ClientSets of one process, by event loop. Pickles as nothing: connections and the
    TLS context cannot travel into a Ray actor, and are rebuilt there on first use."""

    def __init__(self) -> None:
        self._sets: dict[asyncio.AbstractEventLoop, ClientSet] = {}
        self._lock = threading.Lock()  # several threads may each run a loop over one model
        self._tls_context: ssl.SSLContext | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def _tls(self) -> ssl.SSLContext:
        # Built once (reading the CA bundle takes tens of ms), with httpx's trust store (certifi).
        with self._lock:
            if self._tls_context is None:
                self._tls_context = httpx.create_ssl_context()
            return self._tls_context

    def enter(self, make: MakeClient) -> ClientSet:
        """The running loop's clients, for one batch; hand them back with `exit`."""
        loop = asyncio.get_running_loop()
        with self._lock:
            clients = self._sets.get(loop)
            if clients is None:
                clients = self._sets[loop] = ClientSet(make, self._tls)
            clients.users += 1
            return clients

    async def exit(self, clients: ClientSet) -> None:
        with self._lock:
            clients.users -= 1
            if clients.users > 0:
                return
            self._sets.pop(asyncio.get_running_loop(), None)
        await clients.aclose()
