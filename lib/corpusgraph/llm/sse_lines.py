"""Reading a streamed /chat/completions body: server-sent events carrying chunk objects.

Pure: fed the body's lines as they come, it says which pieces of text each line added and, at
the end, the answer, its finish reason, the usage when the server sent one, and any error.

Framing (WHATWG HTML, "Server-sent events", html.spec.whatwg.org/multipage/server-sent-events.html):
an event is `field: value` lines ended by a blank line; several `data` lines join with "\\n";
a line starting with ":" is a comment (servers send them as keep-alives). Chunks (OpenAI's chat
completion chunk object): `choices[0].delta.content` holds the next piece, `finish_reason` is set
on the last content chunk, and with `stream_options.include_usage` a final chunk with empty
`choices` carries `usage` before `data: [DONE]`. An error after the 200 comes as a chunk holding
an `error` object.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ChunkReader"]


class ChunkReader:
    """Feed it lines (bytes or text, with or without their line ending); read its state."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, int] | None = None
        self.error: str | None = None
        self.done = False  # `data: [DONE]` seen
        self._data: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def feed(self, line: bytes | str) -> list[str]:
        """The pieces of text this line completed (an event completes on its blank line, or on
        its data line when the server does not separate events, which some do not)."""
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        line = line.rstrip("\r\n")
        if self.done:
            return []
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return []
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field != "data":
            return []  # event, id, retry: nothing a chat stream needs
        self._data.append(value)
        # A complete JSON object (or [DONE]) is dispatched at once: servers put one per data line,
        # and waiting for the blank line would hold each piece back by one line.
        joined = "\n".join(self._data).strip()
        if joined == "[DONE]":
            return self._dispatch()
        if joined.startswith("{") and joined.endswith("}"):
            try:
                chunk = json.loads(joined)
            except ValueError:
                return []  # not whole yet: the next data line or the blank line ends it
            self._data = []
            return self._chunk(chunk)
        return []

    def close(self) -> list[str]:
        """The body ended: whatever event was still open."""
        return self._dispatch()

    def _dispatch(self) -> list[str]:
        if not self._data:
            return []
        payload, self._data = "\n".join(self._data), []
        if payload.strip() == "[DONE]":
            self.done = True
            return []
        try:
            chunk = json.loads(payload)
        except ValueError:
            self.error = self.error or f"malformed stream chunk: {payload[:200]!r}"
            return []
        return self._chunk(chunk)

    def _chunk(self, chunk: Any) -> list[str]:
        if not isinstance(chunk, dict):
            self.error = self.error or f"malformed stream chunk: {json.dumps(chunk)[:200]!r}"
            return []
        if chunk.get("error") is not None:
            err = chunk["error"]
            message = err.get("message") if isinstance(err, dict) else err
            self.error = f"the server reported an error mid-stream: {str(message)[:300]}"
            return []
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = {"prompt_tokens": _int(usage.get("prompt_tokens")),
                          "completion_tokens": _int(usage.get("completion_tokens"))}
        out = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                out.append(piece)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        self.pieces.extend(out)
        return out


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
