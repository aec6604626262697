"""`dpbench twin clock`: the cost model against published DeepSeek serving figures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from dpbench.twin.clock import WITHIN, ClockRow, clock_rows, held_out_ratios, within
from dpbench.twin.profiles import DEFAULT_PROFILE

SHORT = {
    "requests_per_s": "req/s",
    "output_tokens_per_s": "out tok/s",
    "total_tokens_per_s": "all tok/s",
    "input_tokens_per_s": "in tok/s",
    "attention_bytes_per_s": "attn B/s",
    "attention_flops_per_s": "attn FLOP/s",
}


def compact(v: float) -> str:
    """3 significant digits with an SI suffix: 11,489 → 11.5k, 6.6e14 → 660T."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def clock_table(rows: list[ClockRow], quantities: dict[str, str]) -> Table:
    """Predicted / published per figure under both profiles, ≤ 80 columns."""
    table = Table(box=None, pad_edge=False, collapse_padding=True)
    for col in ("figure", "what", "GPU", "published", "roofline", "×", "fit", "×", "role"):
        left = col in ("figure", "what", "role")
        table.add_column(col, justify="left" if left else "right", no_wrap=True)
    for r in rows:
        table.add_row(
            r.figure,
            quantities[r.figure],
            r.hardware,
            compact(r.published),
            compact(r.predicted["roofline"]),
            f"{r.ratio('roofline'):.2f}",
            compact(r.predicted["published-fit"]),
            f"{r.ratio('published-fit'):.2f}",
            r.role,
        )
    return table


def clock(
    fit: Annotated[
        bool, typer.Option("--fit", help="refit published-fit; rewrite its stored file")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="also write the table as JSON")
    ] = None,
) -> None:
    """Cost model vs published DeepSeek serving figures.

    Runs the cost model on each published set-up (dpbench/data/published-serving.yaml)
    under the roofline and published-fit profiles and prints predicted / published."""
    from dpbench.core.atomic import write_json
    from dpbench.twin.clockfit import FitError, write_fit
    from dpbench.twin.published import load_figures

    out = Console()
    if fit:
        try:
            out.print(f"wrote {write_fit()}")
        except FitError as exc:
            raise typer.BadParameter(str(exc), param_hint="--fit") from None
    rows = clock_rows()
    names = {
        f.id: SHORT[f.quantity] + {"node": "/node", "user": "/user"}.get(f.per, "")
        for f in load_figures()
    }
    out.print(clock_table(rows, names))
    held = held_out_ratios(rows)
    worst = max(held, key=lambda k: abs(held[k] - 1.0))
    out.print(
        f"× = predicted / published. published-fit held out {len(held)} figures; worst "
        f"{worst} at {held[worst]:.2f}; all within ±{WITHIN:.0%}: "
        f"{'yes' if within(held) else 'no'}. Default profile: {DEFAULT_PROFILE}."
    )
    if output is not None:
        write_json(output, {"rows": [r.as_dict() for r in rows]})
        out.print(f"saved {output}")
