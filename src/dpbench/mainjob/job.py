"""`dpbench bench` (what `make bench` runs): the CPU tiers over SGLang releases, published.

Builds the release history (every known release, :mod:`dpbench.mainjob.releases`), then chooses
what to run on which commit:

1. the placement tier over every selected release;
2. the twin over up to four of them, chosen from step 1's own results: the first release
   labelled ``early``, the last ``early`` one before the first ``post-kv`` (the before/after
   pair of the placement change), the first labelled ``post-kv``, and the newest;
3. SGLang's real scheduler at the headline's scale (``server.SimulatedVirtualHeadline``: the
   simulated-forward server in virtual time on the full ``long-prompt-burst``, DP 4 and 8,
   chunk 8192, three workload seeds, one start-up each) over the before/after pair only;
4. over the before/after pair only: the twin at the headline settings (``TwinHeadline``, the
   full spec at DP 4/8 × chunk 8192/16384, 5 seeds compared seed by seed), against offered
   load and its capacity at SLO (``TwinLoad``, ``TwinCapacity``), and on production traffic
   (``TwinProductionTrace``; the simulated server on a window, ``SimulatedProductionTrace``).

asv runs with ``--record-samples``: every seed's value is kept, so comparisons pair seeds.

A change added to the history (:mod:`dpbench.changes`) runs every step its base is picked for.
The changes run after every release's steps, in a phase of their own with the same shape
(placement, the side steps beside the twin steps, the timings), so the releases' runs are
those of a job without changes and what the changes add is that phase's wall time: their
environments (built like their bases') and their benchmarks. By default every added change
runs; naming versions selects among releases and changes, and a change needs its base selected.

``--bench REGEX`` replaces that plan by one asv run of REGEX over every selected release (then
one over the selected changes).
Then it publishes asv's site and the dpbench dashboard, and says where everything is.
A failed benchmark never costs the others their results: everything is published
first, then the job exits non-zero naming each failed benchmark. Every step is an
ordinary command a user could run by hand; this only strings them together.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from dpbench.changes import history as change_history
from dpbench.core.paths import project_root
from dpbench.core.procs import alive, descendants
from dpbench.mainjob import plan as mainplan
from dpbench.mainjob import releases

# The default plan (its steps, picks and costs) lives in dpbench.mainjob.plan. The kernel and
# GPU-server benchmarks skip without GPUs anyway; the workload benchmarks measure dpbench
# itself, not SGLang, so they need one commit only:
# `asv run --config asv.releases.json -b workloads HEAD^!`; the twin on production traffic
# at DP 8 runs by hand: `asv run -b TwinProductionTraceDp8`.
PAIR_PICKS = ("last early", "first post-kv")  # the placement change's before/after pair
# the simulated server runs on these of choose_heavy's picks (its start-ups cost ~1 min each)
SERVER_SIM_PICKS = ("last early", "first post-kv", "newest")
console = Console(stderr=True)


# asv walks every folder under results/ for machine.json, including our run files'
# results/runs/<commit>/<tier>/ folders and the simulated server's results/server-logs/<run>/
# folders, and warns once per folder; those lines say nothing.
RUN_FILE_NOISE = re.compile(
    r"Skipping results: could not load .*/(runs/[0-9a-f]+/\w+|server-logs/[^/]+|fidelity)/machine\.json"
)


def _run(
    cmd: list[str],
    *,
    cwd: Path,
    check: bool = True,
    quiet: bool = False,
    drop: re.Pattern[str] | None = None,
    nice: bool = False,
) -> int:
    """Run a step in its own process group, streaming its output; reap it on Ctrl-C.

    ``quiet`` discards its stdout; ``drop`` filters out the stdout lines it matches;
    ``nice``: at the lowest CPU priority (:func:`lowest_priority`).
    """
    console.print(f"[bold cyan]$[/] {' '.join(cmd)}")
    piped = drop is not None
    out = subprocess.DEVNULL if quiet else (subprocess.PIPE if piped else None)
    if nice:
        cmd = ["nice", "-n", "19", *cmd]
    proc = subprocess.Popen(cmd, cwd=cwd, start_new_session=True, stdout=out, text=piped)
    if nice:
        lowest_priority(proc.pid)
    try:
        if piped:
            assert proc.stdout is not None
            for line in proc.stdout:
                if drop is None or not drop.search(line):
                    sys.stdout.write(line)
                    sys.stdout.flush()
        rc = proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    if rc != 0 and check:
        raise typer.Exit(rc)
    return rc


def lowest_priority(pid: int) -> bool:
    """Put the session ``pid`` leads at the lowest CPU priority: with autogroup scheduling
    (Linux's default on desktops and these VMs) each session is one group and groups share the
    CPU equally whatever their processes' nice values, so ``nice`` alone leaves a CPU-bound
    session half the machine. Writing 19 to the session's autogroup gives it a weight of 15
    against a simulated server's 1,024 (measured beside two CPU-bound processes so set:
    the server's run-queue wait 0.29 of its run against 0.17 alone, its decisions the same;
    with nice alone 1.0–2.0, every replay invalid). False where there is no autogroup."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text("19")
    except OSError:
        return False
    return True


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM the step's group (asv then stops its own benchmark processes), then SIGKILL leftovers.

    asv starts benchmarks and installs in process groups of their own, so the whole
    process tree is snapshotted first and anything still alive after the grace period is
    killed by PID.
    """
    tree = descendants(proc.pid)
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if sig == signal.SIGKILL:
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM and not any(alive(p) for p in tree):
            return
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _sigterm_to_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def placement_labels(results: Path, commits: list[str]) -> dict[str, str]:
    """commit → the placement label its placement run file records (commits without one are left out)."""
    found: dict[str, str] = {}
    for sha in commits:
        path = results / "runs" / sha / "placement" / "placement.json"
        if path.is_file():
            label = (json.loads(path.read_text()).get("placement") or {}).get("label")
            if label:
                found[sha] = label
    return found


def choose_heavy(rows: list[tuple[str, str]], labels: dict[str, str]) -> list[tuple[str, str, str]]:
    """[(version, commit, why)]: the first ``early``, the last ``early`` before the first
    ``post-kv`` (the "before" of the placement change, the pair users compare), the first
    ``post-kv`` and the newest release of ``rows``."""
    why: dict[str, list[str]] = {}  # commit → reasons, a release chosen twice says both
    version = dict((c, v) for v, c in rows)
    for want in ("early", "post-kv"):
        hit = next((c for _, c in rows if labels.get(c) == want), None)
        if hit is not None:
            why.setdefault(hit, []).append(f"first {want}")
    first_post = next((i for i, (_, c) in enumerate(rows) if labels.get(c) == "post-kv"), None)
    if first_post is not None:
        before = [c for _, c in rows[:first_post] if labels.get(c) == "early"]
        if before:
            why.setdefault(before[-1], []).append("last early")
    if rows:
        why.setdefault(rows[-1][1], []).append("newest")
    chosen = {c: (version[c], c, ", ".join(reasons)) for c, reasons in why.items()}
    return sorted(chosen.values(), key=lambda t: [c for _, c in rows].index(t[1]))


def server_sim_releases(heavy: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The picks of :func:`choose_heavy` the simulated server runs on: the last ``early``,
    the first ``post-kv`` and the newest (a release chosen for two reasons counts once)."""
    return [h for h in heavy if any(p in h[2] for p in SERVER_SIM_PICKS)]


def compare_pair(
    rows: list[tuple[str, str]], labels: dict[str, str]
) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """The pair to suggest comparing: the last ``early`` release and the first ``post-kv``
    one (the placement change); else the first two releases run."""
    first_post = next((i for i, (_, c) in enumerate(rows) if labels.get(c) == "post-kv"), None)
    if first_post:
        before = [r for r in rows[:first_post] if labels.get(r[1]) == "early"]
        if before:
            return before[-1], rows[first_post]
    return (rows[0], rows[1]) if len(rows) > 1 else None


def failed_benchmarks(results_root: Path, commits: list[str], bench: str) -> list[str]:
    """``name (commit)`` of every benchmark matching ``bench`` that asv recorded as failed for one
    of ``commits`` on this machine, read from asv's own result files: a failed parameter
    combination is stored as null (a skip is NaN, a value a number). A benchmark class whose
    ``setup_cache`` raised has all its combinations null, so it is named too."""
    from asv.machine import Machine
    from asv.results import iter_results_for_machine

    pattern = re.compile(bench)
    wanted = set(commits)
    out: list[str] = []
    machine = Machine.get_unique_machine_name()
    if not (results_root / machine).is_dir():
        return out
    for res in iter_results_for_machine(str(results_root), machine):
        if res.commit_hash not in wanted:
            continue
        for name in sorted(res.get_all_result_keys()):
            if not pattern.search(name):
                continue
            values = res._results.get(name)  # asv's stored list, one per parameter combination
            if values is None or any(v is None for v in values):
                out.append(f"{name} ({res.commit_hash[:8]})")
    return out


def _picks(
    selected: list[tuple[str, str]], results_root: Path
) -> dict[str, list[tuple[str, str, str]]]:
    """Each pick rule's releases: every selected one, and those picked from placement's results."""
    heavy = choose_heavy(selected, placement_labels(results_root, [c for _, c in selected]))
    return {
        "every": [(v, c, "selected") for v, c in selected],
        "heavy": heavy,
        "pair": [h for h in heavy if any(p in h[2] for p in PAIR_PICKS)],
        "served": server_sim_releases(heavy),
        "newest": [h for h in heavy if "newest" in h[2]],
    }


def _announce(step: mainplan.Step, chosen: list[tuple[str, str, str]], where: str = "") -> None:
    names = ", ".join(f"{v} ({why})" if why else v for v, _, why in chosen)
    est = mainplan.estimate_s(step, len(chosen))
    console.print(
        f"[bold]{step.title}[/]{where} over {names}"
        + ("" if est is None else f" (expected ~{est / 60:.0f} min)")
    )


def selected_changes(stored: dict[str, Any], asked: list[str]) -> list[tuple[str, str, str]]:
    """[(name, commit, base)] of the asked changes (``stored``: name → the history's
    StoredChange). A change runs where its base runs, so its base must be asked for too."""
    out = [(n, s.commit, s.change.base) for n, s in stored.items() if n in asked]
    for name, _, base in out:
        if base not in asked:
            raise typer.BadParameter(
                f"change {name} is benchmarked where its base runs: select {base} too"
            )
    return out


def changes_of(
    chosen: list[tuple[str, str, str]], changes: list[tuple[str, str, str]]
) -> list[tuple[str, str, str]]:
    """The changes whose base is among a step's chosen releases (the step runs them too)."""
    bases = {v for v, _, _ in chosen}
    return [c for c in changes if c[2] in bases]


def phase_steps(
    steps: list[mainplan.Step],
    picks: dict[str, list[tuple[str, str, str]]],
    changes: list[tuple[str, str, str]],
    of_changes: bool,
) -> list[tuple[mainplan.Step, list[tuple[str, str, str]]]]:
    """What each step runs in one phase of the job, as ``(label, commit, why)``: the releases
    it picks, or (``of_changes``) the changes whose base it picks. Steps with none are left out."""
    out = []
    for step in steps:
        chosen = picks[step.picks]
        if of_changes:
            chosen = [(n, c, f"change on {b}") for n, c, b in changes_of(chosen, changes)]
        if chosen:
            out.append((step, chosen))
    return out


def expected_changes_s(
    steps: list[tuple[mainplan.Step, list[tuple[str, str, str]]]],
    changes: list[tuple[str, str, str]],
) -> float:
    """The changes' phase's expected length: each change's base's share of the steps it runs."""
    return sum(
        mainplan.change_share_s(
            {s.key for s, chosen in steps if any(c == commit for _, c, _ in chosen)}
        )
        for _, commit, _ in changes
    )


def _timed(
    step: mainplan.Step,
    chosen: list[tuple[str, str, str]],
    of_changes: bool,
    rcs: list[int],
    costs: list[mainplan.StepCost],
    run: Any,
) -> None:
    """One step's asv run over ``chosen``, timed into ``costs``."""
    t = time.monotonic()
    rcs.append(run([c for _, c, _ in chosen]))
    costs.append(mainplan.StepCost(step.key, len(chosen), time.monotonic() - t, of_changes))


def cost_lines(costs: list[mainplan.StepCost]) -> list[str]:
    """What each step took, its releases and its changes apart, against the plan's figure."""
    lines = []
    for c in costs:
        step = next((s for s in mainplan.PLAN if s.key == c.key), None)
        ref = None if step is None else mainplan.estimate_s(step, c.releases)
        what = "change(s)" if c.changes else "release(s)"
        lines.append(
            f"{c.key}: {c.wall_s / 60:.1f} min over {c.releases} {what}"
            + ("" if ref is None else f" (expected ~{ref / 60:.0f})")
        )
    return lines


@dataclass
class JobRun:
    """What every asv run of one `dpbench bench` shares, and what it collects: the benchmarks
    its result files record as failed, asv's exit statuses and each step's cost."""

    asv: list[str]
    conf: list[str]
    conf_data: dict[str, Any]
    config: Path
    root: Path
    results_root: Path
    rerun: bool
    failed: list[str] = field(default_factory=list)
    rcs: list[int] = field(default_factory=list)
    costs: list[mainplan.StepCost] = field(default_factory=list)

    def run(
        self,
        step: mainplan.Step,
        chosen: list[tuple[str, str, str]],
        of_changes: bool,
        *,
        conf: list[str] | None = None,
        results_root: Path | None = None,
        failed: list[str] | None = None,
        **kw: Any,
    ) -> None:
        """One timed asv run of ``step`` over ``chosen``: the job's config, results and failed
        list unless given (the side run's); ``kw``: :func:`_asv_run`'s others."""
        _timed(step, chosen, of_changes, self.rcs, self.costs, lambda shas: _asv_run(
            self.asv, conf or self.conf, step.regex, shas, root=self.root, rerun=self.rerun,
            results_root=results_root or self.results_root,
            failed=self.failed if failed is None else failed, **kw))  # fmt: skip


def _default_plan(
    job: JobRun,
    selected: list[tuple[str, str]],
    changes: list[tuple[str, str, str]],
    phases: dict[str, float],
) -> None:
    """The releases' whole plan, then the changes' (each timed into ``phases``): placement,
    then the simulated-server steps in an asv run of their own (dpbench.mainjob.side) while
    the twin steps run niced in the main one, then the timings alone. The changes' phase
    comes last, so what they add to the job is its wall time, and the releases' runs are
    the same as in a job without them."""
    console.print("[bold]plan[/]")
    for line in mainplan.plan_lines(len(selected)) + mainplan.change_lines(
        [(n, b) for n, _, b in changes]
    ):
        console.print(f"  {line}")
    placement, *rest = mainplan.PLAN
    picks: dict[str, list[tuple[str, str, str]]] = {}
    for of_changes in (False, True):
        if of_changes and not changes:
            break
        t = time.monotonic()
        every = [(v, c, "") for v, c in selected]
        first = phase_steps([placement], {"every": every}, changes, of_changes)
        if not of_changes:
            console.print("[bold]the releases[/]")
        else:
            phases["changes_expected"] = expected_changes_s(
                first + phase_steps(rest, picks, changes, True), changes
            )
            console.print(
                "[bold]the changes[/], after every release's steps "
                f"(expected ~{phases['changes_expected'] / 60:.0f} min)"
            )
        for step, chosen in first:
            _announce(step, chosen)
            job.run(step, chosen, of_changes)
        picks = picks or _picks(selected, job.results_root)  # from the releases' placement
        _phase(job, phase_steps(rest, picks, changes, of_changes), of_changes)
        phases["changes" if of_changes else "releases"] = time.monotonic() - t


def _phase(
    job: JobRun, steps: list[tuple[mainplan.Step, list[tuple[str, str, str]]]], of_changes: bool
) -> None:
    """One phase's steps after placement: the side steps in a thread, the twin steps niced
    beside them, then the timings on an otherwise idle machine; the side results merged."""
    from asv.machine import Machine

    from dpbench.mainjob import side as mainside

    machine = Machine.get_unique_machine_name()
    side_root = job.root / mainside.SIDE_RESULTS_DIR
    side_on = ["--config", str(mainside.side_config(job.conf_data, job.config))]
    side_failed: list[str] = []

    def run(step: mainplan.Step, chosen: list[tuple[str, str, str]], **kw: Any) -> None:
        if step.side:
            mainside.seed_side(job.results_root, side_root, machine, [c for _, c, _ in chosen])
            kw.update(conf=side_on, results_root=side_root, failed=side_failed)
        job.run(step, chosen, of_changes, **kw)

    side_steps = [(s, c) for s, c in steps if s.side]
    with _beside(side_steps, run, job.results_root) as worker:
        for step, chosen in steps:
            if not step.side and not step.alone:
                _announce(step, chosen)
                run(step, chosen, nice=worker.is_alive())
        if worker.is_alive():
            console.print("waiting for the simulated-server steps beside")
        while worker.is_alive():
            worker.join(timeout=1.0)  # a short join keeps Ctrl-C deliverable
        for step, chosen in steps:
            if step.alone:  # timings, on a machine nothing else runs on
                _announce(step, chosen)
                run(step, chosen)
    regexes = [s.regex for s, _ in side_steps]
    merged = mainside.merge_side(side_root, job.results_root, machine, regexes)
    console.print(f"simulated-server results merged into {len(merged)} result file(s)")
    job.failed += side_failed


@contextlib.contextmanager
def _beside(
    side_steps: list[tuple[mainplan.Step, list[tuple[str, str, str]]]], run: Any, results_root: Path
) -> Any:
    """The side steps, one after another, in a thread of their own (their asv output to a
    log); on leaving, asv runs still going are killed and the thread joined."""
    import threading

    log = results_root / "server-logs" / f"main-job-side-{int(time.time())}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[Any]] = []
    stop = threading.Event()

    def side() -> None:
        with log.open("w") as out:
            for step, chosen in side_steps:
                if stop.is_set():
                    return
                t = time.monotonic()
                run(step, chosen, log=out, procs=procs)
                console.print(
                    f"[bold]{step.title}[/] (beside) done in {(time.monotonic() - t) / 60:.1f} min"
                )

    for step, chosen in side_steps:
        _announce(step, chosen, " (beside the twin, its own asv run)")
    console.print(f"  its output: {log}")
    worker = threading.Thread(target=side, name="main-job-side", daemon=True)
    worker.start()
    try:
        yield worker
    finally:
        stop.set()
        for proc in procs:
            if proc.poll() is None:
                _kill_group(proc)
        worker.join(timeout=30)


def _asv_run(
    asv: list[str],
    conf: list[str],
    bench: str,
    commits: list[str],
    *,
    root: Path,
    results_root: Path,
    rerun: bool,
    failed: list[str],
    nice: bool = False,
    log: Any = None,
    procs: list[subprocess.Popen[Any]] | None = None,
) -> int:
    """One ``asv run`` of ``bench`` over ``commits`` (a HASHFILE); the benchmarks asv's result
    files record as failed go to ``failed``. ``nice``: at the lowest CPU priority (beside the
    simulated server); ``log``: its output to that file, its process kept in ``procs``."""
    with tempfile.NamedTemporaryFile("w", suffix=".hashes", delete=False) as fh:
        fh.write("\n".join(commits) + "\n")
        hashfile = fh.name
    # --record-samples: asv keeps each benchmark's per-seed values (in seed order), so
    # comparisons pair two commits seed by seed (dpbench.dashboard.compare).
    # forkserver: asv imports the benchmark modules once per commit and forks each of the
    # ~3,400 (benchmark, parameter) runs from there; spawning a fresh interpreter for each
    # cost ~0.4 s against ~0.15 s (80 runs of twin.TwinOnServerScenario on 0.5.23: 42 s
    # against 23 s, same values). The modules import neither torch nor SGLang at the top,
    # so every fork starts clean; the GPU tiers' own runs (README) keep spawn.
    run = [
        *asv,
        "run",
        *conf,
        "--show-stderr",
        "--record-samples",
        "--bench",
        bench,
        "--launch-method",
        "forkserver",
    ]
    if not rerun:
        run.append("--skip-existing-successful")  # failed ones are retried
    cmd = [*run, f"HASHFILE:{hashfile}"]
    try:
        if log is None:
            rc = _run(cmd, cwd=root, check=False, nice=nice)
        else:
            proc = subprocess.Popen(
                cmd, cwd=root, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
            )
            if procs is not None:
                procs.append(proc)
            rc = proc.wait()
    finally:
        os.unlink(hashfile)
    failed += failed_benchmarks(results_root, commits, bench)
    return rc


_VERSIONS_HELP = (
    "SGLang releases to benchmark (default: every known release, "
    + " ".join(releases.KNOWN_VERSIONS)
    + "); a release newer than those is appended to the history"
)


def bench_command(
    versions: list[str] = typer.Argument(None, metavar="VERSIONS", help=_VERSIONS_HELP),
    bench: str = typer.Option(
        None,
        "--bench",
        "-b",
        metavar="REGEX",
        help="asv benchmark regex run over every selected release, instead of the default plan "
        "(placement everywhere; the twin on the first early, last early, first post-kv and newest; "
        "the simulated server on the last early, first post-kv and newest)",
    ),
    rerun: bool = typer.Option(False, help="re-run benchmarks that already have results"),
    config: Path = typer.Option(
        None,
        metavar="FILE",
        help="asv config (default: asv.releases.json); its 'repo' is where the history is built",
    ),
    site_dir: Path = typer.Option(
        None, "--site", metavar="DIR", help="where the dashboard goes (default: dashboard/site)"
    ),
) -> None:
    """The main job: asv over releases, then the dashboard.

    It runs the CPU tiers under asv for each release, then builds asv's site and the
    dashboard."""
    from asv.util import load_json

    # `kill` (or a CI timeout) must stop asv and its benchmarks too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _sigterm_to_exit)
    root = project_root()
    asv = [sys.executable, "-m", "asv"]
    config = (config or root / "asv.releases.json").resolve()
    conf_data = load_json(str(config), js_comments=True)
    history = (config.parent / conf_data["repo"]).resolve()
    results_root = (config.parent / conf_data.get("results_dir", "results")).resolve()
    html_dir = (config.parent / conf_data.get("html_dir", "html")).resolve()
    conf = ["--config", str(config)]
    t0 = time.monotonic()
    asked = versions or list(releases.KNOWN_VERSIONS)
    added = set(change_history.list_names(history))  # a change named is not a new release
    try:
        with console.status("building the SGLang release history"):
            newer = [v for v in asked if v not in releases.KNOWN_VERSIONS and v not in added]
            rows = releases.build(newer, history)
    except releases.ReleasesError as exc:
        raise typer.BadParameter(str(exc)) from exc
    stored = {s.change.name: s for s in change_history.list_changes(history)}
    if not versions:
        asked += list(stored)  # every change added to the history, beside its base
    unknown = [v for v in asked if v not in {r for r, _ in rows} and v not in stored]
    if unknown:
        raise typer.BadParameter(
            f"not in the release history: {unknown}; changes: {sorted(stored) or 'none added'}"
        )
    selected = [(v, c) for v, c in rows if v in set(asked)]
    changes = selected_changes(stored, asked)
    console.print("release history: " + ", ".join(f"{v} ({sha[:8]})" for v, sha in rows))
    if changes:
        console.print("changes: " + ", ".join(f"{n} on {b} ({c[:8]})" for n, c, b in changes))
    _run(
        [*asv, "machine", "--yes", *conf], cwd=root, quiet=True
    )  # its questionnaire, answered by defaults
    failed: list[str] = []
    rcs: list[int] = []
    costs: list[mainplan.StepCost] = []
    phases: dict[str, float] = {}
    commits = [c for _, c in selected]
    if bench:
        for part, shas in (("releases", commits), ("changes", [c for _, c, _ in changes])):
            if not shas:
                continue
            t_part = time.monotonic()
            rcs.append(
                _asv_run(asv, conf, bench, shas, root=root, results_root=results_root,
                         rerun=rerun, failed=failed)
            )  # fmt: skip
            phases[part] = time.monotonic() - t_part
            costs.append(mainplan.StepCost(bench, len(shas), phases[part], part == "changes"))
    else:
        _default_plan(
            JobRun(asv, conf, conf_data, config, root, results_root, rerun, failed, rcs, costs),
            selected,
            changes,
            phases,
        )
    # A failed benchmark must not cost the user the others' results: publish anyway, fail at the end.
    _run([*asv, "publish", *conf], cwd=root, drop=RUN_FILE_NOISE)
    from dpbench.dashboard import build as dashboard_build

    site = dashboard_build.build_site(
        results=results_root,
        out=site_dir or root / "dashboard" / "site",
        history_repo=history,
        asv_html=html_dir,
    )
    elapsed = time.monotonic() - t0
    console.print(f"\n[bold green]done[/] in {elapsed / 60:.1f} min")
    if costs:
        for line in cost_lines(costs) + mainplan.phase_lines(phases):
            console.print(f"  {line}")
        kept = mainplan.write_costs(
            results_root / "mainjob-costs.json", costs, total_s=elapsed, phases=phases
        )
        print(f"costs:      {kept}")
    print(f"results:    {results_root}")
    print(f"asv site:   {html_dir / 'index.html'}")
    print(f"dashboard:  {site}")
    pair = compare_pair(selected, placement_labels(results_root, commits))
    if pair is not None:
        (va, ca), (vb, cb) = pair
        print(f"compare:    .venv/bin/asv compare --config {config.name} {ca[:8]} {cb[:8]}")
        print(f"            .venv/bin/dpbench compare {va} {vb}")
    bad = next((rc for rc in rcs if rc != 0), 0)
    if bad or failed:
        names = ", ".join(dict.fromkeys(failed)) or "(asv named none; see its output above)"
        console.print(f"[bold red]failed benchmarks: {names}[/] (asv run exited with status {bad})")
        raise typer.Exit(bad or 1)
