"""The environment of a change: a copy of its base release's environment with the change laid over SGLang.

``.cache/envs/change-<name>-<key>/`` (key: base + patch digest) is the base's environment
copied whole as hard links (the same pins, torch link and dpbench), then the changed files from
:func:`dpbench.changes.apply.changed_files` written over its SGLang and compiled, each as a
new file (never through a link). The release environment itself is only read. It is built in
a ``.partial`` folder, checked (SGLang's scheduler must import), and renamed into place: a
failed build leaves nothing.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from dpbench.changes import ChangeError
from dpbench.changes.apply import changed_files, overlay
from dpbench.changes.diff import parse
from dpbench.changes.record import Change
from dpbench.core.atomic import write_json
from dpbench.core.paths import cache_dir
from dpbench.envs.venv import (
    ENV_LAYOUT_VERSION,
    ReleaseEnv,
    _locked,
    compile_bytecode,
    ensure_env,
    ensure_server_env,
    wheel_path,
)

# What a change must import to be benchmarked: the adder and the delayer the tiers drive.
SCHEDULER_MODULES = ("sglang.srt.managers.schedule_policy", "sglang.srt.managers.prefill_delayer")
IMPORT_TIMEOUT_S = 600


def change_env_path(change: Change) -> Path:
    return cache_dir() / "envs" / f"change-{change.name}-{change.key}"


def _stamp_matches(path: Path, change: Change, server: bool) -> bool:
    stamp = path / "dpbench-env.json"
    if not stamp.exists():
        return False
    have = json.loads(stamp.read_text())
    if server and "server" not in have:
        return False
    return have.get("layout") == ENV_LAYOUT_VERSION and have.get("change") == change.marker()


def _retarget(copy: Path, base: Path, final: Path) -> None:
    """Point the copy's scripts and pyvenv.cfg at ``final`` (they name the base's folder).

    Each is replaced by a new file with the same mode: the copy's files are hard links to the
    base's, and writing one in place would rewrite the base's too."""
    old, new = str(base), str(final)
    targets = [copy / "pyvenv.cfg", *(p for p in (copy / "bin").iterdir() if p.is_file())]
    for path in targets:
        if path.is_symlink():
            continue
        data = path.read_bytes()
        if old.encode() in data[:4096]:
            tmp = path.with_name(path.name + ".dpbench-tmp")
            tmp.write_bytes(data.replace(old.encode(), new.encode()))
            tmp.chmod(path.stat().st_mode & 0o7777)
            tmp.replace(path)


def check_scheduler_imports(python: Path, name: str) -> None:
    """ChangeError (one line: the exception) when SGLang's scheduler does not import."""
    code = "import " + ", ".join(SCHEDULER_MODULES)
    proc = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S
    )
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        where = next((ln.strip() for ln in reversed(lines) if ln.strip().startswith("File ")), "")
        raise ChangeError(
            f"change {name}: SGLang's scheduler does not import: {lines[-1] if lines else '?'}"
            + (f" ({where})" if where else "")
        )


def overlay_change(python: Path, site: Path, change: Change, patch: bytes) -> list[str]:
    """Write the change's files (its patch applied to the base wheel's sources) over the SGLang
    installed in ``site`` and compile them; returns the package paths written."""
    files = changed_files(wheel_path(change.base), parse(patch.decode("utf-8")))
    written = overlay(site, files, change.marker())
    compile_bytecode(python, *{p.parent for p in written})
    return [str(p.relative_to(site)) for p in written]


def _build(change: Change, patch: bytes, tmp: Path, final: Path, server: bool) -> dict:
    base = ensure_server_env(change.base) if server else ensure_env(change.base)
    started = time.perf_counter()
    # hard links, not copies (1.2-1.3 GB and ~20 s of disk a change): nothing here writes a
    # file in place (the overlay, the compiled bytecode and the stamp each replace theirs)
    subprocess.run(["cp", "-a", "--link", str(base.path), str(tmp)], check=True)
    _retarget(tmp, base.path, final)
    site = next((tmp / "lib").glob("python3*/site-packages"))
    overlay_change(tmp / "bin" / "python", site, change, patch)
    check_scheduler_imports(tmp / "bin" / "python", change.name)
    stamp = json.loads((base.path / "dpbench-env.json").read_text())
    return {**stamp, "change": change.marker(), "build_s": round(time.perf_counter() - started, 1)}


def ensure_change_env(change: Change, patch: bytes, *, server: bool = False) -> ReleaseEnv:
    """The change's environment, built on first use (from its base's) and reused after.

    ``server``: with the server tier's extras, which it gets by copying a base environment
    that has them (an environment copied from one without them is built again)."""
    path = change_env_path(change)
    if _stamp_matches(path, change, server):
        return ReleaseEnv(change.name, path)
    with _locked(cache_dir() / "envs" / f".{path.name}.lock"):
        if _stamp_matches(path, change, server):
            return ReleaseEnv(change.name, path)
        tmp = path.with_name(path.name + ".partial")
        for stale in (tmp, path):
            subprocess.run(["rm", "-rf", str(stale)], check=True)
        try:
            info = _build(change, patch, tmp, path, server)
            write_json(tmp / "dpbench-env.json", info)
            tmp.rename(path)
        except BaseException:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
            raise
    return ReleaseEnv(change.name, path)
