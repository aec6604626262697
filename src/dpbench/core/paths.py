"""Where the suite keeps its files: the checkout, its caches and its outputs."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The dpbench checkout: $DPBENCH_ROOT, else the folder holding asv.conf.json above this file."""
    env = os.environ.get("DPBENCH_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "asv.conf.json").exists() and (parent / "src" / "dpbench").is_dir():
            return parent
    # Installed (non-editable) into an asv environment: asv tells us the config dir.
    conf = os.environ.get("ASV_CONF_DIR")
    if conf:
        return Path(conf).resolve()
    return Path.cwd().resolve()


def cache_dir() -> Path:
    """Ignored folder for downloaded wheels, release environments and the release history repo."""
    return Path(os.environ.get("DPBENCH_CACHE", project_root() / ".cache")).resolve()


def history_dir() -> Path:
    """The local git history of SGLang releases and changes asv runs over: $DPBENCH_HISTORY,
    else .cache/sglang-releases."""
    env = os.environ.get("DPBENCH_HISTORY")
    return Path(env).resolve() if env else cache_dir() / "sglang-releases"


def workloads_dir() -> Path:
    return project_root() / "workloads"


def shared_traces_dir() -> Path:
    """The production traces beside the checkout (``../shared/traces/``; $DPBENCH_TRACES
    overrides): tests, CI and the main job read them there; the project does not ship them."""
    env = os.environ.get("DPBENCH_TRACES")
    return Path(env).resolve() if env else project_root().parent / "shared" / "traces"


def results_dir() -> Path:
    return project_root() / "results"
