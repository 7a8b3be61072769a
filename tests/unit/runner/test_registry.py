"""The stage registry as data: named pipelines, declared tables, and what a stage may touch."""

from __future__ import annotations

import pytest

from corpusgraph.runner import registry
from corpusgraph.runner.registry import PIPELINES, STAGES, Stage
from corpusgraph.runner.run import StageResult, StageTables

pytestmark = pytest.mark.unit


def _step(st, **sections):
    return StageResult()


def test_pipelines_name_registered_stages_in_order():
    stages = registry.stages()
    assert STAGES == ("ingest", "chunk", "extract", "resolve", "communities", "reports", "embed")
    assert PIPELINES["calibrate"] == ("extract", "resolve", "communities", "reports")
    assert PIPELINES["estimate"] == PIPELINES["prompt-tune"] == ("ingest", "chunk")
    # An update records its incremental stages under the names of the ones they stand in for.
    recorded = [s.recorded_as for s in registry.pipeline("update")]
    assert recorded == ["ingest", "chunk", "extract", "resolve", "communities", "reports", "embed", "cost"]
    assert all(name in stages for order in PIPELINES.values() for name in order)


def test_a_duplicate_stage_name_fails_loudly():
    with pytest.raises(RuntimeError, match="registered twice"):
        registry._by_name([Stage("ingest", _step), Stage("ingest", _step)])


def test_a_stage_naming_an_undeclared_table_or_section_fails_loudly():
    with pytest.raises(ValueError, match="tables.py does not declare"):
        Stage("x", _step, writes=("no_such_table",))
    with pytest.raises(ValueError, match="config sections"):
        Stage("x", _step, sections=("no_such_section",))


def test_an_unknown_pipeline_is_refused():
    with pytest.raises(ValueError, match="unknown pipeline"):
        registry.pipeline("rebuild")


class _Warehouse:
    def __init__(self):
        self.calls = []

    def read(self, name):
        self.calls.append(("read", name))

    def overwrite(self, name, df, **kw):
        self.calls.append(("overwrite", name))


def test_a_stage_touches_only_the_tables_it_declares():
    wh = _Warehouse()
    tables = StageTables(wh, "chunk", reads=("documents",), writes=("text_units",))
    tables.read("documents")
    tables.read("text_units")  # a stage may read back what it wrote
    tables.overwrite("text_units", None)
    assert wh.calls == [("read", "documents"), ("read", "text_units"), ("overwrite", "text_units")]
    with pytest.raises(PermissionError, match="does not declare"):
        tables.read("entities")
    with pytest.raises(PermissionError, match="does not declare"):
        tables.overwrite("documents", None)
