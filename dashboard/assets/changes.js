// The regressions & improvements page: the steps dpbench.dashboard.steps found (asv's detector).
"use strict";

(function () {
  const data = window.DPBENCH_DATA;
  const commits = data.commits;

  function render() {
    const kind = document.getElementById("kind-select").value;
    const tier = document.getElementById("tier-select").value;
    const tbody = document.querySelector("#steps-table tbody");
    tbody.textContent = "";
    let n = 0;
    for (const st of data.steps) {
      const chart = data.charts[st.chart], s = chart.series[st.series];
      if ((kind && st.kind !== kind) || (tier && chart.tier !== tier)) continue;
      n++;
      const before = commits[st.before], after = commits[st.after];
      const range = before.label + " → " + after.label;
      let size = st.pct == null ? "from 0" : DP.sign(st.pct) + " %";
      if (st.pct != null && st.lo != null && st.lo !== st.hi) size += " [" + DP.sign(st.lo) + ", " + DP.sign(st.hi) + "]";
      const tr = DP.el("tr", {"class": "step-" + st.kind, "data-before": before.sha, "data-after": after.sha});
      const cells = [st.kind, chart.tier, chart.title, DP.scenarioText(s.scenario), s.machine + " / " + s.env, range,
                     DP.fmt(st.value_before) + " → " + DP.fmt(st.value_after), size, chart.unit];
      for (const c of cells) tr.appendChild(DP.el("td", {}, c));
      tr.cells[5].title = before.sha + " → " + after.sha;
      tbody.appendChild(tr);
    }
    document.getElementById("steps-count").textContent = n + " of " + data.steps.length + " steps shown" +
      (commits.length < 3 ? " (with fewer than 3 commits every change of level is a step)" : "");
    document.body.dataset.rows = String(n);
  }

  DP.onLoad(function () {
    for (const id of ["kind-select", "tier-select"]) document.getElementById(id).addEventListener("change", render);
    render();
    DP.ready();
  });
})();
