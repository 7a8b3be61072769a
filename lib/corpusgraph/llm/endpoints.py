"""Which endpoint gets the next request, and when it may go.

An `EndpointPool` spreads the requests of one process over one or more OpenAI-compatible
endpoints (one vLLM server per GPU node, say). Per request it picks the endpoint with the
fewest requests in flight (ties go round-robin), and it holds a request back while:

- the process already has `max_in_flight` requests out (the client's own concurrency);
- every usable endpoint is at `max_in_flight_per_endpoint`;
- every usable endpoint's tokens-per-minute bucket lacks the request's estimated cost.

An endpoint that could not be connected to is "cooling" for a short, growing backoff: traffic
goes to the healthy ones meanwhile, and it is tried again when the backoff ends (or at once if
every endpoint is cooling, since there is nowhere better to send the request).

Every limit here is per process, i.e. per Ray actor: nothing is shared between actors, so a
cluster-wide limit is the per-actor limit times `ray.actors`. Within a process one pool serves
every event loop and thread that uses it (the state is plain numbers under a threading lock;
waiters are woken on their own loop), so overlapping batches share one budget.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

__all__ = ["EndpointPool", "Lease", "TokenBucket", "estimate_tokens"]

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[Any]]


def estimate_tokens(messages: Sequence[dict[str, str]], max_tokens: int, extra_chars: int = 0) -> int:
    """A request's worst-case token cost before it is sent: prompt estimate + max_tokens.

    About four characters a token for English prose; it only has to be close, because the
    bucket is corrected with the server's reported usage once the answer is in.
    """
    chars = sum(len(m.get("content") or "") for m in messages) + extra_chars
    return chars // 4 + 4 * len(messages) + int(max_tokens)


class TokenBucket:
    """A tokens-per-minute budget that refills continuously and starts full.

    Not locked on its own: the pool's lock guards it. The level may go below zero when an
    answer used more than was charged for it; later requests then wait that debt off.
    """

    def __init__(self, per_minute: int, now: float) -> None:
        if per_minute < 1:
            raise ValueError("tokens_per_minute must be at least 1")
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0  # tokens per second
        self.level = self.capacity
        self.stamp = now

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def charge_for(self, cost: int) -> int:
        # A request larger than a whole minute's budget still goes, once the bucket is full;
        # otherwise it would wait forever.
        return int(min(cost, self.capacity))

    def wait_s(self, cost: int, now: float) -> float:
        """Seconds until `cost` tokens are available (0 when they are now)."""
        self._refill(now)
        deficit = self.charge_for(cost) - self.level
        return 0.0 if deficit <= 0 else deficit / self.rate

    def take(self, cost: int, now: float) -> int:
        self._refill(now)
        charged = self.charge_for(cost)
        self.level -= charged
        return charged

    def give(self, tokens: float, now: float) -> None:
        """Return tokens (negative: take more, when an answer cost more than its charge)."""
        self._refill(now)
        self.level = min(self.capacity, self.level + tokens)


@dataclass(eq=False)
class _Endpoint:
    url: str
    bucket: TokenBucket | None
    in_flight: int = 0
    failures: int = 0  # consecutive connection failures; 0 = healthy
    cool_until: float = 0.0  # clock time before which it is avoided


@dataclass(eq=False)
class Lease:
    """Permission to send one request to `url`; give it back with `EndpointPool.release`."""

    endpoint: _Endpoint
    charged: int  # tokens taken from the endpoint's bucket (0 without a bucket)
    # Which of the process's max_in_flight slots it holds, lowest free first: a client can
    # shard its connection pools by slot and know no shard ever has more requests than slots.
    slot: int = 0
    released: bool = False

    @property
    def url(self) -> str:
        return self.endpoint.url


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future = field(repr=False)
    woken: bool = False  # popped by a release: it owes the wake-up to someone else if it leaves


class EndpointPool:
    """Least-loaded choice over endpoints, with per-process concurrency, TPM and cooldowns."""

    def __init__(
        self,
        urls: Sequence[str],
        max_in_flight: int,
        max_in_flight_per_endpoint: int | None = None,
        tokens_per_minute: int | None = None,
        cooldown_s: float = 1.0,
        max_cooldown_s: float = 30.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        urls = [u.rstrip("/") for u in urls]
        if not urls:
            raise ValueError("an endpoint pool needs at least one URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"endpoint URLs repeat: {urls}")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        if max_in_flight_per_endpoint is not None and max_in_flight_per_endpoint < 1:
            raise ValueError("max_in_flight_per_endpoint must be at least 1")
        self._config = dict(urls=urls, max_in_flight=max_in_flight,
                            max_in_flight_per_endpoint=max_in_flight_per_endpoint,
                            tokens_per_minute=tokens_per_minute, cooldown_s=cooldown_s,
                            max_cooldown_s=max_cooldown_s, clock=clock, sleep=sleep)
        self.max_in_flight = max_in_flight
        self.per_endpoint = max_in_flight_per_endpoint
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self._clock = clock
        self._sleep = sleep
        now = clock()
        self.endpoints = [_Endpoint(u, TokenBucket(tokens_per_minute, now) if tokens_per_minute else None)
                          for u in urls]
        self._lock = threading.Lock()
        self._in_flight = 0
        self._cursor = 0  # round-robin start for ties
        self._free_slots = list(range(max_in_flight - 1, -1, -1))  # a stack: pop() gives the lowest
        self._waiters: deque[_Waiter] = deque()

    # A pool travels into Ray actors inside the chat model: the configuration goes, the live
    # state (lock, waiters, counts) starts afresh in the new process.
    def __getstate__(self) -> dict[str, Any]:
        return dict(self._config)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self.endpoints]

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def any_healthy(self) -> bool:
        """Whether some endpoint is not cooling, i.e. a retry can go somewhere else now."""
        with self._lock:
            now = self._clock()
            return any(e.cool_until <= now for e in self.endpoints)

    # -- taking and giving back -----------------------------------------------------------------
    async def acquire(self, cost: int = 0) -> Lease:
        """Wait until a request of about `cost` tokens may go, and say where."""
        loop = asyncio.get_running_loop()
        woken_before = False
        while True:
            with self._lock:
                now = self._clock()
                endpoint, wait_s = self._pick(cost, now)
                if endpoint is not None:
                    endpoint.in_flight += 1
                    self._in_flight += 1
                    charged = endpoint.bucket.take(cost, now) if endpoint.bucket else 0
                    return Lease(endpoint, charged, self._free_slots.pop())
                waiter = _Waiter(loop, loop.create_future())
                # One that was woken and then lost the slot to a newcomer keeps its place.
                if woken_before:
                    self._waiters.appendleft(waiter)
                else:
                    self._waiters.append(waiter)
            woken_before = await self._wait(waiter, wait_s)

    def release(self, lease: Lease, used_tokens: int | None = None, reachable: bool = True) -> None:
        """Give a lease back.

        used_tokens: what the request really cost (the server's usage; 0 when nothing reached
        the model); None keeps the estimate charged. reachable=False marks the endpoint as
        cooling, because it could not be connected to; True marks it healthy again.
        """
        with self._lock:
            if lease.released:
                return
            lease.released = True
            ep = lease.endpoint
            ep.in_flight -= 1
            self._in_flight -= 1
            self._free_slots.append(lease.slot)
            now = self._clock()
            refund = 0
            if ep.bucket is not None and used_tokens is not None:
                refund = lease.charged - used_tokens
                ep.bucket.give(refund, now)
            if reachable:
                ep.failures, ep.cool_until = 0, 0.0
            else:
                ep.failures += 1
                ep.cool_until = now + min(self.max_cooldown_s, self.cooldown_s * 2 ** (ep.failures - 1))
            # A freed slot serves one waiter. A refund (at most this request's charge) pays for
            # about one more request of its size; waiters held back by a bucket also wake on
            # their own timers, so waking every waiter on each release is never needed.
            self._wake(2 if refund > 0 else 1)

    # -- choosing -------------------------------------------------------------------------------
    def _pick(self, cost: int, now: float) -> tuple[_Endpoint | None, float | None]:
        """(endpoint, None) when one may take the request now; else (None, seconds to wait for
        a bucket to refill, or None to wait for a release)."""
        if self._in_flight >= self.max_in_flight:
            return None, None
        healthy = [e for e in self.endpoints if e.cool_until <= now]
        # Every endpoint cooling: try them anyway; the caller's retry backoff paces the attempts.
        usable = healthy or self.endpoints
        open_ = [e for e in usable if self.per_endpoint is None or e.in_flight < self.per_endpoint]
        if not open_:
            return None, None
        waits = {id(e): (e.bucket.wait_s(cost, now) if e.bucket else 0.0) for e in open_}
        ready = [e for e in open_ if waits[id(e)] <= 0.0]
        if not ready:
            return None, min(waits.values())
        n = len(self.endpoints)
        best: _Endpoint | None = None
        best_at = 0
        for k in range(n):  # least loaded; scanning from the cursor turns ties into round-robin
            at = (self._cursor + k) % n
            e = self.endpoints[at]
            if e in ready and (best is None or e.in_flight < best.in_flight):
                best, best_at = e, at
        self._cursor = (best_at + 1) % n
        return best, None

    # -- waiting --------------------------------------------------------------------------------
    async def _wait(self, waiter: _Waiter, wait_s: float | None) -> bool:
        """Sleep until woken by a release or, for a bucket, until it should have refilled.
        Returns whether a release woke it."""
        sleeper: asyncio.Future | None = None
        try:
            if wait_s is None:
                await waiter.future
            else:
                sleeper = asyncio.ensure_future(self._sleep(wait_s))
                await asyncio.wait({waiter.future, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            with self._lock:
                self._forget(waiter)
                # Leaving (cancelled) after a release picked us would strand that release's
                # slot: hand the wake-up on.
                if waiter.woken:
                    self._wake(1)
            raise
        finally:
            if sleeper is not None and not sleeper.done():
                sleeper.cancel()
        with self._lock:
            self._forget(waiter)
        return waiter.woken

    def _forget(self, waiter: _Waiter) -> None:
        if not waiter.woken:  # a woken one was already taken off the queue
            try:
                self._waiters.remove(waiter)
            except ValueError:
                pass

    def _wake(self, n: int) -> None:
        """Wake up to n waiters, oldest first; the caller holds the lock."""
        while n > 0 and self._waiters:
            waiter = self._waiters.popleft()
            waiter.woken = True
            try:
                waiter.loop.call_soon_threadsafe(_resolve, waiter.future)
            except RuntimeError:  # its loop has closed: it is gone, wake the next one instead
                continue
            n -= 1


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
