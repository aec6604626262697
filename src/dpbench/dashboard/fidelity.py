"""Fidelity: the twin beside the simulated-forward server on the same scenario, per commit.

The simulated-forward server (an asv class in ``benchmarks/server.py`` whose name
contains "Simulated"; every number marked ``executor: simulated``) runs SGLang's real
server processes with only the model forward replaced by the cost model; the twin runs
SGLang's real adder and delayer in lockstep ranks. Where both measured the same metric
on the same scenario (common parameters equal, ``workload`` read as ``spec``, a
parameter only one tier has at ``default``) on a commit, the two values go side by side,
with the twin's deviation from the server: in percentage points for a fraction (a
DP-mixed fraction of 0.02 against 0.01 is +1 point, not +100 %), relative otherwise.

:func:`replayed` reads what ``dpbench server fidelity`` measured: each server run paired
with the twin replaying that run's own arrivals, over repeated runs, as the README's
fidelity tables show it (n, mean paired difference, 95 % interval; timing rows over the
runs whose instrument was healthy).
"""

from __future__ import annotations

import math
from typing import Any

# Metric names that differ between the tiers for the same quantity: server name → twin name.
SAME_METRIC = {"request_throughput_per_s": "request_throughput"}


def _name(chart: dict[str, Any]) -> str:
    return SAME_METRIC.get(chart["metric"], chart["metric"])


def deviation_unit(unit: str) -> str:
    """``pts`` for a fraction (a difference in percentage points), else ``%``."""
    return "pts" if unit.startswith("fraction") else "%"


def deviation(twin: float, server: float, unit: str) -> tuple[float | None, str]:
    """Twin − server: percentage points for fractions, else percent of the server's value."""
    if deviation_unit(unit) == "pts":
        return (twin - server) * 100, "pts"
    return ((twin - server) / abs(server) * 100 if server != 0 else None), "%"


def _same_scenario(a: dict[str, str], b: dict[str, str]) -> bool:
    """Common parameters equal; a parameter only one tier has must be at its default there
    (e.g. the twin's ``chunked_prefill=default`` is what the server runs without the axis)."""
    common = set(a) & set(b)
    extra = [v for k, v in [*a.items(), *b.items()] if k not in common]
    return bool(common) and all(a[k] == b[k] for k in common) and all(v == "default" for v in extra)


def pairs(model: dict[str, Any]) -> list[dict[str, Any]]:
    sims = [
        (n, c)
        for n, c in enumerate(model["charts"])
        if c["tier"] == "server" and c["executor"] == "simulated" and c["source"] == "asv"
    ]
    twins = [
        (n, c)
        for n, c in enumerate(model["charts"])
        if c["tier"] == "twin" and c["source"] == "asv" and c["param_names"]
    ]
    out = []
    for ns, sim in sims:
        for nt, twin in twins:
            if _name(sim) != _name(twin):
                continue
            for ks, ss in enumerate(sim["series"]):
                for kt, ts in enumerate(twin["series"]):
                    if ss["machine"] != ts["machine"] or not _same_scenario(
                        ss["scenario"], ts["scenario"]
                    ):
                        continue
                    sv = {p[0]: p for p in ss["points"]}
                    rows = []
                    for p in ts["points"]:
                        q = sv.get(p[0])
                        if q is None:
                            continue
                        dev, _ = deviation(p[1], q[1], twin["unit"])
                        rows.append([p[0], p[1], p[2], p[3], q[1], q[2], q[3], dev])
                    if rows:
                        out.append(
                            {
                                "metric": _name(twin),
                                "unit": twin["unit"],
                                "better": twin["better"],
                                "scenario": ts["scenario"],
                                "machine": ts["machine"],
                                "twin": [nt, kt],
                                "server": [ns, ks],
                                "rows": rows,  # [commit, twin, lo, hi, server, lo, hi, dev]
                                "dev_unit": deviation_unit(twin["unit"]),
                            }
                        )
    out.sort(key=lambda p: (p["metric"], sorted(p["scenario"].items())))
    return out


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def replayed(model: dict[str, Any], reports: list[Any]) -> list[dict[str, Any]]:
    """One entry per ``dpbench server fidelity`` report: its setting, the commit of its release
    (by the release history's ``v<version>`` tag; None off the history), and per row the n
    paired runs, the server and replayed-twin means, and server − replay with its 95 %
    interval: points for a fraction, % of the replay's mean otherwise."""
    by_tag = {t: i for i, c in enumerate(model["commits"]) for t in c.get("tags", [])}
    out = []
    for rep in reports:
        inp = rep.data["inputs"]
        release = str(inp.get("release", ""))
        rows = []
        for row in rep.data["rows"]:
            runs = row.get("server_runs") or []
            valid = row.get("valid_runs") or [True] * len(runs)
            reps = row.get("replay_runs") or []
            pairs = [
                (a, b)
                for a, b, ok in zip(runs, reps, valid, strict=False)
                if ok and _finite(a) is not None and _finite(b) is not None
            ]
            diff = _finite(row.get("replay_diff"))
            lo, hi = (_finite(v) for v in (row.get("replay_ci95") or [None, None]))
            mean_rep = sum(b for _, b in pairs) / len(pairs) if pairs else None
            unit = str(row.get("unit", ""))
            if deviation_unit(unit) == "pts":
                scale = 100.0
            else:
                scale = 100.0 / abs(mean_rep) if mean_rep else None
            rows.append(
                {
                    "metric": row.get("metric", ""),
                    "unit": unit,
                    "n": len(pairs),
                    "excluded": sum(1 for ok in valid if not ok),
                    "server": sum(a for a, _ in pairs) / len(pairs) if pairs else None,
                    "replay": mean_rep,
                    "diff": diff * scale if diff is not None and scale else None,
                    "lo": lo * scale if lo is not None and scale else None,
                    "hi": hi * scale if hi is not None and scale else None,
                    "dev_unit": deviation_unit(unit),
                }
            )
        out.append(
            {
                "path": rep.path,
                "release": release,
                "commit": by_tag.get(f"v{release}"),
                "scenario": {
                    "spec": str(inp.get("spec", "")),
                    "dp_size": str(inp.get("dp", "")),
                    "chunked_prefill_size": str(inp.get("chunked_prefill_size", "")),
                    "delayer": "on" if inp.get("delayer", True) else "off",
                },
                "runs": len(rep.data.get("server_results") or []),
                "broken": [
                    f"r{i}: {line}"
                    for i, h in enumerate(rep.data.get("server_health") or [])
                    for line in h.get("broken", [])
                ],
                "rows": rows,
            }
        )
    out.sort(key=lambda r: (sorted(r["scenario"].items()), r["release"]))
    return out
