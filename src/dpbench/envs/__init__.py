"""Per-release SGLang environments for the CPU tiers: venvs holding one SGLang wheel and its CPU pins.

Two SGLang releases cannot share an environment (they pin different transformers,
openai, … versions), so every release gets its own virtual environment under
``.cache/envs/sglang-<version>/``. The CUDA build of torch/torchvision that imports on
a CPU-only machine is installed once into ``.cache/torch-<version>/`` and linked into
each environment with a ``.pth`` file (its site-packages come first, so a release's own
pins win); that saves ~5.5 GB and a minute per environment.

The one way to run something in a release environment (every tier uses it; do not
start release interpreters by hand): ``run_in_env(version, module, args, *, timeout,
env=None, on_line=None) -> CompletedProcess`` (:mod:`.run`): ``python -m module`` from
the project root in its own process group, reaped on timeout / error / Ctrl-C;
``on_line`` streams stdout lines. ``release_python(version)`` and ``child_env()`` are
for the one caller that must own the process itself (a server launched with its own
lifetime management).

A change (:mod:`dpbench.changes`) runs the same way, named instead of a version
(``run_in_env("revert-31835", …)``): :mod:`.resolve` maps the name to the environment
:mod:`.change_env` builds from its base's.
"""

from dpbench.envs.pins import TORCH_PAIR, cpu_requirements
from dpbench.envs.resolve import ensure_env
from dpbench.envs.run import child_env, release_python, run_in_env
from dpbench.envs.venv import ReleaseEnv

__all__ = [
    "TORCH_PAIR",
    "ReleaseEnv",
    "child_env",
    "cpu_requirements",
    "ensure_env",
    "release_python",
    "run_in_env",
]
