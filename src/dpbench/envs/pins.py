"""What a release environment installs: SGLang ``--no-deps`` plus the CPU tiers' imports, pinned as the release pins them."""

from __future__ import annotations

import email.parser
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# The torch/torchvision pair that imports on a CPU-only x86-64 machine with Python 3.11
# (a CUDA build; see shared/reference/sglang-facts.md). Releases pin other torch versions
# (0.5.16 pins torch==2.11.0); the CPU tiers only need torch.distributed (gloo), tensors
# and Triton's interpreter, which this pair provides for every supported release.
TORCH_PAIR = ("torch==2.14.1", "torchvision==0.29.1")

# Packages `sglang.srt.managers.schedule_policy`, `prefill_delayer`, the Triton attention
# kernels and `sglang.launch_server --help` import on a CPU-only machine, found by trial
# per release (0.5.16 … 0.5.23). None of SGLang's GPU-only dependencies is here.
CPU_IMPORTS: tuple[str, ...] = (
    "numpy",
    "orjson",
    "psutil",
    "pybase64",
    "requests",
    "packaging",
    "pillow",
    "starlette",
    "fastapi",
    "uvicorn",
    "uvloop",
    "msgspec",
    "pydantic",
    "pyzmq",
    "tqdm",
    "IPython",
    "aiohttp",
    "transformers",
    "tokenizers",
    "dill",
    "apache-tvm-ffi",
    "sentencepiece",
    "compressed-tensors",
    "gguf",
    "openai",
    "partial_json_parser",
    "prometheus-client",
    "setproctitle",
    "python-multipart",
    "einops",
    "scipy",
    "pyyaml",
    "interegular",
    "xxhash",
    "regex",
    "python-dateutil",
    "huggingface-hub",
    "xgrammar",
    # sglang.bench_serving (the server tier's reference client) imports it at load time
    "datasets",
)

# Never installed for the CPU tiers, whatever a release's metadata says.
GPU_ONLY = frozenset(
    canonicalize_name(n)
    for n in (
        "torch",
        "torchvision",
        "torchaudio",
        "torchao",
        "torchcodec",
        "flashinfer-python",
        "flashinfer-cubin",  # precompiled CUDA kernels (1.8 GB, 0.5.14); only flashinfer loads them
        "sglang-kernel",
        "sgl-kernel",
        "sgl-deep-gemm",
        "sgl-deep-ep",
        "sgl-flash-mla",
        "flash-attn-4",
        "humming-kernels",
        "nvidia-cutlass-dsl",
        "cuda-python",
        "tilelang",
        "quack-kernels",
        "tokenspeed-mla",
        "torch-memory-saver",
        "helion",
        # NVIDIA's CUDA Tile (0.5.18-0.5.22 pin 1.6.0rc5): a wheel stub that downloads the real
        # wheel from NVIDIA's index at install time, unreachable and useless without CUDA.
        "cuda-tile",
    )
)


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The unconditional ``Requires-Dist`` entries of a wheel whose markers hold here."""
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode())
    env = default_environment()
    env["extra"] = ""
    out = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            out.append(req)
    return out


def cpu_requirements(wheel: Path) -> list[str]:
    """Requirement strings for the CPU tiers: each CPU import, with the release's own specifier."""
    return cpu_requirements_for(wheel_requirements(wheel))


def cpu_requirements_for(requirements: list[Requirement]) -> list[str]:
    """Each CPU import, with the specifier ``requirements`` (a wheel's or a pyproject's) give it."""
    pinned = {canonicalize_name(r.name): r for r in requirements}
    out: list[str] = []
    for name in CPU_IMPORTS:
        key = canonicalize_name(name)
        if key in GPU_ONLY:
            continue
        req = pinned.get(key)
        out.append(f"{name}{req.specifier}" if req is not None and req.specifier else name)
    return out


# The server tier on a CPU (SGLang's real launch_server, forward simulated) imports more
# than the CPU tiers: the release's other runtime dependencies, minus build and profiling
# tools it never imports while serving, plus its own sglang-kernel wheel installed
# --no-deps (its native-op loader is disabled by dpbench.sglang_compat.simforward).
SERVER_TOOLING = frozenset(
    canonicalize_name(n)
    for n in (
        "build",
        "ninja",
        "py-spy",
        "numba",
        "nvidia-mathdx",
        "nvshmem4py-cu13",
        "kernels",
        "modelscope",
        "deepseek-recipe",
        "tml-renderers",
        "timm",
        # Mistral tokenizers only (the server runs with --skip-tokenizer-init); its
        # releases need numpy < 2.4, which conflicts with the CPU tiers' numpy pin
        "mistral_common",
    )
)
SERVER_KERNEL = canonicalize_name("sglang-kernel")


def server_requirements(wheel: Path) -> tuple[list[str], str | None]:
    """(the release's non-GPU runtime requirements for the server tier, its pinned sglang-kernel)."""
    out: list[str] = []
    kernel = None
    for req in wheel_requirements(wheel):
        key = canonicalize_name(req.name)
        if key == SERVER_KERNEL:
            kernel = f"{req.name}{req.specifier}"
        elif key not in GPU_ONLY and key not in SERVER_TOOLING:
            out.append(f"{req.name}{req.specifier}")
    return out, kernel
