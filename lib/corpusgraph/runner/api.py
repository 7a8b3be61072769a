"""The Python API for notebooks: index or update from a Spark DataFrame, register the tables.

    cfg = corpusgraph.load_config("conf/local.yaml")
    corpusgraph.index(spark.table("kb.articles"), cfg)   # columns named by ingest.id/text/title_field
    corpusgraph.register_tables(spark, cfg)              # storage.schema set: the tables by name

The DataFrame is a full snapshot of its documents, like a folder of files: a row absent from it
on `update` soft-deletes its document. Inputs in ingest.inputs are read in the same run.
"""

from __future__ import annotations

from pathlib import Path

from corpusgraph.config import Config, load_config

__all__ = ["index", "update", "register_tables"]


def _context(data, config: Config | str | Path, kind: str, name: str):
    from corpusgraph.runner.run import RunContext

    cfg = config if isinstance(config, Config) else load_config(config)
    return RunContext(cfg, data.sparkSession, kind=kind, input_frames={name: data})


def index(data, config: Config | str | Path, *, name: str = "dataframe", stages: list[str] | None = None) -> dict:
    """Pipeline `index` over a DataFrame's rows (and ingest.inputs); its stage results. Rows are
    named `dataframe:<name>#<id>`."""
    from corpusgraph.runner.pipeline import run_index

    return run_index(_context(data, config, "index", name), stages)


def update(data, config: Config | str | Path, *, name: str = "dataframe") -> dict:
    """Pipeline `update` with the DataFrame as the input's new snapshot."""
    from corpusgraph.runner.pipeline import run_update

    return run_update(_context(data, config, "update", name))


def register_tables(spark, config: Config | str | Path) -> list[str]:
    """Register every table of the warehouse under storage.catalog / storage.schema (a new
    session of Spark's built-in catalog has forgotten them); the names registered."""
    from corpusgraph.storage.catalog import register_tables as register

    cfg = config if isinstance(config, Config) else load_config(config)
    return register(spark, cfg.storage)
