"""What `corpusgraph report` shows, read from the warehouse without a JVM (delta-rs) and reduced
to small plain structures: the page's size depends on the number of stages, types, distinct
degrees and shown communities, never on the number of rows.

Every reader returns an empty result for a missing or empty table; report/html.py turns that
into a "none" panel instead of a chart.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from corpusgraph.config import S3Section
from corpusgraph.storage.locations import open_delta
from corpusgraph.tables import TABLES, table_path

__all__ = ["ReportData", "load_report_data", "stage_rows", "estimate_vs_actual", "hierarchy",
           "MAX_COMMUNITIES"]

# The sunburst draws every community of each level, coarsest first, while the total stays within
# this; a deeper level that would pass it is left out (and the panel says how many were shown).
MAX_COMMUNITIES = 2000
# Runs shown in the time chart (the most recent ones).
MAX_RUNS = 30
QUARANTINE_EXAMPLES = 12


@dataclass
class ReportData:
    warehouse: str
    generated: str
    tables: dict[str, tuple[int, int] | None]  # name -> (rows, version); None: missing
    runs: list[dict] = field(default_factory=list)  # index/update runs, oldest first
    llm_calls: list[dict] = field(default_factory=list)
    estimate: dict | None = None  # the latest estimate run's Estimate.to_dict(), with run_id, started
    entity_types: list[tuple[str, int]] = field(default_factory=list)  # most frequent first
    degrees: list[tuple[int, int]] = field(default_factory=list)  # (degree, entities), by degree
    communities: list[dict] = field(default_factory=list)  # shown ones: id, level, parent, size, title
    communities_total: int = 0
    reports_total: int = 0
    quarantine: list[tuple[str, int]] = field(default_factory=list)  # (reason, rows), most first
    quarantine_examples: list[dict] = field(default_factory=list)


def _read(warehouse: str, name: str, columns: list[str] | None = None, s3: S3Section | None = None):
    """(pyarrow table, version) or (None, None) when the table does not exist."""
    from deltalake.exceptions import TableNotFoundError

    try:
        dt = open_delta(table_path(warehouse, name), s3)
    except TableNotFoundError:
        return None, None
    return dt.to_pyarrow_dataset().to_table(columns=columns), dt.version()


def _iso(ts) -> str | None:
    return ts.isoformat(timespec="seconds") if isinstance(ts, datetime) else None


def _stage_counts(text: str | None) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def load_report_data(warehouse: str, s3: S3Section | None = None) -> ReportData:
    """Read what the report needs; only the columns it uses, aggregated as they are read.
    s3: how to reach a warehouse on S3 (None: the environment's settings)."""
    import pyarrow.compute as pc
    from deltalake.exceptions import TableNotFoundError

    data = ReportData(warehouse=warehouse, generated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      tables={})
    for name in TABLES:
        try:
            dt = open_delta(table_path(warehouse, name), s3)
            data.tables[name] = (dt.to_pyarrow_dataset().count_rows(), dt.version())
        except TableNotFoundError:
            data.tables[name] = None

    runs, _ = _read(warehouse, "runs", s3=s3)
    estimates = []
    for r in sorted(runs.to_pylist() if runs is not None else [], key=lambda r: (r["started"] is None, r["started"])):
        counts = _stage_counts(r["stage_counts"])
        row = {"run_id": r["run_id"], "kind": r["kind"], "status": r["status"], "started": _iso(r["started"]),
               "finished": _iso(r["finished"])}
        if r["kind"] == "estimate":
            if isinstance(counts.get("stages"), list):
                estimates.append({**counts, **row})
            continue
        row["stages"] = {s: float(v.get("seconds") or 0.0) for s, v in counts.items() if isinstance(v, dict)}
        row["rows"] = {s: {k: v for k, v in c.items() if k not in ("seconds", "driver_collected_bytes")}
                       for s, c in counts.items() if isinstance(c, dict)}
        if r["started"] and r["finished"]:
            row["wall_s"] = (r["finished"] - r["started"]).total_seconds()
        data.runs.append(row)
    data.estimate = estimates[-1] if estimates else None

    calls, _ = _read(warehouse, "llm_calls", s3=s3)
    data.llm_calls = calls.to_pylist() if calls is not None else []

    ents, _ = _read(warehouse, "entities", ["type", "degree"], s3=s3)
    if ents is not None and ents.num_rows:
        types = pc.value_counts(pc.fill_null(ents["type"], "(none)")).to_pylist()
        data.entity_types = sorted(((t["values"] or "(none)", t["counts"]) for t in types), key=lambda t: (-t[1], t[0]))
        degs = pc.value_counts(pc.fill_null(ents["degree"], 0)).to_pylist()
        data.degrees = sorted((int(d["values"]), int(d["counts"])) for d in degs)

    comms, _ = _read(warehouse, "communities", ["community_id", "level", "parent_id", "size"], s3=s3)
    reports, _ = _read(warehouse, "community_reports", ["community_id", "title"], s3=s3)
    titles = {r["community_id"]: r["title"] for r in reports.to_pylist()} if reports is not None else {}
    data.reports_total = len(titles)
    if comms is not None:
        data.communities_total = comms.num_rows
        data.communities = hierarchy(comms.to_pylist(), titles)

    quar, _ = _read(warehouse, "quarantine", ["source_uri", "reason", "detail"], s3=s3)
    if quar is not None and quar.num_rows:
        reasons = pc.value_counts(pc.fill_null(quar["reason"], "(none)")).to_pylist()
        data.quarantine = sorted(((r["values"], r["counts"]) for r in reasons), key=lambda r: (-r[1], r[0]))
        data.quarantine_examples = quar.slice(0, QUARANTINE_EXAMPLES).to_pylist()
    return data


def hierarchy(rows: list[dict], titles: dict[str, str], limit: int = MAX_COMMUNITIES) -> list[dict]:
    """The communities to draw: whole levels, coarsest first, up to `limit` (the coarsest level is
    cut to its `limit` largest when it alone is over). Each gets its report title (or none), its
    parent when that is drawn too, and a value of at least its drawn children's sum, so that a
    sunburst with branchvalues 'total' draws every one."""
    by_level: dict[int, list[dict]] = {}
    for r in rows:
        by_level.setdefault(int(r["level"] or 0), []).append(r)
    shown: list[dict] = []
    for level in sorted(by_level):
        group = sorted(by_level[level], key=lambda r: (-(r["size"] or 0), r["community_id"]))
        if shown and len(shown) + len(group) > limit:
            break
        shown += group[: limit - len(shown)]
    ids = {r["community_id"] for r in shown}
    out = {r["community_id"]: {"id": r["community_id"], "level": int(r["level"] or 0),
                               "parent": r["parent_id"] if r["parent_id"] in ids else "",
                               "size": int(r["size"] or 0), "title": titles.get(r["community_id"])}
           for r in shown}
    # Deepest level first, so each parent's value covers its children's.
    below: Counter = Counter()
    for node in sorted(out.values(), key=lambda n: -n["level"]):
        node["value"] = max(node["size"], below[node["id"]])
        if node["parent"]:
            below[node["parent"]] += node["value"]
    return sorted(out.values(), key=lambda n: (n["level"], -n["value"], n["id"]))


def stage_rows(llm_calls: list[dict]) -> list[dict]:
    """LLM accounting summed per stage over every run, in pipeline order."""
    from corpusgraph.runner.registry import STAGES

    totals: dict[str, Counter] = {}
    for r in llm_calls:
        c = totals.setdefault(r["stage"], Counter())
        for k in ("calls", "tokens_in", "tokens_out", "cache_hits", "errors", "usd", "seconds"):
            c[k] += r[k] or 0
    order = {s: i for i, s in enumerate(STAGES)}
    return [{"stage": s, **{k: c[k] for k in ("calls", "tokens_in", "tokens_out", "cache_hits", "errors", "usd",
                                             "seconds")}}
            for s, c in sorted(totals.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))]


def estimate_vs_actual(estimate: dict | None, runs: list[dict], llm_calls: list[dict]) -> dict | None:
    """The latest estimate's LLM stages beside what the index runs recorded for the same stages.

    Actual requests are paid calls plus cache hits (an estimate counts every request a build sends;
    a cached answer is one the cache paid for earlier), summed over every `index` run, since a
    resumed build pays in several runs. Actual tokens are the paid calls' tokens. None when there
    is no estimate or no index run with LLM accounting."""
    if not estimate:
        return None
    index_runs = {r["run_id"] for r in runs if r["kind"] == "index"}
    actual = stage_rows([r for r in llm_calls if r["run_id"] in index_runs])
    if not actual:
        return None
    by_stage = {r["stage"]: r for r in actual}
    rows = []
    for s in estimate["stages"]:
        if not s.get("llm", True):
            continue  # the embedder: batches, not chat calls
        a = by_stage.get(s["stage"], {})
        rows.append({"stage": s["stage"], "est_calls": s["calls"], "est_tokens_in": s["tokens_in"],
                     "est_tokens_out": s["tokens_out"], "calls": a.get("calls", 0) + a.get("cache_hits", 0),
                     "paid_calls": a.get("calls", 0), "tokens_in": a.get("tokens_in", 0),
                     "tokens_out": a.get("tokens_out", 0), "seconds": a.get("seconds", 0.0),
                     "usd": a.get("usd", 0.0), "basis": s.get("basis", "")})
    usd = estimate.get("usd") or {}
    configured = next((v for k, v in usd.items() if k.startswith("configured")), None)
    return {"estimate_run": estimate["run_id"], "estimate_started": estimate.get("started"),
            "index_runs": len(index_runs), "rows": rows, "est_wall_s": estimate.get("wall_s"),
            "llm_seconds": sum(r["seconds"] for r in rows), "est_usd_configured": configured,
            "usd": sum(r["usd"] for r in rows), "est_usd": usd, "prices_as_of": estimate.get("prices_as_of")}
