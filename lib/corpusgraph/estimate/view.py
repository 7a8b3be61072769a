"""Presenting an estimate: the table `corpusgraph estimate` prints and the chart it writes."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Sequence

from corpusgraph.config import EstimateSection
from corpusgraph.estimate.model import Estimate

__all__ = ["format_estimate", "write_chart", "svg_chart"]


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s"


def format_estimate(est: Estimate, throughput: EstimateSection) -> str:
    """The table: calls and tokens per stage, dollars per model, GPU-hours and wall time at the
    throughputs `throughput` (the estimate section) states."""
    head = f"{'stage':<10}{'calls':>9}{'tokens in':>13}{'tokens out':>12}  basis"
    lines = [f"estimate for {est.documents} documents, {est.units} text units "
             f"(tokenizer: {est.tokenizer}; rates: {est.rates.source})", head, "-" * len(head)]
    for s in est.stages:
        lines.append(f"{s.stage:<10}{s.calls:>9,}{s.tokens_in:>13,}{s.tokens_out:>12,}  {s.basis}")
    lines.append("-" * len(head))
    if est.sampling:
        sm, err = est.sampling, est.sampling["relative_error_95"]
        lines.append(f"extract prompts tokenised for a sample of {sm['units_counted']:,} of {sm['units_total']:,} units "
                     f"({sm['packs_counted']:,} of {sm['packs_total']:,} calls) and scaled up: 95% bound on extract "
                     f"tokens in +/-{100 * err['tokens_in']:.2f}%; calls counted exactly (--sample-units 0: all)")
    lines.append(f"{'LLM total':<10}{est.llm_calls:>9,}{est.llm_tokens_in:>13,}{est.llm_tokens_out:>12,}")
    lines.append("")
    lines.append(f"dollars by model (prices as of {est.prices_as_of or 'unknown'}; edit estimate.prices in conf/base.yaml):")
    for name, usd in sorted(est.usd.items(), key=lambda kv: kv[1]):
        lines.append(f"  {name:<32}${usd:>12,.2f}")
    e = throughput
    lines.append(f"GPU-hours at {e.gpu_prefill_tokens_per_s:,.0f} in / {e.gpu_decode_tokens_per_s:,.0f} out tokens/s "
                 f"per GPU: {est.gpu_hours:,.2f}")
    lines.append(f"wall time on the configured endpoint(s) ({e.endpoint_prefill_tokens_per_s:,.0f} in / "
                 f"{e.endpoint_decode_tokens_per_s:,.0f} out tokens/s each): {_duration(est.wall_s)}")
    return "\n".join(lines)


def write_chart(est: Estimate, stem: Path) -> Path:
    """Tokens per stage and dollars per model: a PNG with matplotlib when it is installed, else an
    SVG written here (no plotting dependency needed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = stem.with_suffix(".svg")
        path.write_text(svg_chart(est))
        return path
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    names = [s.stage for s in est.stages if s.llm]
    a.barh(names, [s.tokens_in for s in est.stages if s.llm], label="tokens in")
    a.barh(names, [s.tokens_out for s in est.stages if s.llm], left=[s.tokens_in for s in est.stages if s.llm],
           label="tokens out")
    a.set_title("LLM tokens by stage")
    a.legend()
    models = sorted(est.usd, key=est.usd.get)
    b.barh(models, [est.usd[m] for m in models])
    b.set_title(f"USD by model (prices {est.prices_as_of})")
    fig.tight_layout()
    path = stem.with_suffix(".png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _bars(title: str, items: Iterable[tuple[str, list[float]]], fmt: Callable[[float], str], y0: int,
          colours: Sequence[str]) -> tuple[list[str], int]:
    items = list(items)
    top = max((sum(v) for _, v in items), default=0.0) or 1.0
    out = [f'<text x="10" y="{y0}" font-weight="bold">{_esc(title)}</text>']
    y = y0 + 12
    for label, values in items:
        x = 200.0
        out.append(f'<text x="190" y="{y + 13}" text-anchor="end">{_esc(label)}</text>')
        for v, colour in zip(values, colours):
            w = 380 * v / top
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="18" fill="{colour}"/>')
            x += w
        out.append(f'<text x="{x + 6:.1f}" y="{y + 13}">{_esc(fmt(sum(values)))}</text>')
        y += 24
    return out, y + 16


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg_chart(est: Estimate) -> str:
    colours = ("#4472c4", "#ed7d31")
    a, y = _bars("LLM tokens by stage (blue: in, orange: out)",
                 [(s.stage, [s.tokens_in, s.tokens_out]) for s in est.stages if s.llm], lambda v: f"{v:,.0f}", 20, colours)
    b, y = _bars(f"USD by model (prices {est.prices_as_of})",
                 [(m, [est.usd[m]]) for m in sorted(est.usd, key=est.usd.get)], lambda v: f"${v:,.2f}", y, colours)
    body = "\n".join(a + b)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="700" height="{y}" font-family="sans-serif" '
            f'font-size="12">\n{body}\n</svg>\n')
