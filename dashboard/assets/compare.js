// The comparison page: any two commits, every metric side by side with ratio, noise band and verdict.
"use strict";

(function () {
  const data = window.DPBENCH_DATA;
  const commits = data.commits;
  const selA = document.getElementById("commit-a"), selB = document.getElementById("commit-b");
  const selM = document.getElementById("machine-select");

  function fill(sel) {
    commits.forEach((c, i) => {
      sel.appendChild(DP.el("option", {value: String(i)}, c.label + " · " + (c.placement || "placement not measured")));
    });
  }

  function fromHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    const find = key => {
      const want = params.get(key);
      if (!want) return null;
      const i = commits.findIndex(c => c.sha.startsWith(want) || c.tags.includes(want) || c.label === want);
      return i >= 0 ? i : null;
    };
    return [find("a"), find("b")];
  }

  function band(v) {
    if (!v) return "—";
    let s = DP.fmt(v.value);
    if (v.lo != null && v.hi != null) s += " [" + DP.fmt(v.lo) + ", " + DP.fmt(v.hi) + "]";
    return s;
  }

  function metricName(row) {
    let s = row.chart.title;
    if (row.series.params.length) s += " (" + row.series.params.join(", ") + ")";
    return s;
  }

  function render() {
    const ia = Number(selA.value), ib = Number(selB.value);
    const tbody = document.querySelector("#compare-table tbody");
    tbody.textContent = "";
    const rows = commits.length ? DP.compareCommits(data, ia, ib, selM.value) : [];
    const a = commits[ia], b = commits[ib];
    document.getElementById("compare-summary").textContent = a && b ?
      "A = " + a.label + " (" + (a.placement || "placement not measured") + ", " + (a.date || "no date") + ")   vs   B = " +
      b.label + " (" + (b.placement || "placement not measured") + ", " + (b.date || "no date") + "): " + rows.length + " metrics" :
      "need at least one commit with results";
    const ratioRows = [];
    for (const row of rows) {
      const tr = DP.el("tr", {"class": "verdict-" + (row.winner || "none")});
      const cells = [row.chart.tier, metricName(row), row.series.machine + " / " + row.series.env, row.chart.unit,
                     row.chart.better, band(row.a), band(row.b), row.ratio == null ? "—" : DP.fmt(row.ratio) + "×",
                     row.verdict];
      for (const c of cells) tr.appendChild(DP.el("td", {}, c));
      tbody.appendChild(tr);
      if (row.ratio != null && row.ratio > 0) ratioRows.push(row);
    }
    const undrawn = rows.length - ratioRows.length;
    document.getElementById("ratio-note").textContent = undrawn ?
      undrawn + " of " + rows.length + " metrics not drawn: a zero or missing value on one side has no ratio on a log scale (see the table)." : "";
    const colour = {A: "#d62728", B: "#2ca02c", "": "#7f7f7f"};
    const trace = {
      type: "bar", orientation: "h", name: "B / A",
      y: ratioRows.map((r, k) => DP.esc(k + 1 + ". " + r.chart.tier + " · " + metricName(r))),
      x: ratioRows.map(r => r.ratio),
      marker: {color: ratioRows.map(r => colour[r.winner])},
      hovertext: ratioRows.map(r => DP.esc(r.verdict + " · " + r.series.machine + " / " + r.series.env)),
      hoverinfo: "x+text",
    };
    Plotly.react("ratio-plot", [trace], {
      height: Math.max(220, 26 * ratioRows.length + 90), margin: {l: 380, r: 20, t: 20, b: 40},
      xaxis: {type: "log", title: {text: "B / A (1 = equal)"}}, yaxis: {automargin: true, autorange: "reversed"},
      shapes: [{type: "line", x0: 1, x1: 1, yref: "paper", y0: 0, y1: 1, line: {dash: "dot", color: "#333"}}],
    }, {displaylogo: false, responsive: true});
    history.replaceState(null, "", "#a=" + (a ? a.sha : "") + "&b=" + (b ? b.sha : ""));
    document.body.dataset.rows = String(rows.length);
  }

  function start() {
    fill(selA); fill(selB);
    const [ha, hb] = fromHash();
    const pair = data.default_pair || [0, Math.max(0, commits.length - 1)];
    selA.value = String(ha != null ? ha : pair[0]);
    selB.value = String(hb != null ? hb : pair[1]);
    for (const s of [selA, selB, selM]) s.addEventListener("change", render);
    render();
    document.body.dataset.readyMs = String(Math.round(performance.now()));
    document.body.dataset.ready = "1";
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
