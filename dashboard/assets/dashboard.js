// Shared by the dashboard's pages: text helpers, and the comparison rules of dpbench.dashboard.compare.
// Strings from results only ever reach the DOM through textContent or plotly text escaped by esc().
"use strict";

const DP = (function () {
  const PLACEMENT_COLOR = {"early": "#d62728", "post-kv": "#2ca02c", "absent": "#7f7f7f", "unknown": "#bcbd22"};
  const PLACEMENT_SYMBOL = {"early": "circle", "post-kv": "diamond", "absent": "x", "unknown": "circle-open"};
  const PLACEMENT_LABELS = {0: "unknown", 1: "early", 2: "post-kv", 3: "absent"};
  const BETTER_TEXT = {"higher": "higher is better", "lower": "lower is better", "none": "no better direction",
                       "unknown": "direction unknown", "instrument": "instrument health, not a result"};
  const TOO_FEW = "too few to judge";  // dpbench.dashboard.compare.TOO_FEW
  const VERDICT_ORDER = {"worse": 0, "better": 1, "changed": 2, "within noise": 3, [TOO_FEW]: 4,
                         "no change": 5, "single run": 6, "not measured": 7, "instrument": 8};
  const QUIET = ["within noise", TOO_FEW, "no change", "single run", "not measured", "instrument"];
  const MIN_COUNT_EVENTS = 10;  // dpbench.dashboard.compare.MIN_COUNT_EVENTS
  const TIMING_TIERS = ["server"];  // dpbench.dashboard.metrics.TIMING_TIERS
  const DETERMINISTIC_TIERS = ["placement"];  // dpbench.dashboard.metrics.DETERMINISTIC_TIERS
  const TIER_ORDER = ["placement", "twin", "server"];  // dpbench.dashboard.metrics.TIER_ORDER
  const MIN_TIMING_RUNS = 3;  // dpbench.dashboard.compare.MIN_TIMING_RUNS
  const CONTROL_VALUES = ["off", "false", "0", "none"];

  // plotly reads its text as a small HTML subset: escape so results cannot add markup (quotes are
  // harmless there, and plotly would show &quot; literally).
  function esc(s) {
    return String(s == null ? "" : s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text != null) node.textContent = text;
    return node;
  }

  function fmt(v) {
    if (v == null || !isFinite(v)) return "—";
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3);
    return Number(v.toPrecision(4)).toString();
  }

  // Same as dpbench.dashboard.compare_text.short: 20,582 rather than 2.058e+04.
  function short(v) {
    if (v != null && isFinite(v) && Math.abs(v) >= 1e4 && Math.abs(v) < 1e9) {
      return Math.round(v).toLocaleString("en-US");
    }
    return fmt(v);
  }

  function sign(x) { return (x >= 0 ? "+" : "") + x.toFixed(1); }

  function seriesName(s) {
    const parts = [s.machine, s.env];
    if (s.params && s.params.length) parts.push(s.params.join(", "));
    return parts.join(" / ");
  }

  function scenarioText(scen) {
    const parts = Object.entries(scen).map(([k, v]) => k + "=" + v);
    return parts.length ? parts.join(", ") : "—";
  }

  function isControl(scen) {
    const v = scen.delayer;
    return v != null && CONTROL_VALUES.includes(String(v).trim().toLowerCase());
  }

  let T975 = [];  // Student's t 0.975 quantiles, df 1 … 100: the model's (data.t975), set by
                  // compareCommits and summary before they compare

  function valueAt(series, index) {
    for (const p of series.points) {
      if (p[0] !== index) continue;
      const smp = series.samples ? series.samples[String(index)] : null;
      return {value: p[1], lo: p[2], hi: p[3], samples: smp ? smp.x : null, seeds: smp ? smp.seeds : null};
    }
    return null;
  }

  // Same as dpbench.dashboard.compare.t975: the table's quantile for an integer df, 1.96 beyond it.
  function t975(df) { return df <= T975.length ? T975[df - 1] : 1.96; }

  function finite(samples) { return samples.filter(x => x != null && isFinite(x)); }

  // Same as dpbench.dashboard.compare.runs_of: a side's finite runs, null when it kept no samples.
  function runsOf(side) { return side.samples ? finite(side.samples).length : null; }

  // Same as dpbench.dashboard.compare.repeats_of: a timing tier's runs, both sides with at least 2.
  function repeatsOf(a, b) {
    if (!a.samples || !b.samples) return null;
    const xa = finite(a.samples), xb = finite(b.samples);
    return xa.length >= 2 && xb.length >= 2 ? [xa, xb] : null;
  }

  function meanVar(xs) {
    let total = 0;
    for (const x of xs) total += x;
    const mean = total / xs.length;
    let ss = 0;
    for (const x of xs) ss += (x - mean) * (x - mean);
    return [mean, ss / (xs.length - 1)];
  }

  // Same as dpbench.dashboard.compare._repeats_change: unpaired difference of means, Welch interval.
  function repeatsChange(xa, xb, better) {
    const na = xa.length, nb = xb.length;
    const [meanA, varA] = meanVar(xa), [meanB, varB] = meanVar(xb);
    const diff = meanB - meanA;
    const basis = "repeats, " + na + " + " + nb + " runs";
    const m = {a: meanA, b: meanB, stat: "mean"};
    if (diff === 0 && varA === 0 && varB === 0) return {pct: 0, lo: null, hi: null, verdict: "no change", basis, ...m};
    const qa = varA / na, qb = varB / nb;
    const se = Math.sqrt(qa + qb);
    let half = 0;
    if (se > 0) {
      const den = qa * qa / (na - 1) + qb * qb / (nb - 1);
      const df = den > 0 ? (qa + qb) * (qa + qb) / den : Infinity;
      half = t975(isFinite(df) ? Math.floor(df + 1e-9) : T975.length + 1) * se;
    }
    let pct = null, lo = null, hi = null;
    if (meanA !== 0) {
      const scale = Math.abs(meanA);
      pct = diff / scale * 100; lo = (diff - half) / scale * 100; hi = (diff + half) / scale * 100;
    }
    if (diff - half <= 0 && 0 <= diff + half) return {pct, lo, hi, verdict: "within noise", basis, ...m};
    if (Math.min(na, nb) < MIN_TIMING_RUNS) return {pct, lo, hi, verdict: "single run", basis, ...m};
    if (better !== "higher" && better !== "lower") return {pct, lo, hi, verdict: "changed", basis, ...m};
    const bWins = better === "higher" ? diff > 0 : diff < 0;
    return {pct, lo, hi, verdict: bWins ? "better" : "worse", basis, ...m};
  }

  // Same as dpbench.dashboard.compare.paired_with: the seeds both sides measured, if the same set.
  function pairedWith(a, b) {
    if (!a.samples || !b.samples || a.seeds == null || a.seeds !== b.seeds) return null;
    if (a.samples.length !== b.samples.length) return null;
    const pairs = [];
    for (let i = 0; i < a.samples.length; i++) {
      const x = a.samples[i], y = b.samples[i];
      if (x != null && y != null && isFinite(x) && isFinite(y)) pairs.push([x, y]);
    }
    return pairs.length >= 2 ? pairs : null;
  }

  // Same as dpbench.dashboard.compare._paired_change.
  function pairedChange(pairs, better) {
    const n = pairs.length;
    const d = pairs.map(([x, y]) => y - x);
    const meanA = pairs.reduce((t, [x]) => t + x, 0) / n;
    const meanD = d.reduce((t, v) => t + v, 0) / n;
    const sd = Math.sqrt(d.reduce((t, v) => t + (v - meanD) ** 2, 0) / (n - 1));
    const half = t975(n - 1) * sd / Math.sqrt(n);
    const basis = "paired, " + n + " seeds";
    const m = {a: meanA, b: pairs.reduce((t, [, y]) => t + y, 0) / n, stat: "mean"};
    if (meanD === 0 && sd === 0) return {pct: 0, lo: null, hi: null, verdict: "no change", basis, ...m};
    let pct = null, lo = null, hi = null;
    if (meanA !== 0) {
      const scale = Math.abs(meanA);
      pct = meanD / scale * 100; lo = (meanD - half) / scale * 100; hi = (meanD + half) / scale * 100;
    }
    if (meanD - half <= 0 && 0 <= meanD + half) return {pct, lo, hi, verdict: "within noise", basis, ...m};
    if (better !== "higher" && better !== "lower") return {pct, lo, hi, verdict: "changed", basis, ...m};
    const bWins = better === "higher" ? meanD > 0 : meanD < 0;
    return {pct, lo, hi, verdict: bWins ? "better" : "worse", basis, ...m};
  }

  // Same rules as dpbench.dashboard.compare.change_of (the terminal's `dpbench compare`), with the
  // chart's bounds ([lo, hi]) and whether it counts events (chart.count).
  function changeOf(a, b, better, tier, bounds, count) {
    const change = baseChange(a, b, better, tier);
    if (!bounds || !a || !b) return change;
    if (count && !DETERMINISTIC_TIERS.includes(tier)) {
      const few = tooFew(change, a, b);
      if (few) return few;
    }
    return clipped(change, bounds);
  }

  function baseChange(a, b, better, tier) {
    if (!a || !b) return {pct: null, lo: null, hi: null, verdict: "not measured", basis: "",
                          a: a ? a.value : null, b: b ? b.value : null, stat: "value"};
    const v = {a: a.value, b: b.value, stat: "value"};
    if (better === "instrument") {
      const p = a.value !== 0 ? (b.value - a.value) / Math.abs(a.value) * 100 : null;
      return {pct: p, lo: null, hi: null, verdict: "instrument", basis: "", ...v};
    }
    const timing = TIMING_TIERS.includes(tier);
    if (timing) {  // repeats of one measurement, never paired
      const reps = repeatsOf(a, b);
      if (reps) return repeatsChange(reps[0], reps[1], better);
    } else {
      const pairs = pairedWith(a, b);
      if (pairs) return pairedChange(pairs, better);
    }
    const banded = a.lo != null && a.hi != null && b.lo != null && b.hi != null;
    if (a.value === b.value) return {pct: 0, lo: null, hi: null, verdict: "no change", basis: banded ? "bands" : "", ...v};
    let pct = null, lo = null, hi = null;
    if (a.value !== 0) {
      const scale = Math.abs(a.value);
      pct = (b.value - a.value) / scale * 100;
      if (banded) { lo = (b.lo - a.hi) / scale * 100; hi = (b.hi - a.lo) / scale * 100; }
    }
    const deterministic = DETERMINISTIC_TIERS.includes(tier) && !banded;
    const basis = banded ? "bands" : deterministic ? "deterministic" : "single run";
    if (banded && a.lo <= b.hi && b.lo <= a.hi) return {pct, lo, hi, verdict: "within noise", basis, ...v};
    const tooFewRuns = [runsOf(a), runsOf(b)].some(n => n != null && n < MIN_TIMING_RUNS);
    if ((!banded && !deterministic) || (timing && tooFewRuns)) return {pct, lo, hi, verdict: "single run", basis, ...v};
    if (better !== "higher" && better !== "lower") return {pct, lo, hi, verdict: "changed", basis, ...v};
    const bWins = better === "higher" ? b.value > a.value : b.value < a.value;
    return {pct, lo, hi, verdict: bWins ? "better" : "worse", basis, ...v};
  }

  // Same as dpbench.dashboard.compare._clipped: the interval cut at the quantity's bounds.
  function clipped(c, bounds) {
    if (c.lo == null || c.hi == null || c.a == null || c.a <= 0) return c;
    let lo = c.lo, hi = c.hi;
    if (bounds[0] != null) { const f = (bounds[0] - c.a) / c.a * 100; lo = Math.max(lo, f); hi = Math.max(hi, f); }
    if (bounds[1] != null) { const t = (bounds[1] - c.a) / c.a * 100; lo = Math.min(lo, t); hi = Math.min(hi, t); }
    return {...c, lo, hi};
  }

  function events(side) {
    const xs = side.samples ? finite(side.samples) : [];
    return xs.length ? xs.reduce((t, x) => t + x, 0) : side.value;
  }

  // Same as dpbench.dashboard.compare._too_few: a count with too few events to judge.
  function tooFew(c, a, b) {
    if (["no change", "instrument", "not measured"].includes(c.verdict)) return null;
    let ea, eb;
    if (c.basis.startsWith("paired")) {
      const pairs = pairedWith(a, b) || [];
      ea = pairs.reduce((t, [x]) => t + x, 0); eb = pairs.reduce((t, [, y]) => t + y, 0);
    } else { ea = events(a); eb = events(b); }
    if (ea + eb >= MIN_COUNT_EVENTS) return null;
    return {...c, pct: null, lo: null, hi: null, verdict: TOO_FEW, basis: num(ea) + " vs " + num(eb) + " events"};
  }

  // Python's format(x, "g"): six significant digits, no trailing zeros.
  function num(x) { return Number(x.toPrecision(6)).toString(); }

  // Same as dpbench.dashboard.compare.chart_change.
  function chartChange(chart, a, b) { return changeOf(a, b, chart.better, chart.tier, chart.bounds, chart.count); }

  function size(c) {
    if (c.pct == null) return ["better", "worse", "changed"].includes(c.verdict) ? Infinity : 0;
    return Math.abs(c.pct);
  }

  // Same as dpbench.dashboard.compare.Change.significance and .basis_rank.
  function significance(c) {
    if (c.basis === "deterministic") return ["better", "worse", "changed"].includes(c.verdict) ? Infinity : 0;
    if (c.pct == null || c.lo == null || c.hi == null) return 0;
    const half = (c.hi - c.lo) / 2;
    return half > 0 ? Math.abs(c.pct) / half : Infinity;
  }

  function basisRank(c) {
    if (c.basis.startsWith("paired") || c.basis === "deterministic") return 0;
    if (c.basis.startsWith("repeats")) return 1;
    return c.basis === "bands" ? 2 : 3;
  }

  // Same as dpbench.dashboard.compare.fmt_pct.
  function fmtPct(c) {
    if (c.verdict === "not measured") return "—";
    if (c.verdict === TOO_FEW) return c.basis;
    if (c.pct == null) return "from 0";
    let s = sign(c.pct) + " %";
    const end = x => (Math.abs(x) >= 100 ? (x >= 0 ? "+" : "") + x.toFixed(0) : sign(x));
    if (c.lo != null && c.hi != null) s += " [" + end(c.lo) + ", " + end(c.hi) + "]";
    return s;
  }

  // A side's value as its change used it (the mean of paired seeds or of runs, else asv's
  // value), with its band where the bands decided.
  function sideText(v, value, banded) {
    if (!v || value == null) return "—";
    let s = short(value);
    if (banded && v.lo != null && v.hi != null) s += " [" + short(v.lo) + ", " + short(v.hi) + "]";
    return s;
  }

  // Same order as dpbench.dashboard.compare.sort_key.
  function compareCommits(data, ia, ib, machine) {
    T975 = data.t975 || [];
    const rows = [];
    for (const chart of data.charts) {
      for (const s of chart.series) {
        if (machine && s.machine !== machine) continue;
        const a = valueAt(s, ia), b = valueAt(s, ib);
        if (!a && !b) continue;
        rows.push({chart: chart, series: s, a: a, b: b, change: chartChange(chart, a, b)});
      }
    }
    const key = r => r.chart.tier + r.chart.title;
    const diff = (p, q) => (p === q ? 0 : p < q ? -1 : 1);  // Infinity − Infinity would be NaN
    // answer first, as dpbench.dashboard.compare.sort_key: rows with a verdict by tier, basis,
    // significance; the quiet ones after, by verdict
    const quiet = r => (QUIET.includes(r.change.verdict) ? 1 : 0);
    const quietOrder = r => (quiet(r) ? VERDICT_ORDER[r.change.verdict] : 0);
    const tierRank = r => (TIER_ORDER.includes(r.chart.tier) ? TIER_ORDER.indexOf(r.chart.tier) : TIER_ORDER.length);
    rows.sort((x, y) => (quiet(x) - quiet(y)) || (quietOrder(x) - quietOrder(y)) || (tierRank(x) - tierRank(y)) ||
      (basisRank(x.change) - basisRank(y.change)) || diff(significance(y.change), significance(x.change)) ||
      diff(size(y.change), size(x.change)) || (key(x) < key(y) ? -1 : key(x) > key(y) ? 1 : 0));
    return rows;
  }

  // Same as dpbench.dashboard.compare.summary: the columns and sections are decided in Python
  // (chart.key, chart.section) so the two cannot drift; this only collects the cells.
  function summary(data, ia, ib, machine) {
    T975 = data.t975 || [];
    const columns = {}, regimes = {};
    for (const chart of data.charts) {
      if (!chart.section) continue;
      if (chart.key) {
        const id = chart.section + "\u0000" + chart.key;
        if (!columns[id]) columns[id] = chart;
      } else if (chart.regime) {
        const id = chart.section + "\u0000" + chart.regime;
        if (!regimes[id]) regimes[id] = chart;
      }
    }
    const tiers = {};
    for (const chart of Object.values(columns)) {
      for (const s of chart.series) {
        if (machine && s.machine !== machine) continue;
        const a = valueAt(s, ia), b = valueAt(s, ib);
        if (!a && !b) continue;
        let scen = {};
        if (chart.source === "asv") {
          for (const [k, v] of Object.entries(s.scenario)) if (k !== "run") scen[k] = v;
        } else scen = {run: s.scenario.run || ""};
        const rk = scenarioText(scen) + "\u0000" + s.machine + "\u0000" + s.env;
        const rows = tiers[chart.section] = tiers[chart.section] || {};
        const row = rows[rk] = rows[rk] || {tier: chart.section, scenario: scen, machine: s.machine, env: s.env,
                                             control: isControl(scen), cells: {}, regime: {}};
        row.cells[chart.key] = {chart: chart, a: a, b: b, change: chartChange(chart, a, b)};
      }
    }
    for (const chart of Object.values(regimes)) {  // what each row ran: requests a run, pool reached
      for (const s of chart.series) {
        const scen = {};
        for (const [k, v] of Object.entries(s.scenario)) if (k !== "run") scen[k] = v;
        const row = (tiers[chart.section] || {})[scenarioText(scen) + "\u0000" + s.machine + "\u0000" + s.env];
        const side = valueAt(s, ib) || valueAt(s, ia);
        if (row && side) row.regime[chart.regime] = side.value;
      }
    }
    const natural = v => (isNaN(Number(v)) ? [1, 0, v] : [0, Number(v), v]);
    const cmp = (x, y) => {
      if (x.control !== y.control) return x.control ? 1 : -1;
      const xs = Object.values(x.scenario).map(natural), ys = Object.values(y.scenario).map(natural);
      for (let i = 0; i < Math.min(xs.length, ys.length); i++) {
        for (let j = 0; j < 3; j++) if (xs[i][j] !== ys[i][j]) return xs[i][j] < ys[i][j] ? -1 : 1;
      }
      if (xs.length !== ys.length) return xs.length - ys.length;
      return x.machine < y.machine ? -1 : x.machine > y.machine ? 1 : x.env < y.env ? -1 : x.env > y.env ? 1 : 0;
    };
    // sections answer first, in the model's order (dpbench.dashboard.metrics.section_rank)
    const order = data.section_order || [];
    const rank = t => (order.indexOf(t) < 0 ? order.length : order.indexOf(t));
    const out = {};
    for (const tier of Object.keys(tiers).sort((x, y) => (rank(x) - rank(y)) || (x < y ? -1 : x > y ? 1 : 0))) {
      out[tier] = Object.values(tiers[tier]).sort(cmp);
    }
    return out;
  }

  // Same as dpbench.dashboard.compare.regime_text: "1,024 requests a run · 5 seeds · pool reached 1.00".
  function regimeText(row) {
    const parts = [];
    if (row.regime.requests != null) parts.push(Math.round(row.regime.requests).toLocaleString("en-US") + " requests a run");
    let seeds = 0;
    for (const c of Object.values(row.cells)) {
      for (const side of [c.a, c.b]) {
        if (side && side.samples) seeds = Math.max(seeds, side.samples.filter(v => v != null).length);
      }
    }
    const what = row.tier.startsWith("twin") ? "seeds" : "runs";  // a server's are repeats
    if (seeds) parts.push(seeds > 1 ? seeds + " " + what : "1 run");
    if (row.regime.pool != null) parts.push("pool reached " + row.regime.pool.toFixed(2));
    return parts.join(" · ");
  }

  function commitOptions(sel, commits) {
    commits.forEach((c, i) => {
      sel.appendChild(el("option", {value: String(i)}, c.label + " · " + (c.placement || "placement not measured")));
    });
  }

  function pairFromHash(commits) {
    const params = new URLSearchParams(location.hash.slice(1));
    const find = key => {
      const want = params.get(key);
      if (!want) return null;
      const i = commits.findIndex(c => c.sha.startsWith(want) || c.tags.includes(want) || c.label === want);
      return i >= 0 ? i : null;
    };
    return [find("a"), find("b")];
  }

  function ready() {
    document.body.dataset.readyMs = String(Math.round(performance.now()));
    document.body.dataset.ready = "1";
  }

  function onLoad(fn) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fn);
    else fn();
  }

  return {PLACEMENT_COLOR, PLACEMENT_SYMBOL, PLACEMENT_LABELS, BETTER_TEXT, QUIET, esc, el, fmt, short, sign,
          seriesName, scenarioText, isControl, valueAt, changeOf, fmtPct, sideText, compareCommits, summary, regimeText,
          commitOptions, pairFromHash, ready, onLoad};
})();
