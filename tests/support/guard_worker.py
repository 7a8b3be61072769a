"""A parse worker for the guard's tests: the real worker loop (stages/ingest/worker.serve) with a
parser that hangs, runs out of memory or crashes on request, and parses normally otherwise.

    python -m tests.support.guard_worker <memory limit in bytes>
"""

from __future__ import annotations

import ctypes
import sys

from corpusgraph.stages.ingest.formats import parse
from corpusgraph.stages.ingest.worker import serve


def pathological(uri: str, data: bytes, section):
    if uri.endswith("/hang.pdf"):
        while True:
            pass
    if uri.endswith("/oom.pdf"):
        hoard = []
        while True:
            hoard.append(bytearray(50 * 2**20))
    if uri.endswith("/segv.pdf"):
        ctypes.string_at(0)
    return parse(uri, data, section)


if __name__ == "__main__":
    serve(pathological, int(sys.argv[1]))
