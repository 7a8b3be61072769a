"""How many threads the embedded llama.cpp server is started with (`llm.threads`).

The command line is checked, not a running server: the real server is started by the llm tier
(tests/llm/test_embedded_server.py), and what the thread count buys is measured by
tests/benchmarks/test_embedded.py.
"""

import os
from pathlib import Path

import pytest

from corpusgraph.config import LLMSection
from corpusgraph.llm import cores
from corpusgraph.llm import server as server_mod
from corpusgraph.llm.chat_endpoint import ChatEndpoint
from corpusgraph.llm.server import EmbeddedServer

pytestmark = pytest.mark.unit


def _threads(cmd: list[str]) -> tuple[str, str]:
    return cmd[cmd.index("--n_threads") + 1], cmd[cmd.index("--n_threads_batch") + 1]


@pytest.fixture(autouse=True)
def no_cgroup_limit(tmp_path_factory, monkeypatch):
    """The machine's own cgroup files stay out of these tests (a CI runner may have a CPU quota)."""
    monkeypatch.setattr(cores, "_CGROUP", tmp_path_factory.mktemp("no-cgroup"))


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


def _cgroup(root: Path, v2: str | None = None, v1: tuple[str, str] | None = None) -> Path:
    if v2 is not None:
        (root / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (root / "cpu").mkdir()
        (root / "cpu" / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (root / "cpu" / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    return root


@pytest.mark.parametrize("v2, v1, expected", [
    ("200000 100000", None, 2),        # cgroup v2, --cpus 2
    ("150000 100000", None, 1),        # --cpus 1.5: one whole CPU's worth
    ("50000 100000", None, 1),         # under one CPU: still one thread
    ("max 100000", None, 8),           # v2, no limit: the affinity
    (None, ("300000", "100000"), 3),   # cgroup v1, --cpus 3
    (None, ("-1", "100000"), 8),       # v1, no limit
    (None, None, 8),                   # no cgroup files at all
    ("1600000 100000", None, 8),       # a quota above the cores the process may run on
    ("100000 0", None, 8),             # a period of 0 (no such cgroup): read as no limit
])
def test_a_containers_cpu_quota_caps_the_default(tmp_path, monkeypatch, v2, v1, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    root = _cgroup(tmp_path, v2, v1)
    assert cores.usable_cores(root) == expected
    assert cores.quota_cap(root) == (expected if expected < 8 else None)


def test_an_unreadable_cpu_max_falls_back_to_cgroup_v1_and_then_to_no_limit(tmp_path):
    both, empty = tmp_path / "both", tmp_path / "empty"
    both.mkdir()
    empty.mkdir()
    assert cores.cgroup_cpu_limit(_cgroup(both, v2="garbage", v1=("200000", "100000"))) == 2.0
    assert cores.cgroup_cpu_limit(_cgroup(empty, v2="")) is None


@pytest.mark.parametrize("cpu_max, expected", [("100000 100000", 1), ("max 100000", 0)])
def test_the_onnx_embedder_takes_the_quota_and_otherwise_its_runtimes_default(tmp_path, monkeypatch, cpu_max,
                                                                                expected):
    from corpusgraph.llm.minilm import find_model_dir
    from corpusgraph.llm.minilm_onnx import OnnxMiniLM

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    (tmp_path / "cg").mkdir()
    monkeypatch.setattr(cores, "_CGROUP", _cgroup(tmp_path / "cg", v2=cpu_max))
    model = OnnxMiniLM(find_model_dir(), 384, threads=0, int8=False, cache_dir=tmp_path / "graphs")
    assert model._session.get_session_options().intra_op_num_threads == expected
    given = OnnxMiniLM(find_model_dir(), 384, threads=3, int8=False, cache_dir=tmp_path / "graphs")
    assert given._session.get_session_options().intra_op_num_threads == 3


def test_the_openvino_embedder_takes_the_quota_and_the_threads_it_is_given(tmp_path, monkeypatch):
    """The default runtime's twin of the test above: a quota of one CPU gives one thread where no
    count was given; a count given is used (1 here: the plugin caps a count at the machine's cores)."""
    from corpusgraph.llm.minilm import find_model_dir
    from corpusgraph.llm.minilm_openvino import OpenVinoMiniLM

    (tmp_path / "cg").mkdir()
    monkeypatch.setattr(cores, "_CGROUP", _cgroup(tmp_path / "cg", v2="100000 100000"))
    model = OpenVinoMiniLM(find_model_dir(), 384, threads=0, cache_dir=tmp_path / "graphs")
    assert model._compiled.get_property("INFERENCE_NUM_THREADS") == 1
    monkeypatch.setattr(cores, "_CGROUP", _cgroup(tmp_path / "cg", v2="max 100000"))
    given = OpenVinoMiniLM(find_model_dir(), 384, threads=1, cache_dir=tmp_path / "graphs")
    assert given._compiled.get_property("INFERENCE_NUM_THREADS") == 1
