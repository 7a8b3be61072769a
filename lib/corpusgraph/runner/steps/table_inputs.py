"""Table and DataFrame inputs of the ingest step, read whole or through the change data feed.

A table input is read at a fixed version. The first time, and whenever its change data feed is
off, unusable (versions vacuumed, a schema change) or not wanted (`read: full`), every row is
read: its documents then go to the documents MERGE like files do, and the input's rows in
`source_rows` are replaced. Otherwise only the rows changed since the version read last are
parsed (inserts and update post-images; deletes mark their rows deleted), and the documents
still held by the input's unchanged rows are carried into the MERGE from the documents table, so
the MERGE's soft delete ("absent from this run") still means what it means for files. The
version read is recorded in `input_versions`.
"""

from __future__ import annotations

from dataclasses import dataclass

from corpusgraph.config import IngestSection, TableInput
from corpusgraph.stages.ingest import tabular

__all__ = ["TableRead", "read_table_input", "read_frame_input", "source_rows_for", "CDF_COLUMNS"]

CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


@dataclass
class TableRead:
    key: str            # input_versions.input and the source_uri prefix
    parsed: object      # PARSED rows (DataFrame) of the rows read
    mode: str           # full or cdf
    version: int | None  # the table version read (None: a DataFrame)
    deleted: object = None  # DataFrame(source_uri) of rows the change feed deleted (cdf only)


def _delta(spark, ti: TableInput):
    from delta.tables import DeltaTable

    return DeltaTable.forName(spark, ti.table) if ti.table else DeltaTable.forPath(spark, ti.path)


def _reader(spark, ti: TableInput, **options):
    if ti.table and "versionAsOf" in options:  # time travel by name: the SQL form (documented for catalog tables)
        return spark.sql(f"SELECT * FROM {ti.table} VERSION AS OF {int(options['versionAsOf'])}")
    reader = spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.table(ti.table) if ti.table else reader.load(ti.path)


def _mapped(df, ti: TableInput, what: str):
    """The id, text, title, access_domain and metadata columns of a table, named as ingest reads them."""
    from pyspark.sql import functions as F

    cols = [c for c in df.columns if c not in CDF_COLUMNS]
    lower = {c.lower(): c for c in cols}
    missing = [c for c in (ti.id, ti.text) if c.lower() not in lower]
    if missing:
        raise ValueError(f"{what} has no column {missing[0]!r} (its columns: {cols}); a table input needs an id and a "
                         f"text column: set them in the input's mapping ({{table: ..., id: ..., text: ...}}) or in "
                         "ingest.id_field / ingest.text_field")
    picked = [F.col(lower[ti.id.lower()]).cast("string").alias(ti.id), F.col(lower[ti.text.lower()]).alias(ti.text)]
    if ti.title and ti.title.lower() in lower:
        picked.append(F.col(lower[ti.title.lower()]).cast("string").alias(ti.title))
    if ti.access_domain:
        if ti.access_domain.lower() not in lower:
            raise ValueError(f"{what} has no access domain column {ti.access_domain!r}")
        picked.append(F.col(lower[ti.access_domain.lower()]).cast("string").alias(tabular.DOMAIN_COL))
    taken = {ti.id.lower(), ti.text.lower(), (ti.title or "").lower(), (ti.access_domain or "").lower()}
    meta = ti.metadata if ti.metadata is not None else [c for c in cols if c.lower() not in taken]
    for name in meta:
        if name.lower() not in lower:
            raise ValueError(f"{what} has no metadata column {name!r}")
        picked.append(F.col(lower[name.lower()]).cast("string").alias(name))
    return picked


def read_table_input(spark, ti: TableInput, sec: IngestSection, last_version: int | None, log) -> TableRead:
    """The rows of one table input to parse: all of them, or its changes since `last_version`."""
    what = f"table input {ti.table or ti.path}"
    table = _delta(spark, ti)
    version = int(table.history(1).select("version").first()[0])
    section = tabular.table_section(sec, ti)
    _mapped(_reader(spark, ti), ti, what)  # the mapping names columns the table has (schema only, no read)
    cdf_on = (table.detail().select("properties").first()[0] or {}).get("delta.enableChangeDataFeed") == "true"
    if ti.read == "cdf" and not cdf_on:
        raise ValueError(f"{what} has read: cdf but its change data feed is off (TBLPROPERTIES "
                         "delta.enableChangeDataFeed = true turns it on)")
    if last_version is not None and ti.read != "full" and cdf_on:
        if last_version >= version:
            empty = spark.createDataFrame([], "source_uri string")
            return TableRead(ti.key(), None, "cdf", version, empty)
        try:
            from pyspark.sql import functions as F
            from pyspark.sql.window import Window

            changes = _reader(spark, ti, readChangeFeed="true", startingVersion=last_version + 1,
                              endingVersion=version).where(F.col("_change_type") != "update_preimage")
            id_col = [c for c in changes.columns if c.lower() == ti.id.lower()]
            latest = Window.partitionBy(F.col(id_col[0]) if id_col else F.lit(0)).orderBy(
                F.col("_commit_version").desc(), F.when(F.col("_change_type") == "delete", 0).otherwise(1))
            changes = changes.withColumn("_cg_rank", F.row_number().over(latest)).where("_cg_rank = 1").drop("_cg_rank")
            live = changes.where(F.col("_change_type") != "delete")
            parsed = tabular.parse_table_rows(live.select(*_mapped(live, ti, what)), section, ti.key())
            deleted = changes.where(F.col("_change_type") == "delete").select(
                F.concat(F.lit(ti.key() + "#"), F.col(id_col[0]).cast("string")).alias("source_uri"))
            return TableRead(ti.key(), parsed, "cdf", version, deleted)
        except Exception as exc:  # noqa: BLE001 - vacuumed versions, schema changes: read it whole instead
            if ti.read == "cdf":
                raise
            log(f"  {what}: change data feed unusable since version {last_version + 1} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); reading it whole")
    rows = _reader(spark, ti, versionAsOf=version)
    parsed = tabular.parse_table_rows(rows.select(*_mapped(rows, ti, what)), section, ti.key())
    return TableRead(ti.key(), parsed, "full", version)


def read_frame_input(name: str, df, sec: IngestSection) -> TableRead:
    """A DataFrame handed to the Python API: a full snapshot, mapped by ingest's field names."""
    ti = TableInput(path=f"dataframe:{name}", id=sec.id_field, text=sec.text_field, title=sec.title_field)
    parsed = tabular.parse_table_rows(df.select(*_mapped(df, ti, f"DataFrame input {name!r}")),
                                      tabular.table_section(sec, ti), f"dataframe:{name}")
    return TableRead(f"dataframe:{name}", parsed, "full", None)


def source_rows_for(read: TableRead):
    """The source_rows of the documents parsed from one input."""
    from pyspark.sql import functions as F

    return read.parsed.where(F.col("outcome") == "document").select(
        "source_uri", F.lit(read.key).alias("input"), "content_hash",
        F.lit(read.version).cast("long").alias("version"), F.lit(False).alias("deleted"))
