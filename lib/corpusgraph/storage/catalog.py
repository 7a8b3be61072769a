"""The output tables registered in a catalog, by name (storage.catalog, storage.schema).

Each table stays where the warehouse keeps it; the catalog gets an external table over that
folder (`CREATE TABLE ... USING DELTA LOCATION ...`), so `SELECT * FROM corpusgraph.entities`
reads what the pipeline wrote, appends included. Registering is idempotent; a name already
registered at another location is an error, never silently repointed.

Unity Catalog (not testable here, no Databricks) takes the same statement for a warehouse under an
external location the metastore admin has granted; managed tables are not made.
"""

from __future__ import annotations

from corpusgraph.config import StorageSection
from corpusgraph.storage.locations import spark_uri
from corpusgraph.tables import TABLES, table_path

__all__ = ["register_tables", "qualified_name"]


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def qualified_name(storage: StorageSection, table: str) -> str:
    """catalog.schema.table (or schema.table), quoted for Spark SQL."""
    parts = [p for p in (storage.catalog, storage.schema_name, table) if p]
    return ".".join(_quote(p) for p in parts)


def _same(a: str, b: str) -> bool:
    norm = lambda x: x.rstrip("/").replace("file:///", "/").replace("file:/", "/")  # noqa: E731
    return norm(a) == norm(b)


def register_tables(spark, storage: StorageSection, names=None) -> list[str]:
    """Register the warehouse's tables (all, or those named) under storage.schema; the names
    registered. Nothing happens when storage.schema is not set."""
    if not storage.schema_name:
        return []
    where = ".".join(_quote(p) for p in (storage.catalog, storage.schema_name) if p)
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {where}")
    done = []
    for name in names or TABLES:
        full = qualified_name(storage, name)
        location = spark_uri(table_path(storage.warehouse, name))
        plain = full.replace("`", "")
        if spark.catalog.tableExists(plain):
            known = spark.sql(f"DESCRIBE DETAIL {full}").select("location").first()[0]
            if not _same(str(known), location):
                raise ValueError(f"{plain} is already registered at {known}, not at this warehouse's {location}; "
                                 "drop it, or set storage.schema to another schema")
        else:
            spark.sql(f"CREATE TABLE IF NOT EXISTS {full} USING DELTA LOCATION '{location}'")
        done.append(plain)
    return done
