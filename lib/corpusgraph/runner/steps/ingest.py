"""The ingest step: files, tables and DataFrames -> documents and quarantine.

Files are listed once by Spark's binaryFile source. Parquet and CSV files are then read by
Spark's own readers (row groups in parallel; CSV with quoted newlines), every other file as one
binary value parsed in a Python task (stages/ingest/files.py; PDF, Word, HTML and e-mail through
the per-file guard). Table inputs (a Delta folder, a catalog table, a DataFrame handed to the
Python API) go through runner/steps/table_inputs.py. Everything is one frame of parsed records,
merged into `documents` (one row per distinct text; what is absent this run is soft-deleted)
and `quarantine`.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import functions as F

from corpusgraph.config import IngestSection, StorageSection, TableInput
from corpusgraph.runner import progress
from corpusgraph.runner.handoff import save
from corpusgraph.runner.run import StageContext, StageResult
from corpusgraph.runner.steps import table_inputs
from corpusgraph.stages.ingest import files as ingest_stage
from corpusgraph.stages.ingest import parquet as ingest_pq
from corpusgraph.stages.ingest import tabular
from corpusgraph.stages.ingest.formats import BINARY_SUFFIXES
from corpusgraph.stages.ingest.records import PARSED_SCHEMA, literal_path, refuse, scan_form
from corpusgraph.tables import spark_struct

__all__ = ["NoDocumentsError", "ingest", "read_files", "split_inputs"]

# Spark settings while the step runs, restored after it. The default open cost (4 MB) packs tiny
# files 32 to a partition at most: 10,000 small files became 313 tasks, each paying a task's
# overhead; 64 KB lets a task take thousands. binaryFile rows reach Python in Arrow batches of
# this many files (default 10,000), so a batch of large PDFs stays bounded in memory.
_FILE_SETTINGS = {"spark.sql.files.openCostInBytes": "65536"}
_BINARY_SETTINGS = {"spark.sql.execution.arrow.maxRecordsPerBatch": "64"}
_CSV_HEAD = 65536  # bytes read on the driver to find a CSV file's header


class NoDocumentsError(ValueError):
    """Ingest found no document in its inputs: the run stops here, loudly, instead of building
    (or estimating) an empty index."""


@contextmanager
def _settings(spark, values: dict[str, str]):
    before = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def _is_delta(spark, location: str) -> bool:
    if "://" not in location and not location.startswith("dbfs:"):
        return (Path(location) / "_delta_log").is_dir()
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, location)


def split_inputs(spark, sec: IngestSection) -> tuple[list[str], list[TableInput]]:
    """(file and folder inputs, table inputs); a folder holding a Delta table is a table input with
    ingest's default field names, never read file by file (that would read every version's files)."""
    paths, tables = [], []
    for item in sec.inputs:
        if isinstance(item, TableInput):
            tables.append(item)
        elif _is_delta(spark, item):
            tables.append(TableInput(path=item, id=sec.id_field, text=sec.text_field, title=sec.title_field))
        else:
            paths.append(item)
    return paths, tables


def _csv_parts(spark, sec: IngestSection, csvs: list[str], s3) -> list:
    """Spark's CSV reader over the CSV files, one read per distinct header (and delimiter)."""
    from pyspark.sql import types as T

    groups: dict[tuple, list[str]] = {}
    refused = []
    for uri in csvs:
        named = scan_form(uri)  # as the other readers name the file
        head = ingest_pq.read_head(uri, _CSV_HEAD, s3)
        refusal = tabular.head_refusal(head, sec)
        if refusal:
            refused.append(refuse(named, *refusal))
            continue
        header = tabular.csv_header(head, uri, sec)
        if header is None:
            refused.append(refuse(named, "empty", "no header row"))
            continue
        if len(head) < _CSV_HEAD:  # the whole file is in hand: a header without rows is refused here
            whole = list(tabular.csv_bytes_records(uri, head, sec))
            if len(whole) == 1 and whole[0].get("reason") == "empty":
                refused.append(refuse(named, "empty", whole[0]["detail"]))
                continue
        names, seen = [], set()
        for i, col in enumerate(header):  # Spark needs distinct, non-empty names
            name = col or f"_c{i}"
            while name.lower() in seen or name in (tabular.PATH_COL, tabular.CORRUPT_COL):
                name += "_"
            seen.add(name.lower())
            names.append(name)
        groups.setdefault((tuple(names), tabular.csv_delimiter(uri, sec)), []).append(uri)
    parts = [_records_frame(spark, refused)] if refused else []
    for (names, sep), paths in groups.items():
        schema = T.StructType([T.StructField(tabular.column_name(i), T.StringType()) for i in range(len(names))]
                              + [T.StructField(tabular.CORRUPT_COL, T.StringType())])
        rows = (spark.read.schema(schema).option("header", True).option("multiLine", True).option("escape", '"')
                .option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", tabular.CORRUPT_COL)
                .option("encoding", sec.csv_encoding).option("sep", sep).csv(_literal(paths))
                .select("*", F.col("_metadata.file_path").alias(tabular.PATH_COL)))
        parts.append(tabular.parse_csv_rows(rows, sec, list(names), sep))
    return parts


def _literal(uris: list[str]) -> list[str]:
    """Listed files (URIs, percent-encoded) as spark.read reads exactly those files: decoded (Spark
    encodes a path again) and with glob characters escaped."""
    return [literal_path(scan_form(u)) for u in uris]


def _records_frame(spark, records: list[dict]):
    return spark.createDataFrame([tuple(r.get(f.name) for f in PARSED_SCHEMA) for r in records],
                                 spark_struct(PARSED_SCHEMA))


def input_files(df) -> list[str]:
    """df.inputFiles() in one py4j round trip: PySpark's own turns the Java array into a list one
    element per call (1.3 s for 10,000 files here, 0.06 s joined in the JVM). The paths are joined
    with NUL, which no file name holds; a count that does not match, or a session with no JVM
    behind it (Spark Connect), takes PySpark's way."""
    try:
        arr = df._jdf.inputFiles()
        joined = df.sparkSession._jvm.org.apache.hadoop.util.StringUtils.join("\u0000", arr)
        paths = joined.split("\u0000") if joined else []
        if len(paths) == len(arr):
            return paths
    except Exception:  # noqa: BLE001 - any failure of the shortcut falls back to the public API
        pass
    return df.inputFiles()


def read_files(spark, sec: IngestSection, paths: list[str], s3=None):
    """(parsed frames, files listed, files the binaryFile source reads, any binary-format file)."""
    files = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(paths)
    listed = input_files(files)
    kinds = {p: ingest_stage.suffix_of(p) for p in listed}
    parquet = [p for p in listed if kinds[p] == ".parquet"]
    csvs = [p for p in listed if kinds[p] in ingest_stage.CSV_SUFFIXES]
    others = [p for p in listed if p not in set(parquet) | set(csvs)]
    parts = []
    if parquet or csvs:
        # Listed again without them, so their bytes are never read as one value.
        files = spark.read.format("binaryFile").load(_literal(others)) if others else None
    if parquet:
        good, refused = ingest_pq.probe_footers(parquet, s3)
        if refused:
            parts.append(_records_frame(spark, refused))
        if good:
            rows = spark.read.option("mergeSchema", "true").parquet(*_literal(good)).select(
                "*", F.col("_metadata.file_path").alias(ingest_pq.PATH_COL),
                F.col("_metadata.row_index").alias(ingest_pq.ROW_COL))
            parts.append(ingest_pq.parse_parquet_rows(rows, sec))
    if csvs:
        parts += _csv_parts(spark, sec, csvs, s3)
    if files is not None:
        files = ingest_stage.with_empty_files(files, others, driver_sees_files=_local_master(spark))
        parts.append(ingest_stage.parse_files(files, sec))
    return parts, len(listed), len(others), any(kinds[p] in BINARY_SUFFIXES for p in others)


def _local_master(spark) -> bool:
    """Spark runs in this process (local[...]): its tasks see the driver's file system."""
    try:
        return spark.sparkContext.master.startswith("local")
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext here: not local
        return False


def _union(parts: list):
    parsed = parts[0]
    for part in parts[1:]:
        parsed = parsed.unionByName(part)
    return parsed


def _previous_versions(st: StageContext) -> dict[str, int]:
    return {r["input"]: int(r["version"]) for r in st.tables.read("input_versions").select("input", "version").collect()
            if r["version"] is not None}


def _frames(st: StageContext) -> dict:
    """DataFrames handed to the Python API (corpusgraph.index(df, cfg)) for this run, by name."""
    return dict(st.input_frames)


def _read_all(st: StageContext, sec: IngestSection, s3):
    """(parsed frames, table reads, files listed, files read as binary values, any binary format)."""
    paths, tables = split_inputs(st.spark, sec)
    parts, n_files, n_binary, binary = [], 0, 0, False
    if paths:
        parts, n_files, n_binary, binary = read_files(st.spark, sec, paths, s3)
    last = _previous_versions(st) if tables else {}
    reads = [table_inputs.read_table_input(st.spark, ti, sec, last.get(ti.key()), st.log) for ti in tables]
    reads += [table_inputs.read_frame_input(name, df, sec) for name, df in _frames(st).items()]
    parts += [r.parsed for r in reads if r.parsed is not None]
    return parts, reads, n_files, n_binary, binary


def _track_rows(st: StageContext, reads: list, parsed) -> None:
    """source_rows after this run's table reads: a full read replaces its input's rows, a change
    feed read upserts the changed ones and marks the deleted ones."""
    for read in reads:
        fresh = table_inputs.source_rows_for(read) if read.parsed is not None else None
        if read.mode == "full":
            st.tables.merge("source_rows", fresh, soft_delete="deleted", scope=f"t.input = '{_sql(read.key)}'")
            continue
        gone = read.deleted.select("source_uri", F.lit(read.key).alias("input"),
                                   F.lit(None).cast("string").alias("content_hash"),
                                   F.lit(read.version).cast("long").alias("version"), F.lit(True).alias("deleted"))
        changed = gone if fresh is None else fresh.unionByName(gone)
        st.tables.merge("source_rows", changed)


def _sql(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _held_documents(st: StageContext, parsed):
    """Live documents that unchanged rows of change-feed inputs still hold, as parsed records (the
    MERGE soft-deletes whatever this run does not name)."""
    live = st.tables.read("source_rows").where(~F.col("deleted")).select("content_hash").distinct()
    docs = st.tables.read("documents").where(~F.col("deleted")).join(live, "content_hash", "left_semi")
    docs = docs.join(parsed.where(F.col("outcome") == "document").select("content_hash"), "content_hash", "left_anti")
    return save(st, docs.select(*[(F.lit("document") if f.name == "outcome" else
                                   F.lit(None).cast("string") if f.name in ("reason", "detail", "input_file") else
                                   F.col(f.name)).alias(f.name) for f in PARSED_SCHEMA]), "held-documents")


def ingest(st: StageContext, *, ingest: IngestSection, storage: StorageSection) -> StageResult:
    sec = ingest
    if not sec.inputs and not _frames(st):
        raise ValueError("ingest.inputs is empty: name the files, folders or tables to index in the config")
    with _settings(st.spark, _FILE_SETTINGS):
        parts, reads, n_files, n_binary, binary = _read_all(st, sec, storage.s3)
        if not parts:
            raise NoDocumentsError(f"ingest found nothing to read in {sec.inputs}")
        with _settings(st.spark, _BINARY_SETTINGS if binary else {}):
            return _ingest(st, sec, storage, _union(parts), reads, n_files, n_binary)


def _ingest(st: StageContext, sec: IngestSection, storage: StorageSection, parsed, reads, n_files: int,
            n_binary: int) -> StageResult:
    parsed = parsed.cache()
    if any(r.mode == "cdf" for r in reads):
        _track_rows(st, reads, parsed)
        parsed = parsed.unionByName(_held_documents(st, parsed))
    elif reads:
        _track_rows(st, reads, parsed)
    docs = ingest_stage.documents_from(parsed).cache()
    quarantine = ingest_stage.quarantine_from(parsed)
    # The pass that reads and parses every file (it fills the caches), in files read.
    with progress.spark_records(st.spark, "ingest", "files", n_binary, source="Scan binaryFile"):
        stats = docs.agg(F.count("*").alias("docs"), F.sum(F.col("copies") - 1).alias("dups")).first()
    n_docs = int(stats["docs"] or 0)
    if n_docs:
        st.tables.merge("documents", docs, update=False, soft_delete="deleted")
    n_quarantine = quarantine.count()
    if n_quarantine:
        st.tables.merge("quarantine", quarantine)
    by_reason = {r["reason"]: r["count"] for r in quarantine.groupBy("reason").count().collect()}
    parsed.unpersist()
    docs.unpersist()
    _record_versions(st, reads)
    reasons = ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items()))
    if n_docs == 0:
        raise NoDocumentsError(
            f"ingest found no documents in {sec.inputs}: {n_files} files listed, {n_quarantine} inputs "
            f"quarantined ({reasons or 'none'}; see the quarantine table under {storage.warehouse}). "
            f"Check ingest.inputs, ingest.max_bytes ({sec.max_bytes}) and ingest.text_field ({sec.text_field!r}).")
    result = StageResult(rows={"documents": n_docs, "duplicates_collapsed": int(stats["dups"] or 0),
                               "quarantined": n_quarantine})
    if by_reason:
        result.notes.append("quarantined by reason: " + reasons)
    for read in reads:
        if read.version is not None:
            result.notes.append(f"{read.key}: version {read.version} read ({read.mode})")
    return result


def _record_versions(st: StageContext, reads: list) -> None:
    from datetime import datetime, timezone

    rows = [(r.key, r.version, r.mode, datetime.now(timezone.utc)) for r in reads if r.version is not None]
    if rows:
        df = st.spark.createDataFrame(rows, "input string, version long, mode string, read_at timestamp")
        st.tables.merge("input_versions", df.withColumn("rows", F.lit(None).cast("long")))
