// The fidelity page: twin vs simulated-forward server on the same scenario, per commit.
"use strict";

(function () {
  const data = window.DPBENCH_DATA;
  const commits = data.commits;

  function band(v, lo, hi) {
    return DP.fmt(v) + (lo != null && hi != null ? " [" + DP.fmt(lo) + ", " + DP.fmt(hi) + "]" : "");
  }

  DP.onLoad(function () {
    const root = document.getElementById("fidelity");
    if (!data.fidelity.length) {
      const twin = data.charts.some(c => c.tier === "twin");
      const sim = data.charts.some(c => c.tier === "server" && c.executor === "simulated");
      root.appendChild(DP.el("p", {"class": "empty", "id": "fidelity-empty"},
        "No scenario measured by both tiers yet (twin results: " + (twin ? "yes" : "none") +
        "; simulated-forward server results: " + (sim ? "yes" : "none") + ")."));
    }
    const t = DP.el("table", {"id": "fidelity-table"});
    const head = DP.el("tr");
    for (const h of ["metric", "scenario", "machine", "commit", "twin", "simulated server", "twin − server"]) head.appendChild(DP.el("th", {}, h));
    const thead = DP.el("thead"); thead.appendChild(head); t.appendChild(thead);
    const tbody = DP.el("tbody");
    for (const p of data.fidelity) {
      for (const r of p.rows) {
        const tr = DP.el("tr");
        const cells = [p.metric + " (" + p.unit + ")", DP.scenarioText(p.scenario), p.machine, commits[r[0]].label,
                       band(r[1], r[2], r[3]), band(r[4], r[5], r[6]), r[7] == null ? "—" : DP.sign(r[7]) + (p.dev_unit === "pts" ? " pts" : " %")];
        for (const c of cells) tr.appendChild(DP.el("td", {}, c));
        tbody.appendChild(tr);
      }
    }
    t.appendChild(tbody);
    if (data.fidelity.length) root.appendChild(t);
    DP.ready();
  });
})();
