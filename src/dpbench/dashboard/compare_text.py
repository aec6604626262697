"""`dpbench compare` as text that fits the terminal: one line a metric, the verdict always shown.

A metric's line holds its label, the values A → B its change is computed from (the means of
paired seeds or of a server's runs, else asv's value: ``Change.a`` / ``Change.b``), the change
in % with its interval, and the verdict. Where the widest line does not fit the console, what
the verdict rests on ("paired, 5 seeds") goes first, then the indent, then the long labels give
way to short ones (:data:`SHORT_LABELS`); then labels wrap within their column; below that each
metric takes two lines (label, then the rest). Numbers and verdicts are never cut. A count too
small to judge shows its events where a change would be, its verdict right after them: the
verdict column is as wide as the other verdicts need.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace

from rich.text import Text

from dpbench.dashboard.compare import TOO_FEW, Change, fmt_pct

PLACEMENT_LABELS = {0: "unknown", 1: "early", 2: "post-kv", 3: "absent"}
VERDICT_STYLE = {"worse": "bold red", "better": "green", "changed": "blue"}
LEGEND = "A → B: the values each change is computed from (means of seeds or runs)"
MIN_LABEL = 12  # narrower than this, a label gets a line of its own
# the answer's long headings (metrics.KEY_METRICS), shortened where a line would not fit
SHORT_LABELS = {
    "false prefillable reports": "false reports",
    "decode-rank s beside prefill": "decode beside prefill",
}


def fmt(v: float | None) -> str:
    if v is None:
        return "—"
    a = abs(v)
    return f"{v:.3e}" if a and (a >= 1e6 or a < 1e-3) else f"{v:.4g}"


def short(v: float | None) -> str:
    """A value for a metric's line: 420,600 rather than 4.206e+05."""
    return f"{v:,.0f}" if v is not None and 1e4 <= abs(v) < 1e9 else fmt(v)


def values_text(chart: dict, change: Change) -> str:
    """A → B as the change used them; a placement code as its label."""
    if chart.get("key") == "placement":
        a, b = (
            "—" if v is None else PLACEMENT_LABELS.get(round(v), fmt(v))
            for v in (change.a, change.b)
        )
        return f"{a} → {b}"
    return f"{short(change.a)} → {short(change.b)}"


def basis_text(change: Change) -> str:
    """What a verdict rests on, where it is more than one run a side."""
    if change.basis.startswith(("paired", "repeats")) or change.basis == "deterministic":
        return change.basis
    return ""


@dataclass(frozen=True)
class Entry:
    """One metric's line: label, values, change and verdict (with what it rests on)."""

    label: str
    values: str
    change: str
    verdict: str
    basis: str = ""

    @classmethod
    def of(cls, label: str, chart: dict, change: Change) -> Entry:
        pct = "" if chart.get("key") == "placement" else fmt_pct(change)
        return cls(label, values_text(chart, change), pct, change.verdict, basis_text(change))


Item = Entry | tuple[str, str]  # an entry, or ("head" | "setting", text)


def _shortened(items: list[Item]) -> list[Item]:
    return [
        replace(i, label=SHORT_LABELS.get(i.label, i.label)) if isinstance(i, Entry) else i
        for i in items
    ]


def _verdict(e: Entry, with_basis: bool) -> Text:
    text = Text(e.verdict, style=VERDICT_STYLE.get(e.verdict, "dim"))
    if with_basis and e.basis:
        text.append(f" ({e.basis})", style="dim")
    return text


def _widths(entries: list[Entry], with_basis: bool) -> tuple[int, int, int, int]:
    """Widths of the label, values and change columns, and of change and verdict together
    (a count too small to judge writes its verdict right after its events)."""

    def most(xs: list[int]) -> int:
        return max(xs, default=0)

    wc = most([len(e.change) for e in entries if e.verdict != TOO_FEW])
    tail = [
        len(e.change) + 2 + len(e.verdict)
        if e.verdict == TOO_FEW
        else wc + 2 + len(e.verdict) + (len(e.basis) + 3 if with_basis and e.basis else 0)
        for e in entries
    ]
    return (
        most([len(e.label) for e in entries]),
        most([len(e.values) for e in entries]),
        wc,
        most(tail),
    )


def _entries(items: list[Item]) -> list[Entry]:
    return [i for i in items if isinstance(i, Entry)]


def metric_lines(items: list[Item], width: int) -> list[Text]:
    """Headings, settings and entries as lines no wider than ``width``."""
    short = _shortened(items)
    for indent, with_basis, labelled in ((4, True, items), (4, False, items), (2, False, short)):
        wl, wv, wc, wt = _widths(_entries(labelled), with_basis)
        if indent + wl + 2 + wv + 2 + wt <= width:
            return _lay(labelled, width, indent, (wl, wv, wc), with_basis)
    wl, wv, wc, wt = _widths(_entries(short), False)
    label = width - (2 + 2 + wv + 2 + wt)
    if label >= MIN_LABEL:
        return _lay(short, width, 2, (label, wv, wc), False)
    return _two_line(short, width)


def _heading(item: tuple[str, str], width: int) -> list[Text]:
    kind, text = item
    indent = "" if kind == "head" else " "
    style = "bold cyan" if kind == "head" else "bold"
    wrapped = textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ")
    return [Text(line, style=style) for line in wrapped]


def _line(e: Entry, pad: str, label: str, widths: tuple[int, int, int], basis: bool) -> Text:
    wl, wv, wc = widths
    change = e.change if e.verdict == TOO_FEW else e.change.ljust(wc)
    values = f"{e.values.ljust(wv)}  " if wv else ""
    text = Text(f"{pad}{label.ljust(wl)}{'  ' if wl else ''}{values}{change}  ")
    return text.append_text(_verdict(e, basis))


def _lay(
    items: list[Item], width: int, indent: int, widths: tuple[int, int, int], with_basis: bool
) -> list[Text]:
    lines: list[Text] = []
    pad = " " * indent
    for item in items:
        if not isinstance(item, Entry):
            lines.extend(_heading(item, width))
            continue
        label = textwrap.wrap(item.label, widths[0]) or [""]
        lines.append(_line(item, pad, label[0], widths, with_basis))
        lines.extend(Text(f"{pad}{more}") for more in label[1:])
    return lines


def _two_line(items: list[Item], width: int) -> list[Text]:
    """Each metric as its label, then its values, change and verdict (wrapped at spaces)."""
    lines: list[Text] = []
    for item in items:
        if not isinstance(item, Entry):
            lines.extend(_heading(item, width))
            continue
        lines.extend(Text(s) for s in textwrap.wrap(item.label, width, initial_indent="  "))
        rest = f"{item.values}  {item.change}  {item.verdict}"
        for s in textwrap.wrap(rest, width, initial_indent="    ", subsequent_indent="    "):
            lines.append(Text(s, style=VERDICT_STYLE.get(item.verdict, "")))
    return lines


def change_lines(entries: list[Entry], width: int) -> list[Text]:
    """A list of changes (long labels: tier · benchmark (parameters)): one line each where
    they fit, else the label on a line of its own above its values, change and verdict."""
    wl, wv, wc, wt = _widths(entries, True)
    if wl + 2 + wv + 2 + wt <= width:
        return _lay(list(entries), width, 0, (wl, wv, wc), True)
    with_basis = 4 + wv + 2 + wt <= width
    wl, wv, wc, wt = _widths(entries, with_basis)
    lines: list[Text] = []
    for e in entries:
        lines.extend(Text(s) for s in textwrap.wrap(e.label, width, subsequent_indent="  "))
        lines.append(_line(e, "    ", "", (0, wv, wc), with_basis))
    return lines
