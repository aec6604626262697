"""Tables that fit the terminal: the whole table where it fits, a narrower layout where not.

A cell is never shortened ("…" never replaces a digit). Where the table is wider than the
console, its rows are grouped under their leading columns (a heading and a smaller table per
group); where that is still too wide, each row becomes a block: its label, then
"column: value" pairs packed into lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Column:
    name: str
    right: bool = False  # right-justified (numbers)
    named: bool = False  # in a heading, "name value" (DP 4), else the value alone


def _table(columns: list[Column], rows: list[list[str]], title: str) -> Table:
    table = Table(title=Text(title) if title else None, title_justify="left")
    for col in columns:
        table.add_column(col.name, justify="right" if col.right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(Text(c) for c in row))  # Text: no rich markup from results
    return table


def fits(console: Console, renderable: Table) -> bool:
    """Whether ``renderable`` at its natural width (no cell wrapped) fits the console."""
    wide = console.options.update(max_width=10**6)
    return Measurement.get(console, wide, renderable).maximum <= console.width


def fit(
    console: Console,
    columns: list[Column],
    rows: list[list[str]],
    *,
    title: str = "",
    group: int = 0,
    label: int = 1,
) -> None:
    """Print ``rows`` under ``columns`` within the console's width.

    ``group``: how many leading columns name a group of rows (e.g. DP and chunk size): the
    narrower layout heads each group with them and tables the rest. ``label``: how many
    leading columns head a row's block in the narrowest layout."""
    full = _table(columns, rows, title)
    if fits(console, full):
        console.print(full)
        return
    if title:
        console.print(Text(title, style="italic"))
    if group:
        parts = _grouped(columns, rows, group)
        tables = [(head, _table(columns[group:], part, "")) for head, part in parts]
        if all(fits(console, t) for _, t in tables):
            for head, t in tables:
                console.print(Text(head, style="bold"))
                console.print(t)
            return
    for line in blocks(columns, rows, console.width, label=label):
        console.print(line, soft_wrap=False, overflow="fold")


def _named(col: Column, value: str) -> str:
    return f"{col.name} {value}" if col.named else value


def _grouped(
    columns: list[Column], rows: list[list[str]], group: int
) -> list[tuple[str, list[list[str]]]]:
    out: dict[str, list[list[str]]] = {}
    for row in rows:
        head = ", ".join(_named(c, v) for c, v in zip(columns[:group], row, strict=False))
        out.setdefault(head, []).append(row[group:])
    return list(out.items())


def blocks(columns: list[Column], rows: list[list[str]], width: int, label: int = 1) -> list[Text]:
    """Each row as a block: its first ``label`` cells as a bold line, then "column: value"
    pairs, as many to a line as fit in ``width`` (a pair wider than that alone on its line)."""
    lines: list[Text] = []
    for row in rows:
        head = " · ".join(_named(c, v) for c, v in zip(columns[:label], row, strict=False))
        lines.append(Text(head, style="bold"))
        line = ""
        for col, value in zip(columns[label:], row[label:], strict=False):
            if not value:
                continue
            pair = f"{col.name}: {value}"
            if line and len(line) + 3 + len(pair) > width:
                lines.append(Text(line))
                line = ""
            line = f"{line}   {pair}" if line else f"  {pair}"
        if line:
            lines.append(Text(line))
    return lines
