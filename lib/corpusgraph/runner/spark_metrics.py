"""How far a Spark SQL pass has read: the rows its scans have produced so far, from Spark's SQL
status store (kept with spark.ui.enabled=false). progress.spark_records turns them into a bar.
"""

from __future__ import annotations

__all__ = ["SqlExecutions", "scan_rows"]


def _metric_int(text) -> int | None:
    """A sum metric as the SQL status store formats it ("12,345") -> 12345; None otherwise."""
    try:
        return int(str(text).strip().replace(",", ""))
    except ValueError:
        return None


def scan_rows(executions, description: str, source: str) -> int:
    """Rows read so far by the main pass: over the SQL executions whose description is exactly
    `description` (Delta's own queries inside them are described "Delta: ..."), the largest
    "number of output rows" of a scan node named `source` ("Scan parquet", "Scan binaryFile");
    scans of a Delta log (its JSON or checkpoint files, its cached state) are not counted. (A
    node's description cannot name the table: Spark abbreviates its Location to 100 characters.)

    `executions`: (description, nodes) pairs, each node (name, desc, {metric name: value text}).
    The largest, not a sum: ingest's plan reads its files in two branches (documents and
    quarantine) and a second query over a cached frame does not read them again.
    """
    best = 0
    for desc, nodes in executions:
        if desc != description:
            continue
        for name, node_desc, metrics in nodes:
            text = f"{name} {node_desc}"
            if name.strip() != source or any(m in text for m in ("_delta_log", "DeltaLogFileIndex", "Delta Table State")):
                continue
            best = max(best, _metric_int(metrics.get("number of output rows", "")) or 0)
    return best


class SqlExecutions:
    """The SQL executions started after it was made, read from Spark's SQL status store (kept with
    spark.ui.enabled=false). Their metrics are aggregated on the driver from task ends and from
    the accumulator updates in executor heartbeats (spark.executor.heartbeatInterval, 10 s), so
    a running task's rows show up mid-task. (The per-stage task metrics of the core status store,
    inputRecords and the like, were measured to stay 0 until a task ends in Spark 4.2 local mode.)
    """

    def __init__(self, spark):
        self._store = spark._jsparkSession.sharedState().statusStore()
        count = int(self._store.executionsCount())
        last = self._store.executionsList(count - 1, 1) if count else None
        self._next = int(last.apply(0).executionId()) + 1 if count and last.size() else 0
        self._seen: dict[int, tuple[str, list]] = {}  # id -> (description, nodes) once completed
        self._running: dict[int, None] = {}  # ids to look at again

    def _find_new(self) -> None:
        misses = 0
        probe = self._next
        while misses < 64:  # an id whose start event is not processed yet leaves a gap for a while
            opt = self._store.execution(probe)
            if opt.isDefined():
                self._running[probe] = None
                self._next, misses = probe + 1, 0
            else:
                misses += 1
            probe += 1

    def _nodes(self, execution_id: int) -> list:
        values = {}
        it = self._store.executionMetrics(execution_id).iterator()
        while it.hasNext():
            kv = it.next()
            values[int(kv._1())] = kv._2()
        nodes, counted = [], set()  # a cached plan's scan shows under every node that reads the cache
        graph_nodes = self._store.planGraph(execution_id).allNodes()
        for i in range(graph_nodes.size()):
            node = graph_nodes.apply(i)
            name = str(node.name())
            if not name.startswith("Scan"):
                continue
            metrics, ms = {}, node.metrics()
            for j in range(ms.size()):
                m = ms.apply(j)
                acc = int(m.accumulatorId())
                if acc in values and acc not in counted:
                    metrics[str(m.name())] = values[acc]
                    counted.add(acc)
            nodes.append((name, str(node.desc()), metrics))
        return nodes

    def _read_one(self, eid: int, description: str):
        data = self._store.execution(eid)
        if not data.isDefined():
            return None
        data = data.get()
        desc = data.description()
        if desc is None:
            return None  # not known yet: a job of it started before its execution-start event was seen
        if str(desc) != description:
            del self._running[eid]  # not the pass's own query: never asked about again
            return None
        final = data.completionTime().isDefined()
        aggregated = final and data.metricValues() is not None
        entry = (description, self._nodes(eid))
        if aggregated:
            self._seen[eid] = entry
            del self._running[eid]
        return entry

    def read(self, description: str) -> list[tuple[str, list]]:
        """(description, scan nodes) of the block's executions described `description`. A finished
        one is kept only once Spark has aggregated its final metrics (it does that asynchronously
        after the end event; until then it is read again each time)."""
        self._find_new()
        out = [v for v in self._seen.values() if v[0] == description]
        for eid in list(self._running):
            try:
                entry = self._read_one(eid, description)
            except Exception:  # noqa: BLE001 - one execution's graph not stored yet: the others still count
                continue
            if entry is not None:
                out.append(entry)
        return out
