"""Which environment a name means: an SGLang release (``0.5.17``) or a change (``revert-31835``).

Every tier names what it runs by such a name (``--sglang``, a twin arm); a release gets its
release environment (:mod:`.venv`), a change the environment built from its base
(:mod:`.change_env`), read from the release history (``$DPBENCH_HISTORY``, else
``.cache/sglang-releases``).
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from dpbench.changes import ChangeError
from dpbench.changes.history import list_names, read_change
from dpbench.core.paths import history_dir
from dpbench.envs import venv
from dpbench.envs.change_env import ensure_change_env


def is_release(name: str) -> bool:
    try:
        Version(name)
    except InvalidVersion:
        return False
    return True


def ensure_env(name: str, *, server: bool = False) -> venv.ReleaseEnv:
    """The environment of release or change ``name``, built on first use; ``server``: with the
    server tier's extras."""
    if is_release(name):
        return venv.ensure_server_env(name) if server else venv.ensure_env(name)
    repo = history_dir()
    if name not in list_names(repo):
        have = ", ".join(list_names(repo)) or "none"
        raise ChangeError(
            f"{name!r} is neither an SGLang release (like 0.5.17) nor a change in {repo} "
            f"(changes: {have}; add one with `dpbench change add`)"
        )
    stored = read_change(repo, name)
    return ensure_change_env(stored.change, stored.patch, server=server)
