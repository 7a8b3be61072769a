"""A Ray LLM task's Parquet output as tests look at it: its accounting and its rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from corpusgraph.config import LLMSection
from corpusgraph.llm.base import Usage
from corpusgraph.runner.passes.llm import META, output_usage
from corpusgraph.storage.shards import COLUMNS as SHARD_COLUMNS


def usage_from_outputs(path: str | Path, llm: LLMSection) -> tuple[Usage, pa.Table]:
    """The task's accounting (passes.llm.output_usage, the pyarrow twin of the pipeline's Spark
    sums) and its output rows without the bookkeeping columns."""
    import pyarrow.dataset as pads

    usage, _ = output_usage(path, llm)
    tbl = pads.dataset(str(path), format="parquet").to_table()
    meta = [n for n, _ in META + SHARD_COLUMNS]
    return usage, tbl.drop_columns([n for n in meta if n in tbl.column_names])
