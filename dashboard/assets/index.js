// The history page: one plotly chart per tier × metric over the commits, placement on every point.
"use strict";

(function () {
  const data = window.DPBENCH_DATA;
  const commits = data.commits;
  const labels = commits.map(c => c.label);
  const plotConfig = {displaylogo: false, responsive: true};

  function hoverText(i) {
    const c = commits[i];
    return DP.esc(c.label) + "<br>" + DP.esc(c.date || "") + "<br>" + DP.esc(c.subject) +
      "<br>placement: " + DP.esc(c.placement || "not measured");
  }

  function changeShapes() {
    const shapes = [], annotations = [];
    for (const ch of data.placement_changes) {
      shapes.push({type: "line", xref: "x", yref: "paper", x0: ch.index - 0.5, x1: ch.index - 0.5,
                   y0: 0, y1: 1, line: {color: "#444", width: 1, dash: "dash"}});
      annotations.push({xref: "x", yref: "paper", x: ch.index - 0.5, y: 1, yanchor: "bottom",
                        showarrow: false, font: {size: 10},
                        text: DP.esc(ch.from + " → " + ch.to + " at " + commits[ch.index].label)});
    }
    return {shapes, annotations};
  }

  function xaxis() {
    return {type: "category", categoryorder: "array", categoryarray: labels, range: [-0.5, labels.length - 0.5],
            tickangle: labels.length > 12 ? -45 : 0, automargin: true};
  }

  function drawPlacement() {
    const known = commits.map((c, i) => i).filter(i => commits[i].placement);
    const trace = {
      type: "scatter", mode: "markers", name: "placement",
      x: known.map(i => labels[i]),
      y: known.map(i => commits[i].placement),
      hovertext: known.map(hoverText), hoverinfo: "text",
      marker: {size: 12, color: known.map(i => DP.PLACEMENT_COLOR[commits[i].placement]),
               symbol: known.map(i => DP.PLACEMENT_SYMBOL[commits[i].placement])},
    };
    const deco = changeShapes();
    Plotly.newPlot("placement-plot", [trace], {
      height: 230, margin: {t: 30, b: 40, l: 70, r: 20}, xaxis: xaxis(),
      yaxis: {type: "category", categoryorder: "array", categoryarray: ["unknown", "absent", "early", "post-kv"],
              title: {text: "placement"}},
      shapes: deco.shapes, annotations: deco.annotations, showlegend: false,
    }, plotConfig);
  }

  function traces(chart, machine, env) {
    const out = [];
    for (const s of chart.series) {
      if ((machine && s.machine !== machine) || (env && s.env !== env)) continue;
      const idx = s.points.map(p => p[0]);
      const banded = s.points.some(p => p[2] != null && p[3] != null);
      const t = {
        type: "scatter", mode: "lines+markers", name: DP.esc(DP.seriesName(s)),
        x: idx.map(i => labels[i]), y: s.points.map(p => p[1]),
        hovertext: s.points.map(p => hoverText(p[0]) + "<br>" + DP.esc(DP.seriesName(s)) + "<br>" +
                                DP.fmt(p[1]) + " " + DP.esc(chart.unit) +
                                (p[2] != null ? " (99% CI " + DP.fmt(p[2]) + "–" + DP.fmt(p[3]) + ")" : "")),
        hoverinfo: "text",
        line: {width: 1.5},
        marker: {size: 9, color: idx.map(i => DP.PLACEMENT_COLOR[commits[i].placement] || "#1f77b4"),
                 symbol: idx.map(i => DP.PLACEMENT_SYMBOL[commits[i].placement] || "square-open"),
                 line: {width: 1, color: "#333"}},
      };
      if (banded) {
        t.error_y = {type: "data", symmetric: false, thickness: 1, width: 3,
                     array: s.points.map(p => p[3] != null ? p[3] - p[1] : 0),
                     arrayminus: s.points.map(p => p[2] != null ? p[1] - p[2] : 0)};
      }
      out.push(t);
    }
    return out;
  }

  function layout(chart) {
    const deco = changeShapes();
    return {
      title: {text: DP.esc(chart.tier + " · " + chart.title + " · " + DP.BETTER_TEXT[chart.better]), font: {size: 14}},
      height: 320, margin: {t: 50, b: 40, l: 70, r: 20}, xaxis: xaxis(),
      yaxis: {title: {text: DP.esc(chart.unit)}, rangemode: "tozero"},
      showlegend: true, legend: {orientation: "h", y: -0.35},
      shapes: deco.shapes, annotations: deco.annotations,
    };
  }

  function buildCards() {
    const root = document.getElementById("charts");
    let tier = null, section = null;
    data.charts.forEach((chart, n) => {
      if (chart.tier !== tier) {
        tier = chart.tier;
        section = DP.el("section", {"class": "tier", "data-tier": tier});
        section.appendChild(DP.el("h2", {}, "tier: " + tier));
        root.appendChild(section);
      }
      const card = DP.el("div", {"class": "card chart", "id": "card-" + n, "data-tier": chart.tier,
                                 "data-chart": chart.id});
      const head = DP.el("div", {"class": "chart-head"});
      head.appendChild(DP.el("span", {"class": "title"}, chart.title));
      head.appendChild(DP.el("span", {"class": "badge tier"}, "tier " + chart.tier));
      head.appendChild(DP.el("span", {"class": "badge unit"}, "unit: " + chart.unit));
      head.appendChild(DP.el("span", {"class": "badge better better-" + chart.better}, DP.BETTER_TEXT[chart.better]));
      head.appendChild(DP.el("span", {"class": "badge source"}, chart.source));
      card.appendChild(head);
      card.appendChild(DP.el("div", {"class": "bench-name muted"}, chart.benchmark +
        (chart.param_names.length ? " · params: " + chart.param_names.join(", ") : "")));
      card.appendChild(DP.el("div", {"class": "plot", "id": "plot-" + n}));
      section.appendChild(card);
    });
  }

  // Draw the charts on screen first (the page is usable then), the rest one per task after,
  // so a long history does not hold the first view back. A newer render cancels an older one.
  let generation = 0;
  function render() {
    const machine = document.getElementById("machine-select").value;
    const env = document.getElementById("env-select").value;
    const tier = document.getElementById("tier-select").value;
    const mine = ++generation;
    document.body.dataset.allDrawn = "0";
    document.querySelectorAll("section.tier").forEach(sec => {
      sec.style.display = (!tier || sec.dataset.tier === tier) ? "" : "none";
    });
    const later = [];
    let shown = 0;
    data.charts.forEach((chart, n) => {
      const card = document.getElementById("card-" + n);
      const ts = traces(chart, machine, env);
      const show = (!tier || chart.tier === tier) && ts.length > 0;
      card.style.display = show ? "" : "none";
      if (!show) return;
      shown++;
      const box = card.getBoundingClientRect();
      if (box.top < window.innerHeight + 200) Plotly.react("plot-" + n, ts, layout(chart), plotConfig);
      else later.push([n, ts, chart]);
    });
    document.body.dataset.chartsShown = String(shown);
    (function next() {
      if (mine !== generation) return;
      const job = later.shift();
      if (!job) { document.body.dataset.allDrawn = "1"; return; }
      Plotly.react("plot-" + job[0], job[1], layout(job[2]), plotConfig);
      setTimeout(next, 0);
    })();
  }

  function start() {
    drawPlacement();
    buildCards();
    for (const id of ["machine-select", "env-select", "tier-select"]) {
      document.getElementById(id).addEventListener("change", render);
    }
    render();
    document.body.dataset.readyMs = String(Math.round(performance.now()));
    document.body.dataset.ready = "1";
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
