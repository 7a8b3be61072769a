"""Fault tolerance of the index: kill a Ray worker, the model server, or the driver mid-stage.

Each time the rerun must finish, pay for no call that had already been answered, and produce
the same tables as a clean run. The LLM is a scripted OpenAI-compatible server (in a thread of
this process) whose answers are derived from the unit text, so two runs over the same inputs
produce the same tables, and whose log of *delivered* answers (written to a still-open
connection) is the ground truth of what was paid for.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow]

import psutil  # noqa: E402  (a declared test dependency)

STAGES = ["ingest", "chunk", "extract", "resolve"]
LATENCY_S = 0.3
COMPARED = ("extractions", "entities", "relationships")

_NAMES = ["Contoso", "Fabrikam", "Northwind", "Tailspin", "Litware", "Adatum", "Wingtip", "Proseware",
          "Valencia", "Milan", "Antwerp", "Rotterdam", "Giulia", "Marek", "Hana", "Tobias"]


def _docs() -> dict[str, str]:
    docs = {}
    for i in range(10):
        a, b, c, d = (_NAMES[(i * 3 + k) % len(_NAMES)] for k in (0, 1, 5, 9))
        docs[f"note-{i:02d}.txt"] = (
            f"Weekly note {i}. {a} shipped goods from {b} to {c} on day {i + 3}. "
            f"{c} reported that {a} arrived late twice, and {d} asked {b} for a refund. "
            f"The dock lead at {c} said that {d} and {a} agreed a new schedule for next month. "
            f"Trailer number {100 + i} stayed at {b} for repairs while {d} waited."
        )
    return docs


# --------------------------------------------------------------------------- the scripted server
def _answer_for(body: dict) -> str:
    """A valid extraction answer whose entities are the capitalised names in the unit text."""
    user = next((m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"), "")
    text = user.split("Text:", 1)[-1]
    names = list(dict.fromkeys(w for w in re.findall(r"\b[A-Z][a-z]{3,}\b", text) if w in _NAMES))[:4]
    types = ["ORGANIZATION", "LOCATION", "PERSON"]
    ents = [{"name": n, "type": types[int(hashlib.sha1(n.encode()).hexdigest(), 16) % 3],
             "description": f"{n} as named in a note of {len(text)} characters."} for n in names]
    rels = [{"source": s, "target": t, "description": f"{s} deals with {t}.", "strength": 1 + len(s + t) % 10}
            for s, t in zip(names, names[1:])]
    return json.dumps({"entities": ents, "relationships": rels})


def _body_key(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class ScriptedServer:
    """OpenAI-compatible chat endpoint in a background thread; can be killed and restarted on its port.

    delivered: request-body keys whose answer was written to a connection still open (paid).
    undelivered: answers computed for a client that had gone away, or cut off by kill().
    """

    def __init__(self, latency_s: float = LATENCY_S, port: int = 0):
        self.latency_s, self.port = latency_s, port
        self.delivered: list[str] = []
        self.undelivered: list[str] = []
        self.dead = False
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def n_delivered(self) -> int:
        with self._lock:
            return len(self.delivered)

    def _app(self):
        from aiohttp import web

        async def chat(request: web.Request):
            body = await request.json()
            key = _body_key(body)
            await asyncio.sleep(self.latency_s)
            tr = request.transport
            if self.dead or tr is None or tr.is_closing():
                with self._lock:
                    self.undelivered.append(key)
                if tr is not None:
                    tr.abort()
                raise ConnectionResetError("server killed or client gone")
            answer = _answer_for(body)
            chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
            usage = {"prompt_tokens": chars // 4 + 1, "completion_tokens": len(answer) // 4 + 1}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            resp = web.json_response({
                "id": "cmpl-" + key[:12], "object": "chat.completion", "model": body.get("model", "x"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": answer}}],
                "usage": usage,
            })
            await resp.prepare(request)
            await resp.write_eof()
            with self._lock:
                self.delivered.append(key)
            return resp

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        return app

    def start(self) -> "ScriptedServer":
        from aiohttp import web

        ready = threading.Event()
        self.dead = False

        async def main():
            self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.5)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
            await site.start()
            self.port = self._runner.addresses[0][1]
            ready.set()

        def thread():
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(main())
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=thread, name="scripted-llm", daemon=True)
        self._thread.start()
        assert ready.wait(30), "scripted server did not start"
        return self

    def kill(self) -> None:
        """Stop answering at once: in-flight requests are cut, new connections refused."""
        self.dead = True
        loop = self._loop
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop)
        fut.result(30)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(30)


# --------------------------------------------------------------------------- helpers
def _overrides(root: Path, inputs: Path, server: ScriptedServer, **extra) -> dict[str, str]:
    return {
        "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
        "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{inputs}]",
        "chunk.size_tokens": "32", "chunk.overlap_tokens": "4",
        "llm.backend": "openai", "llm.api_base": server.base_url, "llm.model": "scripted",
        "llm.concurrency": "2", "ray.actors": "1", "ray.num_cpus": "2",
        # One call per unit and no gleaning: the assertions count paid calls per unit.
        "extract.units_per_call": "1", "extract.glean_rounds": "0",
        **extra,
    }


def _config(root, inputs, server, **extra):
    from corpusgraph.config import load_config

    return load_config(REPO / "conf" / "local.yaml", _overrides(root, inputs, server, **extra))


def _run(spark, cfg):
    from corpusgraph.pipeline import RunContext, run_index

    ctx = RunContext(cfg, spark)
    run_index(ctx, STAGES)
    return ctx


def _tables(warehouse: str) -> dict[str, list[str]]:
    """Each compared table as sorted canonical JSON rows, without run ids and timestamps."""
    from deltalake import DeltaTable

    from corpusgraph.tables import table_path

    out = {}
    for name in COMPARED:
        tbl = DeltaTable(table_path(warehouse, name)).to_pyarrow_table()
        keep = [f.name for f in tbl.schema if f.name != "run_id" and not str(f.type).startswith("timestamp")]
        rows = tbl.select(keep).to_pylist()
        out[name] = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    return out


def _llm_calls(warehouse: str) -> dict[str, dict]:
    from deltalake import DeltaTable

    from corpusgraph.tables import table_path

    rows = DeltaTable(table_path(warehouse, "llm_calls")).to_pyarrow_table().to_pylist()
    return {r["run_id"]: r for r in rows if r["stage"] == "extract"}


def _runs(warehouse: str) -> dict[str, str]:
    from deltalake import DeltaTable

    from corpusgraph.tables import table_path

    return {r["run_id"]: r["status"] for r in DeltaTable(table_path(warehouse, "runs")).to_pyarrow_table().to_pylist()}


def _wait_for(pred, what: str, limit_s: float = 300.0, poll_s: float = 0.05):
    # A guard against a hung run only; no assertion depends on how long anything takes.
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(poll_s)
    raise AssertionError(f"never happened: {what}")


IN_FLIGHT = 2  # llm.concurrency x ray.actors in _overrides


def _assert_paid_once(delivered: list[str], clean_keys: set[str], lost_in_transit: set[str] = frozenset()):
    """No body is paid for twice, except answers that were on the wire when a process was
    SIGKILLed (delivered by the server, never received or cached by the client)."""
    counts = collections.Counter(delivered)
    twice = {k: n for k, n in counts.items() if n > 1 and k not in lost_in_transit}
    assert not twice, f"{len(twice)} request bodies were answered (paid for) more than once"
    assert set(counts) == clean_keys, "the crashed run and its rerun together paid for a different set of calls"


def _repaid_at_kill(delivered: list[str], delivered_at_kill: int) -> set[str]:
    """Bodies answered more than once, checked against the one window a SIGKILL leaves: at most
    IN_FLIGHT of them, each among the last IN_FLIGHT answers delivered before the kill."""
    repaid = {k for k, n in collections.Counter(delivered).items() if n > 1}
    assert len(repaid) <= IN_FLIGHT, f"{len(repaid)} bodies paid twice; at most {IN_FLIGHT} were in flight"
    window = set(delivered[max(0, delivered_at_kill - IN_FLIGHT):delivered_at_kill])
    assert repaid <= window, "an answer delivered well before the kill (so cached) was paid again"
    return repaid


def _write_inputs(root: Path) -> Path:
    inputs = root / "in"
    inputs.mkdir(parents=True)
    for name, text in _docs().items():
        (inputs / name).write_text(text)
    return inputs


@pytest.fixture(scope="module")
def clean(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    inputs = _write_inputs(root)
    server = ScriptedServer().start()
    try:
        cfg = _config(root, inputs, server)
        ctx = _run(spark, cfg)
    finally:
        server.kill()
    units = ctx.results["extract"].rows["units"]
    assert 15 <= units <= 60, f"{units} units: the fixture is meant to give a few dozen"
    assert ctx.results["extract"].rows.get("status_ok") == units
    keys = set(server.delivered)
    assert len(server.delivered) == len(keys) == units
    return {"tables": _tables(cfg.storage.warehouse), "keys": keys, "units": units}


def _in_thread(fn):
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def _llm_worker_pids() -> list[int]:
    """Ray Data map actors running _LLMWorker, among this process's descendants (our own Ray)."""
    pids = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "MapWorker" in cmd or "_LLMWorker" in cmd:
            pids.append(p.pid)
    return pids


# --------------------------------------------------------------------------- the faults
def test_killed_ray_worker_then_rerun(spark, clean, tmp_path):
    inputs = _write_inputs(tmp_path)
    server = ScriptedServer().start()
    try:
        cfg = _config(tmp_path, inputs, server)
        thread, box = _in_thread(lambda: _run(spark, cfg))
        n_kill = clean["units"] // 3
        _wait_for(lambda: server.n_delivered() >= n_kill or not thread.is_alive(), "extraction under way")
        assert thread.is_alive(), f"the run ended before the kill: {box}"
        pids = _llm_worker_pids()
        assert pids, "no _LLMWorker actor process found"
        os.kill(pids[0], signal.SIGKILL)
        killed_at = server.n_delivered()
        thread.join(600)
        assert not thread.is_alive()
        print(f"worker {pids[0]} killed after {killed_at} answers; first run: "
              f"{'failed: ' + repr(box['error'])[:300] if 'error' in box else 'finished'}; "
              f"undelivered={len(server.undelivered)}")
        first_run_paid = server.n_delivered()
        second = _run(spark, cfg)
    finally:
        server.kill()
    assert 0 < killed_at < clean["units"]
    # As for the driver: an answer the server wrote just before the SIGKILL and the actor never
    # cached may be paid again, at most the requests in flight, only among the last answers
    # delivered before the kill; every answer that reached the cache is not.
    repaid = _repaid_at_kill(server.delivered, killed_at)
    _assert_paid_once(server.delivered, clean["keys"], lost_in_transit=repaid)
    assert _tables(cfg.storage.warehouse) == clean["tables"]
    calls = _llm_calls(cfg.storage.warehouse)[second.run_id]
    # The rerun's accounting is what the server answered after the first run ended.
    assert calls["calls"] == len(server.delivered) - first_run_paid
    assert calls["errors"] == 0


def test_killed_model_server_then_rerun(spark, clean, tmp_path):
    inputs = _write_inputs(tmp_path)
    server = ScriptedServer().start()
    n_kill = clean["units"] // 3
    try:
        cfg = _config(tmp_path, inputs, server, **{"llm.max_retries": "1"})
        thread, box = _in_thread(lambda: _run(spark, cfg))
        _wait_for(lambda: server.n_delivered() >= n_kill or not thread.is_alive(), "extraction under way")
        assert thread.is_alive(), f"the run ended before the kill: {box}"
        server.kill()
        paid_before = server.n_delivered()
        thread.join(600)
        assert not thread.is_alive()
        first = box.get("value")
        print(f"server killed after {paid_before} answers; first run: "
              f"{'failed: ' + repr(box['error'])[:300] if 'error' in box else first.results['extract'].rows}")
        restarted = ScriptedServer(port=server.port).start()
        try:
            second = _run(spark, cfg)
        finally:
            restarted.kill()
    finally:
        if not server.dead:
            server.kill()
    assert 0 < paid_before < clean["units"]
    _assert_paid_once(server.delivered + restarted.delivered, clean["keys"])
    assert _tables(cfg.storage.warehouse) == clean["tables"]
    calls = _llm_calls(cfg.storage.warehouse)
    if first is not None:  # the run survived the outage: its failures are llm_error rows, retried next time
        assert first.results["extract"].rows.get("status_llm_error", 0) == clean["units"] - paid_before
        assert calls[first.run_id]["calls"] - calls[first.run_id]["errors"] == paid_before
        assert _runs(cfg.storage.warehouse)[first.run_id] == "partial"  # not "ok": some units got no answer
    # The rerun called the server only for the units with no answer yet.
    assert calls[second.run_id]["calls"] == len(restarted.delivered) == clean["units"] - paid_before
    assert calls[second.run_id]["errors"] == 0
    assert second.results["extract"].rows["sent"] == clean["units"] - paid_before


def _cli(cfg_over: dict[str, str], log: Path) -> subprocess.Popen:
    cmd = [str(Path(sys.executable).with_name("corpusgraph")), "index", "--conf", str(REPO / "conf" / "local.yaml"),
           "--stages", ",".join(STAGES)]
    over = {**cfg_over, "spark.master": "local[2]", "spark.driver_memory": "1g"}
    for k, v in over.items():
        cmd += ["--set", f"{k}={v}"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def test_killed_driver_then_rerun(clean, tmp_path):
    inputs = _write_inputs(tmp_path)
    server = ScriptedServer().start()
    try:
        over = _overrides(tmp_path, inputs, server)
        proc = _cli(over, tmp_path / "first.log")
        n_kill = clean["units"] // 3
        _wait_for(lambda: server.n_delivered() >= n_kill or proc.poll() is not None, "extraction under way",
                  limit_s=600)
        assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        family = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        paid_before = server.n_delivered()
        time.sleep(5)  # what the kill left behind, for the report (no assertion on it)
        left = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        print(f"driver killed after {paid_before} answers; {len(family)} descendants, still running 5 s later: "
              + ", ".join(f"{p.pid}:{' '.join(p.cmdline())[:60]}" for p in left))
        for p in left:  # our own leftovers only, by pid
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        paid_first = server.n_delivered()
        rerun = _cli(over, tmp_path / "second.log")
        rc = rerun.wait(600)
        log = (tmp_path / "second.log").read_text()
        assert rc == 0, log[-3000:]
    finally:
        server.kill()
    assert 0 < paid_before < clean["units"]
    # A SIGKILL can land after the server wrote an answer and before the client cached it: at
    # most the requests in flight, and only the last answers delivered before the kill, may be
    # paid again. Every answer that reached the cache is not.
    repaid = _repaid_at_kill(server.delivered, paid_first)
    _assert_paid_once(server.delivered, clean["keys"], lost_in_transit=repaid)
    assert _tables(over["storage.warehouse"]) == clean["tables"]
    runs = _runs(over["storage.warehouse"])
    # The killed driver's row stays "running" (it never finished); the rerun's is "ok".
    assert sorted(runs.values()) == ["ok", "running"], runs
    (run_id,) = [r for r, status in runs.items() if status == "ok"]
    calls = _llm_calls(over["storage.warehouse"])[run_id]
    assert calls["calls"] == clean["units"] - paid_first + len(repaid)
    assert calls["cache_hits"] == paid_first - len(repaid)
    assert calls["errors"] == 0
