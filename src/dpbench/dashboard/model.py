"""Turn loaded results into the dashboard's data: ordered commits with placement, and chart series.

The returned dict is plain JSON; the site's JavaScript and the terminal comparison
(:mod:`dpbench.dashboard.compare`) read the same structure::

    {"commits": [{"sha", "short", "label", "date", "subject", "branch", "tags",
                  "placement", "placement_sources"}],          # oldest first
     "placement_changes": [{"index", "from", "to"}],
     "machines": [...], "envs": [...],
     "charts": [{"id", "tier", "source": "asv" | "run file", "benchmark", "title",
                 "unit", "better": "higher" | "lower" | "none", "param_names",
                 "series": [{"machine", "env", "params", "points": [[i, value, lo|None, hi|None]]}]}],
     "problems": [{"path", "reason"}]}
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter, defaultdict
from typing import Any

from dpbench.dashboard.loaders import Loaded

# The placement tier's codes (dpbench.placement.probe.PLACEMENT_CODES), decoded here.
PLACEMENT_LABELS = {0: "unknown", 1: "early", 2: "post-kv", 3: "absent"}
PLACEMENT_BENCH = re.compile(r"^placement\..*\btrack_placement_code$")
SHA = re.compile(r"^[0-9a-f]{7,64}$")


TIME_UNITS = {"s", "seconds", "ms", "us", "ns"}


def _direction(
    bench_name: str, unit: str, tier: str, run_better: dict[tuple[str, str], str]
) -> str:
    """asv has no direction field: time/memory benchmarks are lower-is-better; a track_ takes the
    direction its run-file metric of the same name declares, or lower for a duration."""
    method = bench_name.rsplit(".", 1)[-1]
    if method.startswith(("time_", "mem_", "peakmem_")):
        return "lower"
    if method.startswith("track_"):
        declared = run_better.get((tier, method.removeprefix("track_")))
        if declared:
            return declared
        return "lower" if unit in TIME_UNITS else "none"
    return "none"


def _iso(date_ms: int | None) -> str | None:
    if date_ms is None:
        return None
    return dt.datetime.fromtimestamp(date_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")


def _timestamp(date: str | None) -> float:
    if not date:
        return float("inf")
    try:
        return dt.datetime.fromisoformat(date).timestamp()
    except ValueError:
        return float("inf")


def _order_commits(loaded: Loaded, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Commits with results, in history order; dates from the history repo, else from asv."""
    hist = {row["commit"]: (i, row) for i, row in enumerate(history)}
    asv_dates: dict[str, int] = {}
    for run in loaded.asv_runs:
        if run.date_ms is not None:
            asv_dates.setdefault(run.commit, run.date_ms)
    shas = {run.commit for run in loaded.asv_runs} | {rf.commit for rf in loaded.run_files}
    rows = []
    for sha in shas:
        idx, row = hist.get(sha, (None, {}))
        date = row.get("date") or _iso(asv_dates.get(sha))
        rows.append(
            {
                "sha": sha,
                "short": sha[:8],
                "date": date,
                "subject": row.get("subject", ""),
                "branch": row.get("branch", ""),
                "tags": row.get("tags", []),
                "_key": (idx, _timestamp(date), sha),
            }
        )
    if all(r["_key"][0] is not None for r in rows):
        rows.sort(key=lambda r: r["_key"][0])  # git's order, even where a rebase broke date order
    else:
        rows.sort(key=lambda r: (r["_key"][1], r["_key"][2]))
    for r in rows:
        del r["_key"]
        tag = r["tags"][0] if r["tags"] else ""
        r["label"] = f"{tag} {r['short']}".strip()
    return rows


def _placements(loaded: Loaded) -> dict[str, Counter[str]]:
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    for rf in loaded.run_files:
        if rf.tier == "placement" and rf.placement_label:
            votes[rf.commit][rf.placement_label] += 1
    for run in loaded.asv_runs:
        for v in run.values:
            if PLACEMENT_BENCH.match(v.benchmark):
                votes[run.commit][PLACEMENT_LABELS.get(int(v.value), "unknown")] += 1
    return votes


def build_model(loaded: Loaded, history: list[dict[str, Any]]) -> dict[str, Any]:
    problems = [{"path": p.path, "reason": p.reason} for p in loaded.problems]
    kept_runs = []
    for rf in loaded.run_files:
        if SHA.match(rf.commit):
            kept_runs.append(rf)
        else:
            problems.append(
                {
                    "path": rf.path,
                    "reason": f"filed under {rf.commit!r}, not a commit hash "
                    "(run it under asv to place it on the history)",
                }
            )
    loaded = Loaded(loaded.benchmarks, loaded.machines, loaded.asv_runs, kept_runs, loaded.problems)

    commits = _order_commits(loaded, history)
    index = {c["sha"]: i for i, c in enumerate(commits)}
    votes = _placements(loaded)
    for c in commits:
        v = votes.get(c["sha"])
        known = Counter({k: n for k, n in (v or {}).items() if k != "unknown"})
        c["placement"] = known.most_common(1)[0][0] if known else ("unknown" if v else None)
        c["placement_sources"] = dict(v or {})
    changes = []
    prev = None
    for i, c in enumerate(commits):
        p = c["placement"]
        if p in (None, "unknown"):
            continue
        if prev is not None and p != prev:
            changes.append({"index": i, "from": prev, "to": p})
        prev = p

    run_better: dict[tuple[str, str], str] = {}
    for rf in loaded.run_files:
        for name, m in rf.data["metrics"].items():
            if m.get("better") in ("higher", "lower"):
                run_better[(rf.tier, name)] = m["better"]

    charts: dict[str, dict[str, Any]] = {}
    asv_metric_names: set[tuple[str, str]] = set()
    for run in loaded.asv_runs:
        for v in run.values:
            meta = loaded.benchmarks.get(v.benchmark, {})
            tier = v.benchmark.split(".", 1)[0]
            chart = charts.get(v.benchmark)
            if chart is None:
                chart = charts[v.benchmark] = {
                    "id": f"asv:{v.benchmark}",
                    "tier": tier,
                    "source": "asv",
                    "benchmark": v.benchmark,
                    "title": meta.get("pretty_name") or v.benchmark.split(".", 1)[-1],
                    "unit": meta.get("unit") or "unitless",
                    "better": _direction(v.benchmark, meta.get("unit") or "", tier, run_better),
                    "param_names": list(meta.get("param_names") or []),
                    "_series": {},
                }
                method = v.benchmark.rsplit(".", 1)[-1]
                asv_metric_names.add((tier, method.removeprefix("track_")))
            key = (run.machine, run.env, v.params)
            s = chart["_series"].setdefault(
                key,
                {"machine": run.machine, "env": run.env, "params": list(v.params), "points": []},
            )
            s["points"].append([index[run.commit], v.value, v.ci_low, v.ci_high])

    for rf in loaded.run_files:
        for name, m in rf.data["metrics"].items():
            if (rf.tier, name) in asv_metric_names:
                continue  # the asv chart of the same metric already shows it
            value = m.get("value")
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            cid = f"run:{rf.tier}/{name}"
            chart = charts.get(cid)
            if chart is None:
                chart = charts[cid] = {
                    "id": cid,
                    "tier": rf.tier,
                    "source": "run file",
                    "benchmark": f"results/runs/*/{rf.tier}/*.json",
                    "title": name,
                    "unit": str(m.get("unit") or "unitless"),
                    "better": m.get("better", "none"),
                    "param_names": ["run"],
                    "_series": {},
                }
            key = (rf.host, "run file", (rf.name,))  # one series per run (scenario) and host
            s = chart["_series"].setdefault(
                key, {"machine": rf.host, "env": "run file", "params": [rf.name], "points": []}
            )
            s["points"].append([index[rf.commit], float(value), None, None])

    out_charts = []
    for chart in sorted(charts.values(), key=lambda c: (c["tier"], c["source"] != "asv", c["id"])):
        series = [chart["_series"][k] for k in sorted(chart["_series"])]
        for s in series:
            s["points"].sort(key=lambda p: p[0])
        del chart["_series"]
        chart["series"] = series
        out_charts.append(chart)

    machines = sorted({s["machine"] for c in out_charts for s in c["series"]})
    envs = sorted({s["env"] for c in out_charts for s in c["series"]})
    return {
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commits": commits,
        "placement_changes": changes,
        "machines": machines,
        "envs": envs,
        "tiers": sorted({c["tier"] for c in out_charts}),
        "charts": out_charts,
        "problems": problems,
    }


def default_pair(model: dict[str, Any]) -> tuple[int, int] | None:
    """Indices of (last `early` commit, first `post-kv` commit after it); else the last two commits."""
    commits = model["commits"]
    if len(commits) < 2:
        return None
    early = [i for i, c in enumerate(commits) if c["placement"] == "early"]
    if early:
        post = [i for i, c in enumerate(commits) if c["placement"] == "post-kv" and i > early[-1]]
        if post:
            return early[-1], post[0]
    return len(commits) - 2, len(commits) - 1
