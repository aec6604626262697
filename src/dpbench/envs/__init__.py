"""Per-release SGLang environments for the CPU tiers: venvs holding one SGLang wheel and its CPU pins.

Two SGLang releases cannot share an environment (they pin different transformers,
openai, … versions), so every release gets its own virtual environment under
``.cache/envs/sglang-<version>/``. The CUDA build of torch/torchvision that imports on
a CPU-only machine is installed once into ``.cache/torch-<version>/`` and linked into
each environment with a ``.pth`` file (its site-packages come first, so a release's own
pins win); that saves ~5.5 GB and a minute per environment.
"""

from dpbench.envs.pins import TORCH_PAIR, cpu_requirements
from dpbench.envs.venv import ReleaseEnv, ensure_env, run_in_env

__all__ = ["TORCH_PAIR", "ReleaseEnv", "cpu_requirements", "ensure_env", "run_in_env"]
