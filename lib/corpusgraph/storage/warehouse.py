"""Reading and writing the Delta tables of tables.py, with every write checked against its schema."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Sequence

import pyarrow as pa

from corpusgraph.tables import TABLES, spark_schema, table, table_path

__all__ = ["Warehouse", "conform"]


class Warehouse:
    """The Delta tables under one warehouse folder, for one Spark session."""

    def __init__(self, spark, root: str):
        self.spark, self.root = spark, root

    def path(self, name: str) -> str:
        return table_path(self.root, name)

    @property
    def local(self) -> bool:
        """A plain folder (not a URI): delta-rs writes there with no storage options to carry."""
        return "://" not in self.root

    def ensure_all(self, names=None) -> None:
        """Create every declared table (or those named) that does not exist yet, empty, with its schema.

        On a local warehouse delta-rs creates them (milliseconds each; a Spark createIfNotExists
        is a JVM round trip and a commit, seconds each, paid by every first run); on a URI Spark
        does, through the Hadoop filesystem the cluster configured.
        """
        for name in names or TABLES:
            if not self.local:
                from delta.tables import DeltaTable

                DeltaTable.createIfNotExists(self.spark).location(self.path(name)).addColumns(
                    spark_schema(name)).execute()
                self._add_missing_columns(name)
            elif not (Path(self.path(name)) / "_delta_log").is_dir():  # not yet a Delta table
                from deltalake import DeltaTable as RsTable

                RsTable.create(self.path(name), schema=table(name).schema, mode="ignore")
            else:
                self._add_missing_columns(name)

    def _add_missing_columns(self, name: str) -> None:
        """Columns the contract gained since the table was made (all nullable), added to it, so a
        warehouse made before them still merges and reads (e.g. documents.spans, text_units.page_start)."""
        declared = table(name).schema
        if self.local:
            from deltalake import DeltaTable as RsTable
            from deltalake import Field, Schema

            rs = RsTable(self.path(name))
            have = {f.name for f in rs.schema().fields}
            missing = [f for f in declared if f.name not in have]
            if missing:
                wanted = Schema.from_arrow(pa.schema(missing))
                rs.alter.add_columns([Field(f.name, f.type, nullable=True) for f in wanted.fields])
            return
        have = set(self.read(name).columns)
        missing = [f for f in spark_schema(name).fields if f.name not in have]
        if missing:
            cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
            self.spark.sql(f"ALTER TABLE delta.`{self.path(name)}` ADD COLUMNS ({cols})")

    def read(self, name: str):
        return self.spark.read.format("delta").load(self.path(name))

    def conform(self, name: str, df):
        return conform(name, df)

    def overwrite(self, name: str, df, *, replace_schema: bool = False) -> int:
        """Replace the table with `df`; returns its rows now. replace_schema: the table takes the
        declared schema even where its stored one differs (a warehouse made before a column was
        added to the table's contract).

        The count is the commit's own (its operationMetrics.numOutputRows, found by a tag the
        write leaves in the commit's userMetadata), so a step need not read back what it wrote;
        where the log cannot be read without Spark (a URI) the table is counted."""
        tag = f"corpusgraph-overwrite-{uuid.uuid4().hex}"
        writer = self.conform(name, df).write.format("delta").mode("overwrite").option("userMetadata", tag)
        if replace_schema:
            writer = writer.option("overwriteSchema", "true")
        writer.save(self.path(name))
        written = self._rows_written(name, tag)
        return written if written is not None else self.read(name).count()

    def _rows_written(self, name: str, tag: str) -> int | None:
        """numOutputRows of the commit tagged `tag` among the table's last few (delta-rs reads
        the log's JSON, no Spark job); None when it is not there or says nothing."""
        if not self.local:
            return None
        from deltalake import DeltaTable as RsTable

        rs = RsTable(self.path(name))
        for commit in rs.history(5):
            if commit.get("userMetadata") == tag:
                rows = (commit.get("operationMetrics") or {}).get("numOutputRows")
                return int(rows) if rows is not None else None
        # No commit: Delta records none for a write with nothing to add or remove (an empty frame
        # over an empty table, e.g. claims when no unit states one). A table without files is empty.
        if _no_data_files(rs):
            return 0
        return None

    def _without_rows(self, name: str) -> bool:
        """The table holds no data file (delta-rs reads the log on the driver, no Spark job). Only
        on a local warehouse; on a URI the MERGE runs whatever the table holds."""
        if not self.local:
            return False
        from deltalake import DeltaTable as RsTable

        return _no_data_files(RsTable(self.path(name)))

    def append(self, name: str, df) -> None:
        self.conform(name, df).write.format("delta").mode("append").save(self.path(name))

    def merge(self, name: str, df, *, update: bool = True, delete_missing: bool = False,
              soft_delete: str | None = None, scope: str | None = None) -> None:
        """Upsert on the table's key.

        update: matched rows take the new values. delete_missing: target rows absent from df are
        deleted. soft_delete: instead, set this boolean column to true on them (documents).
        scope: a SQL condition on the target row (alias t) limiting which absent rows are deleted
        or soft-deleted (the rows of one input, when df holds only that input's).

        Into a table with no rows (every table of a first build) the MERGE would match, update
        and delete nothing and insert every source row: an append writes the same rows, in about
        a third of the Spark executions (the MERGE's source materialisation, its join with the
        target's snapshot and its follow-ups are 7-13 whatever the size).
        """
        from delta.tables import DeltaTable

        if self._without_rows(name):
            self.append(name, df)
            return
        keys = table(name).key
        cond = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
        m = DeltaTable.forPath(self.spark, self.path(name)).alias("t").merge(self.conform(name, df).alias("s"), cond)
        if update:
            m = m.whenMatchedUpdateAll()
        elif soft_delete:  # a document that comes back is live again; nothing else changes
            m = m.whenMatchedUpdate(condition=f"t.`{soft_delete}`", set={soft_delete: "false"})
        m = m.whenNotMatchedInsertAll()
        where = f" AND ({scope})" if scope else ""
        if soft_delete:
            m = m.whenNotMatchedBySourceUpdate(condition=f"NOT t.`{soft_delete}`{where}", set={soft_delete: "true"})
        elif delete_missing:
            m = m.whenNotMatchedBySourceDelete(condition=scope)
        m.execute()

    def upsert_records(self, name: str, records: list[dict]) -> None:
        """Upsert a few records built on the driver (a run's `runs` row, its `llm_calls` rows) on the
        table's key. On a local warehouse through delta-rs: a Spark MERGE of one row runs several
        jobs, twice per run; on a URI through Spark. Records lacking a column
        write it as null; a column the table lacks is an error.
        """
        schema = table(name).schema
        extra = sorted({k for r in records for k in r} - set(schema.names))
        if extra:
            raise ValueError(f"records for table {name!r} have columns it lacks: {extra}")
        if not records:
            return
        if not self.local:
            self.merge(name, self.spark.createDataFrame([tuple(r.get(f) for f in schema.names) for r in records],
                                                        spark_schema(name)))
            return
        import pyarrow as pa
        from deltalake import DeltaTable as RsTable

        self.ensure_all([name])
        cond = " AND ".join(f"t.`{k}` = s.`{k}`" for k in table(name).key)
        (RsTable(self.path(name)).merge(pa.Table.from_pylist(records, schema=schema), cond,
                                         source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())

    def delete_where_missing(self, name: str, keys_df, key: str | Sequence[str]) -> bool:
        """Delete rows whose key (one column or several) is not among keys_df's (e.g. reports of
        vanished communities, vectors of items that no longer exist). Returns whether it deleted.

        The MERGE runs only when some row is missing: a first build and most updates find none,
        and one anti-join that finds nothing costs a job where the MERGE costs ten (it scans the
        table, joins, and commits a version that changes nothing). The anti-join matches keys the
        way the MERGE does (`=`, so a null key counts as missing)."""
        keys = [key] if isinstance(key, str) else list(key)
        source = keys_df.select(*keys).distinct()
        if not self.read(name).join(source, keys, "left_anti").limit(1).count():
            return False
        self._merge_on(name, source, keys).whenNotMatchedBySourceDelete().execute()
        return True

    def delete_matching(self, name: str, keys_df, key: str | Sequence[str]) -> None:
        """Delete rows whose key is among keys_df's (e.g. the text units of deleted documents)."""
        keys = [key] if isinstance(key, str) else list(key)
        self._merge_on(name, keys_df.select(*keys), keys).whenMatchedDelete().execute()

    def _merge_on(self, name: str, source, keys: list[str]):
        from delta.tables import DeltaTable

        cond = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
        return DeltaTable.forPath(self.spark, self.path(name)).alias("t").merge(source.alias("s"), cond)


def _no_data_files(rs) -> bool:
    """The delta-rs table's current version adds no data file: it holds no rows."""
    return rs.get_add_actions(flatten=True).num_rows == 0


def conform(name: str, df):
    """The frame with exactly table `name`'s columns, in order and declared types; a clear error
    when a column is missing (a stage bug, caught before anything is written), except the table's
    optional columns, written as null."""
    from pyspark.sql import functions as F

    schema = spark_schema(name)
    optional = set(table(name).optional)
    missing = [f.name for f in schema if f.name not in df.columns and f.name not in optional]
    if missing:
        raise ValueError(f"output for table {name!r} lacks columns {missing}; it has {df.columns}")
    return df.select([(F.col(f.name) if f.name in df.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                      for f in schema])
