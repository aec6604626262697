"""Build, reuse and run code inside per-release SGLang environments."""

from __future__ import annotations

import fcntl
import fnmatch
import functools
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dpbench.core.atomic import atomic_open, write_json
from dpbench.core.paths import cache_dir, project_root
from dpbench.envs.pins import (
    TORCH_PAIR,
    cpu_requirements,
    cpu_requirements_for,
    server_requirements,
)

# Bump when what an environment holds changes, so stale environments are rebuilt.
ENV_LAYOUT_VERSION = 3


class EnvError(RuntimeError):
    """A release environment could not be built or used."""


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock (parallel asv environments, parallel tests)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _pip(python: str | Path, *args: str, quiet: bool = True) -> None:
    """``pip install ARGS`` into ``python``'s environment, done by uv (``uv pip install``): the
    same resolution from the same indexes as pip's configuration names, at a fraction of its
    time (a release environment's CPU imports: 27 s with pip, ~3 s with uv). Files are hard
    links into uv's cache (``.cache/uv``), as a change's environment links its base's: nothing
    writes an installed file in place (the overlay, bytecode and stamps replace theirs), and
    the torch base and three environments then hold their files once (8.7 GB of cache beside
    them when copied).
    No bytecode here: :func:`compile_bytecode` writes the environment's once, at the end."""
    from uv import find_uv_bin

    # best-match: pip's rule (the best version over every index), not uv's first index to list it
    cmd = [find_uv_bin(), "pip", "install", "--python", str(python), "--link-mode", "hardlink",
           "--index-strategy", "unsafe-best-match"]  # fmt: skip
    if quiet:
        cmd.append("-q")
    cmd += [*_pip_config_args(), *args]
    if "--target" not in args:  # an environment: torch and its GPU wheels come from the base
        cmd += ["--overrides", str(_base_overrides())]
    env = {**os.environ, "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(cache_dir() / "uv"))}
    cert = _pip_config().get("cert")
    if cert and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = cert
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise EnvError(
            f"uv pip install failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )


# The torch base's GPU-sized distributions (``torch_base``, linked into every environment by
# a .pth file): pip saw them there and installed none again; uv looks only at an environment's
# own site-packages, so it is told they are not wanted (an override whose marker never holds).
# pip installed nothing else of the base into an environment either (2026-12-06).
BASE_ONLY = ("torch", "torchvision", "triton", "nvidia-*", "cuda-*")


def _base_overrides() -> Path:
    names = sorted(
        {d.name.split("-")[0].replace("_", "-").lower() for d in torch_base().glob("*.dist-info")}
    )
    wanted = [n for n in names if any(fnmatch.fnmatch(n, p) for p in BASE_ONLY)]
    path = cache_dir() / "uv-overrides-torch-base.txt"
    text = "".join(f"{n} ; sys_platform == 'never'\n" for n in wanted)
    if not path.exists() or path.read_text() != text:
        with atomic_open(path) as fh:
            fh.write(text)
    return path


@functools.cache
def _pip_config() -> dict[str, str]:
    """pip's effective configuration (``pip config list``: its files and ``PIP_*`` variables),
    by option name, the environment's value over the files'."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    )
    if proc.returncode != 0:  # else uv would run on its defaults, past this machine's indexes
        raise EnvError(f"`pip config list` failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = proc.stdout
    found: dict[str, str] = {}
    for line in sorted(out.splitlines(), key=lambda ln: ln.startswith(":env:")):
        key, sep, value = line.partition("=")
        if sep:
            found[key.rsplit(".", 1)[-1]] = value.strip().strip("'\"")
    return found


def _pip_config_args() -> list[str]:
    """uv's flags for the indexes, local wheel folders and constraints pip's configuration
    names (uv reads no pip configuration); locations that do not exist are left out, as pip
    ignores them."""
    cfg = _pip_config()
    args: list[str] = []
    for key, flag in (("index-url", "--index-url"), ("extra-index-url", "--extra-index-url"),
                      ("find-links", "--find-links"), ("constraint", "-c")):  # fmt: skip
        for value in cfg.get(key, "").split():
            remote = value.startswith(("http:", "https:"))
            if not remote and not Path(value.removeprefix("file://")).exists():
                continue
            args += [flag, value]
    return args


def compile_bytecode(python: str | Path, *dirs: Path) -> None:
    """Write the .pyc of every module under ``dirs`` once, at build time (:mod:`.bytecode`).

    This machine's image (like many CI images) exports ``PYTHONDONTWRITEBYTECODE=1``: without
    bytecode on disk every process compiles everything it imports from source, every time.
    A server start-up imports SGLang, torch and transformers in five or more processes (16 s
    of CPU each on these cores against 7 s from bytecode), and so does every twin and probe
    subprocess. Code compiled before (the same file content, in any environment) is reused."""
    from dpbench.envs.bytecode import BytecodeError
    from dpbench.envs.bytecode import compile_bytecode as compile_

    try:
        compile_(python, *dirs)
    except BytecodeError as exc:
        raise EnvError(str(exc)) from exc


def wheel_path(version: str) -> Path:
    """The SGLang release wheel, downloaded once into .cache/wheels (PyPI, no dependencies)."""
    wheels = cache_dir() / "wheels"
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    with _locked(wheels / f".sglang-{version}.lock"):
        found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
        if found:
            return found[0]
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            str(wheels),
            f"sglang=={version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise EnvError(
                f"could not download the sglang=={version} wheel from the package index "
                f"(`pip index versions sglang` lists the releases):\n{proc.stderr[-2000:]}"
            )
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise EnvError(f"pip reported success but no sglang-{version} wheel is in {wheels}")
    return found[0]


def torch_base() -> Path:
    """One shared install of the torch/torchvision pair (pip --target), linked into every env."""
    tag = "-".join(r.replace("==", "") for r in TORCH_PAIR)
    base = cache_dir() / f"torch-base-{tag}"
    done = base / ".complete"
    if done.exists():
        return base
    with _locked(cache_dir() / f".{base.name}.lock"):
        if done.exists():
            return base
        tmp = base.with_name(base.name + ".partial")
        if tmp.exists():
            subprocess.run(["rm", "-rf", str(tmp)], check=True)
        _pip(sys.executable, "--target", str(tmp), *TORCH_PAIR)
        compile_bytecode(sys.executable, tmp)
        if base.exists():
            subprocess.run(["rm", "-rf", str(base)], check=True)
        tmp.rename(base)
        done.write_text("ok\n")
    return base


def _site_packages(python: str | Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def install_release(
    python: str | Path, version: str, *, with_dpbench: bool = True, with_server: bool = False
) -> dict:
    """Install SGLang ``version`` (no deps), its pinned CPU imports and the shared torch into ``python``'s env.

    Used both by :func:`ensure_env` and by asv's ``install_command`` (through
    ``python -m dpbench.envs.install``), so tests and benchmarks run in identical environments.
    """
    wheel = wheel_path(version)
    base = torch_base()
    site = _site_packages(python)
    # Appended after the env's own site-packages: the release's pins shadow the base's copies.
    (site / "_dpbench_torch_base.pth").write_text(f"{base}\n")
    reqs = cpu_requirements(wheel)
    _pip(python, *reqs)
    _pip(python, "--no-deps", "--reinstall", str(wheel))
    if with_dpbench:
        _pip(python, "--no-deps", "-e", str(project_root()))
        # dpbench's own light dependencies, without disturbing the release's pins.
        _pip(
            python,
            "typer>=0.12",
            "rich>=13.7",
            "pyyaml>=6.0",
            "aiohttp>=3.9",
            "prometheus-client>=0.20",
        )
    info = {"sglang": version, "wheel": wheel.name, "requirements": reqs, "torch_base": str(base)}
    if with_server:
        info["server"] = install_server_extras(python, version)
    compile_bytecode(python, site)
    info["bytecode"] = True
    return info


def source_requirements(build_dir: Path) -> tuple[str | None, list[str]]:
    """(version, the CPU tiers' requirement strings) of an SGLang source tree's pyproject.toml."""
    import tomllib

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    project = tomllib.loads((build_dir / "pyproject.toml").read_text()).get("project", {})
    env = default_environment()
    env["extra"] = ""
    reqs = [Requirement(r) for r in project.get("dependencies", [])]
    held = [r for r in reqs if r.marker is None or r.marker.evaluate(env)]
    return project.get("version"), cpu_requirements_for(held)


def install_source(python: str | Path, build_dir: Path) -> dict:
    """Install an SGLang source tree (a checkout's ``python/``) into ``python``'s env the CPU way:
    the CPU imports pinned as its pyproject pins them, SGLang itself ``--no-deps``, the shared
    torch. What a GPU runner's config adds: SGLang's full (CUDA) dependency list."""
    version, reqs = source_requirements(build_dir)
    base = torch_base()
    site = _site_packages(python)
    (site / "_dpbench_torch_base.pth").write_text(f"{base}\n")
    _pip(python, *reqs)
    _pip(python, "--no-deps", "--no-build-isolation", "--reinstall", str(build_dir))
    compile_bytecode(python, site)
    return {
        "sglang": version,
        "source": str(build_dir),
        "requirements": reqs,
        "torch_base": str(base),
    }


def install_server_extras(python: str | Path, version: str) -> dict:
    """Add what SGLang's real server needs on a CPU to ``python``'s env, keeping the CPU tiers' pins.

    The installed versions of this release's CPU imports (and torch/torchvision) are
    passed to pip as constraints, so the CPU tiers run on exactly what they were tested
    with. Only those: asv reuses one environment across commits, and what an earlier
    release's server extras left there must be free to move to this release's pins.
    """
    import tempfile

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wheel = wheel_path(version)
    reqs, kernel = server_requirements(wheel)
    keep = {canonicalize_name(Requirement(r).name) for r in cpu_requirements(wheel)}
    keep |= {canonicalize_name(Requirement(r).name) for r in TORCH_PAIR}
    frozen = subprocess.run(
        [str(python), "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pins = [
        ln
        for ln in frozen.splitlines()
        if "==" in ln and not ln.startswith("-") and canonicalize_name(ln.split("==", 1)[0]) in keep
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("\n".join(pins) + "\n")
    try:
        _pip(python, "-c", fh.name, *reqs)
    finally:
        os.unlink(fh.name)
    if kernel is None:
        raise EnvError(
            f"sglang {version}'s metadata pins no sglang-kernel; the server tier needs it"
        )
    _pip(python, "--no-deps", kernel)
    dropped = drop_cpu_unloadable_binaries(python)
    return {"requirements": reqs, "kernel": kernel, "dropped": dropped}


# sglang-kernel's FlashAttention-3 extension: 1.1-1.7 GB of CUDA code per environment, which
# needs libcuda.so.1 to load. ``sgl_kernel.flash_attn`` imports it inside a bare ``except:``
# that raises the same ImportError whether the file is missing or fails to load, so on a
# machine without CUDA removing it changes nothing but the disk the environment takes.
CPU_UNLOADABLE = ("sgl_kernel/flash_ops.*.so",)


def drop_cpu_unloadable_binaries(python: str | Path) -> list[str]:
    """Remove :data:`CPU_UNLOADABLE` from ``python``'s env when this machine has no CUDA driver.

    Returns the removed paths (relative to site-packages), recorded in the env's stamp.
    """
    import ctypes.util

    if ctypes.util.find_library("cuda"):
        return []  # a CUDA machine: keep the wheel whole
    site = _site_packages(python)
    dropped = []
    for pattern in CPU_UNLOADABLE:
        for path in sorted(site.glob(pattern)):
            path.unlink()
            dropped.append(str(path.relative_to(site)))
    return dropped


def ensure_server_env(version: str) -> ReleaseEnv:
    """The release environment with the server tier's extras added (once; stamped)."""
    rel = ensure_env(version)
    stamp = rel.path / "dpbench-env.json"
    if "server" in json.loads(stamp.read_text()):
        return rel
    with _locked(cache_dir() / "envs" / f".sglang-{version}.lock"):
        have = json.loads(stamp.read_text())
        if "server" not in have:
            have["server"] = install_server_extras(rel.python, version)
            compile_bytecode(rel.python, _site_packages(rel.python))
            write_json(stamp, have)
    return rel


@dataclass(frozen=True)
class ReleaseEnv:
    version: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def env_path(version: str) -> Path:
    return cache_dir() / "envs" / f"sglang-{version}"


def ensure_env(version: str) -> ReleaseEnv:
    """The environment for SGLang ``version``, built on first use and reused after."""
    path = env_path(version)
    stamp = path / "dpbench-env.json"
    want = {"layout": ENV_LAYOUT_VERSION, "sglang": version}
    if stamp.exists():
        have = json.loads(stamp.read_text())
        if {k: have.get(k) for k in want} == want:
            if not have.get("bytecode"):
                _add_bytecode(path, stamp)
            return ReleaseEnv(version, path)
    with _locked(cache_dir() / "envs" / f".sglang-{version}.lock"):
        if stamp.exists() and {k: json.loads(stamp.read_text()).get(k) for k in want} == want:
            return ReleaseEnv(version, path)
        if path.exists():
            subprocess.run(["rm", "-rf", str(path)], check=True)
        python = _base_python()
        subprocess.run([python, "-m", "venv", str(path)], check=True)
        info = install_release(path / "bin" / "python", version)
        write_json(stamp, {**want, **info})
    return ReleaseEnv(version, path)


def _add_bytecode(path: Path, stamp: Path) -> None:
    """An environment built before build-time bytecode: compile it (and the torch base) once."""
    with _locked(cache_dir() / "envs" / f".{path.name}.lock"):
        have = json.loads(stamp.read_text())
        if have.get("bytecode"):
            return
        python = path / "bin" / "python"
        base = have.get("torch_base")
        compile_bytecode(python, _site_packages(python), *([Path(base)] if base else []))
        write_json(stamp, {**have, "bytecode": True})


def _base_python() -> str:
    """A CPython 3.11 (the SGLang wheels are cp311): this interpreter if it is one."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    for cand in ("python3.11",):
        proc = subprocess.run(["which", cand], capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout.strip()
    raise EnvError(
        f"SGLang's wheels are built for CPython 3.11; found {sys.version.split()[0]} and no python3.11"
    )


def current_purelib() -> Path:
    return Path(sysconfig.get_paths()["purelib"])
