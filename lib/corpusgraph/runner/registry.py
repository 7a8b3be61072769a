"""The stage registry as data: every stage with its step, the config sections it is handed, and
the tables it reads and writes; and the named pipelines as ordered lists of stage names.

Read top to bottom, this is the whole index pipeline. A stage is run by runner/pipeline.py: it gets a
StageContext whose tables are exactly the ones declared here, and its sections as keyword
arguments. Update's incremental chunk and communities and its cost summary are stages of their
own, recorded under the names of the stages they stand in for, so the `runs` and `llm_calls`
rows of an update read as they always have.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable

from corpusgraph.tables import TABLES

__all__ = ["Stage", "PIPELINES", "STAGES", "stages", "pipeline"]


@dataclass(frozen=True)
class Stage:
    """One registry entry. `name` is its key here; `recorded_as` the name its results, hand-off
    folders and LLM accounting go under (the name of the stage it stands in for); `sections` the
    config sections passed to `step` as keyword arguments; `reads` and `writes` its tables."""

    name: str
    step: Callable
    sections: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    recorded_as: str = ""

    def __post_init__(self) -> None:
        from corpusgraph.config import Config

        if not self.recorded_as:
            object.__setattr__(self, "recorded_as", self.name)
        unknown = [t for t in self.reads + self.writes if t not in TABLES]
        if unknown:
            raise ValueError(f"stage {self.name!r} names tables tables.py does not declare: {unknown}")
        missing = [s for s in self.sections if s not in Config.model_fields]
        if missing:
            raise ValueError(f"stage {self.name!r} names config sections the config does not have: {missing}")


# Named pipelines, each an ordered list of stage names. `update` swaps in the incremental stages;
# `estimate` counts a scratch corpus; `calibrate` runs the LLM stages on a sample of its units;
# `prompt-tune` needs the corpus's text units only.
PIPELINES: dict[str, tuple[str, ...]] = {
    "index": ("ingest", "chunk", "extract", "resolve", "communities", "reports", "embed"),
    "update": ("ingest", "chunk_incremental", "extract", "resolve", "communities_incremental", "reports", "embed",
               "cost"),
    "estimate": ("ingest", "chunk"),
    "calibrate": ("extract", "resolve", "communities", "reports"),
    "prompt-tune": ("ingest", "chunk"),
}

STAGES: tuple[str, ...] = PIPELINES["index"]

_REPORT_INPUTS = ("communities", "entities", "relationships", "text_units", "documents")


@cache
def stages() -> dict[str, Stage]:
    """Every stage by name, in pipeline order (built on first use: the steps import Spark)."""
    from corpusgraph.runner.steps import embed as embed_step
    from corpusgraph.runner.steps import index as steps
    from corpusgraph.runner.steps import ingest as ingest_step
    from corpusgraph.runner.steps import update as update_steps

    return _by_name([
        Stage("ingest", ingest_step.ingest, ("ingest", "storage"),
              writes=("documents", "quarantine", "source_rows", "input_versions")),
        Stage("chunk", steps.chunk, ("chunk",), reads=("documents",), writes=("text_units",)),
        Stage("chunk_incremental", update_steps.chunk, ("chunk",), reads=("documents",), writes=("text_units",),
              recorded_as="chunk"),
        Stage("extract", steps.extract, ("extract", "llm", "ray"), reads=("text_units",), writes=("extractions",)),
        Stage("resolve", steps.resolve, ("resolve", "extract", "llm", "ray"),
              reads=("extractions", "text_units", "resolve_pairs"),
              writes=("entities", "entity_aliases", "relationships", "claims", "resolve_pairs")),
        Stage("communities", steps.communities, ("communities",), reads=("entities", "relationships"),
              writes=("communities",)),
        Stage("communities_incremental", update_steps.communities, ("communities", "update"),
              reads=("entities", "relationships"), writes=("communities",), recorded_as="communities"),
        Stage("reports", steps.reports, ("reports", "llm", "ray"), reads=_REPORT_INPUTS,
              writes=("community_reports", "community_domain_reports")),
        Stage("embed", embed_step.embed, ("embeddings", "ray", "storage"),
              reads=("text_units", "entities", "community_reports", "documents"), writes=("embeddings",)),
        # Reads what a full rebuild's price is measured from (estimate/rates.py's warehouse rates).
        Stage("cost", update_steps.cost, ("update", "extract", "resolve", "reports", "embeddings", "llm", "estimate"),
              reads=("text_units", "extractions", "entities", "relationships", "community_reports",
                     "community_domain_reports", "documents")),
    ])


def _by_name(entries: list[Stage]) -> dict[str, Stage]:
    out: dict[str, Stage] = {}
    for entry in entries:
        if entry.name in out:
            raise RuntimeError(f"stage {entry.name!r} is registered twice")
        out[entry.name] = entry
    for name, order in PIPELINES.items():
        unknown = [s for s in order if s not in out]
        if unknown:
            raise RuntimeError(f"pipeline {name!r} names unregistered stages {unknown}")
        recorded = [out[s].recorded_as for s in order]
        if len(set(recorded)) != len(recorded):
            raise RuntimeError(f"pipeline {name!r} would record two stages under one name: {recorded}")
    return out


def pipeline(name: str) -> list[Stage]:
    """The stages of a named pipeline, in order."""
    if name not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}; known: {sorted(PIPELINES)}")
    registry = stages()
    return [registry[s] for s in PIPELINES[name]]
