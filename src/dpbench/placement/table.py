"""Render placement run results as rich tables (one release, or several side by side)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table


def _metric(result: dict[str, Any], name: str) -> str:
    m = result.get("metrics", {}).get(name)
    return "—" if m is None else f"{m['value']:g}"


def release(result: dict[str, Any]) -> str:
    """``0.5.17``, or ``0.5.17+revert-31835`` for a change laid over it."""
    s = result["sglang"]
    change = s.get("change")
    return f"{s.get('version')}+{change['name']}" if change else str(s.get("version"))


def summary(results: Sequence[dict[str, Any]]) -> Table:
    """One row per release: labels and the tier's metrics."""
    table = Table(title="PrefillDelayer negotiation placement (tier: placement)")
    for col in (
        "SGLang",
        "generation",
        "label",
        "static",
        "behavioural",
        "KV exits before",
        "false prefillable",
        "chunked negotiates",
        "PR #31835 cases",
    ):
        table.add_column(col)
    for r in results:
        p = r.get("placement") or {}
        table.add_row(
            release(r),
            str(r["sglang"].get("generation")),
            str(p.get("label")),
            str((p.get("static") or {}).get("label")),
            str(p.get("behavioural_label", "—")),
            _metric(r, "kv_exits_before_negotiation"),
            _metric(r, "false_prefillable_reports"),
            _metric(r, "chunked_negotiates"),
            _metric(r, "pr31835_conforming_cases") + "/5"
            if "pr31835_conforming_cases" in r["metrics"]
            else "—",
        )
    return table


def cases(result: dict[str, Any]) -> Table:
    """One row per behavioural case: verdict given, what SGLang told the delayer, the outcome."""
    table = Table(title=f"SGLang {release(result)}: what the delayer was told")
    for col in (
        "case",
        "verdict",
        "told (local_prefillable)",
        "result",
        "admitted",
        "false report",
        "as PR",
    ):
        table.add_column(col)
    for c in result.get("extra", {}).get("cases", []):
        if not c["constructible"]:
            table.add_row(c["case"], "", f"not constructible: {c['reason']}", "", "", "", "")
            continue
        told = (
            ", ".join(str(n["local_prefillable"]) for n in c["negotiations"])
            or "nothing (finalize: False)"
        )
        table.add_row(
            c["case"],
            {True: "allow", False: "delay", None: ""}[c["verdict"]],
            told,
            str(c["result"]),
            str(c["admitted"]),
            "yes" if c["false_prefillable_report"] else "no",
            "yes" if c["conforms_to_pr31835"] else "no",
        )
    return table


def render(result: dict[str, Any]) -> Group:
    parts: list[Any] = [summary([result])]
    if result.get("extra", {}).get("cases"):
        parts.append(cases(result))
    static = (result.get("placement") or {}).get("static") or {}
    if static.get("events"):
        ev = Table(title="add_one_req in source order (static)")
        ev.add_column("line")
        ev.add_column("event")
        ev.add_column("detail")
        for e in static["events"]:
            ev.add_row(str(e["line"]), e["kind"], e["detail"])
        parts.append(ev)
    return Group(*parts)
