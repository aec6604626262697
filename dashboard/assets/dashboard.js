// Shared by the dashboard's pages: placement styling, plotly-safe text, and the commit comparison.
// Strings from results only ever reach the DOM through textContent or plotly text escaped by esc().
"use strict";

const DP = (function () {
  const PLACEMENT_COLOR = {"early": "#d62728", "post-kv": "#2ca02c", "absent": "#7f7f7f", "unknown": "#bcbd22"};
  const PLACEMENT_SYMBOL = {"early": "circle", "post-kv": "diamond", "absent": "x", "unknown": "circle-open"};
  const BETTER_TEXT = {"higher": "higher is better", "lower": "lower is better", "none": "no better direction"};

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

  function seriesName(s) {
    const parts = [s.machine, s.env];
    if (s.params && s.params.length) parts.push(s.params.join(", "));
    return parts.join(" / ");
  }

  function valueAt(series, index) {
    for (const p of series.points) if (p[0] === index) return {value: p[1], lo: p[2], hi: p[3]};
    return null;
  }

  // Same rules as dpbench.dashboard.compare.compare_values (the terminal's `dpbench compare`).
  function compareValues(a, b, better) {
    if (!a && !b) return {ratio: null, winner: "", verdict: "no data"};
    if (!a) return {ratio: null, winner: "", verdict: "only B"};
    if (!b) return {ratio: null, winner: "", verdict: "only A"};
    let ratio = null;
    if (a.value !== 0) ratio = b.value / a.value;
    else if (b.value === 0) ratio = 1;
    if (a.value === b.value) return {ratio: ratio, winner: "", verdict: "same"};
    const banded = a.lo != null && a.hi != null && b.lo != null && b.hi != null;
    if (banded && a.lo <= b.hi && b.lo <= a.hi) return {ratio: ratio, winner: "", verdict: "within noise"};
    if (better !== "higher" && better !== "lower") return {ratio: ratio, winner: "", verdict: "differs"};
    const bWins = better === "higher" ? b.value > a.value : b.value < a.value;
    const winner = bWins ? "B" : "A";
    return {ratio: ratio, winner: winner, verdict: winner + " better" + (banded ? "" : " (single run)")};
  }

  function compareCommits(data, ia, ib, machine) {
    const rows = [];
    for (const chart of data.charts) {
      for (const s of chart.series) {
        if (machine && s.machine !== machine) continue;
        const a = valueAt(s, ia), b = valueAt(s, ib);
        if (!a && !b) continue;
        rows.push(Object.assign({chart: chart, series: s, a: a, b: b}, compareValues(a, b, chart.better)));
      }
    }
    return rows;
  }

  return {PLACEMENT_COLOR, PLACEMENT_SYMBOL, BETTER_TEXT, esc, el, fmt, seriesName, valueAt,
          compareValues, compareCommits};
})();
