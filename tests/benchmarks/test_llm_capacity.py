"""`make bench-llm`: how much of an inference server's capacity the extract stage uses.

The server (fixed_latency_server.py, a separate process) serves at most `slots` requests at
once, each in exactly LATENCY_S, so its capacity is slots / LATENCY_S requests per second. The
extract stage runs the product path over UNITS synthetic text units: Parquet hand-off ->
passes.llm.run_llm_task (Ray Data, actor pool, OpenAIChatModel, response cache) -> Parquet.

Two rates are reported per slot count, both as a fraction of capacity:
- fraction_of_capacity: requests served / the server's busy window (first arrival to last
  answer). This is the LLM pass itself, and what the 0.9-at-64-slots target is about.
- end_to_end_fraction: requests / wall time of run_llm_task, which adds Ray planning, actor
  start-up and the Parquet read and write; a fixed few seconds that a 2,000-unit run cannot
  amortise at 256 slots (a real corpus does).

In the same run, Microsoft graphrag's own extraction (graphrag_side.py: pinned graphrag 3.x in
its own virtualenv, built on first use; its default concurrent_requests, 25, and default
max_gleanings, 1, so two calls per unit) is pointed at a fresh server with the same slots and
latency, over the same units, and scored the same two ways from the server's count of its
extraction requests (graphrag_fraction_of_capacity, graphrag_end_to_end_fraction). Its start-up
includes a Python process, its config check and its input and chunking workflows.
graphrag's client did not keep even 8 slots busy here: a py-spy sample showed its main thread
building a request's cache key by YAML-dumping the whole request in pure Python (graphrag_llm's
cache middleware), and it issued about 1 request/s on the shared 2-core machine whatever the
slot count. Its passes therefore cover the first GRAPHRAG_UNITS units (default 100,
env CORPUSGRAPH_BENCH_GRAPHRAG_UNITS); the fractions are rates, so they stay comparable.

Even a perfect client stays under 1.0: the last wave of requests leaves slots idle, so
2,000 units top out at 2000 / (ceil(2000 / slots) * slots), 0.977 at 64 and 256 slots.

LATENCY_S is 1.0 s: long enough that 256 slots (256 requests/s) is within reach of one
2-core machine running the client, the server and Ray together, short enough that 8 slots
(8 requests/s, 250 s for 2,000 units) is a few minutes. ACTORS is 2, one per core, each with
slots / 2 requests in flight. Each run gets a fresh cache folder, so every unit is a real call.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusgraph.config import ExtractSection, LLMSection, RaySection
from corpusgraph.prompts import load_prompt
from corpusgraph.runner.passes.llm import run_llm_task
from corpusgraph.stages.extract.llm import ExtractPrompts, PackTask, pack_batch
from tests.support import graphrag_side
from tests.support.child_server import ChildServer
from tests.support.task_outputs import usage_from_outputs
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.ray]

HERE = Path(__file__).resolve().parent
SUPPORT = Path(__file__).resolve().parents[1] / "support"
RESULTS = HERE / "results" / "llm_capacity.json"
SERVER = SUPPORT / "fixed_latency_server.py"

UNITS = int(os.environ.get("CORPUSGRAPH_BENCH_UNITS", "2000"))
# graphrag's client is CPU-bound (see the module docstring): ~1 request/s on the shared 2-core
# machine, so 2,000 units would take over an hour per slot count. Its fraction is a rate, so a
# shorter pass over the first GRAPHRAG_UNITS of the same units measures the same thing.
GRAPHRAG_NOTE = ("graphrag's own `graphrag index` (extraction workflows only, default settings) over the first "
                 "graphrag_units of the same units, one fresh server per slot count; scored from the server's "
                 "count of its extraction requests (its one start-up check request excluded). Its client builds "
                 "each request's cache key by YAML-dumping the request in pure Python (seen with py-spy); on the "
                 "shared 2-core machine it issued about 1 request/s whatever the slot count.")
GRAPHRAG_UNITS = int(os.environ.get("CORPUSGRAPH_BENCH_GRAPHRAG_UNITS", str(min(UNITS, 100))))
LATENCY_S = 1.0
SLOTS = (8, 64, 256)
ACTORS = 2
TARGET_AT_64 = 0.9


def actor_concurrency(slots: int, actors: int = ACTORS) -> int:
    """Requests in flight per actor so that all actors together cover every slot."""
    return math.ceil(slots / actors)


def unit_rows(n: int) -> list[dict]:
    """n distinct units of about 300 tokens: what both clients extract from."""
    filler = ("Contoso Freight moved reefer containers from the Antwerp terminal to the Milan hub, "
              "where Giulia Sarti logged a two-day delay caused by a customs hold. ") * 7
    return [{"unit_id": f"u{i:05d}", "text": f"Report {i}. {filler}"} for i in range(n)]


def write_units(path: Path, n: int) -> None:
    """The units in packs of one (one call each) in one Parquet file (what Spark writes for a small
    pending set once adaptive execution has coalesced it: the hardest case for spreading work)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([pack_batch(unit_rows(n), ExtractSection(units_per_call=1), 0)]), path)


class BenchServer(ChildServer):
    """The fixed-latency server in its own process, so it never competes for our GIL."""

    def __init__(self, slots: int, latency_s: float):
        super().__init__(SERVER, "--slots", str(slots), "--latency-s", str(latency_s))

    def stats(self) -> dict:
        return self.get_json("/stats", timeout=10)


def measure(slots: int, root: Path, units: int = UNITS, latency_s: float = LATENCY_S, actors: int = ACTORS) -> dict:
    """One extract pass against a server with `slots` slots; rates as fractions of its capacity."""
    in_path = root / "in" / "units.parquet"
    write_units(in_path, units)
    concurrency = actor_concurrency(slots, actors)
    load_before = os.getloadavg()[0]
    server = BenchServer(slots, latency_s)
    try:
        llm = LLMSection(backend="openai", api_base=server.base_url, model="bench", concurrency=concurrency,
                         timeout_s=120.0, max_retries=3)
        # the limits the results were measured with (the defaults are now sized for real models)
        section = ExtractSection(max_tokens=400, max_entities=5, max_relationships=5)
        task = PackTask(section, ExtractPrompts(load_prompt(REPO / "conf" / "prompts" / "extract.txt")),
                        "bench-prompt", "bench", "bench-run", 0.0)
        t0 = time.monotonic()  # the server's clock too (see fixed_latency_server.py)
        run_llm_task(task, str(in_path.parent), str(root / "out"), llm=llm,
                     ray_section=RaySection(num_cpus=os.cpu_count(), actors=actors),
                     cache_dir=str(root / "cache"), base_url=None)
        t1 = time.monotonic()
        stats = server.stats()
    finally:
        server.stop()
    usage, packs = usage_from_outputs(root / "out", llm)
    rows = [r for pack in packs.column("rows").to_pylist() for r in pack]
    capacity = slots / latency_s
    return {
        "slots": slots, "actors": actors, "concurrency_per_actor": concurrency, "rows": len(rows),
        "ok": sum(1 for r in rows if r["status"] == "ok"), "errors": usage.errors,
        "served": stats["served"], "max_concurrent": stats["max_concurrent"], "busy_s": stats["busy_s"],
        "ramp_s": stats["ramp_s"],
        # Other work on the machine takes CPU from the client: 256 slots need most of 2 cores.
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "wall_s": t1 - t0, "capacity_rps": capacity,
        # Before the first request: planning, actor start-up, the read. After the last answer:
        # building the last blocks and writing them.
        "before_first_request_s": stats["first_arrival"] - t0, "after_last_answer_s": t1 - stats["last_done"],
        "fraction_of_capacity": stats["served"] / stats["busy_s"] / capacity,
        "end_to_end_fraction": stats["served"] / (t1 - t0) / capacity,
    }


def measure_graphrag(slots: int, root: Path, units: int = GRAPHRAG_UNITS, latency_s: float = LATENCY_S) -> dict:
    """graphrag's extraction over the same units against a fresh server with `slots` slots."""
    load_before = os.getloadavg()[0]
    server = BenchServer(slots, latency_s)
    try:
        graphrag_side.write_project(root, ((r["unit_id"], r["text"]) for r in unit_rows(units)), server.base_url)
        run = graphrag_side.run_index(root)
        stats = server.stats()
    finally:
        server.stop()
    ours = stats["by_client"].get("graphrag", {"served": 0, "busy_s": 0.0, "first_arrival": None,
                                               "last_done": None})
    capacity = slots / latency_s
    served, busy = ours["served"], ours["busy_s"]
    return {
        "slots": slots, "units": units, "graphrag_version": graphrag_side.GRAPHRAG_VERSION,
        "completed": run.completed, "error": run.error, "text_units": run.text_units,
        "entities": run.entities, "relationships": run.relationships,
        "served": served, "other_requests": stats["served"] - served,  # its start-up model check
        "requests_per_unit": served / units, "max_concurrent": stats["max_concurrent"], "busy_s": busy,
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "wall_s": run.wall_s, "capacity_rps": capacity,
        "achieved_rps": served / busy if busy else 0.0,
        "before_first_request_s": (ours["first_arrival"] - run.t0) if ours["first_arrival"] else None,
        "after_last_answer_s": (run.t0 + run.wall_s - ours["last_done"]) if ours["last_done"] else None,
        "fraction_of_capacity": served / busy / capacity if busy else 0.0,
        "end_to_end_fraction": served / run.wall_s / capacity,
        "log_tail": None if run.completed else run.log_tail[-1500:],
    }


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.platform()}; {platform.processor() or platform.machine()}; {os.cpu_count()} cores; " \
           f"python {platform.python_version()}; load average before the run {load}"


@pytest.fixture(scope="module")
def ray_session():
    import ray

    # One local Ray for all slot counts: its start-up is paid once and is not part of any pass.
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def graphrag_venv():
    """graphrag's own virtualenv, built on first use (pip from PyPI, a few minutes)."""
    return graphrag_side.ensure_venv()


def test_extract_uses_the_servers_capacity(ray_session, graphrag_venv, tmp_path):
    where = machine()
    runs, theirs = [], []
    for slots in SLOTS:  # both clients at one slot count, one after the other, each on a fresh server
        runs.append(measure(slots, tmp_path / f"slots{slots}"))
        theirs.append(measure_graphrag(slots, tmp_path / f"graphrag{slots}"))
    print(f"\n{UNITS} units, latency {LATENCY_S:g} s, {ACTORS} actors")
    print(" slots  per actor  capacity rps  achieved rps  fraction  end-to-end  max in service  wall s")
    for r in runs:
        print(f" {r['slots']:>5}  {r['concurrency_per_actor']:>9}  {r['capacity_rps']:>12.0f}"
              f"  {r['served'] / r['busy_s']:>12.1f}  {r['fraction_of_capacity']:>8.3f}"
              f"  {r['end_to_end_fraction']:>10.3f}  {r['max_concurrent']:>14}  {r['wall_s']:>6.1f}")
    print(f"graphrag {graphrag_side.GRAPHRAG_VERSION}, {GRAPHRAG_UNITS} units, its default concurrent_requests")
    print(" slots  requests/unit  achieved rps  fraction  end-to-end  max in service  wall s  completed")
    for g in theirs:
        print(f" {g['slots']:>5}  {g['requests_per_unit']:>13.2f}  {g['achieved_rps']:>12.1f}"
              f"  {g['fraction_of_capacity']:>8.3f}  {g['end_to_end_fraction']:>10.3f}  {g['max_concurrent']:>14}"
              f"  {g['wall_s']:>6.1f}  {g['completed']}")
    at64 = next((r["fraction_of_capacity"] for r in runs if r["slots"] == 64), None)
    if at64 is not None:
        print(f"target: >= {TARGET_AT_64} of capacity at 64 slots: {'met' if at64 >= TARGET_AT_64 else 'NOT met'}")
    for r, g in zip(runs, theirs):
        ahead = r["fraction_of_capacity"] > g["fraction_of_capacity"]
        print(f"{r['slots']} slots: ours {r['fraction_of_capacity']:.3f} vs graphrag {g['fraction_of_capacity']:.3f}"
              f" -> {'ahead' if ahead else 'NOT ahead'}")
    result = {
        "fraction_of_capacity": {str(r["slots"]): round(r["fraction_of_capacity"], 3) for r in runs},
        "end_to_end_fraction_of_capacity": {str(r["slots"]): round(r["end_to_end_fraction"], 3) for r in runs},
        "graphrag_fraction_of_capacity": {str(g["slots"]): round(g["fraction_of_capacity"], 3) for g in theirs},
        "graphrag_end_to_end_fraction_of_capacity": {str(g["slots"]): round(g["end_to_end_fraction"], 3)
                                                     for g in theirs},
        "graphrag_version": graphrag_side.GRAPHRAG_VERSION,
        "graphrag_concurrent_requests": "default (25)",
        "graphrag_units": GRAPHRAG_UNITS,
        "graphrag_note": GRAPHRAG_NOTE,
        "latency_s": LATENCY_S,
        "units": UNITS,
        "actors": ACTORS,
        "concurrency": {str(r["slots"]): r["concurrency_per_actor"] for r in runs},  # per actor, by slots
        "runs": runs,
        "graphrag_runs": theirs,
        "machine": where,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for r in runs:  # behaviour, not speed: every unit answered once, never beyond the slots
        assert r["rows"] == UNITS and r["ok"] == UNITS and r["errors"] == 0
        assert r["served"] == UNITS and r["max_concurrent"] <= r["slots"]
    for g in theirs:  # graphrag ran to the end on every unit: one extraction and one gleaning call each
        assert g["completed"], g["error"]
        assert g["text_units"] == GRAPHRAG_UNITS and g["served"] == 2 * GRAPHRAG_UNITS
        assert g["max_concurrent"] <= g["slots"]
