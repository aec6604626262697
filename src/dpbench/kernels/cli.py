"""`dpbench kernels …`: time SGLang's Triton MLA attention and write the twin's calibration file.

GPU check on a machine with torch and triton but no SGLang install and no registry:
where a registry is reachable, ``dpbench kernels wheels --dest .whl/kernels`` downloads
SGLang's release wheels (into ``.whl/kernels/sglang/``) and the few wheels its kernel
modules and dpbench import that such a machine lacks (for Python 3.12); carry that
folder, install the small ones with ``pip install --no-index --no-deps --target``, and::

    PYTHONPATH=/tmp/site:src python3 -m dpbench.kernels.cli check \
        --sglang-wheel .whl/kernels/sglang/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl -o $OUT/kcheck

``--sglang-wheel`` unzips the wheel's Python files into a temp folder and puts them first
on ``sys.path``: the wheel is tagged cp311, so pip refuses it on another Python, and the
Triton kernels are pure Python. Where importing the ``sglang`` package needs more than is
there, the kernels load as kernel modules only (``dpbench.sglang_compat.kernels``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Annotated, Any

import typer

from dpbench.core.cli_help import Typer, choices
from dpbench.core.progress import console, interactive, progress
from dpbench.kernels.cases import SWEEPS
from dpbench.sglang_compat.source import sglang_installed

app = Typer(
    help="Time SGLang's Triton MLA kernels; write a calibration.\n\n"
    "It times decode, extend and mixed attention; the twin's cost model reads the file.",
    add_completion=False,
    pretty_exceptions_enable=False,
)

SWEEP_HELP = "which cases (tiny: for Triton's interpreter on a CPU)"
KERNELS_IMPORT = ("auto", "package", "kernel-modules-only")


def _enable_interpreter() -> None:
    """TRITON_INTERPRET must be set before triton is imported; say so if it is too late."""
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise typer.BadParameter(
            "--interpreter: triton is already imported without TRITON_INTERPRET=1; "
            "set TRITON_INTERPRET=1 in the environment instead"
        )
    os.environ["TRITON_INTERPRET"] = "1"


def use_sglang_wheel(wheel: Path, dest: Path | None = None) -> Path:
    """Unzip the wheel's Python files (and its .dist-info) and import SGLang from there.

    ``dest`` defaults to a folder in the system temp dir named after the wheel.
    """
    if not wheel.is_file() or wheel.suffix != ".whl":
        raise typer.BadParameter(f"--sglang-wheel: {wheel} is not a .whl file")
    site = dest or Path(tempfile.gettempdir()) / f"dpbench-site-{wheel.stem}"
    site.mkdir(parents=True, exist_ok=True)
    marker = site / f".{wheel.name}.unpacked"
    if not marker.exists():
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.endswith(".py") or ".dist-info/" in m]
            zf.extractall(site, members=members)
        marker.write_text("ok\n")
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    return site


def _stdout() -> Any:
    """A console on stdout, wide enough for the table where stdout is not a terminal (logs, $OUT)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def _table(
    points: list[dict[str, Any]], failures: list[dict[str, Any]], skipped: list[str], title: str
) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in (
        "case",
        "median µs",
        "p20–p80 µs",
        "GB/s",
        "% copy BW",
        "TFLOP/s",
        "% matmul",
        "rel err",
    ):
        table.add_column(col, justify="left" if col == "case" else "right")
    for p in points:
        q = p["quantiles_s"]
        table.add_row(
            p["case"],
            f"{p['median_s'] * 1e6:.1f}",
            f"{q.get('p20', 0) * 1e6:.1f}–{q.get('p80', 0) * 1e6:.1f}",
            f"{p['bandwidth_bytes_per_s'] / 1e9:.1f}",
            f"{100 * p['copy_bandwidth_fraction']:.1f}",
            f"{p['flops_per_s'] / 1e12:.2f}",
            f"{100 * p['matmul_rate_fraction']:.1f}",
            f"{p['rel_error']:.1e}",
        )
    for f in failures:
        table.add_row(f["case"], "WRONG", "", "", "", "", "", f["reason"][:60])
    for s in skipped:
        table.add_row(s, "skipped", "", "", "", "", "", "")
    return table


def _run(
    sweep_name: str,
    output: Path,
    *,
    interpreter: bool,
    attn_tp_size: int,
    dtype: str,
    seed: int,
    warmup_ms: float,
    rep_ms: float,
    budget_s: float | None,
    kernels_import: str,
    log_lines: list[str] | None = None,
) -> tuple[dict[str, Any], Any]:
    if interpreter:
        _enable_interpreter()
    from dpbench.kernels.calibration import save_calibration
    from dpbench.kernels.run import run_sweep

    device = "cpu" if interpreter else "cuda"
    log = log_lines if log_lines is not None else []
    with progress() as bar:
        task = bar.add_task("kernel cases", total=None)

        def on_start(cases: list[Any]) -> None:
            bar.update(task, total=len(cases))

        def on_case(case: Any, rec: dict[str, Any]) -> None:
            if rec["status"] == "ok":
                p = rec["point"]
                line = (
                    f"ok      {case.name}: median {p['median_s'] * 1e6:.1f} µs, "
                    f"{p['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s ({100 * p['copy_bandwidth_fraction']:.1f}% of copy), "
                    f"rel err {p['rel_error']:.2e}, {p['timing']['method']}, {p['timing']['cache']}"
                )
            elif rec["status"] == "failed":
                line = f"WRONG   {case.name}: {rec['failure']['reason']}"
            else:
                line = f"skipped {case.name}: {rec['reason']}"
            log.append(line)
            if interactive():
                bar.console.log(line)
            else:
                print(line, file=sys.stderr, flush=True)
            bar.advance(task)

        try:
            calib, outcome = run_sweep(
                sweep_name,
                device=device,
                attn_tp_size=attn_tp_size,
                dtype=dtype,
                seed=seed,
                warmup_ms=warmup_ms,
                rep_ms=rep_ms,
                deadline_s=budget_s,
                kernels_mode=kernels_import,
                on_case=on_case,
                on_start=on_start,
            )
        except (
            ImportError,
            RuntimeError,
        ) as exc:  # no SGLang, no GPU, unsupported kernel signatures
            log.append(f"cannot run: {exc}")
            console().print(f"dpbench kernels: {exc}")
            raise typer.Exit(2) from None
    if calib["points"]:
        save_calibration(output, calib)
        log.append(f"wrote {output}")
    else:
        log.append(f"no case passed its check; {output} not written")
    return calib, outcome


@app.command()
def run(
    output: Annotated[
        Path, typer.Option("-o", "--output", metavar="FILE", help="calibration JSON to write")
    ] = Path("calib.json"),
    quick: Annotated[
        bool, typer.Option("--quick", help="the quick sweep (same as --sweep quick)")
    ] = False,
    sweep_name: Annotated[
        str, typer.Option("--sweep", metavar=choices(SWEEPS), help=SWEEP_HELP)
    ] = "full",
    interpreter: Annotated[
        bool,
        typer.Option(
            "--interpreter",
            help="run on the CPU under Triton's interpreter (marks the file interpreter=true)",
        ),
    ] = False,
    attn_tp_size: Annotated[
        int, typer.Option(help="attention TP size per DP rank (tp/dp); 1 = DP attention, 128 heads")
    ] = 1,
    dtype: Annotated[
        str,
        typer.Option(
            metavar="DTYPE",
            help="bfloat16 (GPU); float32 under the interpreter, whose bf16 is wrong on CPUs",
        ),
    ] = "",
    seed: int = 0,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    budget_s: Annotated[
        float, typer.Option(help="stop starting new cases after this many seconds (0: none)")
    ] = 0.0,
    kernels_import: Annotated[
        str,
        typer.Option(
            metavar=choices(KERNELS_IMPORT), help="import SGLang's package or its kernel modules"
        ),
    ] = "auto",
    sglang_wheel: Annotated[
        Path | None,
        typer.Option(
            metavar="WHEEL", help="SGLang .whl to import from when SGLang is not installed"
        ),
    ] = None,
) -> None:
    """Check and time every case; write the calibration file.

    Each case is checked against a reference before it is timed."""
    from dpbench.kernels.cases import SWEEPS

    if sglang_wheel is not None and not sglang_installed():
        use_sglang_wheel(sglang_wheel)

    name = "quick" if quick else sweep_name
    if name not in SWEEPS:
        raise typer.BadParameter(
            f"--sweep is {name!r}; allowed: {', '.join(SWEEPS)}", param_hint="--sweep"
        )
    dt = dtype or ("float32" if interpreter else "bfloat16")
    calib, outcome = _run(
        name,
        output,
        interpreter=interpreter,
        attn_tp_size=attn_tp_size,
        dtype=dt,
        seed=seed,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        budget_s=budget_s or None,
        kernels_import=kernels_import,
    )
    title = f"{calib['device']} · SGLang {calib['sglang_version']} · sweep {name}"
    _stdout().print(
        _table(outcome.points, outcome.failures, [s["case"] for s in outcome.skipped], title)
    )
    if outcome.failures or not outcome.points:
        raise typer.Exit(1)


@app.command()
def check(
    out_dir: Annotated[
        Path,
        typer.Option(
            "-o", "--out-dir", help="folder for calibration.json, check.log, run-result.json"
        ),
    ] = Path("kernels-check"),
    sglang_wheel: Annotated[
        Path | None,
        typer.Option(
            metavar="WHEEL",
            help="SGLang .whl to import from (its Python files unzipped into a temp folder) when SGLang is not installed",
        ),
    ] = None,
    budget_s: Annotated[
        float, typer.Option(help="stop starting new cases after this many seconds")
    ] = 360.0,
    attn_tp_size: int = 1,
    seed: int = 0,
) -> None:
    """The single-GPU check: correctness, timing, calibration.

    It checks every case, times a reduced sweep, writes the calibration and a log, and prints
    a table last."""
    t0 = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    if sglang_wheel is not None and not sglang_installed():
        site = use_sglang_wheel(sglang_wheel)
        log.append(f"SGLang imported from {sglang_wheel.name}, unzipped into {site}")
    import torch

    if not torch.cuda.is_available():
        console().print(
            "dpbench kernels check needs a CUDA GPU; torch sees none. "
            "On a CPU: `dpbench kernels run --interpreter --sweep tiny`."
        )
        raise typer.Exit(2)
    log.append(
        f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"triton {importlib.import_module('triton').__version__}"
    )
    calib_path = out_dir / "calibration.json"
    try:
        calib, outcome = _run(
            "check",
            calib_path,
            interpreter=False,
            attn_tp_size=attn_tp_size,
            dtype="bfloat16",
            seed=seed,
            warmup_ms=25.0,
            rep_ms=100.0,
            budget_s=budget_s,
            kernels_import="auto",
            log_lines=log,
        )
    finally:
        (out_dir / "check.log").write_text("\n".join(log) + "\n")
    c = calib["ceilings"]
    log.append(
        f"ceilings: copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul {c['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s"
    )
    _write_run_result(out_dir / "run-result.json", calib, outcome, time.perf_counter() - t0)
    log.append(f"wall {time.perf_counter() - t0:.0f} s")
    (out_dir / "check.log").write_text("\n".join(log) + "\n")
    title = (
        f"{calib['device']} · SGLang {calib['sglang_version']} ({calib['import_path']}) · "
        f"copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s · matmul {c['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s"
    )
    _stdout().print(
        _table(outcome.points, outcome.failures, [s["case"] for s in outcome.skipped], title)
    )
    if outcome.failures or not outcome.points:
        raise typer.Exit(1)


def _write_run_result(path: Path, calib: dict[str, Any], outcome: Any, wall_s: float) -> None:
    from dpbench.core.results import Metric, make_run_result, save

    metrics = {
        "copy_bandwidth_bytes_per_s": Metric(
            calib["ceilings"]["copy_bytes_per_s"], "B/s", "higher"
        ),
        "matmul_flops_per_s": Metric(calib["ceilings"]["matmul_flops_per_s"], "FLOP/s", "higher"),
        "cases_wrong_count": Metric(float(len(outcome.failures)), "count", "lower"),
    }
    for p in outcome.points:
        metrics[f"{p['case']}_median_us"] = Metric(p["median_s"] * 1e6, "us", "lower")
        metrics[f"{p['case']}_copy_bw_fraction"] = Metric(
            p["copy_bandwidth_fraction"], "fraction", "higher"
        )
    from dpbench.sglang_compat.provenance import provenance

    result = make_run_result(
        tier="kernels",
        # the kernel tier drives no scheduler: no API generation compared; placement read statically
        **provenance(()),
        metrics=metrics,
        wall_time_s=wall_s,
        notes=list(calib["notes"]),
        extra={"calibration": calib},
    )
    save(path, result)


# What a GPU machine with torch+triton (the device image: Python 3.12, with numpy, psutil,
# requests, packaging, anyio, typer, rich, pyyaml) lacks for the check: SGLang's kernel
# imports and dpbench's pydantic, pinned to what dpbench is tested with.
CARRIED = (
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "typing-inspection",
    "annotated-types",
    "typing_extensions",
    "orjson",
    "pybase64",
    "starlette",
    "msgspec",
    "pyzmq",
)
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


@app.command()
def wheels(
    dest: Annotated[
        Path,
        typer.Option(
            metavar="DIR", help="folder to fill (ignored by git; name it in the device run's carry)"
        ),
    ] = Path(".whl/kernels"),
    sglang: Annotated[
        list[str] | None,
        typer.Option(help="SGLang release(s) whose wheel to bring (default: 0.5.23 0.5.16)"),
    ] = None,
    python_version: Annotated[
        str, typer.Option(metavar="X.Y", help="the GPU machine's Python")
    ] = "3.12",
) -> None:
    """Download the wheels `check` needs on an offline machine.

    Run it where a package registry is reachable, then carry the folder."""
    import subprocess

    sglang = sglang or ["0.5.23", "0.5.16"]
    base = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmds = [[*base, "-d", str(dest / "sglang"), f"sglang=={v}"] for v in sglang]
    plat = [x for p in PLATFORMS for x in ("--platform", p)]
    cmds.append(
        [
            *base,
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *plat,
            "-d",
            str(dest),
            *CARRIED,
        ]
    )
    for cmd in cmds:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            console().print(
                f"pip download failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-1500:]}"
            )
            raise typer.Exit(2)
    got = sorted(p.name for p in dest.rglob("*.whl"))
    total = sum(p.stat().st_size for p in dest.rglob("*.whl"))
    console().print(f"{len(got)} wheels, {total / 2**20:.1f} MiB in {dest}:\n  " + "\n  ".join(got))


@app.command()
def show(
    path: Annotated[Path, typer.Argument(metavar="FILE", help="a calibration JSON file")],
    allow_interpreter: Annotated[
        bool, typer.Option(help="also show interpreter-mode (CPU) files")
    ] = False,
) -> None:
    """Print a calibration file's measured cases."""
    from dpbench.kernels.calibration import (
        CalibrationError,
        InterpreterCalibrationError,
        load_calibration,
    )

    try:
        cal = load_calibration(path, allow_interpreter=allow_interpreter)
    except CalibrationError as exc:
        hint = (
            " (here: --allow-interpreter)" if isinstance(exc, InterpreterCalibrationError) else ""
        )
        console().print(f"{exc}{hint}")
        raise typer.Exit(2) from None
    points = [p.model_dump() for p in cal.data.points]
    title = f"{cal.device} · SGLang {cal.sglang_version}" + (
        " · INTERPRETER (CPU)" if cal.interpreter else ""
    )
    _stdout().print(_table(points, cal.data.failures, [], title))


if __name__ == "__main__":
    app()
