"""uvicorn's HTTP/1.1 protocol with a deadline for request headers.

uvicorn closes an idle keep-alive connection after `timeout_keep_alive`, but a client that sends
its headers a byte at a time holds its connection open for ever: every byte cancels the
keep-alive timer, and there is no timer before the first request. This protocol closes a
connection whose headers are not complete `header_timeout_s` after it opened or after its last
response. (The body has its own deadline: serving.limits.BodyLimit answers 408.)
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["with_header_deadline"]


class _HeaderDeadline(H11Protocol):
    header_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _headers_late(self) -> None:
        # IDLE: the client has not finished a request line and headers since the timer was set
        # (once they are in, h11 moves on to SEND_BODY or DONE and the request runs normally).
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def with_header_deadline(header_timeout_s: float) -> type[H11Protocol]:
    """An H11Protocol class (uvicorn's `http=` option) closing connections slow to send headers."""
    return type("HeaderDeadlineH11", (_HeaderDeadline,), {"header_timeout_s": float(header_timeout_s)})
