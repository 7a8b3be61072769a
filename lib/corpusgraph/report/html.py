"""`corpusgraph report --out DIR`: one static HTML page of an index, drawn with Plotly.

The page is self-contained: plotly.js is embedded in it, so it opens offline and can be mailed
or archived as one file. Panels: time per stage and run (`runs`), LLM calls, tokens and dollars
per stage (`llm_calls`), the latest estimate against the index runs' actual calls and tokens,
entities by type, the degree distribution, the community hierarchy (a sunburst labelled with
report titles) and quarantine reasons. A table with nothing to show gets a "none" panel that
says why, not an empty chart. The data come from report/data.py (delta-rs, no JVM).

After loading, the page sets `window.reportRendered` to a promise of {drawn: [ids], failed:
[messages]} over every chart's Plotly.newPlot, and writes the same to `data-rendered` on
<body>, so a headless browser can tell whether every chart drew.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from corpusgraph.report.data import ReportData, estimate_vs_actual, load_report_data, stage_rows

__all__ = ["build_page", "write_report", "figures"]

_TYPES_SHOWN = 30  # entity types drawn; the rest are summed as "other"
_TITLE_CHARS = 40  # sunburst labels; the whole title is in the hover text
_FONT = "system-ui, -apple-system, 'Segoe UI', sans-serif"


def _layout(**kw) -> dict:
    base = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 30, "b": 60}, "height": 380,
            "font": {"family": _FONT, "size": 12}, "legend": {"orientation": "h", "y": -0.2}}
    base.update(kw)
    return base


def _t(text) -> str:
    """Text for a Plotly label or hover: Plotly reads a subset of HTML in them, so a title like
    'A <b> B' is escaped to show as written."""
    return html.escape(str(text), quote=False)


def _fig(data: list, layout: dict) -> dict:
    """A figure as Plotly's own JSON (validated by plotly.graph_objects)."""
    import plotly.graph_objects as go

    return json.loads(go.Figure(data=data, layout=layout).to_json())


def _run_label(r: dict) -> str:
    # The id's tail keeps two runs started in the same minute apart (one bar each).
    return _t(f"{r['kind']} {(r['started'] or '')[:16].replace('T', ' ')} {r['run_id'][-6:]}")


def _stage_order(names) -> list[str]:
    from corpusgraph.runner.registry import STAGES

    order = {s: i for i, s in enumerate(STAGES)}
    return sorted(set(names), key=lambda s: (order.get(s, len(order)), s))


def fig_time(data: ReportData) -> dict | None:
    import plotly.graph_objects as go

    from corpusgraph.report.data import MAX_RUNS

    runs = [r for r in data.runs if r["stages"]][-MAX_RUNS:]
    if not runs:
        return None
    labels = [_run_label(r) for r in runs]
    traces = [go.Bar(name=_t(s), x=labels, y=[round(r["stages"].get(s, 0.0), 2) for r in runs],
                     customdata=[[_t(r["run_id"]), _t(r["status"])] for r in runs],
                     hovertemplate=f"{_t(s)}: %{{y:.1f}} s<br>%{{customdata[0]}} (%{{customdata[1]}})<extra></extra>")
              for s in _stage_order(k for r in runs for k in r["stages"])]
    return _fig(traces, _layout(barmode="stack", yaxis={"title": "seconds"}))


def fig_llm(rows: list[dict]) -> dict | None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not rows:
        return None
    stages = [_t(r["stage"]) for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens", "requests"))
    fig.add_trace(go.Bar(name="tokens in", x=stages, y=[r["tokens_in"] for r in rows], legendgroup="t"), 1, 1)
    fig.add_trace(go.Bar(name="tokens out", x=stages, y=[r["tokens_out"] for r in rows], legendgroup="t"), 1, 1)
    fig.add_trace(go.Bar(name="paid calls", x=stages, y=[r["calls"] for r in rows], legendgroup="c",
                         customdata=[[round(r["usd"], 4), r["errors"]] for r in rows],
                         hovertemplate="%{y} calls, $%{customdata[0]}, %{customdata[1]} errors<extra></extra>"), 1, 2)
    fig.add_trace(go.Bar(name="cache hits", x=stages, y=[r["cache_hits"] for r in rows], legendgroup="c"), 1, 2)
    fig.update_layout(**_layout(barmode="stack", margin={"l": 60, "r": 20, "t": 60, "b": 60}))
    return json.loads(fig.to_json())


def fig_estimate(cmp: dict | None) -> dict | None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not cmp or not cmp["rows"]:
        return None
    rows = cmp["rows"]
    stages = [_t(r["stage"]) for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("requests", "tokens (in + out)"))
    fig.add_trace(go.Bar(name="estimate", x=stages, y=[r["est_calls"] for r in rows], marker_color="#8c9bb5",
                         legendgroup="e"), 1, 1)
    fig.add_trace(go.Bar(name="actual", x=stages, y=[r["calls"] for r in rows], marker_color="#2f6fdf",
                         legendgroup="a", customdata=[r["paid_calls"] for r in rows],
                         hovertemplate="%{y} requests (%{customdata} paid)<extra></extra>"), 1, 1)
    fig.add_trace(go.Bar(name="estimate", x=stages, y=[r["est_tokens_in"] + r["est_tokens_out"] for r in rows],
                         marker_color="#8c9bb5", legendgroup="e", showlegend=False), 1, 2)
    fig.add_trace(go.Bar(name="actual", x=stages, y=[r["tokens_in"] + r["tokens_out"] for r in rows],
                         marker_color="#2f6fdf", legendgroup="a", showlegend=False), 1, 2)
    fig.update_layout(**_layout(barmode="group", margin={"l": 60, "r": 20, "t": 60, "b": 60}))
    return json.loads(fig.to_json())


def fig_types(types: list[tuple[str, int]]) -> dict | None:
    import plotly.graph_objects as go

    if not types:
        return None
    shown = types[:_TYPES_SHOWN]
    if len(types) > _TYPES_SHOWN:
        shown.append((f"other ({len(types) - _TYPES_SHOWN} types)", sum(n for _, n in types[_TYPES_SHOWN:])))
    shown = shown[::-1]  # largest at the top of a horizontal bar chart
    return _fig([go.Bar(x=[n for _, n in shown], y=[_t(t) for t, _ in shown], orientation="h",
                        hovertemplate="%{y}: %{x} entities<extra></extra>")],
                _layout(xaxis={"title": "entities"},
                        height=max(260, 60 + 22 * len(shown)), margin={"l": 160, "r": 20, "t": 40, "b": 50}))


def fig_degrees(degrees: list[tuple[int, int]]) -> dict | None:
    import plotly.graph_objects as go

    if not degrees:
        return None
    counts = [n for _, n in degrees]
    log = max(counts) > 20 * min(counts)
    return _fig([go.Bar(x=[d for d, _ in degrees], y=counts, hovertemplate="degree %{x}: %{y} entities<extra></extra>")],
                _layout(xaxis={"title": "degree (relationships of an entity)"},
                        yaxis={"title": "entities", "type": "log" if log else "linear"}, bargap=0.1))


def fig_hierarchy(nodes: list[dict]) -> dict | None:
    import plotly.graph_objects as go

    if not nodes:
        return None

    def label(n: dict) -> str:
        t = n["title"] or f"community {n['id']}"
        return _t(t if len(t) <= _TITLE_CHARS else t[: _TITLE_CHARS - 1] + "\u2026")

    return _fig([go.Sunburst(
        ids=[n["id"] for n in nodes], parents=[n["parent"] for n in nodes], labels=[label(n) for n in nodes],
        values=[n["value"] for n in nodes], branchvalues="total", maxdepth=3, insidetextorientation="radial",
        customdata=[[_t(n["title"] or "(no report)"), n["level"], n["size"]] for n in nodes],
        hovertemplate="%{customdata[0]}<br>level %{customdata[1]}, %{customdata[2]} entities<extra></extra>")],
        _layout(height=620, margin={"l": 10, "r": 10, "t": 40, "b": 10}))


def fig_quarantine(reasons: list[tuple[str, int]]) -> dict | None:
    import plotly.graph_objects as go

    if not reasons:
        return None
    return _fig([go.Bar(x=[_t(r) for r, _ in reasons], y=[n for _, n in reasons], marker_color="#d9822b",
                        hovertemplate="%{x}: %{y} inputs<extra></extra>")],
                _layout(yaxis={"title": "inputs"}))


def figures(data: ReportData) -> dict[str, dict | None]:
    """Every panel's figure (None: nothing to draw), keyed by the id of its div."""
    rows = stage_rows(data.llm_calls)
    return {"chart-time": fig_time(data), "chart-llm": fig_llm(rows),
            "chart-estimate": fig_estimate(estimate_vs_actual(data.estimate, data.runs, data.llm_calls)),
            "chart-types": fig_types(data.entity_types), "chart-degrees": fig_degrees(data.degrees),
            "chart-hierarchy": fig_hierarchy(data.communities), "chart-quarantine": fig_quarantine(data.quarantine)}


# -- the page -------------------------------------------------------------------------------------

def _e(value) -> str:
    return html.escape(str(value))


def _table(head: list[str], rows: list[list]) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _panel(pid: str, title: str, fig: dict | None, none: str, note: str = "", extra: str = "") -> str:
    body = f'<div class="chart" id="{pid}"></div>' if fig is not None else \
        f'<p class="none" id="{pid}-none"><strong>None.</strong> {_e(none)}</p>'
    note_html = f'<p class="note">{note}</p>' if note else ""
    return f'<section class="panel" id="{pid}-panel"><h2>{_e(title)}</h2>{note_html}{body}{extra}</section>'


def _fmt(n) -> str:
    return f"{n:,.0f}" if isinstance(n, (int, float)) else "-"


def _estimate_note(cmp: dict | None) -> str:
    if not cmp:
        return ""
    parts = [f"Estimate run <code>{_e(cmp['estimate_run'])}</code> against {cmp['index_runs']} index run(s). "
             "Actual requests are paid calls plus cache hits, summed over the index runs; actual tokens are "
             "the paid calls'."]
    if cmp.get("est_wall_s") is not None:
        parts.append(f"LLM wall time: estimated {cmp['est_wall_s']:,.0f} s, recorded {cmp['llm_seconds']:,.0f} s.")
    if cmp.get("est_usd_configured") is not None:
        parts.append(f"Dollars at the configured prices: estimated ${cmp['est_usd_configured']:,.4f}, "
                     f"recorded ${cmp['usd']:,.4f}.")
    return " ".join(parts)


def _page_sections(data: ReportData, figs: dict[str, dict | None]) -> list[str]:
    rows = stage_rows(data.llm_calls)
    cmp = estimate_vs_actual(data.estimate, data.runs, data.llm_calls)
    llm_table = _table(["stage", "calls", "cache hits", "errors", "tokens in", "tokens out", "seconds", "usd"],
                       [[r["stage"], _fmt(r["calls"]), _fmt(r["cache_hits"]), _fmt(r["errors"]), _fmt(r["tokens_in"]),
                         _fmt(r["tokens_out"]), f"{r['seconds']:,.1f}", f"{r['usd']:,.4f}"] for r in rows]) if rows else ""
    est_table = _table(["stage", "estimated requests", "actual requests", "estimated tokens", "actual tokens", "basis"],
                       [[r["stage"], _fmt(r["est_calls"]), _fmt(r["calls"]), _fmt(r["est_tokens_in"] + r["est_tokens_out"]),
                         _fmt(r["tokens_in"] + r["tokens_out"]), r["basis"]] for r in cmp["rows"]]) if cmp else ""
    if data.estimate is None:
        est_none = "No estimate run is recorded in this warehouse: run `corpusgraph estimate` to have one to compare."
    else:
        est_none = "An estimate is recorded but no index run has LLM accounting to compare it with."
    shown, total = len(data.communities), data.communities_total
    hier_note = (f"{total:,} communities, {data.reports_total:,} with a report"
                 + (f"; the {shown:,} of the coarsest levels are drawn" if shown < total else "") + "."
                 if total else "")
    quarantine_table = _table(["source", "reason", "detail"], [[q["source_uri"], q["reason"], (q["detail"] or "")[:160]]
                                                              for q in data.quarantine_examples]) \
        if data.quarantine_examples else ""
    q_total = sum(n for _, n in data.quarantine)
    return [
        _panel("chart-time", "Time per stage", figs["chart-time"],
               "No index or update run is recorded in the `runs` table."),
        _panel("chart-llm", "LLM calls, tokens and cost per stage", figs["chart-llm"],
               "No LLM calls are recorded in `llm_calls` (a fast extraction with no LLM stage, or no run yet).",
               extra=llm_table),
        _panel("chart-estimate", "Estimate against actual", figs["chart-estimate"], est_none,
               note=_estimate_note(cmp), extra=est_table),
        _panel("chart-types", "Entities by type", figs["chart-types"], "The `entities` table is empty or missing."),
        _panel("chart-degrees", "Degree distribution", figs["chart-degrees"], "The `entities` table is empty or missing."),
        _panel("chart-hierarchy", "Community hierarchy", figs["chart-hierarchy"],
               "The `communities` table is empty or missing.", note=_e(hier_note)),
        _panel("chart-quarantine", "Quarantine reasons", figs["chart-quarantine"],
               "No input was quarantined: every input became a document.",
               note=_e(f"{q_total:,} inputs refused; the first {len(data.quarantine_examples)} below.") if q_total else "",
               extra=quarantine_table),
    ]


_CSS = """
body { font-family: %s; margin: 0; background: #f4f5f7; color: #1d2330; }
header { background: #1d2330; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 4px; font-size: 22px; } header p { margin: 0; color: #c9cfdb; font-size: 13px; }
main { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 18px; padding: 18px 28px; }
.panel { background: #fff; border-radius: 6px; padding: 12px 16px; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
.panel h2 { font-size: 16px; margin: 4px 0 8px; } .note { font-size: 12px; color: #555; margin: 0 0 6px; }
#chart-hierarchy-panel, #tables-panel { grid-column: 1 / -1; }
.none { padding: 28px; text-align: center; color: #555; background: #f8f8fa; border: 1px dashed #c5c9d3; }
table { border-collapse: collapse; font-size: 12px; margin-top: 8px; width: 100%%; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #e4e6eb; }
th { background: #f0f2f5; } code { font-size: 12px; }
""" % _FONT

_SCRIPT = """
(function () {
  var figs = JSON.parse(document.getElementById('report-figures').textContent);
  var ids = Object.keys(figs);
  var drawing = ids.map(function (id) {
    return Plotly.newPlot(id, figs[id].data, figs[id].layout, {displaylogo: false, responsive: true})
      .then(function () { return id; });
  });
  window.reportRendered = Promise.allSettled(drawing).then(function (results) {
    var out = {drawn: [], failed: []};
    results.forEach(function (r, i) {
      if (r.status === 'fulfilled') out.drawn.push(r.value); else out.failed.push(ids[i] + ': ' + r.reason);
    });
    document.body.setAttribute('data-rendered', JSON.stringify(out));
    return out;
  });
})();
"""


def build_page(data: ReportData, plotly_js: str | None = None) -> str:
    """The whole HTML page (plotly.js inline unless `plotly_js` is given as a script URL)."""
    from plotly.offline import get_plotlyjs

    figs = figures(data)
    drawn = {k: v for k, v in figs.items() if v is not None}
    # "<" escaped so no string in the data can close the script element.
    payload = json.dumps(drawn, separators=(",", ":")).replace("<", "\\u003c")
    lib = f'<script src="{_e(plotly_js)}"></script>' if plotly_js else f"<script>{get_plotlyjs()}</script>"
    present = {k: v for k, v in data.tables.items() if v is not None}
    tables = _table(["table", "rows", "version"], [[k, _fmt(v[0]), v[1]] for k, v in present.items()])
    missing = [k for k, v in data.tables.items() if v is None]
    missing_note = f'<p class="note">Missing tables: {_e(", ".join(missing))}.</p>' if missing else ""
    last = next((r for r in reversed(data.runs) if r["kind"] in ("index", "update")), None)
    subtitle = (f"warehouse {data.warehouse} · generated {data.generated} · "
                + (f"last run {last['run_id']} ({last['status']})" if last else "no index run recorded"))
    sections = "\n".join(_page_sections(data, figs))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>corpusgraph index report</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<style>{_CSS}</style>{lib}</head>
<body><header><h1>corpusgraph index report</h1><p>{_e(subtitle)}</p></header>
<main>
{sections}
<section class="panel" id="tables-panel"><h2>Tables</h2>{missing_note}{tables}</section>
</main>
<script type="application/json" id="report-figures">{payload}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def write_report(warehouse: str, out_dir: str | Path, s3=None) -> Path:
    """Read the warehouse and write DIR/index.html; returns its path. s3: corpusgraph.config.S3Section
    for a warehouse on S3 (None: the environment's settings)."""
    data = load_report_data(warehouse, s3)
    if not any(v is not None for v in data.tables.values()):
        raise FileNotFoundError(f"no Delta tables under {warehouse}: run `corpusgraph index` first")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    page = out / "index.html"
    page.write_text(build_page(data), encoding="utf-8")
    return page
