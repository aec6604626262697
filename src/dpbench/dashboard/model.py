"""Turn loaded results into the dashboard's data: ordered commits with placement, and chart series.

The returned dict is plain JSON; the site's JavaScript and the terminal comparison
(:mod:`dpbench.dashboard.compare`) read the same structure::

    {"commits": [{"sha", "short", "label", "date", "subject", "branch", "tags",
                  "placement", "placement_sources"}],          # oldest first
     "placement_changes": [{"index", "from", "to"}],
     "machines": [...], "envs": [...], "tiers": [...],
     "scenario_axes": {"spec": [...], "dp_size": [...], "delayer": [...], ...},
     "default_scenario": {axis: value}, # the history page's first view (the twin's headline)
     "key_metrics": [{"key", "heading"}],                     # the summary's columns
     "unknown_directions": [metric names no direction row matched],
     "charts": [{"id", "tier", "source": "asv" | "run file", "benchmark", "group", "title",
                 "metric", "key": summary column | None, "section": summary table | None, "unit", "better": "higher" | "lower" | "none" | "unknown",
                 "bounds": [lo | None, hi | None], "count": bool (metrics.quantity),
                 "stat": "mean" (points are means of per-seed samples) | "value" (asv's value),
                 "better_why", "executor": "simulated" | None, "param_names", "axes",
                 "series": [{"machine", "env", "params", "scenario": {axis: value},
                             "band": "99% CI" | "IQR" | "sample range" | None,
                             "points": [[i, value, lo|None, hi|None]],
                             "samples": {"i": {"x": [per-seed value|None], "seeds": version}}
                                        (only where asv kept per-seed samples)}]}],
     "problems": [{"path", "reason"}],
     "section_order": [summary sections, answer first],
     "t975": [Student's t 0.975 quantile for df 1 … 100]}

A point is the value every comparison uses: the mean of a track's per-seed samples where asv
kept them (asv's own value is their median), else asv's value. A value asv or a run file left
null/NaN (skipped, not measured) is absent: no point. A noise
band is cut at the metric's bounds (a rate's never below 0, a fraction's never above 1).
"""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import functools
import math
import re
from collections import Counter, defaultdict
from typing import Any

from dpbench.dashboard import metrics
from dpbench.dashboard.loaders import Loaded
from dpbench.metrics.latency import Slo
from dpbench.twin.stats import t_quantile_975

# The placement tier's codes (dpbench.placement.probe.PLACEMENT_CODES), decoded here.
PLACEMENT_LABELS = {0: "unknown", 1: "early", 2: "post-kv", 3: "absent"}
PLACEMENT_BENCH = re.compile(r"^placement\..*\btrack_placement_code$")
SHA = re.compile(r"^[0-9a-f]{7,64}$")
T975 = [round(t_quantile_975(df), 6) for df in range(1, 101)]


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
    loaded = _filed_by_commit(loaded, problems)

    commits = _order_commits(loaded, history)
    index = {c["sha"]: i for i, c in enumerate(commits)}
    changes = _mark_placements(loaded, commits)

    charts: dict[str, dict[str, Any]] = {}
    asv_metrics = _asv_charts(loaded, index, charts)
    _run_file_charts(loaded, index, charts, asv_metrics)
    out_charts = []
    for chart in sorted(charts.values(), key=lambda c: (c["tier"], c["source"] != "asv", c["id"])):
        series = [chart["_series"][k] for k in sorted(chart["_series"])]
        for s in series:
            s["points"].sort(key=lambda p: p[0])
        del chart["_series"]
        chart["series"] = series
        out_charts.append(chart)

    _assign_sections(out_charts)

    axes: dict[str, set[str]] = defaultdict(set)
    for c in out_charts:
        if c["source"] == "asv":
            for s in c["series"]:
                for k, v in s["scenario"].items():
                    axes[k].add(v)
    machines = sorted({s["machine"] for c in out_charts for s in c["series"]})
    envs = sorted({s["env"] for c in out_charts for s in c["series"]})
    unknown = sorted({c["metric"] for c in out_charts if c["better"] == "unknown"})
    scenario_axes = {k: sorted(v, key=_natural) for k, v in sorted(axes.items())}
    return {
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commits": commits,
        "placement_changes": changes,
        "machines": machines,
        "envs": envs,
        "tiers": sorted({c["tier"] for c in out_charts}),
        "scenario_axes": scenario_axes,
        # the history page's first view: the twin's headline scenario (metrics.HEADLINE_SCENARIO)
        "default_scenario": metrics.default_scenario(scenario_axes),
        "key_metrics": [{"key": k, "heading": h} for k, h, _ in metrics.KEY_METRICS],
        "unknown_directions": unknown,
        "charts": out_charts,
        "problems": problems,
        # the suite's SLO (every benchmark's): the latency-load charts draw it
        "load_slo": {"ttft_ms_p99": Slo().ttft_ms, "tpot_ms_p99": Slo().tpot_ms},
        # the summary's sections, answer first (metrics.SECTION_ORDER): the pages use this order
        "section_order": sorted(
            {c["section"] for c in out_charts if c.get("section")}, key=metrics.section_rank
        ),
        # Student's t 0.975 quantiles for 1 … 100 degrees of freedom: the pages' paired
        # intervals use the numbers the terminal uses
        "t975": T975,
    }


def _asv_charts(
    loaded: Loaded, index: dict[str, int], charts: dict[str, dict[str, Any]]
) -> dict[str, set[str]]:
    """A chart per asv benchmark, a series per machine, environment and parameters; returns
    the metric names asv's charts show, per tier."""
    run_better: dict[tuple[str, str], str] = {}
    for rf in loaded.run_files:
        for name, m in rf.data["metrics"].items():
            if m.get("better") in ("higher", "lower"):
                run_better[(rf.tier, name)] = m["better"]

    asv_metrics: dict[str, set[str]] = defaultdict(set)  # tier → metric names asv charts show
    for run in loaded.asv_runs:
        for v in run.values:
            chart = charts.get(v.benchmark)
            if chart is None:
                chart = charts[v.benchmark] = _asv_chart(v.benchmark, loaded, run_better)
                asv_metrics[chart["tier"]].add(chart["metric"])
            shown = tuple(param_value(p) for p in v.params)
            key = (run.machine, run.env, shown)
            s = chart["_series"].get(key)
            if s is None:
                s = chart["_series"][key] = {
                    "machine": run.machine,
                    "env": run.env,
                    "params": list(shown),
                    "scenario": dict(zip(chart["axes"], shown, strict=False)),
                    "band": None,
                    "points": [],
                }
            s["band"] = s["band"] or v.band
            # per-seed values of a track (one sample per seed, in seed order): comparisons
            # pair them by seed, and the point is their mean, the value every comparison
            # uses (asv's own value is their median). A timing's samples are repeats of one
            # measurement: never paired, and its point is asv's median
            paired_kind = loaded.benchmarks.get(v.benchmark, {}).get("type") == "track"
            seeds = [x for x in v.samples or () if x is not None] if paired_kind else []
            value = sum(seeds) / len(seeds) if seeds else v.value
            s["points"].append([index[run.commit], value, *_clip(v.ci_low, v.ci_high, chart)])
            if seeds:
                s.setdefault("samples", {})[str(index[run.commit])] = {
                    "x": list(v.samples),
                    "seeds": v.version,
                }
                chart["stat"] = "mean"

    return asv_metrics


def _run_file_charts(
    loaded: Loaded,
    index: dict[str, int],
    charts: dict[str, dict[str, Any]],
    asv_metrics: dict[str, set[str]],
) -> None:
    """A chart per run-file metric no asv chart shows, a series per run and host."""
    for rf in loaded.run_files:
        for name, m in rf.data["metrics"].items():
            if _shown_by_asv(name, asv_metrics.get(rf.tier, set())):
                continue  # the asv chart of the same metric already shows it
            value = _finite(m.get("value"))
            if value is None:  # absent / null / NaN: not measured, never 0
                continue
            cid = f"run:{rf.tier}/{name}"
            chart = charts.get(cid)
            if chart is None:
                d = metrics.direction(name, m.get("better"))
                chart = charts[cid] = {
                    "id": cid,
                    "tier": rf.tier,
                    "source": "run file",
                    "benchmark": f"results/runs/*/{rf.tier}/*.json",
                    "group": "run files",
                    "title": name,
                    "metric": name,
                    "key": metrics.key_metric(name),
                    "unit": str(m.get("unit") or "unitless"),
                    "better": d.better,
                    "better_why": d.why,
                    **_bounds(name),
                    "stat": "value",
                    "executor": None,
                    "param_names": ["run"],
                    "axes": ["run"],
                    "_series": {},
                }
            if m.get("executor") == "simulated" or rf.data.get("executor") == "simulated":
                chart["executor"] = "simulated"
            key = (rf.host, "run file", (rf.name,))  # one series per run (scenario) and host
            s = chart["_series"].setdefault(
                key,
                {
                    "machine": rf.host,
                    "env": "run file",
                    "params": [rf.name],
                    "scenario": {"run": rf.name},
                    "band": None,
                    "points": [],
                },
            )
            lo, hi, band = _run_band(m)
            s["band"] = s["band"] or band
            s["points"].append([index[rf.commit], value, *_clip(lo, hi, chart)])


def _assign_sections(out_charts: list[dict[str, Any]]) -> None:
    # The summary's sections: a tier, or tier · benchmark class where several classes of a
    # tier have deciding metrics (server: GPU ServeThroughput and the simulated-forward one).
    # Run-file metrics fill a section only for a tier no asv benchmark summarises.
    key_groups: dict[str, set[str]] = defaultdict(set)
    for c in out_charts:
        if c["key"] and c["source"] == "asv":
            key_groups[c["tier"]].add(c["group"])
    for c in out_charts:
        if c.get("regime") and c["source"] == "asv" and c["group"] in key_groups[c["tier"]]:
            several = len(key_groups[c["tier"]]) > 1  # the rows its section's key metrics fill
            c["section"] = f"{c['tier']} · {c['group']}" if several else c["tier"]
        elif not c["key"]:
            c["section"] = None
        elif c["source"] == "asv":
            several = len(key_groups[c["tier"]]) > 1
            c["section"] = f"{c['tier']} · {c['group']}" if several else c["tier"]
        else:
            c["section"] = None if key_groups[c["tier"]] else c["tier"]


def _mark_placements(loaded: Loaded, commits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each commit's placement (its runs' majority, "unknown" only where nothing else was
    found), and where it changes along the history."""
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
    return changes


def _filed_by_commit(loaded: Loaded, problems: list[dict[str, str]]) -> Loaded:
    """The run files filed under a commit hash; the others named in ``problems``."""
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
    loaded = dataclasses.replace(loaded, run_files=kept_runs)
    return loaded


def _asv_chart(
    benchmark: str, loaded: Loaded, run_better: dict[tuple[str, str], str]
) -> dict[str, Any]:
    meta = loaded.benchmarks.get(benchmark, {})
    tier = benchmark.split(".", 1)[0]
    name = metrics.metric_name(benchmark)
    d = metrics.direction(benchmark, run_better.get((tier, name)))
    param_names = [str(n) for n in (meta.get("param_names") or [])]
    cls = benchmark.split(".")[-2] if benchmark.count(".") >= 2 else ""
    return {
        "id": f"asv:{benchmark}",
        "tier": tier,
        "source": "asv",
        "benchmark": benchmark,
        "group": cls,
        "title": meta.get("pretty_name") or benchmark.split(".", 1)[-1],
        "metric": name,
        "key": metrics.key_metric(name),
        "regime": metrics.regime_metric(name),
        "unit": meta.get("unit") or "unitless",
        "better": d.better,
        "better_why": d.why,
        **_bounds(benchmark),
        "stat": "value",  # "mean" once a point is the mean of its seeds or runs
        "executor": "simulated" if "simulated" in cls.lower() else None,
        "param_names": param_names,
        "axes": [metrics.scenario_axis(n) for n in param_names],
        "_series": {},
    }


def _natural(s: str) -> tuple[int, float, str]:
    try:
        return (0, float(s), s)
    except ValueError:
        return (1, 0.0, s)


@functools.lru_cache(maxsize=4096)
def param_value(text: str) -> str:
    """asv stores parameter values as their repr ("'on'", "4"): show them without the quotes."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    return str(value) if isinstance(value, str | int | float | bool) else text


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def _bounds(benchmark: str) -> dict[str, Any]:
    """A chart's bounds (``metrics.quantity``: [lo, hi], None where unbounded) and whether it
    counts events: the comparisons clip intervals there, the pages as the terminal."""
    q = metrics.quantity(benchmark)
    return {"bounds": [q.lo, q.hi] if q else [None, None], "count": bool(q and q.count)}


def _clip(
    lo: float | None, hi: float | None, chart: dict[str, Any]
) -> tuple[float | None, float | None]:
    """A noise band cut at the metric's bounds: asv's 99 % interval of three runs of a rate
    can reach below 0, which no rate can."""
    if lo is None or hi is None:
        return lo, hi
    floor, ceiling = chart["bounds"]
    if floor is not None:
        lo, hi = max(lo, floor), max(hi, floor)
    if ceiling is not None:
        lo, hi = min(lo, ceiling), min(hi, ceiling)
    return lo, hi


def _run_band(m: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
    """A run-file metric's spread, if the tier recorded one (interval, or per-seed samples)."""
    for lo_key, hi_key in (("ci_low", "ci_high"), ("lo", "hi")):
        lo, hi = _finite(m.get(lo_key)), _finite(m.get(hi_key))
        if lo is not None and hi is not None:
            return lo, hi, "interval"
    interval = m.get("interval") or m.get("ci")
    if isinstance(interval, list | tuple) and len(interval) == 2:
        lo, hi = _finite(interval[0]), _finite(interval[1])
        if lo is not None and hi is not None:
            return lo, hi, "interval"
    samples = m.get("samples") or m.get("per_seed")
    if isinstance(samples, list):
        finite = [x for x in (_finite(v) for v in samples) if x is not None]
        if len(finite) >= 2:
            return min(finite), max(finite), "sample range"
    return None, None, None


def _shown_by_asv(name: str, asv_names: set[str]) -> bool:
    if name in asv_names or name.removesuffix("_count") in asv_names:
        return True
    return any(name.startswith(a + "_") for a in asv_names)


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
