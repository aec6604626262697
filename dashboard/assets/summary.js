// The landing page: for a pair of commits, the metrics that decide the question, per tier and scenario.
"use strict";

(function () {
  const data = window.DPBENCH_DATA;
  const commits = data.commits;
  const selA = document.getElementById("commit-a"), selB = document.getElementById("commit-b");
  const selM = document.getElementById("machine-select");
  const headings = {};
  for (const k of data.key_metrics) headings[k.key] = k.heading;

  // The value the change used (cell.change.a / .b: the mean of paired seeds or of runs, else
  // asv's value), as the terminal's `dpbench compare` shows it.
  function valueText(cell, side) {
    const v = cell.change[side];
    if (!cell[side] || v == null) return "—";
    if (cell.chart.key === "placement") return DP.PLACEMENT_LABELS[Math.round(v)] || DP.fmt(v);
    return DP.sideText(cell[side], v, cell.change.basis === "bands");
  }

  function cellNode(cell) {
    const td = DP.el("td", {"class": "cell verdict-" + cell.change.verdict.replace(/ /g, "-"),
                            "data-metric": cell.chart.metric});
    // each value, and the interval, a unit that never breaks: a narrow column wraps between them
    const values = DP.el("div", {"class": "values"});
    values.appendChild(DP.el("span", {"class": "nowrap"}, valueText(cell, "a") + " →"));
    values.appendChild(document.createTextNode(" "));
    values.appendChild(DP.el("span", {"class": "nowrap"}, valueText(cell, "b")));
    td.appendChild(values);
    if (cell.chart.key !== "placement") {
      const pct = DP.el("div", {"class": "pct"});
      const text = DP.fmtPct(cell.change), cut = text.indexOf(" [");
      pct.appendChild(DP.el("span", {"class": "nowrap"}, cut < 0 ? text : text.slice(0, cut)));
      if (cut >= 0) {
        pct.appendChild(document.createTextNode(" "));
        pct.appendChild(DP.el("span", {"class": "nowrap interval"}, text.slice(cut + 1)));
      }
      td.appendChild(pct);
    }
    const verdict = DP.el("div", {"class": "verdict"}, cell.change.verdict);
    td.appendChild(verdict);
    const why = [cell.chart.title, "unit: " + cell.chart.unit, DP.BETTER_TEXT[cell.chart.better],
                 cell.change.basis === "single run" ? "single run per commit (no noise band)" :
                 cell.change.basis === "bands" ? "unpaired: noise bands (" + (cell.chart.series[0].band || "") + ")" :
                 cell.change.basis.startsWith("paired") ? cell.change.basis + ": mean per-seed difference, 95 % interval" :
                 cell.change.basis.startsWith("repeats") ? cell.change.basis +
                   ": independent runs, unpaired: difference of means, Welch 95 % interval" +
                   " (better / worse needs 3 runs a side)" : ""];
    td.title = why.filter(Boolean).join(" · ");
    if (cell.change.basis === "single run" || /^(paired|repeats)/.test(cell.change.basis) || cell.change.basis === "bands") {
      td.appendChild(DP.el("div", {"class": "basis muted"}, cell.change.basis === "bands" ? "unpaired" : cell.change.basis));
    }
    return td;
  }

  function table(tier, rows, control) {
    const keys = data.key_metrics.map(k => k.key).filter(k => rows.some(r => r.cells[k]));
    const units = {};
    for (const r of rows) for (const k of keys) if (r.cells[k]) units[k] = r.cells[k].chart;
    const t = DP.el("table", {"class": "summary", "data-tier": tier, "data-control": control ? "1" : "0"});
    const where = new Set(rows.map(r => r.machine + " / " + r.env));
    const head = DP.el("tr");
    head.appendChild(DP.el("th", {}, "scenario"));
    if (where.size > 1) head.appendChild(DP.el("th", {}, "machine / env"));
    else t.setAttribute("title", "machine / env: " + Array.from(where)[0]);
    for (const k of keys) {
      const th = DP.el("th", {"data-key": k}, headings[k]);
      const c = units[k];
      th.appendChild(DP.el("div", {"class": "unit muted"}, c.unit + (c.key === "placement" ? "" : " · " + DP.BETTER_TEXT[c.better])));
      head.appendChild(th);
    }
    const thead = DP.el("thead"); thead.appendChild(head); t.appendChild(thead);
    const tbody = DP.el("tbody");
    for (const r of rows) {
      const tr = DP.el("tr", {"data-scenario": DP.scenarioText(r.scenario)});
      const scen = DP.el("td", {"class": "scenario"});  // a line a parameter: the column stays narrow
      const parts = Object.entries(r.scenario).map(([k, v]) => k + "=" + v);
      for (const part of parts.length ? parts : ["—"]) scen.appendChild(DP.el("div", {}, part));
      const regime = DP.regimeText(r);
      if (regime) scen.appendChild(DP.el("div", {"class": "regime muted"}, regime));
      tr.appendChild(scen);
      if (where.size > 1) tr.appendChild(DP.el("td", {"class": "muted"}, r.machine + " / " + r.env));
      for (const k of keys) tr.appendChild(r.cells[k] ? cellNode(r.cells[k]) : DP.el("td", {"class": "muted"}, "—"));
      tbody.appendChild(tr);
    }
    t.appendChild(tbody);
    return t;
  }

  function stepsHead() {
    const p = document.getElementById("steps-head");
    const n = {regression: 0, improvement: 0, change: 0};
    for (const st of data.steps) n[st.kind]++;
    p.textContent = "";
    p.appendChild(document.createTextNode("Over the whole history asv's step detector finds "));
    const a = DP.el("a", {href: "changes.html", id: "steps-link"},
                    n.regression + " regression(s), " + n.improvement + " improvement(s), " + n.change + " change(s) without a direction");
    p.appendChild(a);
    p.appendChild(document.createTextNode("."));
  }

  function render() {
    const ia = Number(selA.value), ib = Number(selB.value);
    const root = document.getElementById("summary");
    root.textContent = "";
    const a = commits[ia], b = commits[ib];
    const head = document.getElementById("summary-head");
    if (!a || !b) { head.textContent = "Needs results on at least one commit."; return; }
    head.textContent = "A = " + a.label + " (" + (a.placement || "placement not measured") + ")  →  B = " +
      b.label + " (" + (b.placement || "placement not measured") + ")" +
      (selM.value || data.machines.length !== 1 ? "" : "  ·  machine " + data.machines[0]);
    const tiers = DP.summary(data, ia, ib, selM.value);
    let n = 0;
    for (const [tier, rows] of Object.entries(tiers)) {
      const sec = DP.el("section", {"class": "card tier", "data-tier": tier});
      sec.appendChild(DP.el("h2", {}, "tier: " + tier));
      const main = rows.filter(r => !r.control), control = rows.filter(r => r.control);
      if (main.length) sec.appendChild(table(tier, main, false));
      if (control.length) {
        sec.appendChild(DP.el("h3", {}, "control: delayer off (the placement of the negotiation cannot matter here)"));
        sec.appendChild(table(tier, control, true));
      }
      root.appendChild(sec);
      n += rows.length;
    }
    if (!n) root.appendChild(DP.el("p", {"class": "empty"}, "None of the deciding metrics was measured on either commit."));
    document.getElementById("compare-link").setAttribute("href", "compare.html#a=" + a.sha + "&b=" + b.sha);
    history.replaceState(null, "", "#a=" + a.sha + "&b=" + b.sha);
    document.body.dataset.rows = String(n);
  }

  function setPair(p) {
    selA.value = String(p[0]); selB.value = String(p[1]); render();
  }

  DP.onLoad(function () {
    DP.commitOptions(selA, commits); DP.commitOptions(selB, commits);
    const [ha, hb] = DP.pairFromHash(commits);
    const last = Math.max(0, commits.length - 1);
    const newest = [Math.max(0, last - 1), last];
    const pair = data.default_pair || newest;
    selA.value = String(ha != null ? ha : pair[0]);
    selB.value = String(hb != null ? hb : pair[1]);
    for (const s of [selA, selB, selM]) s.addEventListener("change", render);
    document.getElementById("pair-question").addEventListener("click", () => setPair(pair));
    document.getElementById("pair-newest").addEventListener("click", () => setPair(newest));
    stepsHead();
    render();
    DP.ready();
  });
})();
