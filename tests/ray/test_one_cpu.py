"""A local Ray with one CPU runs both Ray stages to the end.

Before the fix, Ray Data gave the Parquet read and write tasks (and the file listing and
repartition operators in front of the actor pool) a whole CPU each; with the actor pool already
holding part of the only CPU, they could never be scheduled and the stage waited forever. The
timeout turns such a hang into a failure.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO
from tests.ray.test_faults import ScriptedServer

pytestmark = [pytest.mark.ray]


@pytest.fixture
def one_cpu_ray():
    """A fresh local Ray limited to one CPU (run_llm_task starts it through init_ray)."""
    import ray

    ray.shutdown()  # another test module may have left a 2-CPU Ray in this process
    yield
    ray.shutdown()


@pytest.mark.timeout(300)
def test_llm_and_embed_tasks_finish_on_a_one_cpu_ray(one_cpu_ray, tmp_path):
    import ray

    from corpusgraph.config import EmbeddingSection, ExtractSection, LLMSection, RaySection
    from corpusgraph.prompts import load_prompt
    from corpusgraph.runner.passes.embed import run_embed_task
    from corpusgraph.runner.passes.llm import run_llm_task
    from tests.support.task_outputs import usage_from_outputs
    from corpusgraph.stages.extract.llm import ExtractPrompts, PackTask, pack_batch

    units = [{"unit_id": f"u{i}", "text": f"Contoso shipped goods from Milan to Antwerp on day {i}; Fabrikam paid.",
              "n_tokens": 16} for i in range(6)]
    (tmp_path / "in").mkdir()
    # Packs of one unit: one call per unit, as before packing.
    packs = pack_batch(units, ExtractSection(units_per_call=1), 0)
    pq.write_table(pa.Table.from_batches([packs]), tmp_path / "in" / "units.parquet")
    one_cpu = RaySection(num_cpus=1, actors=1)
    server = ScriptedServer(tmp_path / "served.log", latency_s=0.05).start()
    try:
        llm = LLMSection(backend="openai", api_base=server.base_url, model="scripted", concurrency=2)
        task = PackTask(ExtractSection(), ExtractPrompts(load_prompt(REPO / "conf" / "prompts" / "extract.txt")),
                        "prompt-hash", "scripted", "run-1", 0.0)
        run_llm_task(task, str(tmp_path / "in"), str(tmp_path / "out"), llm=llm, ray_section=one_cpu,
                     cache_dir=str(tmp_path / "cache"), base_url=None)
    finally:
        server.kill()
    assert ray.cluster_resources().get("CPU") == 1.0  # the Ray this ran on really had one CPU
    usage, packs = usage_from_outputs(tmp_path / "out", llm)
    rows = [r for pack in packs.column("rows").to_pylist() for r in pack]
    assert sorted(r["unit_id"] for r in rows) == [f"u{i}" for i in range(6)]
    assert {r["status"] for r in rows} == {"ok"}
    assert usage.calls == 6 and usage.errors == 0

    texts = ["Contoso shipped goods.", "Antwerp is a port.", "Fabrikam paid late."]
    pq.write_table(pa.table({"kind": ["unit"] * 3, "id": ["a", "b", "c"], "text": texts,
                             "text_hash": ["h1", "h2", "h3"]}), tmp_path / "embed-in.parquet")
    run_embed_task(str(tmp_path / "embed-in.parquet"), str(tmp_path / "embed-out"), ray_section=one_cpu,
                   embedding=EmbeddingSection(batch_size=4, max_tokens=32), cache_dir=None)
    vectors = pq.read_table(tmp_path / "embed-out")
    assert sorted(vectors.column("id").to_pylist()) == ["a", "b", "c"]
    assert {len(v) for v in vectors.column("vector").to_pylist()} == {384}
