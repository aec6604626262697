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
      " metrics — " + ["worse", "better", "changed", "within noise", "too few to judge", "no change", "single run", "not measured",
       "instrument"]
        .filter(v => counts[v]).map(v => counts[v] + " " + v).join(", ") +
      (hidden && !quiet.checked ? " (" + hidden + " quiet rows hidden)" : "") :
      "need at least one commit with results";
    const plotted = [];
    for (const row of rows) {
      const isQuiet = DP.QUIET.includes(row.change.verdict);
      const tr = DP.el("tr", {"class": "verdict-" + row.change.verdict.replace(/ /g, "-") + (isQuiet ? " quiet" : "")});
      if (isQuiet && !quiet.checked) tr.style.display = "none";
      const cells = [row.chart.tier, metricName(row), row.series.machine + " / " + row.series.env, row.chart.unit,
                     DP.BETTER_TEXT[row.chart.better], DP.sideText(row.a, row.change.a, row.change.basis === "bands"),
                     DP.sideText(row.b, row.change.b, row.change.basis === "bands"), DP.fmtPct(row.change),
                     row.change.verdict + (row.change.basis === "single run" && !isQuiet ? " (single run)" :
                     /^(paired|repeats|deterministic)/.test(row.change.basis) ? " (" + row.change.basis + ")" : "")];
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
    drawLoad(ia, ib);
    history.replaceState(null, "", "#a=" + (a ? a.sha : "") + "&b=" + (b ? b.sha : ""));
    document.body.dataset.rows = String(rows.length);
  }

  // Latency against offered load: for every chart of TTFT p99 / TPOT p99 with a rate_scale
  // parameter, one plot per scenario (the other parameters, machine, env): a line per commit
  // (A, B) over the rates, the seeds' band as error bars, the load benchmarks' SLO drawn.
  const LOAD_METRICS = ["ttft_ms_p99", "tpot_ms_p99"];
  function drawLoad(ia, ib) {
    const root = document.getElementById("load-plots");
    root.textContent = "";
    const slo = data.load_slo || {};
    let n = 0;
    for (const chart of data.charts) {
      const axis = (chart.axes || []).indexOf("rate_scale");
      if (axis < 0 || !LOAD_METRICS.includes(chart.metric)) continue;
      const groups = {};
      for (const s of chart.series) {
        const rest = Object.entries(s.scenario).filter(([k]) => k !== "rate_scale");
        const key = [s.machine, s.env, DP.scenarioText(Object.fromEntries(rest))].join(" / ");
        (groups[key] = groups[key] || []).push(s);
      }
      for (const [key, series] of Object.entries(groups)) {
        const traces = [];
        for (const [label, idx] of [["A", ia], ["B", ib]]) {
          const pts = [];
          for (const s of series) {
            const v = DP.valueAt(s, idx);
            if (v) pts.push([Number(s.scenario.rate_scale), v]);
          }
          if (!pts.length) continue;
          pts.sort((p, q) => p[0] - q[0]);
          traces.push({
            type: "scatter", mode: "lines+markers", name: DP.esc(label + " = " + commits[idx].label),
            x: pts.map(p => p[0]), y: pts.map(p => p[1].value),
            error_y: {type: "data", symmetric: false, visible: true,
                      array: pts.map(p => (p[1].hi != null ? p[1].hi - p[1].value : 0)),
                      arrayminus: pts.map(p => (p[1].lo != null ? p[1].value - p[1].lo : 0))},
          });
        }
        if (!traces.length) continue;
        const id = "load-plot-" + n++;
        const card = DP.el("div", {"class": "load-card"});
        card.appendChild(DP.el("h3", {}, chart.title + " · " + key));
        card.appendChild(DP.el("div", {"id": id, "class": "plot", "data-metric": chart.metric}));
        root.appendChild(card);
        const shapes = slo[chart.metric] != null ? [{type: "line", xref: "paper", x0: 0, x1: 1,
          y0: slo[chart.metric], y1: slo[chart.metric], line: {color: "#d62728", dash: "dash"}}] : [];
        const annotations = slo[chart.metric] != null ? [{xref: "paper", x: 1, y: slo[chart.metric],
          text: "SLO " + DP.fmt(slo[chart.metric]) + " ms", showarrow: false, yanchor: "bottom", xanchor: "right"}] : [];
        Plotly.react(id, traces, {
          height: 320, margin: {l: 70, r: 20, t: 10, b: 50}, shapes: shapes, annotations: annotations,
          xaxis: {title: {text: "offered rate (× the spec's)"}, type: "log"},
          yaxis: {title: {text: DP.esc(chart.unit)}, rangemode: "tozero"},
        }, {displaylogo: false, responsive: true});
      }
    }
    document.getElementById("load-empty").style.display = n ? "none" : "";
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
