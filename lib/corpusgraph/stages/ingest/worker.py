"""The parse worker: a process of its own that reads files for the guard (guard.py).

    python -m corpusgraph.stages.ingest.worker <memory limit in bytes>

It caps its own address space (RLIMIT_AS), then answers frames on stdin with frames on stdout,
each an 8-byte little-endian length and a pickle: in, (uri, bytes, section); out, ("ok",
records), ("memory_limit", detail) or ("error", detail). After a MemoryError it answers and
exits, so the next file gets a fresh heap. Anything a parser prints goes to stderr, never into
the frames.
"""

from __future__ import annotations

import pickle
import resource
import struct
import sys
from typing import BinaryIO, Callable

__all__ = ["serve", "main", "read_frame", "write_frame"]

_HEAD = struct.Struct("<Q")


def read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(_HEAD.size)
    if len(head) < _HEAD.size:
        return None
    (size,) = _HEAD.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def write_frame(stream: BinaryIO, payload: bytes) -> None:
    stream.write(_HEAD.pack(len(payload)) + payload)
    stream.flush()


def serve(parse: Callable, memory_bytes: int) -> None:
    """Answer frames until stdin closes. parse(uri, data, section) -> records."""
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a parser that prints cannot corrupt the frames
    while True:
        frame = read_frame(inp)
        if frame is None:
            return
        fatal = False
        try:
            uri, data, section = pickle.loads(frame)
            reply = ("ok", parse(uri, data, section))
        except MemoryError:
            reply, fatal = ("memory_limit", f"over the worker's memory limit of {memory_bytes // 2**20} MiB"), True
        except BaseException as exc:  # noqa: BLE001 - reported to the guard, which quarantines the file
            reply = ("error", f"{type(exc).__name__}: {str(exc)[:300]}")
        del frame
        try:
            payload = pickle.dumps(reply, protocol=5)
        except MemoryError:
            payload, fatal = pickle.dumps(("memory_limit", "the records did not fit the memory limit")), True
        write_frame(out, payload)
        if fatal:
            return


def main() -> None:
    import logging

    from corpusgraph.stages.ingest.formats import parse

    # pypdf logs every damaged object it skips; the file's outcome already says what went wrong.
    logging.getLogger("pypdf").setLevel(logging.ERROR)

    serve(parse, int(sys.argv[1]) if len(sys.argv) > 1 else 0)


if __name__ == "__main__":
    main()
