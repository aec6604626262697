// The fidelity page: twin vs simulated-forward server on the same scenario, per commit.
"use strict";

(function () {
  const data = window.DPBENCH_DATA;
  const commits = data.commits;

  function band(v, lo, hi) {
    return DP.fmt(v) + (lo != null && hi != null ? " [" + DP.fmt(lo) + ", " + DP.fmt(hi) + "]" : "");
  }

  // dpbench server fidelity's reports: each server run paired with the twin replaying its arrivals
  function replayedTable(root) {
    const reports = data.fidelity_replayed || [];
    root.appendChild(DP.el("h2", {}, "Twin replaying each server run's arrivals (repeated runs, paired)"));
    if (!reports.length) {
      root.appendChild(DP.el("p", {"class": "empty", "id": "replayed-empty"},
        "No `dpbench server fidelity` report in this results directory (results/fidelity/)."));
      return;
    }
    const t = DP.el("table", {"id": "fidelity-replayed"});
    const head = DP.el("tr");
    for (const h of ["scenario", "SGLang", "metric", "n", "server", "twin on its arrivals",
                     "server − twin (paired mean [95 % CI])"]) head.appendChild(DP.el("th", {}, h));
    const thead = DP.el("thead"); thead.appendChild(head); t.appendChild(thead);
    const tbody = DP.el("tbody");
    for (const rep of reports) {
      const where = rep.commit != null ? commits[rep.commit].label : rep.release + " (not on this history)";
      for (const r of rep.rows) {
        const tr = DP.el("tr", {"data-metric": r.metric});
        const u = r.dev_unit === "pts" ? " pts" : " %";
        const diff = r.diff == null ? "—" : DP.sign(r.diff) + u +
          (r.lo != null && r.hi != null ? " [" + DP.sign(r.lo) + ", " + DP.sign(r.hi) + "]" : "");
        const n = String(r.n) + (r.excluded ? " (" + r.excluded + " left out: instrument)" : "");
        for (const c of [DP.scenarioText(rep.scenario), where, r.metric + " (" + r.unit + ")", n,
                         DP.fmt(r.server), DP.fmt(r.replay), diff]) tr.appendChild(DP.el("td", {}, c));
        tbody.appendChild(tr);
      }
      for (const line of rep.broken) {
        const tr = DP.el("tr", {"class": "muted"});
        const td = DP.el("td", {colspan: "7"}, DP.scenarioText(rep.scenario) + " · " + where + " · instrument: " + line);
        tr.appendChild(td); tbody.appendChild(tr);
      }
    }
    t.appendChild(tbody);
    root.appendChild(t);
  }

  DP.onLoad(function () {
    const root = document.getElementById("fidelity");
    replayedTable(root);
    root.appendChild(DP.el("h2", {}, "Twin beside single server runs of the main job (not replayed: arrivals differ)"));
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
