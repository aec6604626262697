"""The asv suites stay thin, and every label names the SLO its numbers were judged by.

- every ``setup_cache`` in ``benchmarks/`` is one call into dpbench plus asv glue, and no
  function there runs over ~60 lines (read from the source: a fattened one fails);
- every track judged by an SLO (goodput, SLO attainment, capacity at SLO) takes its unit from
  :class:`dpbench.metrics.latency.Slo`, asv's own discovery records that unit, and reading a
  track whose runs were judged by another SLO fails;
- the ``--ttft-slo-ms``/``--tpot-slo-ms`` options of every command come from ``Slo``'s fields.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import json
import math
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from dpbench.metrics.latency import Slo

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SLO_METRICS = ("goodput_requests_per_s", "slo_attainment", "capacity_at_slo")
# a unit that states an SLO: "TTFT ≤ 2 s", "within TTFT 5 s, TPOT 250 ms", "… SLO …"
STATES_SLO = re.compile(r"(TTFT|TPOT)\s*(≤|<=)?\s*\d|\bSLO\b")
MAX_LINES = 60


# --- thin setup_cache --------------------------------------------------------------------


def _dpbench_names(tree: ast.Module) -> set[str]:
    """The names a module binds by importing from dpbench (``bench``, ``run_twin``, …)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dpbench"):
            out.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(
                (a.asname or a.name).split(".")[0] for a in node.names if "dpbench" in a.name
            )
    return out


def _root_name(func: ast.expr) -> str | None:
    while isinstance(func, ast.Attribute):
        func = func.value
    return func.id if isinstance(func, ast.Name) else None


def setup_cache_problems(source: str, where: str) -> list[str]:
    """Each ``setup_cache`` that is more than one call into dpbench plus asv glue (a docstring,
    plain assignments, a ``return``)."""
    tree = ast.parse(source)
    ours = _dpbench_names(tree)
    problems = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "setup_cache"):
                continue
            name = f"{where}:{cls.name}.setup_cache"
            body = fn.body[1:] if ast.get_docstring(fn) else fn.body
            glue = (ast.Return, ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom)
            extra = [type(s).__name__ for s in body if not isinstance(s, glue)]
            if extra:
                problems.append(f"{name}: statements that are not asv glue: {extra}")
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
            if len(calls) != 1:
                problems.append(f"{name}: {len(calls)} calls, want one library call")
            elif _root_name(calls[0].func) not in ours:
                problems.append(f"{name}: calls {ast.unparse(calls[0].func)}, not into dpbench")
    return problems


def long_functions(source: str, where: str) -> list[str]:
    tree = ast.parse(source)
    return [
        f"{where}:{n.name} has {n.end_lineno - n.lineno + 1} lines"
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.end_lineno - n.lineno + 1 > MAX_LINES
    ]


def test_every_setup_cache_is_one_library_call():
    sources = {p.name: p.read_text() for p in sorted(BENCHMARKS.glob("*.py"))}
    found = sum(s.count("def setup_cache(") for s in sources.values())
    assert found >= 15  # every tier's classes, read (a renamed method must not hide here)
    problems = [p for name, s in sources.items() for p in setup_cache_problems(s, name)]
    problems += [p for name, s in sources.items() for p in long_functions(s, name)]
    assert problems == []


def test_a_fattened_setup_cache_fails_the_check():
    source = (BENCHMARKS / "twin.py").read_text()
    thin = "        return bench.high_kv(self.params, SEEDS, requests=HIGH_KV_REQUESTS)\n"
    assert thin in source
    three_calls = source.replace(
        thin, "        why = bench.unsupported()\n" + thin.replace("return", "out =") + thin
    )
    assert any("3 calls" in p for p in setup_cache_problems(three_calls, "twin.py"))
    local = source.replace(thin, "        return _own_pool(self.params)\n")
    assert any("not into dpbench" in p for p in setup_cache_problems(local, "twin.py"))
    looped = source.replace(thin, "        for p in self.params:\n            pass\n" + thin)
    assert any("not asv glue: ['For']" in p for p in setup_cache_problems(looped, "twin.py"))
    long = source.replace(thin, thin + "        x = 1\n" * MAX_LINES)
    assert long_functions(long, "twin.py")


# --- one SLO, named by every label ---------------------------------------------------------


def _classes():
    for path in sorted(BENCHMARKS.glob("*.py")):
        module = importlib.import_module(f"benchmarks.{path.stem}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and hasattr(cls, "table"):
                yield f"{path.stem}.{name}", cls


def label_problems(name: str, cls: type) -> list[str]:
    """Rows of a class's table whose unit does not name the SLO they were judged by."""
    out = []
    for track, row in cls.table.items():
        unit = getattr(cls, f"track_{track}").unit
        says_slo = STATES_SLO.search(unit) is not None
        if unit != row.unit:
            out.append(f"{name}.track_{track}: unit {unit!r} is not its table's {row.unit!r}")
        if row.metric in SLO_METRICS or says_slo:
            if row.slo is None:
                out.append(f"{name}.track_{track}: {unit!r} names no SLO it was judged by")
            elif row.slo.label not in unit or row.slo != Slo():
                out.append(f"{name}.track_{track}: {unit!r} vs judged by {row.slo.label}")
    return out


def test_every_slo_label_is_the_slo_the_numbers_were_judged_by():
    classes = dict(_classes())
    for must in ("twin.TwinLoad", "twin.TwinCapacity", "twin.TwinHighKV", "server.ServeThroughput"):
        assert must in classes
    problems = [p for name, cls in classes.items() for p in label_problems(name, cls)]
    assert problems == []
    load = classes["twin.TwinLoad"]
    assert load.track_goodput_requests_per_s.unit == f"req/s meeting {Slo().label} (simulated)"
    assert load.track_slo_attainment.unit == f"fraction within {Slo().label}"
    # TwinLoad has its own table: no unit taken from TwinHighKV by inheritance
    assert load.track_ttft_ms_p99 is not classes["twin.TwinHighKV"].track_ttft_ms_p99


def test_a_typed_slo_label_fails_the_label_check():
    from benchmarks.common import OneRun, Track, goodput, tracks

    @tracks({"goodput_requests_per_s": Track("goodput_requests_per_s", "req/s meeting TTFT ≤ 2 s")})
    class Typed(OneRun):
        version = "x"

    @tracks({"goodput_requests_per_s": goodput(Slo(ttft_ms=2000, tpot_ms=100))})
    class Other(OneRun):
        version = "x"

    assert label_problems("Typed", Typed) and label_problems("Other", Other)


def _judged(slo: Slo, **values: float) -> dict:
    return {
        "metrics": {k: {"value": v} for k, v in values.items()},
        "slo": asdict(slo),
        "health": {},
    }


def test_reading_a_track_judged_by_another_slo_fails():
    """A run judged by another SLO than the label says: the track fails naming both."""
    from benchmarks.common import entries
    from benchmarks.server import SimulatedRooflineServe
    from benchmarks.twin import CAPACITY_SEEDS, SEEDS, TwinCapacity, TwinHighKV
    from dpbench.core.asvcache import setting_key

    old = Slo(ttft_ms=2000, tpot_ms=100)
    setting = ("long-prompt-burst", 4, "default", "on")
    for slo, ok in ((Slo(), True), (old, False)):
        cache = {setting_key(*setting, s): _judged(slo, goodput_requests_per_s=1.5) for s in SEEDS}
        bench = TwinHighKV()
        bench.setup(cache, *setting)
        if ok:
            assert bench.track_goodput_requests_per_s()["samples"] == [1.5] * len(SEEDS)
            continue
        with pytest.raises(ValueError, match=r"names TTFT ≤ 5 s .* judged by TTFT ≤ 2 s"):
            bench.track_goodput_requests_per_s()
    sim = SimulatedRooflineServe()
    sim.runs, sim.delayer = [_judged(old, goodput_requests_per_s=1.0)], "on"
    with pytest.raises(ValueError, match="judged by TTFT ≤ 2 s and TPOT ≤ 100 ms"):
        sim.track_goodput_requests_per_s()
    assert sim.track_ttft_ms_p50 and math.isnan(sim.read(sim.table["device_idle_fraction"]))
    search = {"rows": [{"seed": 0, "bound": "bracket", "capacity": 0.3}], "wall_s": 2.0}
    cache = {setting_key(4, s): {**search, "slo": asdict(old)} for s in CAPACITY_SEEDS}
    cap = TwinCapacity()
    cap.setup(cache, 4)
    with pytest.raises(ValueError, match="judged by TTFT ≤ 2 s"):
        cap.track_capacity_at_slo()
    assert cap.track_capacity_search_wall_s() == 2.0 * len(CAPACITY_SEEDS)
    assert entries(cache, (4,), [0])[0]["wall_s"] == 2.0


def test_asv_discovery_records_the_slo_in_every_slo_unit():
    """asv's own discovery (what ``asv run`` writes to benchmarks.json, which the dashboard and
    ``dpbench compare`` read their labels from): the same 256 benchmarks (238 before SimulatedVirtualHeadline's 18 tracks), each SLO unit naming
    the one SLO, each SLO-judged track's version naming it too."""
    from asv_runner.discovery import list_benchmarks

    fp = io.StringIO()
    list_benchmarks(str(BENCHMARKS), fp)
    found = {b["name"]: b for b in json.loads(fp.getvalue())}
    assert len(found) == 256
    judged = [b for n, b in found.items() if n.rsplit("track_", 1)[-1] in SLO_METRICS]
    assert len(judged) == 13  # 11 goodputs, TwinLoad's attainment, TwinCapacity's capacity
    for b in judged:
        assert Slo().label in b["unit"], b["name"]
        assert b["version"].endswith(f"+slo-{Slo().ttft_ms:g}-{Slo().tpot_ms:g}"), b["name"]
    stating = [b for b in found.values() if STATES_SLO.search(b.get("unit") or "")]
    assert sorted(b["name"] for b in stating) == sorted(b["name"] for b in judged)


def test_slo_labels_read_as_people_write_durations():
    assert Slo().label == "TTFT ≤ 5 s and TPOT ≤ 250 ms"
    assert Slo(ttft_ms=1500, tpot_ms=100).label == "TTFT ≤ 1.5 s and TPOT ≤ 100 ms"
    assert Slo().goodput_unit == "req/s meeting TTFT ≤ 5 s and TPOT ≤ 250 ms"


def test_run_results_record_the_slo_they_were_judged_by():
    """The goodput and attainment metrics of a run carry the SLO in their unit."""
    from dpbench.metrics.latency import RequestLatency, latency_metrics

    slo = Slo(ttft_ms=800, tpot_ms=500)
    m = latency_metrics([RequestLatency(0.5, 1.0, [0.5], 2)], 2.0, slo)
    assert m["goodput_requests_per_s"].unit == "req/s meeting TTFT ≤ 800 ms and TPOT ≤ 500 ms"
    assert slo.label in m["slo_attainment"].unit


# --- the SLO options, from the one definition ----------------------------------------------


@pytest.mark.parametrize("command", [["twin", "capacity"], ["twin", "run"], ["server", "run"]])
def test_every_slo_option_comes_from_the_slo_fields(command):
    from typer.testing import CliRunner

    from dpbench.cli import app

    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"}, color=False)
    assert res.exit_code == 0, res.output
    lines = {ln.split()[0]: ln for ln in res.output.splitlines() if ln.strip().startswith("--")}
    for flag, default in (("--ttft-slo-ms", Slo().ttft_ms), ("--tpot-slo-ms", Slo().tpot_ms)):
        assert f"[default: {default}]" in lines[flag], lines[flag]
        assert f"goodput's {flag[2:6].upper()} SLO, ms" in lines[flag]


def test_a_bad_slo_option_is_a_one_line_usage_error():
    from typer.testing import CliRunner

    from dpbench.cli import app

    res = CliRunner().invoke(
        app, ["twin", "capacity", "x", "--sglang", "0.5.17", "--ttft-slo-ms", "0"]
    )
    assert res.exit_code == 2
    assert "SLOs must be > 0 ms" in res.output
