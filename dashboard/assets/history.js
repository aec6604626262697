// The history page: per metric, the chosen scenario's series over the commits, normalised to a
// baseline commit (or absolute), with its noise band, placement on every point and detected steps.
"use strict";

(function () {
  const data = window.DPBENCH_DATA;
  const commits = data.commits;
  const labels = commits.map(c => c.label);
  const plotConfig = {displaylogo: false, responsive: true};
  const stepsBySeries = {};
  for (const st of data.steps) (stepsBySeries[st.chart + ":" + st.series] = stepsBySeries[st.chart + ":" + st.series] || []).push(st);

  function hoverText(i) {
    const c = commits[i];
    return DP.esc(c.label) + "<br>" + DP.esc(c.date || "") + "<br>" + DP.esc(c.subject) +
      "<br>placement: " + DP.esc(c.placement || "not measured");
  }

  function decorations(stepList) {
    const shapes = [], annotations = [];
    for (const ch of data.placement_changes) {
      shapes.push({type: "line", xref: "x", yref: "paper", x0: ch.index - 0.5, x1: ch.index - 0.5,
                   y0: 0, y1: 1, line: {color: "#444", width: 1, dash: "dash"}});
      annotations.push({xref: "x", yref: "paper", x: ch.index - 0.5, y: 1, yanchor: "bottom",
                        showarrow: false, font: {size: 10},
                        text: DP.esc(ch.from + " → " + ch.to + " at " + commits[ch.index].label)});
    }
    for (const st of stepList || []) {
      const colour = st.kind === "regression" ? "rgba(214,39,40,0.15)" : st.kind === "improvement" ? "rgba(44,160,44,0.15)" : "rgba(127,127,127,0.15)";
      shapes.push({type: "rect", xref: "x", yref: "paper", x0: st.before, x1: st.after, y0: 0, y1: 1,
                   fillcolor: colour, line: {width: 0}, layer: "below"});
    }
    return {shapes, annotations};
  }

  function xaxis() {
    return {type: "category", categoryorder: "array", categoryarray: labels, range: [-0.5, labels.length - 0.5],
            tickangle: labels.length > 8 ? -45 : 0, automargin: true};
  }

  function drawPlacement() {
    const known = commits.map((c, i) => i).filter(i => commits[i].placement);
    const trace = {
      type: "scatter", mode: "markers", name: "placement",
      x: known.map(i => labels[i]), y: known.map(i => commits[i].placement),
      hovertext: known.map(hoverText), hoverinfo: "text",
      marker: {size: 12, color: known.map(i => DP.PLACEMENT_COLOR[commits[i].placement]),
               symbol: known.map(i => DP.PLACEMENT_SYMBOL[commits[i].placement])},
    };
    const deco = decorations([]);
    Plotly.newPlot("placement-plot", [trace], {
      height: 200, margin: {t: 30, b: 40, l: 70, r: 20}, xaxis: xaxis(),
      yaxis: {type: "category", categoryorder: "array", categoryarray: ["unknown", "absent", "early", "post-kv"]},
      shapes: deco.shapes, annotations: deco.annotations, showlegend: false,
    }, plotConfig);
  }

  function selection() {
    const axes = {};
    document.querySelectorAll(".axis-select").forEach(s => { axes[s.dataset.axis] = s.value; });
    return {
      axes: axes,
      tier: document.getElementById("tier-select").value,
      machine: document.getElementById("machine-select").value,
      env: document.getElementById("env-select").value,
      baseline: Number(document.getElementById("baseline-select").value),
      normalise: document.getElementById("normalise").checked,
      runFiles: document.getElementById("run-files").checked,
    };
  }

  function matches(chart, s, sel) {
    if (sel.machine && s.machine !== sel.machine) return false;
    if (sel.env && s.env !== sel.env) return false;
    for (const axis of chart.axes) {
      if (axis in sel.axes && s.scenario[axis] !== sel.axes[axis]) return false;
    }
    return true;
  }

  // Traces of one chart for the selection: each matching series, its band drawn as a filled area.
  function traces(n, chart, sel) {
    const out = [], stepList = [];
    let normalised = false, note = "";
    chart.series.forEach((s, k) => {
      if (!matches(chart, s, sel)) return;
      const meta = {scenario: s.scenario, machine: s.machine, env: s.env};
      let div = 1;
      if (sel.normalise) {
        const base = DP.valueAt(s, sel.baseline);
        if (base && base.value !== 0) { div = base.value; normalised = true; }
        else note = base ? "baseline value is 0: absolute" : "not measured on the baseline: absolute";
      }
      const idx = s.points.map(p => p[0]);
      const x = idx.map(i => labels[i]);
      const banded = s.points.filter(p => p[2] != null && p[3] != null);
      if (banded.length) {
        out.push({type: "scatter", mode: "lines", x: banded.map(p => labels[p[0]]), y: banded.map(p => p[2] / div),
                  line: {width: 0}, hoverinfo: "skip", showlegend: false, meta: meta, name: "band low"});
        out.push({type: "scatter", mode: "lines", x: banded.map(p => labels[p[0]]), y: banded.map(p => p[3] / div),
                  fill: "tonexty", fillcolor: "rgba(31,119,180,0.18)", line: {width: 0}, hoverinfo: "skip",
                  showlegend: false, meta: meta, name: DP.esc((s.band || "band") + " " + DP.seriesName(s))});
      }
      out.push({
        type: "scatter", mode: "lines+markers", name: DP.esc(DP.seriesName(s)), meta: meta, x: x,
        y: s.points.map(p => p[1] / div),
        hovertext: s.points.map(p => hoverText(p[0]) + "<br>" + DP.esc(DP.seriesName(s)) + "<br>" +
                                DP.short(p[1]) + " " + DP.esc(chart.unit) +
                                (div !== 1 ? " (" + DP.sign((p[1] / div - 1) * 100) + " % vs baseline)" : "") +
                                (p[2] != null ? "<br>" + DP.esc(s.band || "band") + " " + DP.fmt(p[2]) + "–" + DP.fmt(p[3]) : "")),
        hoverinfo: "text", line: {width: 1.5, color: "#1f77b4"},
        marker: {size: 9, color: idx.map(i => DP.PLACEMENT_COLOR[commits[i].placement] || "#1f77b4"),
                 symbol: idx.map(i => DP.PLACEMENT_SYMBOL[commits[i].placement] || "square-open"),
                 line: {width: 1, color: "#333"}},
      });
      for (const st of stepsBySeries[n + ":" + k] || []) stepList.push(st);
    });
    return {traces: out, steps: stepList, normalised: normalised, note: note};
  }

  function layout(chart, drawn, sel) {
    const deco = decorations(drawn.steps);
    const y = drawn.normalised ?
      {title: {text: "× value at " + DP.esc(commits[sel.baseline].label)}, tickformat: ".3~f"} :
      {title: {text: DP.esc(chart.unit)}, rangemode: "tozero"};
    if (drawn.normalised) {
      deco.shapes.push({type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: 1, y1: 1, line: {color: "#999", width: 1, dash: "dot"}});
    }
    return {height: 270, margin: {t: 24, b: 40, l: 60, r: 10}, xaxis: xaxis(), yaxis: y,
            showlegend: false, shapes: deco.shapes, annotations: deco.annotations};
  }

  function buildCards() {
    const root = document.getElementById("charts");
    data.charts.forEach((chart, n) => {
      const card = DP.el("div", {"class": "card chart", "id": "card-" + n, "data-tier": chart.tier, "data-chart": chart.id});
      const head = DP.el("div", {"class": "chart-head"});
      head.appendChild(DP.el("span", {"class": "title"}, chart.tier + " · " + chart.title));
      head.appendChild(DP.el("span", {"class": "badge better better-" + chart.better, "title": chart.better_why}, DP.BETTER_TEXT[chart.better]));
      head.appendChild(DP.el("span", {"class": "badge unit"}, chart.unit));
      if (chart.stat === "mean") {  // the value `dpbench compare` and the other pages compare
        head.appendChild(DP.el("span", {"class": "badge stat", "title": "asv's own value is their median"},
                               chart.tier === "server" ? "mean of the runs" : "mean of the seeds"));
      }
      if (chart.executor) head.appendChild(DP.el("span", {"class": "badge"}, "executor: " + chart.executor));
      if (chart.source !== "asv") head.appendChild(DP.el("span", {"class": "badge source"}, chart.source));
      card.appendChild(head);
      card.appendChild(DP.el("div", {"class": "note muted", "id": "note-" + n}));
      card.appendChild(DP.el("div", {"class": "plot", "id": "plot-" + n}));
      root.appendChild(card);
    });
  }

  // Charts on screen first (the page is usable then), the rest one per task after, so a long
  // history does not hold the first view back. A newer render cancels an older one.
  let generation = 0;
  function render() {
    const sel = selection();
    const mine = ++generation;
    document.body.dataset.allDrawn = "0";
    const scen = Object.entries(sel.axes).map(([k, v]) => k + "=" + v).join(", ");
    document.getElementById("scenario-text").textContent = "showing " + (scen || "every series") +
      (sel.machine ? " on " + sel.machine : "");
    const later = [];
    let shown = 0;
    data.charts.forEach((chart, n) => {
      const card = document.getElementById("card-" + n);
      const drawn = traces(n, chart, sel);
      const show = (!sel.tier || chart.tier === sel.tier) && (sel.runFiles || chart.source === "asv") && drawn.traces.length > 0;
      card.style.display = show ? "" : "none";
      if (!show) { if (card.dataset.drawn) { Plotly.purge("plot-" + n); delete card.dataset.drawn; } return; }
      shown++;
      document.getElementById("note-" + n).textContent = drawn.note;
      const box = card.getBoundingClientRect();
      if (box.top < window.innerHeight + 200) { Plotly.react("plot-" + n, drawn.traces, layout(chart, drawn, sel), plotConfig); card.dataset.drawn = "1"; }
      else later.push([n, drawn, chart, card]);
    });
    document.body.dataset.chartsShown = String(shown);
    (function next() {
      if (mine !== generation) return;
      const job = later.shift();
      if (!job) { document.body.dataset.allDrawn = "1"; return; }
      Plotly.react("plot-" + job[0], job[1].traces, layout(job[2], job[1], sel), plotConfig);
      job[3].dataset.drawn = "1";
      setTimeout(next, 0);
    })();
  }

  DP.onLoad(function () {
    const base = document.getElementById("baseline-select");
    DP.commitOptions(base, commits);
    base.value = String(data.default_pair ? data.default_pair[0] : 0);
    const first = data.default_scenario || {};  // the twin's headline scenario
    document.querySelectorAll(".axis-select").forEach(s => {
      if (first[s.dataset.axis] != null) s.value = first[s.dataset.axis];
    });
    drawPlacement();
    buildCards();
    document.querySelectorAll("select, input").forEach(n => n.addEventListener("change", render));
    render();
    DP.ready();
  });
})();
