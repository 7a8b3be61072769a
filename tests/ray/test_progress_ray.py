"""Progress of the Ray stages, counted on the driver: an LLM task's bar moves as answers come (the
chat client tells the worker of each one, the worker tells the driver's counter actor) and ends
at the rows written; the embed task's bar counts vectors. Ray Data's own progress is off."""

from __future__ import annotations

import io
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusgraph.runner import progress
from corpusgraph.runner.progress import Work
from tests.conftest import REPO
from tests.ray.test_faults import ScriptedServer

pytestmark = [pytest.mark.ray]

ROWS = 60  # at 0.1 s an answer and 2 in flight, the task takes at least 3 s: several polls see it move


@pytest.fixture
def log(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(progress, "_settings", progress._Settings(stream=out, interactive=False, interval_s=0.05))
    return out


def _counts(text: str, label: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(rf"^\[corpusgraph\] {re.escape(label)}: (\d+)/(\d+) ", text, re.M)]


@pytest.mark.timeout(600)
def test_llm_and_embed_bars_move_with_the_work_and_end_at_the_rows_written(log, tmp_path):
    import ray

    from corpusgraph.config import EmbeddingSection, ExtractSection, LLMSection, RaySection
    from corpusgraph.prompts import load_prompt
    from corpusgraph.runner.passes.embed import run_embed_task
    from corpusgraph.runner.passes.llm import run_llm_task
    from corpusgraph.stages.extract.llm import ExtractPrompts, PackTask, pack_batch

    (tmp_path / "in").mkdir()
    units = [{"unit_id": f"u{i}", "text": f"Contoso shipped crate {i} from Milan to Antwerp.", "n_tokens": 12}
             for i in range(ROWS)]
    # Packs of one unit: one LLM call per row, so the bar counts rows.
    pq.write_table(pa.Table.from_batches([pack_batch(units, ExtractSection(units_per_call=1), 0)]),
                   tmp_path / "in" / "units.parquet")
    server = ScriptedServer(tmp_path / "served.log", latency_s=0.1).start()
    try:
        llm = LLMSection(backend="openai", api_base=server.base_url, model="scripted", concurrency=2)
        task = PackTask(ExtractSection(), ExtractPrompts(load_prompt(REPO / "conf" / "prompts" / "extract.txt")),
                        "prompt-hash", "scripted", "run-1", 0.0)
        run_llm_task(task, str(tmp_path / "in"), str(tmp_path / "out"), llm=llm, ray_section=RaySection(actors=1),
                     cache_dir=str(tmp_path / "cache"), base_url=None, work=Work("extract", "LLM calls", ROWS))
    finally:
        server.kill()
    text = log.getvalue()
    counts = _counts(text, "extract")
    assert counts[-1] == (ROWS, ROWS)
    assert re.search(rf"\[corpusgraph\] extract: {ROWS}/{ROWS} LLM calls \(100%\), .+, done in \S+$", text)
    assert [d for d, _ in counts] == sorted(d for d, _ in counts)  # never backwards
    assert any(0 < d < ROWS for d, _ in counts), text  # seen part-way, per answer, not only at the end
    # Ray Data's own progress is off without --verbose.
    assert ray.data.DataContext.get_current().enable_progress_bars is False

    texts = [f"Fabrikam paid invoice {i}." for i in range(10)]
    pq.write_table(pa.table({"kind": ["unit"] * 10, "id": [f"e{i}" for i in range(10)], "text": texts,
                             "text_hash": [f"h{i}" for i in range(10)]}), tmp_path / "embed-in.parquet")
    run_embed_task(str(tmp_path / "embed-in.parquet"), str(tmp_path / "embed-out"), ray_section=RaySection(actors=1),
                   embedding=EmbeddingSection(batch_size=4, max_tokens=32), cache_dir=None,
                   work=Work("embed", "vectors", 10))
    assert _counts(log.getvalue(), "embed")[-1] == (10, 10)
    assert re.search(r"^\[corpusgraph\] embed: 10/10 vectors \(100%\), .+, done in \S+$", log.getvalue(), re.M)


@pytest.mark.timeout(300)
def test_a_pass_keeps_its_counter_when_an_earlier_pass_is_collected(log):
    """The counter a pass's workers tell must live as long as that pass, whatever became of the
    handles of passes before it (a long pass once showed no line after the garbage collector
    took the previous pass's handle)."""
    import gc
    import time

    import ray

    from corpusgraph.config import RaySection
    from corpusgraph.runner.passes.base import init_ray, progress_feed

    init_ray(RaySection(actors=1))
    with progress_feed(Work("first", "rows", 4), lambda: 4) as first:
        ray.get(first[0].add.remote(first[1], 4), timeout=60)
    with progress_feed(Work("second", "rows", 10), lambda: 10) as second:
        del first
        gc.collect()
        time.sleep(1)  # time for Ray to act on the freed handle
        ray.get(second[0].add.remote(second[1], 3), timeout=60)
        deadline = time.monotonic() + 30
        while (3, 10) not in _counts(log.getvalue(), "second") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (3, 10) in _counts(log.getvalue(), "second"), log.getvalue()
    assert _counts(log.getvalue(), "first")[-1] == (4, 4)
