"""Compare two commits metric by metric: change in %, its interval, and a verdict.

The rules match the site's JavaScript (``dashboard/assets/dashboard.js``, ``changeOf``
and ``summary``), so the terminal (`dpbench compare`) and the pages agree:

- a side with no value → "not measured" (a value asv or a run file left null is absent,
  never 0); both values equal → "no change";
- change = (B − A) / |A| in %; a drop to 0 is −100 %; from A = 0 the change has no
  percentage ("from 0");
- both sides carry a band (asv's 99 % CI from repeats, else IQR, else the range of
  per-seed samples) and the bands overlap → "within noise"; the change's interval is
  then [(B.lo − A.hi), (B.hi − A.lo)] / |A|;
- a metric of the instrument's health ("instrument": client lateness, device idle, …) is
  "instrument" whatever it did: a validity check, never a verdict, listed last;
- a timing-dependent tier (``metrics.TIMING_TIERS``: the server): its samples are
  **repeats**, never paired (run k of commit A has nothing to do with run k of commit B,
  whatever the seed set says). Both sides with at least 2 finite runs → the change is the
  difference of means B − A over |mean A|, with its 95 % **Welch** t interval (standard
  error √(s_A²/n_A + s_B²/n_B), Welch–Satterthwaite degrees of freedom rounded down to an
  integer, as the pages' t table holds); "no change" when both sides are the same constant,
  "within noise" when the interval holds 0. **A better / worse (or changed) verdict needs
  ≥ 3 runs on each side** (``MIN_TIMING_RUNS``): with fewer it is "single run" (too few
  runs for a verdict, a quiet row), its change and interval still given. A timing tier
  with fewer than 2 runs on a side falls through to the rules below, and gets "single run"
  where they would call a verdict without bands on both sides or with a side's recorded
  runs under 3;
- a deterministic tier (``metrics.DETERMINISTIC_TIERS``: placement, a probe of the installed
  code) needs no repeats: one run a side is its answer ("deterministic");
- elsewhere, both sides carry per-seed samples of the same seeds (the same benchmark
  version and as many samples: asv keeps them in seed order with ``--record-samples``) →
  **paired**: the change is the mean of the per-seed differences B − A over the mean of A,
  with its 95 % t interval (as ``dpbench twin sweep`` pairs its arms); "within noise" when
  that interval holds 0. Pairing comes first: unpaired bands are the fallback where the
  seeds differ;
- otherwise, with bands or a deterministic tier, the metric's direction decides "better" /
  "worse"; a metric with no direction ("none") or an unknown one only "changed". **One run a
  side of any other tier gets no verdict**: "single run", a quiet row that never gates, its
  change still given (one seed of the twin is one draw of its distribution). ``basis`` says
  what the verdict rests on: a deterministic probe ("deterministic"), paired seeds
  ("paired, n seeds"), a timing tier's repeated runs ("repeats, n_A + n_B runs"), bands
  ("bands") or a single run per side ("single run").

Every change carries the values it is computed from (``Change.a``, ``Change.b``: the means of
the paired seeds or of a timing tier's runs, else asv's value), and every page and the terminal
show those, never asv's median beside a change of means. With the metric's bounds
(``metrics.quantity``) the interval stops at them (:func:`_clipped`: a count or a rate never
below 0, so a drop to 0 is never past -100 %; a fraction never above 1), and a count whose two
sides hold fewer than ``MIN_COUNT_EVENTS`` events together is "too few to judge", its events in
place of a percentage (a deterministic tier's counts are exact, and judged).

Rows sort answer first (:func:`sort_key`): the rows with a verdict before the quiet ones; among
them by tier (placement, twin, server, the rest: ``metrics.TIER_ORDER``), then deterministic
and paired before repeats before bands (``Change.basis_rank``), each by significance (the
change over its interval's half-width; a deterministic change is certain), never by the size of
a single run's change.

The t quantiles are the pages' too: exact for 1 … 100 degrees of freedom (the model's
``t975``), 1.96 beyond (:func:`t975`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from dpbench.dashboard import metrics

TOO_FEW = "too few to judge"
VERDICT_ORDER = {
    "worse": 0,
    "better": 1,
    "changed": 2,
    "within noise": 3,
    TOO_FEW: 4,
    "no change": 5,
    "single run": 6,
    "not measured": 7,
    "instrument": 8,
}
# hidden behind the page's toggle
QUIET = ("within noise", TOO_FEW, "no change", "single run", "not measured", "instrument")
# a count (metrics.Quantity.count) judged on fewer events than this, both sides together, is
# "too few to judge": its Poisson noise (about √n) is a third of it or more, so no percentage
# says anything. A deterministic tier's counts are exact and always judged.
MIN_COUNT_EVENTS = 10
# a timing tier's better / worse needs this many finite runs on each side
MIN_TIMING_RUNS = 3
# the pages carry Student's t 0.975 quantiles for 1 … T975_MAX_DF degrees of freedom
# (dpbench.dashboard.model.T975) and take 1.96 beyond: the terminal does the same
T975_MAX_DF = 100


class CommitNotFound(LookupError):
    pass


@dataclass(frozen=True)
class Side:
    value: float
    lo: float | None = None
    hi: float | None = None
    # per-seed values in seed order, and what identifies the seed set (the benchmark's version)
    samples: tuple[float | None, ...] | None = None
    seeds: str | None = None

    @property
    def banded(self) -> bool:
        return self.lo is not None and self.hi is not None


def paired_with(a: Side, b: Side) -> list[tuple[float, float]] | None:
    """The (A, B) value of each seed both sides measured, when they ran the same seeds; None
    when they cannot be paired (no samples, another seed set, fewer than 2 common seeds)."""
    if a.samples is None or b.samples is None or a.seeds is None or a.seeds != b.seeds:
        return None
    if len(a.samples) != len(b.samples):
        return None
    pairs = [
        (x, y)
        for x, y in zip(a.samples, b.samples, strict=True)
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
    ]
    return pairs if len(pairs) >= 2 else None


def t975(df: int) -> float:
    """Student's t 0.975 quantile for an integer ``df`` ≥ 1, as the pages have it (their
    ``T975`` table up to ``T975_MAX_DF``, then 1.96)."""
    from dpbench.twin.stats import t_quantile_975

    return t_quantile_975(df) if df <= T975_MAX_DF else 1.96


def _finite(samples: tuple[float | None, ...]) -> list[float]:
    return [x for x in samples if x is not None and math.isfinite(x)]


def runs_of(side: Side) -> int | None:
    """How many finite runs a side recorded; None when it kept no samples."""
    return None if side.samples is None else len(_finite(side.samples))


def repeats_of(a: Side, b: Side) -> tuple[list[float], list[float]] | None:
    """A timing tier's finite runs on each side, when both recorded at least 2: independent
    repeats, compared unpaired whatever their seeds (see :func:`_repeats_change`)."""
    if a.samples is None or b.samples is None:
        return None
    xa, xb = _finite(a.samples), _finite(b.samples)
    return (xa, xb) if len(xa) >= 2 and len(xb) >= 2 else None


def _mean_var(xs: list[float]) -> tuple[float, float]:
    """Mean and sample variance, summed left to right as the pages' JavaScript sums."""
    total = 0.0
    for x in xs:
        total += x
    mean = total / len(xs)
    ss = 0.0
    for x in xs:
        ss += (x - mean) * (x - mean)
    return mean, ss / (len(xs) - 1)


def _repeats_change(xa: list[float], xb: list[float], better: str) -> Change:
    """Unpaired: difference of means B − A with its 95 % Welch interval (Welch–Satterthwaite
    degrees of freedom, rounded down); better / worse only with ``MIN_TIMING_RUNS`` runs a
    side, else "single run"."""
    na, nb = len(xa), len(xb)
    mean_a, var_a = _mean_var(xa)
    mean_b, var_b = _mean_var(xb)
    diff = mean_b - mean_a
    basis = f"repeats, {na} + {nb} runs"
    means = {"a": mean_a, "b": mean_b, "stat": "mean"}
    if diff == 0 and var_a == 0 and var_b == 0:
        return Change(0.0, None, None, "no change", basis, **means)
    qa, qb = var_a / na, var_b / nb
    se = math.sqrt(qa + qb)
    half = 0.0
    if se > 0:
        den = qa * qa / (na - 1) + qb * qb / (nb - 1)
        df = (qa + qb) * (qa + qb) / den if den > 0 else math.inf
        # rounded down (the t table is by integer df); 1e-9 keeps an integer df computed as
        # 3.9999999999 at 4
        half = t975(math.floor(df + 1e-9) if math.isfinite(df) else T975_MAX_DF + 1) * se
    pct = lo = hi = None
    if mean_a != 0:
        scale = abs(mean_a)
        pct = diff / scale * 100
        lo, hi = (diff - half) / scale * 100, (diff + half) / scale * 100
    if diff - half <= 0 <= diff + half:
        return Change(pct, lo, hi, "within noise", basis, **means)
    if min(na, nb) < MIN_TIMING_RUNS:
        return Change(pct, lo, hi, "single run", basis, **means)
    if better not in ("higher", "lower"):
        return Change(pct, lo, hi, "changed", basis, **means)
    b_wins = diff > 0 if better == "higher" else diff < 0
    return Change(pct, lo, hi, "better" if b_wins else "worse", basis, **means)


def _paired_change(pairs: list[tuple[float, float]], better: str) -> Change:
    n = len(pairs)
    d = [y - x for x, y in pairs]
    mean_a = sum(x for x, _ in pairs) / n
    mean_d = sum(d) / n
    sd = math.sqrt(sum((v - mean_d) ** 2 for v in d) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    means = {"a": mean_a, "b": sum(y for _, y in pairs) / n, "stat": "mean"}
    basis = f"paired, {n} seeds"
    if mean_d == 0 and sd == 0:
        return Change(0.0, None, None, "no change", basis, **means)
    pct = lo = hi = None
    if mean_a != 0:
        pct = mean_d / abs(mean_a) * 100
        lo, hi = (mean_d - half) / abs(mean_a) * 100, (mean_d + half) / abs(mean_a) * 100
    if mean_d - half <= 0 <= mean_d + half:
        return Change(pct, lo, hi, "within noise", basis, **means)
    if better not in ("higher", "lower"):
        return Change(pct, lo, hi, "changed", basis, **means)
    b_wins = mean_d > 0 if better == "higher" else mean_d < 0
    return Change(pct, lo, hi, "better" if b_wins else "worse", basis, **means)


@dataclass(frozen=True)
class Change:
    pct: float | None  # (B − A) / |A| × 100; None when A or B is missing, or A = 0 ≠ B
    lo: float | None  # interval of pct where both sides have bands
    hi: float | None
    verdict: str  # better | worse | changed | within noise | no change | single run | …
    basis: str  # "paired, N seeds" | "repeats, NA + NB runs" | "bands" | "single run" | ""
    # the values of A and B the change is computed from (what a page or the terminal shows):
    # the means of the paired seeds or of a timing tier's runs, else asv's value (the median
    # of its samples); None for a side not measured
    a: float | None = None
    b: float | None = None
    stat: str = "value"  # "mean" where a and b are means, "value" where they are asv's values

    @property
    def size(self) -> float:
        """|pct| for sorting; a change from 0 counts as infinite."""
        if self.pct is None:
            return math.inf if self.verdict in ("better", "worse", "changed") else 0.0
        return abs(self.pct)

    @property
    def significance(self) -> float:
        """|change| over its interval's half-width (a paired change's t-like ratio); 0 without
        an interval."""
        if self.basis == "deterministic":
            return math.inf if self.verdict in ("better", "worse", "changed") else 0.0
        if self.pct is None or self.lo is None or self.hi is None:
            return 0.0
        half = (self.hi - self.lo) / 2
        return abs(self.pct) / half if half > 0 else math.inf

    @property
    def basis_rank(self) -> int:
        """A deterministic probe and paired seeds (0) before a timing tier's repeats (1), unpaired
        bands (2), and single runs or no basis (3)."""
        if self.basis.startswith("paired") or self.basis == "deterministic":
            return 0
        if self.basis.startswith("repeats"):
            return 1
        return 2 if self.basis == "bands" else 3


def change_of(
    a: Side | None,
    b: Side | None,
    better: str,
    tier: str = "",
    quantity: metrics.Quantity | None = None,
) -> Change:
    """The change from A to B by the rules above; with the metric's ``quantity`` (its bounds),
    its interval clipped at the bounds (:func:`_clipped`) and a count with too few events
    "too few to judge" (:func:`_too_few`)."""
    change = _change_of(a, b, better, tier)
    if quantity is None or a is None or b is None:
        return change
    if quantity.count and tier not in metrics.DETERMINISTIC_TIERS:
        few = _too_few(change, a, b)
        if few is not None:
            return few
    return _clipped(change, quantity)


def _change_of(a: Side | None, b: Side | None, better: str, tier: str) -> Change:
    if a is None or b is None:
        return Change(None, None, None, "not measured", "", a and a.value, b and b.value)
    values = {"a": a.value, "b": b.value}
    if better == "instrument":
        pct = (b.value - a.value) / abs(a.value) * 100 if a.value != 0 else None
        return Change(pct, None, None, "instrument", "", **values)
    timing = tier in metrics.TIMING_TIERS
    if timing:  # repeats of one measurement, never paired
        reps = repeats_of(a, b)
        if reps is not None:
            return _repeats_change(*reps, better)
    else:
        pairs = paired_with(a, b)
        if pairs is not None:
            return _paired_change(pairs, better)
    banded = a.banded and b.banded
    if a.value == b.value:
        return Change(0.0, None, None, "no change", "bands" if banded else "", **values)
    pct = lo = hi = None
    if a.value != 0:
        scale = abs(a.value)
        pct = (b.value - a.value) / scale * 100
        if banded:
            lo = (b.lo - a.hi) / scale * 100  # type: ignore[operator]
            hi = (b.hi - a.lo) / scale * 100  # type: ignore[operator]
    deterministic = tier in metrics.DETERMINISTIC_TIERS and not banded
    basis = "bands" if banded else "deterministic" if deterministic else "single run"
    if banded and a.lo <= b.hi and b.lo <= a.hi:  # type: ignore[operator]
        return Change(pct, lo, hi, "within noise", basis, **values)
    if (not banded and not deterministic) or (timing and _too_few_runs(a, b)):
        return Change(pct, lo, hi, "single run", basis, **values)
    if better not in ("higher", "lower"):
        return Change(pct, lo, hi, "changed", basis, **values)
    b_wins = b.value > a.value if better == "higher" else b.value < a.value
    return Change(pct, lo, hi, "better" if b_wins else "worse", basis, **values)


def chart_change(chart: dict[str, Any], a: Side | None, b: Side | None) -> Change:
    """The change of one of the model's charts (its direction, tier and bounds) from A to B."""
    bounds = chart.get("bounds")
    q = metrics.Quantity(bounds[0], bounds[1], chart.get("count", False)) if bounds else None
    return change_of(a, b, chart["better"], chart["tier"], q)


def _clipped(c: Change, q: metrics.Quantity) -> Change:
    """The change's interval cut where the quantity's bounds cut it.

    The intervals are t intervals (or band differences) on B − A, over A: symmetric, so for a
    quantity near a bound they run past what B can be (a count below 0, a fraction above 1).
    B's bound gives the change's: B ≥ lo means (B − A) / A ≥ (lo − A) / A, -100 % for a count
    that drops to 0. Clipping keeps the interval's other end and every verdict as they were
    (the estimate B lies within the bounds, so the clipped interval still holds it; whether it
    holds 0 does not change). Not an interval on log(B / A): a drop to 0 has no log ratio,
    and the pages mirror these difference intervals (dashboard.js ``clipped``)."""
    if c.lo is None or c.hi is None or c.a is None or c.a <= 0:
        return c
    lo, hi = c.lo, c.hi
    if q.lo is not None:
        floor = (q.lo - c.a) / c.a * 100
        lo, hi = max(lo, floor), max(hi, floor)
    if q.hi is not None:
        ceiling = (q.hi - c.a) / c.a * 100
        lo, hi = min(lo, ceiling), min(hi, ceiling)
    return replace(c, lo=lo, hi=hi)


def _events(side: Side) -> float:
    """How many events a side of a count holds: the sum of its recorded seeds or runs, else
    its value."""
    if side.samples is not None and _finite(side.samples):
        return sum(_finite(side.samples))
    return side.value


def _too_few(c: Change, a: Side, b: Side) -> Change | None:
    """A count whose two sides hold fewer than ``MIN_COUNT_EVENTS`` events together: "too few
    to judge", the counts in place of a percentage. None when there are enough, or when the
    change needs no judging (no change, the instrument)."""
    if c.verdict in ("no change", "instrument", "not measured"):
        return None
    if c.basis.startswith("paired"):
        pairs = paired_with(a, b) or []
        ea, eb = sum(x for x, _ in pairs), sum(y for _, y in pairs)
    else:
        ea, eb = _events(a), _events(b)
    if ea + eb >= MIN_COUNT_EVENTS:
        return None
    return replace(c, pct=None, lo=None, hi=None, verdict=TOO_FEW, basis=f"{ea:g} vs {eb:g} events")


def _too_few_runs(a: Side, b: Side) -> bool:
    """A side recorded its runs, and fewer than a timing tier's verdict needs."""
    return any(n is not None and n < MIN_TIMING_RUNS for n in (runs_of(a), runs_of(b)))


def fmt_pct(c: Change) -> str:
    """ "-13.4 % [-100, +93.9]": the change and its interval (an end past ±100 without its
    decimal: the line stays short where a count fell to 0); "3 vs 0 events" for a count too
    small to judge; "from 0" with no percentage."""
    if c.verdict == "not measured":
        return "—"
    if c.verdict == TOO_FEW:
        return c.basis  # "3 vs 0 events"
    if c.pct is None:
        return "from 0"
    text = f"{c.pct:+.1f} %"
    if c.lo is not None and c.hi is not None:
        text += f" [{_end(c.lo)}, {_end(c.hi)}]"
    return text


def _end(x: float) -> str:
    return f"{x:+.0f}" if abs(x) >= 100 else f"{x:+.1f}"


@dataclass(frozen=True)
class Row:
    tier: str
    source: str
    metric: str
    params: tuple[str, ...]
    scenario: dict[str, str]
    machine: str
    env: str
    unit: str
    better: str
    a: Side | None
    b: Side | None
    change: Change

    @property
    def verdict(self) -> str:
        return self.change.verdict

    @property
    def control(self) -> bool:
        return metrics.is_control(self.scenario)


def resolve_commit(model: dict[str, Any], name: str) -> int:
    """Index of a commit named by sha prefix, tag (v0.5.16), version (0.5.16) or label."""
    commits = model["commits"]
    want = name.strip()
    exact = [
        i
        for i, c in enumerate(commits)
        if want in c["tags"] or f"v{want}" in c["tags"] or c["label"] == want
    ]
    if len(exact) == 1:
        return exact[0]
    if len(want) >= 4:
        by_sha = [i for i, c in enumerate(commits) if c["sha"].startswith(want.lower())]
        if len(by_sha) == 1:
            return by_sha[0]
        if len(by_sha) > 1:
            raise CommitNotFound(f"{name!r} matches {len(by_sha)} commits; give more of the hash")
    known = ", ".join(c["label"] for c in commits[-12:]) or "none (no results yet)"
    raise CommitNotFound(f"no commit with results matches {name!r}; commits with results: {known}")


def side_at(series: dict[str, Any], index: int) -> Side | None:
    for i, value, lo, hi in series["points"]:
        if i == index:
            smp = (series.get("samples") or {}).get(str(index))
            if smp is None:
                return Side(value, lo, hi)
            return Side(value, lo, hi, tuple(smp["x"]), smp["seeds"])
    return None


def sort_key(row: Row) -> tuple[int, int, int, int, float, float, str]:
    """Answer first: rows with a verdict (better, worse, changed) by tier (placement, twin,
    server, the rest), then deterministic and paired changes, a timing tier's repeats, unpaired
    bands (``Change.basis_rank``), each by significance (change over its interval), then by
    size; the quiet rows after, by verdict (within noise, no change, single run, …)."""
    c = row.change
    quiet = row.verdict in QUIET
    return (
        int(quiet),
        VERDICT_ORDER[row.verdict] if quiet else 0,
        metrics.tier_rank(row.tier),
        c.basis_rank,
        -c.significance,
        -c.size,
        row.tier + row.metric,
    )


def compare_commits(
    model: dict[str, Any], ia: int, ib: int, machine: str | None = None
) -> list[Row]:
    """One row per chart series (metric × machine × env × params) measured on either commit,
    most significant first."""
    rows = []
    for chart in model["charts"]:
        for s in chart["series"]:
            if machine and s["machine"] != machine:
                continue
            a, b = side_at(s, ia), side_at(s, ib)
            if a is None and b is None:
                continue
            rows.append(
                Row(
                    chart["tier"],
                    chart["source"],
                    chart["title"],
                    tuple(s["params"]),
                    s["scenario"],
                    s["machine"],
                    s["env"],
                    chart["unit"],
                    chart["better"],
                    a,
                    b,
                    chart_change(chart, a, b),
                )
            )
    rows.sort(key=sort_key)
    return rows


# --- the summary: the metrics that decide the question, per tier and scenario ---------------


@dataclass
class SummaryRow:
    tier: str
    scenario: dict[str, str]
    machine: str
    env: str
    control: bool
    cells: dict[str, tuple[dict[str, Any], Side | None, Side | None, Change]] = field(
        default_factory=dict
    )  # column key → (chart, A, B, change)
    regime: dict[str, float] = field(default_factory=dict)  # requests, pool: B's (else A's)

    @property
    def seeds(self) -> int | None:
        """How many seeds (or repeats) the row's cells hold, on the side with most."""
        counts = [
            sum(v is not None for v in side.samples)
            for _, a, b, _ in self.cells.values()
            for side in (a, b)
            if side is not None and side.samples
        ]
        return max(counts) if counts else None


def regime_text(row: SummaryRow) -> str:
    """ "1,024 requests a run · 5 seeds · pool reached 1.00": what a summary row ran (the
    pages say the same: dashboard.js regimeText)."""
    parts = []
    if "requests" in row.regime:
        parts.append(f"{row.regime['requests']:,.0f} requests a run")
    if row.seeds:
        what = "seeds" if row.tier.startswith("twin") else "runs"  # a server's are repeats
        parts.append(f"{row.seeds} {what}" if row.seeds > 1 else "1 run")
    if "pool" in row.regime:
        parts.append(f"pool reached {row.regime['pool']:.2f}")
    return " · ".join(parts)


def scenario_text(scenario: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in scenario.items()) or "—"


def summary(
    model: dict[str, Any], ia: int, ib: int, machine: str | None = None
) -> dict[str, list[SummaryRow]]:
    """section (a tier, or "tier · class") → rows, one per scenario × machine × env with a
    deciding metric on A or B.

    Each section's column is filled by its first chart (by id) with that key (see
    ``section`` in :mod:`dpbench.dashboard.model`). Rows: delayer-on (or no delayer
    parameter) first, the control (delayer off) after.
    """
    columns: dict[tuple[str, str], dict[str, Any]] = {}
    regimes: dict[tuple[str, str], dict[str, Any]] = {}
    for chart in model["charts"]:
        key, section = chart.get("key"), chart.get("section")
        if section is None:
            continue
        if key is not None:
            columns.setdefault((section, key), chart)
        elif chart.get("regime"):
            regimes.setdefault((section, chart["regime"]), chart)
    out: dict[str, dict[tuple[str, str, str], SummaryRow]] = {}
    for (section, key), chart in columns.items():
        for s in chart["series"]:
            if machine and s["machine"] != machine:
                continue
            a, b = side_at(s, ia), side_at(s, ib)
            if a is None and b is None:
                continue
            scen = {k: v for k, v in s["scenario"].items() if k != "run"}
            if chart["source"] != "asv":
                scen = {"run": s["scenario"].get("run", "")}
            rk = (scenario_text(scen), s["machine"], s["env"])
            row = out.setdefault(section, {}).get(rk)
            if row is None:
                row = out[section][rk] = SummaryRow(
                    section, scen, s["machine"], s["env"], metrics.is_control(scen)
                )
            row.cells[key] = (chart, a, b, chart_change(chart, a, b))
    for (section, regime), chart in regimes.items():
        for s in chart["series"]:
            rows = out.get(section, {})
            scen = {k: v for k, v in s["scenario"].items() if k != "run"}
            rk = (scenario_text(scen), s["machine"], s["env"])
            side = side_at(s, ib) or side_at(s, ia)
            if rk in rows and side is not None:
                rows[rk].regime[regime] = side.value
    return {
        section: sorted(
            rows.values(), key=lambda r: (r.control, _scenario_sort(r), r.machine, r.env)
        )
        for section, rows in sorted(out.items(), key=lambda kv: metrics.section_rank(kv[0]))
    }


def _scenario_sort(row: SummaryRow) -> list[tuple[int, float, str]]:
    keys = []
    for v in row.scenario.values():
        try:
            keys.append((0, float(v), v))
        except ValueError:
            keys.append((1, 0.0, v))
    return keys


def regressions(rows: list[Row], threshold_pct: float) -> list[Row]:
    """Rows that gate CI: verdict "worse" and a change of at least ``threshold_pct`` % (from 0
    always counts). Metrics without a direction never gate."""
    return [
        r
        for r in rows
        if r.verdict == "worse" and (r.change.pct is None or abs(r.change.pct) >= threshold_pct)
    ]


def profile_mismatch(run_files: list[Any], sha_a: str, sha_b: str) -> str | None:
    """Why two commits' results cannot be paired: their simulated times came from different
    cost profiles (each run file's ``cost`` block; dpbench.core.results.cost_profile_of).
    None when both sides used one profile, or either side has no simulated clock."""
    from dpbench.core.results import cost_profile_of

    seen: dict[str, set[str]] = {sha_a: set(), sha_b: set()}
    for rf in run_files:
        profile = cost_profile_of(rf.data) if rf.commit in seen else None
        if profile is not None:
            seen[rf.commit].add(profile)
    a, b = seen[sha_a], seen[sha_b]
    if not a or not b or (a == b and len(a) == 1):
        return None
    return (
        f"A's results come from cost profile {', '.join(sorted(a))} and B's from "
        f"{', '.join(sorted(b))}: their simulated times are not comparable"
    )
