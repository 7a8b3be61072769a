"""How many threads the embedded llama.cpp server is started with (`llm.threads`).

The command line is checked, not a running server: the real server is started by the llm tier
(tests/llm/test_embedded_server.py), and what the thread count buys is measured by
tests/benchmarks/test_embedded.py.
"""

import os
from pathlib import Path

import pytest

from corpusgraph.config import LLMSection
from corpusgraph.llm import server as server_mod
from corpusgraph.llm.chat_endpoint import ChatEndpoint
from corpusgraph.llm.server import EmbeddedServer

pytestmark = pytest.mark.unit


def _threads(cmd: list[str]) -> tuple[str, str]:
    return cmd[cmd.index("--n_threads") + 1], cmd[cmd.index("--n_threads_batch") + 1]


def test_by_default_every_usable_core_generates_and_reads_the_prompt(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    cmd = EmbeddedServer(log_path=tmp_path / "s.log").command(1234, Path("m.gguf"))
    assert _threads(cmd) == ("3", "3")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5}, raising=False)
    assert _threads(EmbeddedServer(log_path=tmp_path / "s.log").command(1234, Path("m.gguf"))) == ("1", "1")


def test_a_thread_count_given_is_used_for_both(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    cmd = EmbeddedServer(log_path=tmp_path / "s.log", n_threads=1).command(1234, Path("m.gguf"))
    assert _threads(cmd) == ("1", "1")


@pytest.mark.parametrize("threads, expected", [(0, None), (1, 1), (3, 3)])
def test_the_endpoint_passes_llm_threads_to_the_server_it_starts(tmp_path, monkeypatch, threads, expected):
    made: list[EmbeddedServer] = []

    def start(self):  # record the server instead of starting llama.cpp
        made.append(self)
        self.port = 4321
        return self

    monkeypatch.setattr(server_mod.EmbeddedServer, "start", start)
    endpoint = ChatEndpoint(LLMSection(backend="embedded", threads=threads), tmp_path / "server.log")
    assert endpoint.url() == "http://127.0.0.1:4321/v1"
    assert len(made) == 1 and made[0].n_threads == expected


def test_llm_threads_refuses_a_negative_count():
    with pytest.raises(ValueError, match="threads"):
        LLMSection(backend="embedded", threads=-1)
