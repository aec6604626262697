"""Whether two commits' results can answer a comparison: a gate never passes on a missing answer.

Two things leave a side without an answer: a results file of that commit the loader could not
read (cut short, not JSON: :func:`unreadable`), and a headline metric the other side has and
this one lacks (:func:`missing_headlines`). `dpbench compare` exits 2 on either, naming the
file or the metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpbench.dashboard import metrics
from dpbench.dashboard.compare import scenario_text, summary

# The answer's sections (metrics.SECTION_ORDER ranks 0-2: placement, the twin's headline
# settings, SGLang's real scheduler) and the metrics each opens with: the headline.
ANSWER_RANKS = 3
ANSWER_KEYS = ("placement", "false_reports", "mixed", "decode_beside", "ttft_p99", "throughput")
# the results that belong to no one commit: unreadable, they leave every commit short
SHARED_FILES = ("benchmarks.json", "machine.json")


def commit_of(path: str) -> str | None:
    """The commit (or hash prefix) a results file belongs to: asv's ``<sha8>-<env>.json``, or
    a run file's ``runs/<sha>/<tier>/<name>.json``; None for another file."""
    p = Path(path)
    if p.parent.parent.parent.name == "runs":
        return p.parent.parent.name
    head = p.name.split("-", 1)[0].lower()
    if "-" in p.name and len(head) >= 7 and all(c in "0123456789abcdef" for c in head):
        return head
    return None


def belongs(path: str, sha: str) -> bool:
    """A results file of this commit, or one every commit's results need."""
    if Path(path).name in SHARED_FILES:
        return True
    of = commit_of(path)
    return of is not None and (sha.startswith(of) or of.startswith(sha))


def unreadable(problems: list[dict[str, str]], sha: str) -> list[dict[str, str]]:
    """The problems (path, reason) the loader recorded for this commit's results."""
    return [p for p in problems if belongs(p["path"], sha)]


def headline_items(
    model: dict[str, Any], ia: int, ib: int, machine: str | None
) -> list[tuple[str, Any, list[tuple[str, dict, Any, Any, Any]]]]:
    """The answer: (section, row, [(key, chart, A, B, change)]) for the headline metrics of
    the answer's sections, delayer-on rows only."""
    out = []
    for section, rows in summary(model, ia, ib, machine).items():
        if metrics.section_rank(section)[0] >= ANSWER_RANKS:
            continue
        for r in rows:
            if r.control:
                continue
            cells = [(k, *r.cells[k]) for k in ANSWER_KEYS if k in r.cells]
            out.append((section, r, cells))
    return out


def missing_headlines(model: dict[str, Any], ia: int, ib: int, machine: str | None) -> list[str]:
    """A sentence for each headline metric one commit measured and the other did not."""
    headings = {k: h for k, h, _ in metrics.KEY_METRICS}
    labels = (model["commits"][ia]["label"], model["commits"][ib]["label"])
    out = []
    for section, row, cells in headline_items(model, ia, ib, machine):
        setting = scenario_text(row.scenario) if row.scenario else ""
        where = f"{section}{', ' + setting if setting else ''}"
        for key, _chart, a, b, _change in cells:
            if (a is None) == (b is None):
                continue
            lacks, has = (labels[0], labels[1]) if a is None else (labels[1], labels[0])
            out.append(f"{lacks} has no {headings[key]} ({where}) that {has} has")
    return out
