"""What a verb test hands a stage's transforms instead of a warehouse: tables held as in-memory
Spark frames, and a `save` that materialises a frame in memory (Spark's local checkpoint) where
the step writes it to its hand-off folder. Frames in, the transform, frames out; no Delta commit,
no file. The tables are conformed to their contracts (tables.py) by the warehouse's own
`conform`, so a frame a transform could not write is refused here too.
"""

from __future__ import annotations

from corpusgraph.storage.warehouse import conform
from corpusgraph.tables import spark_schema


class FrameTables:
    """read(name) and overwrite(name, df) over frames held in memory; a table never written reads
    as an empty frame of its contract's schema."""

    def __init__(self, spark, **frames):
        self.spark, self.frames = spark, {}
        for name, df in frames.items():
            self.overwrite(name, df)

    def read(self, name: str):
        if name not in self.frames:
            return self.spark.createDataFrame([], spark_schema(name))
        return self.frames[name]

    def overwrite(self, name: str, df, *, replace_schema: bool = False) -> int:
        """The table replaced by `df`; its rows now (as Warehouse.overwrite returns them)."""
        self.frames[name] = conform(name, df).localCheckpoint()
        return self.frames[name].count()

    def rows(self, name: str, key: str) -> list[dict]:
        return sorted((r.asDict(recursive=True) for r in self.read(name).collect()), key=lambda r: r[key])


class Saved:
    """A step's `save(df, part)`: the frame computed once, held in memory, and kept by part name
    so a test can look at what the transform saved (the hand-off folder's contents in a step)."""

    def __init__(self):
        self.parts: dict = {}

    def __call__(self, df, part: str):
        self.parts[part] = df.localCheckpoint()
        return self.parts[part]
