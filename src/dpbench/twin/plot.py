"""A plotly timeline of one twin run: what each rank ran per step, its KV utilization, and the delayer's verdicts.

Three panels sharing the step axis:

1. forward kind per rank (idle / decode / extend), DP-mixed steps marked on a row above;
2. KV-pool utilization per rank;
3. the delayer's verdict per rank (input estimation / output reason), with false
   prefillable reports (said prefillable, was allowed, admitted nothing) marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpbench.core.atomic import atomic_open

KIND_COLORS = ["#e8e8e8", "#4c78a8", "#f58518"]  # idle, decode, extend
VERDICT_ORDER = [
    "",
    "none/none",
    "all/no_wait",
    "all/wait_success",
    "mixed/delay",
    "all/delay",
    "mixed/wait_timeout",
    "all/wait_timeout",
    "all/token_watermark",
    "mixed/token_watermark",
]


def _discrete_scale(colors: list[str]) -> list[list[Any]]:
    n = len(colors)
    scale: list[list[Any]] = []
    for i, c in enumerate(colors):
        scale.append([i / n, c])
        scale.append([(i + 1) / n, c])
    return scale


def build_figure(result: dict[str, Any]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    tl = result.get("extra", {}).get("timeline")
    if not tl:
        raise ValueError(
            "this run result has no timeline (run the twin with --plot, or without --no-timeline)"
        )
    ranks = len(tl["rank_kind"])
    steps = len(tl["step_kind"])
    x = list(range(steps))
    t_s = tl["step_end_s"]
    mixed_steps = [i for i, k in enumerate(tl["step_kind"]) if k == 2]
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        row_heights=[0.4, 0.3, 0.3],
        subplot_titles=(
            "forward kind per rank (DP-mixed steps marked in red above)",
            "KV-pool utilization per rank",
            "delayer verdict per rank (× false prefillable report)",
        ),
    )
    rank_names = [f"rank {r}" for r in range(ranks)]
    fig.add_trace(
        go.Heatmap(
            z=tl["rank_kind"],
            x=x,
            y=rank_names,
            zmin=-0.5,
            zmax=2.5,
            colorscale=_discrete_scale(KIND_COLORS),
            showscale=False,
            customdata=[t_s] * ranks,
            hovertemplate="step %{x} (ends %{customdata:.3f} s)<br>%{y}: %{z}<extra>0 idle · 1 decode · 2 extend</extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=mixed_steps,
            y=["DP-mixed"] * len(mixed_steps),
            mode="markers",
            name="DP-mixed step",
            marker={"color": "#d62728", "symbol": "line-ns-open", "size": 10},
        ),
        row=1,
        col=1,
    )
    for r in range(ranks):
        fig.add_trace(
            go.Scattergl(x=x, y=tl["rank_kv_util"][r], mode="lines", name=f"KV rank {r}"),
            row=2,
            col=1,
        )
    verdicts = tl["rank_verdict"]
    seen = sorted(
        {v for row in verdicts for v in row},
        key=lambda v: (VERDICT_ORDER.index(v) if v in VERDICT_ORDER else 99, v),
    )
    if any(seen):
        code = {v: i for i, v in enumerate(seen)}
        z = [[code[v] for v in row] for row in verdicts]
        palette = [
            "#ffffff",
            "#bab0ac",
            "#54a24b",
            "#88d27a",
            "#e45756",
            "#ff9da6",
            "#b279a2",
            "#d4a6c8",
            "#eeca3b",
            "#9d755d",
        ]
        colors = [
            palette[(VERDICT_ORDER.index(v) if v in VERDICT_ORDER else 9) % len(palette)]
            for v in seen
        ]
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=x,
                y=rank_names,
                zmin=-0.5,
                zmax=len(seen) - 0.5,
                colorscale=_discrete_scale(colors),
                showscale=True,
                colorbar={
                    "tickvals": list(range(len(seen))),
                    "ticktext": [v or "no delayer" for v in seen],
                    "len": 0.3,
                    "y": 0.15,
                },
                customdata=verdicts,
                hovertemplate="step %{x}<br>%{y}: %{customdata}<extra></extra>",
            ),
            row=3,
            col=1,
        )
        fx, fy = [], []
        for r, row in enumerate(tl["rank_false_report"]):
            for i, flag in enumerate(row):
                if flag:
                    fx.append(i)
                    fy.append(rank_names[r])
        fig.add_trace(
            go.Scatter(
                x=fx,
                y=fy,
                mode="markers",
                name="false prefillable report",
                marker={"symbol": "x", "color": "black", "size": 7},
            ),
            row=3,
            col=1,
        )
    s = result["sglang"]
    m = result["metrics"]
    fig.update_layout(
        title=(
            f"twin · {result['workload']['name']} · SGLang {s.get('version')} "
            f"({(result.get('placement') or {}).get('label', '?')}) · {ranks} ranks · "
            f"DP-mixed {m['dp_mixed_step_fraction']['value']:.1%} of steps"
        ),
        height=300 + 90 * ranks * 2,
        legend={"orientation": "h", "y": -0.08},
    )
    fig.update_xaxes(title_text="step", row=3, col=1)
    fig.update_yaxes(title_text="used / pool", range=[0, 1.02], row=2, col=1)
    return fig


def write_timeline(result: dict[str, Any], path: str | Path) -> Path:
    """Write the timeline as a self-contained HTML file, atomically."""
    html = build_figure(result).to_html(include_plotlyjs=True, full_html=True)
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(html)
    return Path(path)
