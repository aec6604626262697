// The comparison page: any two commits, every metric with its change, interval and verdict,
// most significant first; rows within noise / unchanged / unmeasured behind a toggle.
"use strict";

(function () {
  const data = window.DPBENCH_DATA;
  const commits = data.commits;
  const selA = document.getElementById("commit-a"), selB = document.getElementById("commit-b");
  const selM = document.getElementById("machine-select"), quiet = document.getElementById("show-quiet");
  const MAX_BARS = 40;
  const COLOUR = {"worse": "#d62728", "better": "#2ca02c", "changed": "#1f77b4", "within noise": "#bbbbbb"};

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
    const counts = {};
    for (const r of rows) counts[r.change.verdict] = (counts[r.change.verdict] || 0) + 1;
    const hidden = rows.filter(r => DP.QUIET.includes(r.change.verdict)).length;
    document.getElementById("compare-summary").textContent = a && b ?
      "A = " + a.label + " (" + (a.placement || "placement not measured") + ", " + (a.date || "no date") + ")   vs   B = " +
      b.label + " (" + (b.placement || "placement not measured") + ", " + (b.date || "no date") + "): " + rows.length +
      " metrics — " + ["worse", "better", "changed", "within noise", "no change", "single run", "not measured", "instrument"]
        .filter(v => counts[v]).map(v => counts[v] + " " + v).join(", ") +
      (hidden && !quiet.checked ? " (" + hidden + " quiet rows hidden)" : "") :
      "need at least one commit with results";
    const plotted = [];
    for (const row of rows) {
      const isQuiet = DP.QUIET.includes(row.change.verdict);
      const tr = DP.el("tr", {"class": "verdict-" + row.change.verdict.replace(/ /g, "-") + (isQuiet ? " quiet" : "")});
      if (isQuiet && !quiet.checked) tr.style.display = "none";
      const cells = [row.chart.tier, metricName(row), row.series.machine + " / " + row.series.env, row.chart.unit,
                     DP.BETTER_TEXT[row.chart.better], DP.sideText(row.a), DP.sideText(row.b), DP.fmtPct(row.change),
                     row.change.verdict + (row.change.basis === "single run" && !isQuiet ? " (single run)" :
                     row.change.basis.startsWith("paired") ? " (" + row.change.basis + ")" : "")];
      for (const c of cells) tr.appendChild(DP.el("td", {}, c));
      tbody.appendChild(tr);
      if (row.change.pct != null && row.change.verdict !== "no change" && row.change.verdict !== "not measured" &&
          row.change.verdict !== "instrument" && (quiet.checked || !isQuiet)) plotted.push(row);
    }
    const fromZero = rows.filter(r => r.change.pct == null && !DP.QUIET.includes(r.change.verdict)).length;
    const total = plotted.length;
    plotted.splice(MAX_BARS);  // the most significant ones; the table lists every row
    document.getElementById("change-note").textContent = (total > plotted.length ?
      "The " + plotted.length + " most significant of " + total + " changes drawn; the table lists all. " : "") +
      (fromZero ? fromZero + " metric(s) changed from 0 on A: no percentage, listed in the table." : "");
    const trace = {
      type: "bar", orientation: "h", name: "change %",
      y: plotted.map((r, k) => DP.esc(k + 1 + ". " + r.chart.tier + " · " + metricName(r))),
      x: plotted.map(r => r.change.pct),
      marker: {color: plotted.map(r => COLOUR[r.change.verdict] || "#7f7f7f")},
      error_x: {type: "data", symmetric: false, visible: true,
                array: plotted.map(r => r.change.hi != null ? r.change.hi - r.change.pct : 0),
                arrayminus: plotted.map(r => r.change.lo != null ? r.change.pct - r.change.lo : 0)},
      hovertext: plotted.map(r => DP.esc(r.change.verdict + " · " + DP.fmtPct(r.change) + " · " + r.series.machine + " / " + r.series.env)),
      hoverinfo: "text",
    };
    Plotly.react("change-plot", [trace], {
      height: Math.max(200, 24 * plotted.length + 80), margin: {l: 420, r: 20, t: 10, b: 40},
      xaxis: {title: {text: "change B vs A (%)"}, zeroline: true}, yaxis: {automargin: true, autorange: "reversed"},
    }, {displaylogo: false, responsive: true});
    history.replaceState(null, "", "#a=" + (a ? a.sha : "") + "&b=" + (b ? b.sha : ""));
    document.body.dataset.rows = String(rows.length);
  }

  DP.onLoad(function () {
    DP.commitOptions(selA, commits); DP.commitOptions(selB, commits);
    const [ha, hb] = DP.pairFromHash(commits);
    const pair = data.default_pair || [0, Math.max(0, commits.length - 1)];
    selA.value = String(ha != null ? ha : pair[0]);
    selB.value = String(hb != null ? hb : pair[1]);
    for (const s of [selA, selB, selM, quiet]) s.addEventListener("change", render);
    render();
    DP.ready();
  });
})();
