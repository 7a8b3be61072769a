"""Fault tolerance of the index: kill a Ray worker, the model server, the driver or a whole Ray
worker node mid-stage.

Each time the rerun must finish, pay for no call that had already been answered, and produce
the same tables as a clean run. The LLM is a scripted OpenAI-compatible server in a child
process (tests/support/fault_server.py) whose answers are derived from the unit text, so two
runs over the same inputs produce the same tables, and whose log of *delivered* answers (written
to a still-open connection) is the ground truth of what was paid for. The model-server fault
kills that process mid-stage and starts a new one on the same port.

The figures of each fault (rows lost, calls repaid, requests in flight at the kill, seconds, load
average) go to tests/benchmarks/results/faults.json when the whole file has run.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow]

import psutil  # noqa: E402  (a declared test dependency)

STAGES = ["ingest", "chunk", "extract", "resolve"]
# Seconds per answer: the extract stage takes about units x LATENCY_S / IN_FLIGHT (some 5 s), long
# enough that a kill after a third of the answers lands mid-stage, with seconds to spare.
LATENCY_S = 0.5
COMPARED = ("extractions", "entities", "relationships")

_NAMES = ["Contoso", "Fabrikam", "Northwind", "Tailspin", "Litware", "Adatum", "Wingtip", "Proseware",
          "Valencia", "Milan", "Antwerp", "Rotterdam", "Giulia", "Marek", "Hana", "Tobias"]


def _docs() -> dict[str, str]:
    docs = {}
    for i in range(6):  # 3 units each: enough calls to kill a stage in the middle of
        a, b, c, d = (_NAMES[(i * 3 + k) % len(_NAMES)] for k in (0, 1, 5, 9))
        docs[f"note-{i:02d}.txt"] = (
            f"Weekly note {i}. {a} shipped goods from {b} to {c} on day {i + 3}. "
            f"{c} reported that {a} arrived late twice, and {d} asked {b} for a refund. "
            f"The dock lead at {c} said that {d} and {a} agreed a new schedule for next month. "
            f"Trailer number {100 + i} stayed at {b} for repairs while {d} waited."
        )
    return docs


# --------------------------------------------------------------------------- the scripted server
SERVER = REPO / "tests" / "support" / "fault_server.py"


class ScriptedServer:
    """tests/support/fault_server.py in a child process: scripted answers after LATENCY_S, and
    a log of every answer delivered to a connection still open (what was paid for).

    kill() cuts every in-flight request and ends the process at once; a new ScriptedServer on
    the same port (and its own log) stands in for the restarted model server.
    """

    def __init__(self, log: Path, latency_s: float = LATENCY_S, port: int = 0):
        self.log, self.latency_s, self.port = Path(log), latency_s, port
        self.proc: subprocess.Popen | None = None
        self.killed_state: dict | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def dead(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def start(self) -> "ScriptedServer":
        self.log.touch()
        cmd = [sys.executable, str(SERVER), "--latency-s", str(self.latency_s), "--log", str(self.log),
               "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
        url = self.proc.stdout.readline().strip()
        if not url.startswith("http"):
            self.proc.kill()
            raise AssertionError(f"fault_server.py did not start (exit {self.proc.wait()})")
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])
        return self

    @property
    def delivered(self) -> list[str]:
        return self.log.read_text().split()

    @property
    def undelivered(self) -> list[str]:
        p = Path(str(self.log) + ".undelivered")
        return p.read_text().split() if p.exists() else []

    def n_delivered(self) -> int:
        return len(self.delivered)

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=30) as resp:
            return json.loads(resp.read())

    def kill(self) -> None:
        """The model server dies: in-flight requests are cut, new connections refused."""
        if self.dead:
            return
        self.proc.send_signal(signal.SIGUSR1)
        self.proc.wait(30)
        killed = Path(str(self.log) + ".killed")
        self.killed_state = json.loads(killed.read_text()) if killed.exists() else None


# --------------------------------------------------------------------------- helpers
def _overrides(root: Path, inputs: Path, server: ScriptedServer, **extra) -> dict[str, str]:
    return {
        "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
        "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{inputs}]",
        "chunk.size_tokens": "32", "chunk.overlap_tokens": "4",
        "llm.backend": "openai", "llm.api_base": server.base_url, "llm.model": "scripted",
        "llm.preflight": "false",  # the CLI's endpoint check (doctor) would add requests the assertions count
        "llm.concurrency": "2", "ray.actors": "1", "ray.num_cpus": "2",
        # One call per unit and no gleaning: the assertions count paid calls per unit.
        "extract.units_per_call": "1", "extract.glean_rounds": "0",
        **extra,
    }


def _config(root, inputs, server, **extra):
    from corpusgraph.config import load_config

    return load_config(REPO / "conf" / "local.yaml", _overrides(root, inputs, server, **extra))


def _run(spark, cfg):
    from corpusgraph.runner.pipeline import run_index
    from corpusgraph.runner.run import RunContext

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


FAULTS = ("worker_kill", "model_server_kill", "driver_kill", "worker_node_kill")
RESULTS = REPO / "tests" / "benchmarks" / "results" / "faults.json"


@pytest.fixture(scope="module")
def report():
    """Collects each fault's figures; writes faults.json once every fault of the file has run."""
    t0, load0 = time.monotonic(), os.getloadavg()
    out: dict = {"faults": {}}
    yield out
    if set(out["faults"]) != set(FAULTS):
        print(f"faults.json not written: only {sorted(out['faults'])} ran")
        return
    out.update({
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "server": f"tests/support/fault_server.py (scripted answers after {LATENCY_S} s, log of delivered answers)",
        "requests_in_flight_max": IN_FLIGHT,
        "seconds": round(time.monotonic() - t0, 1),
        "load_average_start": [round(x, 2) for x in load0],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    })
    out["faults"] = {k: out["faults"][k] for k in FAULTS}
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")


def _lost(clean_tables: dict, tables: dict) -> dict[str, int]:
    """Rows of the clean run's tables missing after the rerun, and rows it has that they lack."""
    out = {}
    for name in COMPARED:
        want, got = collections.Counter(clean_tables[name]), collections.Counter(tables.get(name, []))
        out[name] = {"missing": sum((want - got).values()), "extra": sum((got - want).values())}
    return out


def _record(report: dict, fault: str, t0: float, load0, clean: dict, server_logs: list[str], tables: dict,
            repaid: set[str], in_flight: int | None, **extra) -> None:
    report["faults"][fault] = {
        "lost_rows": _lost(clean["tables"], tables),
        "calls_never_answered": len(clean["keys"] - set(server_logs)),
        "units": clean["units"],
        "answered": len(server_logs),
        "repaid_calls": len(repaid),
        "in_flight_at_kill": in_flight,
        **extra,
        "seconds": round(time.monotonic() - t0, 1),
        "load_average": [round(x, 2) for x in load0],
    }


def _write_inputs(root: Path) -> Path:
    inputs = root / "in"
    inputs.mkdir(parents=True)
    for name, text in _docs().items():
        (inputs / name).write_text(text)
    return inputs


@pytest.fixture(scope="module")
def clean(spark, tmp_path_factory, report):
    t0 = time.monotonic()
    root = tmp_path_factory.mktemp("clean")
    inputs = _write_inputs(root)
    server = ScriptedServer(root / "served.log").start()
    try:
        cfg = _config(root, inputs, server)
        ctx = _run(spark, cfg)
    finally:
        server.kill()
    units = ctx.results["extract"].rows["units"]
    assert 15 <= units <= 60, f"{units} units: the fixture is meant to give a few dozen"
    assert ctx.results["extract"].rows.get("status_ok") == units
    delivered = server.delivered
    keys = set(delivered)
    assert len(delivered) == len(keys) == units
    tables = _tables(cfg.storage.warehouse)
    assert all(tables[name] for name in COMPARED), {k: len(v) for k, v in tables.items()}
    report["clean_run"] = {"units": units, "answered": len(delivered),
                           "rows": {k: len(v) for k, v in tables.items()}, "seconds": round(time.monotonic() - t0, 1)}
    return {"tables": tables, "keys": keys, "units": units}


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
def test_killed_ray_worker_then_rerun(spark, clean, report, tmp_path):
    t0, load0 = time.monotonic(), os.getloadavg()
    inputs = _write_inputs(tmp_path)
    server = ScriptedServer(tmp_path / "served.log").start()
    try:
        cfg = _config(tmp_path, inputs, server)
        thread, box = _in_thread(lambda: _run(spark, cfg))
        n_kill = clean["units"] // 3
        _wait_for(lambda: server.n_delivered() >= n_kill or not thread.is_alive(), "extraction under way")
        assert thread.is_alive(), f"the run ended before the kill: {box}"
        pids = _llm_worker_pids()
        assert pids, "no _LLMWorker actor process found"
        in_flight = server.stats()["in_flight"]
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
    delivered = server.delivered
    repaid = {k for k, n in collections.Counter(delivered).items() if n > 1}
    tables = _tables(cfg.storage.warehouse)
    _record(report, "worker_kill", t0, load0, clean, delivered, tables, repaid, in_flight,
            answered_before_kill=killed_at, first_run="failed" if "error" in box else "finished")
    assert 0 < killed_at < clean["units"]
    # As for the driver: an answer the server wrote just before the SIGKILL and the actor never
    # cached may be paid again, at most the requests in flight, only among the last answers
    # delivered before the kill; every answer that reached the cache is not.
    repaid = _repaid_at_kill(delivered, killed_at)
    _assert_paid_once(delivered, clean["keys"], lost_in_transit=repaid)
    assert tables == clean["tables"]
    calls = _llm_calls(cfg.storage.warehouse)[second.run_id]
    # The rerun's accounting is what the server answered after the first run ended.
    assert calls["calls"] == len(delivered) - first_run_paid
    assert calls["errors"] == 0


def test_killed_model_server_then_rerun(spark, clean, report, tmp_path):
    t0, load0 = time.monotonic(), os.getloadavg()
    inputs = _write_inputs(tmp_path)
    server = ScriptedServer(tmp_path / "served.log").start()
    n_kill = clean["units"] // 3
    restarted = None
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
        print(f"server killed after {paid_before} answers ({server.killed_state}); first run: "
              f"{'failed: ' + repr(box['error'])[:300] if 'error' in box else first.results['extract'].rows}")
        # The model server comes back on the same port: the rerun's config is unchanged.
        restarted = ScriptedServer(tmp_path / "served-after-restart.log", port=server.port).start()
        assert restarted.port == server.port
        try:
            second = _run(spark, cfg)
        finally:
            restarted.kill()
    finally:
        server.kill()
    assert server.killed_state is not None, "the server's kill left no record"
    delivered = server.delivered + (restarted.delivered if restarted else [])
    repaid = {k for k, n in collections.Counter(delivered).items() if n > 1}
    tables = _tables(cfg.storage.warehouse)
    _record(report, "model_server_kill", t0, load0, clean, delivered, tables, repaid,
            server.killed_state["in_flight"], answered_before_kill=paid_before,
            answered_after_restart=len(restarted.delivered),
            first_run="failed" if first is None else "partial")
    assert 0 < paid_before < clean["units"]
    # The server died with requests in flight; none of them had been answered, so nothing at
    # all may be paid twice.
    assert server.killed_state["served"] == paid_before
    _assert_paid_once(delivered, clean["keys"])
    assert tables == clean["tables"]
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


def test_killed_driver_then_rerun(clean, report, tmp_path):
    t0, load0 = time.monotonic(), os.getloadavg()
    inputs = _write_inputs(tmp_path)
    server = ScriptedServer(tmp_path / "served.log").start()
    try:
        over = _overrides(tmp_path, inputs, server)
        proc = _cli(over, tmp_path / "first.log")
        n_kill = clean["units"] // 3
        _wait_for(lambda: server.n_delivered() >= n_kill or proc.poll() is not None, "extraction under way",
                  limit_s=600)
        assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        family = psutil.Process(proc.pid).children(recursive=True)
        in_flight = server.stats()["in_flight"]
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
    delivered = server.delivered
    repaid = {k for k, n in collections.Counter(delivered).items() if n > 1}
    tables = _tables(over["storage.warehouse"])
    _record(report, "driver_kill", t0, load0, clean, delivered, tables, repaid, in_flight,
            answered_before_kill=paid_first, leftover_processes_killed=len(left))
    assert 0 < paid_before < clean["units"]
    # A SIGKILL can land after the server wrote an answer and before the client cached it: at
    # most the requests in flight, and only the last answers delivered before the kill, may be
    # paid again. Every answer that reached the cache is not.
    repaid = _repaid_at_kill(delivered, paid_first)
    _assert_paid_once(delivered, clean["keys"], lost_in_transit=repaid)
    assert tables == clean["tables"]
    runs = _runs(over["storage.warehouse"])
    # The killed driver's row stays "running" (it never finished); the rerun's is "ok".
    assert sorted(runs.values()) == ["ok", "running"], runs
    (run_id,) = [r for r, status in runs.items() if status == "ok"]
    calls = _llm_calls(over["storage.warehouse"])[run_id]
    assert calls["calls"] == clean["units"] - paid_first + len(repaid)
    assert calls["cache_hits"] == paid_first - len(repaid)
    assert calls["errors"] == 0


# --------------------------------------------------------------------------- a worker node
def _node_family(proc: subprocess.Popen) -> list[psutil.Process]:
    """`ray start --block` and every process of its node: its descendants and its process group
    (the daemon leads a session of its own; raylet's workers may be reparented)."""
    try:
        family = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    seen = {p.pid for p in family}
    for p in psutil.process_iter():
        try:
            if p.pid not in seen and os.getpgid(p.pid) == proc.pid:
                family.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return family


def test_killed_ray_worker_node_then_rerun(clean, report, tmp_path, monkeypatch):
    """A Ray cluster of separate processes (a head with no CPUs, one worker node with two) and
    `corpusgraph index` joining it: mid-extraction the whole worker node (its `ray start` process
    group: raylet, its workers, the LLM actor) is SIGKILLed and a replacement node joins, as a
    cluster's autoscaler or a restarted machine would bring one. The run finishes or fails; either
    way a rerun on the cluster finishes with the clean run's tables, and no answer that reached
    the cache is paid again. The driver is a process of its own, as in production: one that ran a
    local Ray before keeps that Ray's auth settings and cannot join the test cluster."""
    from tests.distributed.cluster import Daemons, RayLocalCluster, localhost_cluster_env, wait_until

    t0, load0 = time.monotonic(), os.getloadavg()
    env = localhost_cluster_env()
    monkeypatch.setenv("RAY_AUTH_MODE", env["RAY_AUTH_MODE"])  # the drivers _cli starts inherit it
    logs = tmp_path / "daemons"
    logs.mkdir()
    daemons = Daemons(logs, env)
    inputs = _write_inputs(tmp_path)
    server = ScriptedServer(tmp_path / "served.log").start()
    try:
        cluster = RayLocalCluster(daemons, Path("/tmp") / f"cg-ray-{os.getpid()}", worker_cpus=2).start()
        over = _overrides(tmp_path, inputs, server, **{"ray.address": cluster.address})
        proc = _cli(over, tmp_path / "first.log")
        n_kill = clean["units"] // 3
        _wait_for(lambda: server.n_delivered() >= n_kill or proc.poll() is not None, "extraction under way",
                  limit_s=600)
        assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        (node_proc,) = [p for name, p in daemons.procs if name.startswith("ray-worker")]
        family = _node_family(node_proc)
        actors = [p for p in family if "MapWorker" in " ".join(p.cmdline()) or "_LLMWorker" in " ".join(p.cmdline())]
        assert actors, "the LLM actor is not on the worker node: " + ", ".join(" ".join(p.cmdline())[:80] for p in family)
        in_flight = server.stats()["in_flight"]
        for p in family:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        killed_at = server.n_delivered()
        daemons.discard(node_proc)
        psutil.wait_procs(family, timeout=30)
        # The replacement node: the same `ray start --address` a restarted machine would run.
        node, log = daemons.start("ray-worker-replacement", [
            str(Path(sys.executable).with_name("ray")), "start", "--address", cluster.address,
            "--num-cpus", str(cluster.worker_cpus), *cluster._node_args()])
        wait_until(lambda: cluster.alive_nodes() == 2, "replacement Ray worker node joined", 240, node, log)
        first_rc = proc.wait(600)
        print(f"worker node killed ({len(family)} processes, {len(actors)} LLM actor) after {killed_at} answers; "
              f"first run exit code {first_rc}")
        first_run_paid = server.n_delivered()
        rerun = _cli(over, tmp_path / "second.log")
        rc = rerun.wait(600)
        assert rc == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        server.kill()
        daemons.stop()
    delivered = server.delivered
    repaid = {k for k, n in collections.Counter(delivered).items() if n > 1}
    tables = _tables(over["storage.warehouse"])
    _record(report, "worker_node_kill", t0, load0, clean, delivered, tables, repaid, in_flight,
            answered_before_kill=killed_at, node_processes_killed=len(family),
            first_run="finished" if first_rc == 0 else f"exit code {first_rc}")
    assert 0 < killed_at < clean["units"]
    # The node died with at most IN_FLIGHT requests on the wire: only those, among the last
    # answers delivered before the kill, may be paid twice.
    repaid = _repaid_at_kill(delivered, killed_at)
    _assert_paid_once(delivered, clean["keys"], lost_in_transit=repaid)
    assert tables == clean["tables"]
    runs, calls = _runs(over["storage.warehouse"]), _llm_calls(over["storage.warehouse"])
    if first_rc == 0:  # the run survived its node: the rerun found nothing left to pay for
        assert list(runs.values()) == ["ok", "ok"] and server.n_delivered() == first_run_paid, runs
    else:  # the rerun paid only for what the first run had no answer for
        (ok,) = [r for r, status in runs.items() if status == "ok"]
        assert calls[ok]["calls"] == len(delivered) - first_run_paid and calls[ok]["errors"] == 0
