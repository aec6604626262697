"""Read what the suite wrote: asv's results tree, dpbench run files, and the commit history.

Everything here tolerates damage: a file that is not JSON, is cut short, or is some
other program's JSON is recorded as a :class:`Problem` (path + reason) and skipped,
so one bad file never stops the dashboard from building.
"""

from __future__ import annotations

import json
import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpbench.changes.history import BRANCH_PREFIX
from dpbench.core import results as run_results

ASV_RESULTS_API = 2  # asv 0.6's results/<machine>/<commit>-<env>.json (result_columns)
ASV_SKIP_FILES = {"machine.json", "benchmarks.json"}
# results/ folders that are not asv machines: dpbench run files, `dpbench server fidelity`'s
# reports and runs, the simulated server's logs
NOT_MACHINES = {"runs", "fidelity", "server-logs"}


@dataclass(frozen=True)
class Problem:
    """A results file the dashboard skipped, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class AsvValue:
    """One benchmark × parameter combination measured on one commit, machine and environment."""

    benchmark: str
    params: tuple[str, ...]  # one string per parameter (asv's repr), () when unparametrised
    value: float
    ci_low: float | None  # the noise band: see :func:`_band` for which of asv's statistics
    ci_high: float | None
    repeats: int | None
    band: str | None = None  # "99% CI" | "IQR" | "sample range" | None (no spread recorded)
    # the per-seed values in the order the benchmark returned them (asv keeps them with
    # `asv run --record-samples`), and the benchmark version that fixes which seeds they are
    samples: tuple[float | None, ...] | None = None
    version: str | None = None


@dataclass(frozen=True)
class AsvRun:
    """One asv results file: a commit measured on one machine in one environment."""

    path: str
    machine: str
    env: str
    commit: str
    date_ms: int | None
    values: tuple[AsvValue, ...]


@dataclass(frozen=True)
class RunFile:
    """One dpbench run result filed under results/runs/<commit>/<tier>/<name>.json."""

    path: str
    commit: str
    tier: str
    name: str
    data: dict[str, Any]

    @property
    def host(self) -> str:
        return str((self.data.get("hardware") or {}).get("host") or "unknown host")

    @property
    def placement_label(self) -> str | None:
        placement = self.data.get("placement")
        if isinstance(placement, dict) and isinstance(placement.get("label"), str):
            return placement["label"]
        return None


@dataclass(frozen=True)
class FidelityReport:
    """One ``dpbench server fidelity`` report (results/fidelity/<setting>.json): the twin
    replaying each server run's arrivals, paired with those runs."""

    path: str
    data: dict[str, Any]


@dataclass
class Loaded:
    """Everything read from one results directory."""

    benchmarks: dict[str, dict[str, Any]] = field(default_factory=dict)  # asv benchmarks.json
    machines: dict[str, dict[str, Any]] = field(default_factory=dict)  # asv machine.json by name
    asv_runs: list[AsvRun] = field(default_factory=list)
    run_files: list[RunFile] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    fidelity_reports: list[FidelityReport] = field(default_factory=list)


def _read_json(path: Path, problems: list[Problem]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        problems.append(Problem(str(path), f"not UTF-8 text ({exc.reason})"))
    except json.JSONDecodeError as exc:
        problems.append(Problem(str(path), f"not valid JSON (line {exc.lineno}: {exc.msg})"))
    except OSError as exc:
        problems.append(Problem(str(path), f"unreadable ({exc.strerror})"))
    return None


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def _load_asv_file(path: Path, machine: str) -> AsvRun:
    """Parse one results file with asv's own loader; raise ValueError saying what is wrong."""
    from asv import util
    from asv.results import Results

    try:
        res = Results.load(str(path), machine_name=machine)
    except util.UserError as exc:
        raise ValueError(
            str(exc).replace(str(path), "").strip(" :'") or "asv could not load it"
        ) from exc
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"not an asv results file ({type(exc).__name__}: {exc})") from exc
    values: list[AsvValue] = []
    for key in res.get_all_result_keys():
        raw = res.get_result_value(key, res.get_result_params(key) or [])
        params = res.get_result_params(key) or []
        stats = res._stats.get(key) or []  # asv keeps per-combination stats here; no public getter
        samples = res._samples.get(key) or []
        combos = _param_combinations(params)
        if not isinstance(raw, list):
            raw = [raw]
        for i, value in enumerate(raw):
            v = _finite(value)
            if v is None:  # asv stores a skipped, failed or unmeasured combination as null / NaN
                continue
            st = stats[i] if i < len(stats) and isinstance(stats[i], dict) else {}
            smp = samples[i] if i < len(samples) and isinstance(samples[i], list) else []
            lo, hi, band = _band(st, smp)
            repeats = st.get("repeat")
            per_seed = tuple(_finite(x) for x in smp) if len(smp) >= 2 else None
            values.append(
                AsvValue(
                    benchmark=key,
                    params=combos[i] if i < len(combos) else (),
                    value=v,
                    ci_low=lo,
                    ci_high=hi,
                    repeats=int(repeats) if isinstance(repeats, int | float) else None,
                    band=band,
                    samples=per_seed,
                    version=res.benchmark_version.get(key) if per_seed else None,
                )
            )
    date = res.date
    return AsvRun(
        path=str(path),
        machine=machine,
        env=res.env_name,
        commit=res.commit_hash,
        date_ms=int(date) if isinstance(date, int | float) else None,
        values=tuple(values),
    )


def _band(
    stats: dict[str, Any], samples: list[Any]
) -> tuple[float | None, float | None, str | None]:
    """The spread asv recorded for one value, best first: its 99 % CI (from repeats), the
    inter-quartile range, else the range of the recorded samples (e.g. one per seed)."""
    a, b = _finite(stats.get("ci_99_a")), _finite(stats.get("ci_99_b"))
    if a is not None and b is not None:
        return a, b, "99% CI"
    q1, q3 = _finite(stats.get("q_25")), _finite(stats.get("q_75"))
    if q1 is not None and q3 is not None and stats.get("repeat", 2) != 1:
        return q1, q3, "IQR"
    finite = [x for x in (_finite(v) for v in samples) if x is not None]
    if len(finite) >= 2:
        return min(finite), max(finite), "sample range"
    return None, None, None


def _param_combinations(params: list[list[str]]) -> list[tuple[str, ...]]:
    """asv orders a parametrised result as the cartesian product of its params, first varying slowest."""
    import itertools

    if not params:
        return [()]
    return [tuple(str(p) for p in combo) for combo in itertools.product(*params)]


def _load_asv(results: Path, out: Loaded) -> None:
    bench_path = results / "benchmarks.json"
    if bench_path.exists():
        data = _read_json(bench_path, out.problems)
        if isinstance(data, dict):
            out.benchmarks = {
                k: v for k, v in data.items() if k != "version" and isinstance(v, dict)
            }
        elif data is not None:
            out.problems.append(
                Problem(str(bench_path), "not asv's benchmarks.json (expected an object)")
            )
    for machine_dir in sorted(
        p for p in results.iterdir() if p.is_dir() and p.name not in NOT_MACHINES
    ):
        machine_json = machine_dir / "machine.json"
        files = sorted(p for p in machine_dir.glob("*.json") if p.name not in ASV_SKIP_FILES)
        if not machine_json.exists():
            for f in files:
                out.problems.append(
                    Problem(str(f), f"no machine.json beside it in {machine_dir.name}/")
                )
            continue
        info = _read_json(machine_json, out.problems)
        if not isinstance(info, dict) or not isinstance(info.get("machine"), str):
            if info is not None:
                out.problems.append(
                    Problem(str(machine_json), "not asv's machine.json (no 'machine' name)")
                )
            for f in files:
                out.problems.append(
                    Problem(str(f), f"skipped: {machine_json.name} of its machine is unusable")
                )
            continue
        machine = info["machine"]
        out.machines[machine] = info
        for f in files:
            data = _read_json(f, out.problems)
            if data is None:
                continue
            if (
                not isinstance(data, dict)
                or data.get("version") != ASV_RESULTS_API
                or "result_columns" not in data
            ):
                found = data.get("version") if isinstance(data, dict) else type(data).__name__
                out.problems.append(
                    Problem(
                        str(f),
                        f"not an asv {ASV_RESULTS_API} results file (found version {found!r})",
                    )
                )
                continue
            try:
                out.asv_runs.append(_load_asv_file(f, machine))
            except ValueError as exc:
                out.problems.append(Problem(str(f), str(exc)))


def _load_runs(results: Path, out: Loaded) -> None:
    runs = results / "runs"
    if not runs.is_dir():
        return
    for path in sorted(runs.glob("*/*/*.json")):
        commit, tier = path.parent.parent.name, path.parent.name
        data = _read_json(path, out.problems)
        if data is None:
            continue
        try:
            run_results.validate(data, source=str(path))
        except run_results.RunResultError as exc:
            out.problems.append(Problem(str(path), str(exc).removeprefix(f"{path}: ")))
            continue
        if data["tier"] != tier:
            out.problems.append(Problem(str(path), f"tier {data['tier']!r} filed under {tier}/"))
            continue
        out.run_files.append(RunFile(str(path), commit, tier, path.stem, data))


def _load_fidelity(results: Path, out: Loaded) -> None:
    """The reports of ``dpbench server fidelity`` (its server runs and twin results beside
    them are run results, read by the report, not here)."""
    where = results / "fidelity"
    if not where.is_dir():
        return
    for path in sorted(where.glob("*.json")):
        if path.name.endswith(".job.json"):
            continue
        data = _read_json(path, out.problems)
        if not isinstance(data, dict) or "tier" in data:  # unreadable, or a run result
            continue
        if not isinstance(data.get("inputs"), dict) or not isinstance(data.get("rows"), list):
            out.problems.append(
                Problem(str(path), "not a `dpbench server fidelity` report (no inputs / rows)")
            )
            continue
        out.fidelity_reports.append(FidelityReport(str(path), data))


def load_results(results: Path) -> Loaded:
    """Read asv's results (via asv's loader) and the run files under ``results``."""
    out = Loaded()
    results = Path(results)
    if not results.is_dir():
        raise FileNotFoundError(
            f"results directory {results} does not exist; run `asv run` (or `make bench`) first"
        )
    _load_asv(results, out)
    _load_runs(results, out)
    _load_fidelity(results, out)
    return out


def read_history(repo: Path | None) -> list[dict[str, str]]:
    """[{commit, date, subject, branch}] of a git repository's checked-out branch, oldest first.

    Works for the release history `dpbench releases` builds and for an SGLang clone; a
    missing repository gives [] (the dashboard then orders commits by asv's dates). The
    history's changes (branches ``change/NAME``, tagged NAME) come in date order, each just
    after its base.
    """
    if repo is None or not (Path(repo) / ".git").exists():
        return []

    def git(*args: str) -> str:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60
        )
        if proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
        return proc.stdout

    branch = git("rev-parse", "--abbrev-ref", "HEAD").strip()
    tags: dict[str, list[str]] = {}
    for line in git("tag", "--format=%(objectname) %(*objectname) %(refname:short)").splitlines():
        obj, peeled, name = [*line.split(" "), "", ""][:3]
        tags.setdefault(peeled or obj, []).append(name)
    # changes (dpbench.changes): a commit on branch change/NAME, dated just after its base
    on_change = {
        sha: ref
        for sha, ref in (
            ln.split(" ", 1)
            for ln in git("for-each-ref", "--format=%(objectname) %(refname:short)", BRANCH_PREFIX)
            .strip()
            .splitlines()
        )
    }
    rows = []
    log = git("log", "--reverse", "--date-order", "--format=%H%x09%cI%x09%s", "HEAD", *on_change)
    for line in log.splitlines():
        sha, date, subject = line.split("\t", 2)
        rows.append(
            {
                "commit": sha,
                "date": date,
                "subject": subject,
                "branch": on_change.get(sha, branch),
                "tags": sorted(tags.get(sha, [])),
            }
        )
    return rows
