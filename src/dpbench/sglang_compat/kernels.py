"""Where the installed SGLang keeps its Triton MLA attention kernels, and how to call them.

The kernel tier calls SGLang's own ``decode_attention_fwd`` and ``extend_attention_fwd``
exactly as its Triton attention backend does for DeepSeek MLA (absorbed form: MQA with
one latent KV head, ``k = [c_kv; k_pe]`` of 576 dims, ``v = c_kv`` of 512), and
``extend_attention_fwd`` in MHA form (192/128 dims, one KV head per query head) for a
prefill with no cached prefix. What differs between releases is absorbed here:

- **where the modules live** (``sglang.kernels.ops.attention`` since 0.5.16; the older
  ``sglang.srt.layers.attention.triton_ops`` is tried after it);
- **how they import**: through the ``sglang`` package as usual, or, where the package's
  ``__init__`` chain needs libraries a GPU machine lacks (``sglang/__init__.py`` pulls
  the frontend language, transformers patches, IPython, aiohttp …), as *kernel modules
  only*: the parent packages ``sglang``, ``sglang.kernels``, ``sglang.kernels.ops`` and
  ``sglang.kernels.ops.attention`` are registered as bare packages pointing at the
  installed folders, so only the kernel files and what *they* import run. The code
  executed for the kernels is the installed SGLang's, unchanged; nothing is vendored.
  For 0.5.23 that path needs, beyond torch and triton: orjson, psutil, pybase64,
  requests, packaging, starlette, msgspec, pydantic, pyzmq (found by trial in an
  environment holding only torch and triton);
- **which keywords the entry points take** (read off their signatures: ``page_size``,
  ``has_mla``, ``attn_lse``);
- **how many KV splits** the backend gives MLA decode (``get_num_kv_splits_triton`` and
  the backend's split cap, where present).

Unknown shapes raise :class:`dpbench.sglang_compat.detect.UnsupportedSGLang`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import math
import os
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpbench.sglang_compat.detect import UnsupportedSGLang
from dpbench.sglang_compat.source import sglang_package_dir

# Module locations, newest first: (decode module, extend module, split-metadata module).
KERNEL_LOCATIONS: tuple[tuple[str, str, str], ...] = (
    (
        "sglang.kernels.ops.attention.decode_attention",
        "sglang.kernels.ops.attention.extend_attention",
        "sglang.kernels.ops.attention.metadata",
    ),
    (
        "sglang.srt.layers.attention.triton_ops.decode_attention",
        "sglang.srt.layers.attention.triton_ops.extend_attention",
        "",
    ),
)

DECODE_REQUIRED = (
    "q",
    "k_buffer",
    "v_buffer",
    "o",
    "kv_indptr",
    "kv_indices",
    "attn_logits",
    "attn_lse",
    "num_kv_splits",
    "max_kv_splits",
    "sm_scale",
    "k_scale",
    "v_scale",
)
EXTEND_REQUIRED = (
    "q_extend",
    "k_extend",
    "v_extend",
    "o_extend",
    "k_buffer",
    "v_buffer",
    "qo_indptr",
    "kv_indptr",
    "kv_indices",
    "custom_mask",
    "is_causal",
    "mask_indptr",
    "max_len_extend",
    "k_scale",
    "v_scale",
)
SUPPORTED = (
    "SGLang releases whose Triton attention kernels take "
    + ", ".join(DECODE_REQUIRED[:10])
    + " … (0.5.16 – 0.5.23 verified)"
)

# Libraries the kernel-modules-only import needs beyond torch and triton (0.5.23, found by
# trial in an environment holding only torch and triton; 0.5.16 and 0.5.17 need a subset).
KERNEL_IMPORT_REQUIREMENTS = (
    "orjson",
    "psutil",
    "pybase64",
    "requests",
    "packaging",
    "starlette",
    "msgspec",
    "pydantic",
    "pyzmq",
)

# SGLang's default --triton-attention-num-kv-splits (ServerArgs), and the MLA cap's block.
DEFAULT_NUM_KV_SPLITS = 8
_MLA_DECODE_MIN_BLOCK_KV = 32


@dataclass(frozen=True)
class AttentionKernels:
    """SGLang's Triton attention entry points with their signatures adapted."""

    sglang_version: str
    import_path: str = ""  # "package" or "kernel-modules-only"
    decode_module: str = ""
    extend_module: str = ""
    decode_fn: Callable[..., Any] | None = None
    extend_fn: Callable[..., Any] | None = None
    split_fn: Callable[..., Any] | None = None  # get_num_kv_splits_triton, where present
    decode_params: tuple[str, ...] = ()
    extend_params: tuple[str, ...] = ()

    def decode(
        self,
        *,
        q,
        k_buffer,
        v_buffer,
        o,
        kv_indptr,
        kv_indices,
        attn_logits,
        attn_lse,
        num_kv_splits,
        max_kv_splits,
        sm_scale,
        page_size=1,
        has_mla=True,
        use_pdl=None,
    ) -> None:
        """One ``decode_attention_fwd`` launch, as the Triton backend's ``forward_decode`` makes it.

        ``use_pdl=None`` follows the backend: programmatic dependent launch on CUDA devices
        of compute capability 9 or newer (``is_arch_support_pdl``), where the kernel takes it.
        """
        kwargs: dict[str, Any] = {}
        if "has_mla" in self.decode_params:
            kwargs["has_mla"] = has_mla
        if "use_pdl" in self.decode_params:
            kwargs["use_pdl"] = pdl_default(q) if use_pdl is None else use_pdl
        if page_size != 1 or "page_size" in self.decode_params:
            if "page_size" not in self.decode_params:
                raise UnsupportedSGLang(
                    f"SGLang {self.sglang_version}: decode_attention_fwd takes no page_size; "
                    f"page size {page_size} needs a release whose kernels are page-aware (0.5.16+)"
                )
            kwargs["page_size"] = page_size
        assert self.decode_fn is not None
        self.decode_fn(
            q,
            k_buffer,
            v_buffer,
            o,
            kv_indptr,
            kv_indices,
            attn_logits,
            attn_lse,
            num_kv_splits,
            max_kv_splits,
            sm_scale,
            1.0,
            1.0,
            **kwargs,
        )

    def extend(
        self,
        *,
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        v_buffer,
        qo_indptr,
        kv_indptr,
        kv_indices,
        max_len_extend,
        sm_scale,
        page_size=1,
    ) -> None:
        """One causal ``extend_attention_fwd`` launch, as the backend's ``forward_extend`` makes it."""
        kwargs: dict[str, Any] = {"sm_scale": sm_scale}
        if page_size != 1 or "page_size" in self.extend_params:
            if "page_size" not in self.extend_params:
                raise UnsupportedSGLang(
                    f"SGLang {self.sglang_version}: extend_attention_fwd takes no page_size; "
                    f"page size {page_size} needs a page-aware release (0.5.16+)"
                )
            kwargs["page_size"] = page_size
        assert self.extend_fn is not None
        self.extend_fn(
            q_extend,
            k_extend,
            v_extend,
            o_extend,
            k_buffer,
            v_buffer,
            qo_indptr,
            kv_indptr,
            kv_indices,
            None,
            True,
            None,
            max_len_extend,
            1.0,
            1.0,
            **kwargs,
        )

    def num_kv_splits(self, seq_lens, *, num_heads: int, max_kv_splits: int, core_count: int):
        """Per-request KV split counts, as ``TritonAttnBackend.get_num_kv_splits`` computes them.

        With SGLang's ``get_num_kv_splits_triton`` (present from 0.5.16) and a GPU's
        multiprocessor count this is the backend's own computation; without a device
        (``core_count <= 0``) the backend fills ``max_kv_splits``, and so does this.
        """
        import torch
        import triton

        out = torch.empty(seq_lens.shape[0], dtype=torch.int32, device=seq_lens.device)
        if self.split_fn is None or core_count <= 0:
            out.fill_(max_kv_splits)
            return out
        num_seq = seq_lens.shape[0]
        schedule = 256 if num_seq < 256 else triton.next_power_of_2(num_seq)
        params = inspect.signature(
            self.split_fn.fn if hasattr(self.split_fn, "fn") else self.split_fn
        ).parameters
        kwargs: dict[str, Any] = {"MAX_NUM_SEQ": schedule}
        if "uneven_batch_ptr" in params:
            kwargs["uneven_batch_ptr"] = None
        self.split_fn[(1,)](
            out, seq_lens, num_seq, 1, num_heads, 1, max_kv_splits, core_count, **kwargs
        )
        return out


def pdl_default(tensor: Any) -> bool:
    """SGLang's ``is_arch_support_pdl``: CUDA (not ROCm) with compute capability ≥ 9."""
    import torch

    if not getattr(tensor, "is_cuda", False) or torch.version.hip:
        return False
    return torch.cuda.get_device_capability(tensor.device)[0] >= 9


def mla_max_kv_splits(
    core_count: int, max_context_len: int, base: int = DEFAULT_NUM_KV_SPLITS
) -> int:
    """The backend's MLA split cap (0.5.23 ``_mla_decode_kv_splits_cap``): SMs and context bound it.

    ``max(base, min(next_pow2(SMs), next_pow2(ceil(max_context / 32))))``; with no device
    (``core_count <= 0``) it stays at ``base``. Releases before the cap used ``base``.
    """
    if core_count <= 0:
        return base
    sm_cap = 1 << max(0, math.ceil(math.log2(core_count)))
    blocks = -(-max_context_len // _MLA_DECODE_MIN_BLOCK_KV)
    ctx_cap = 1 << max(0, math.ceil(math.log2(blocks)))
    return max(base, min(sm_cap, ctx_cap))


def sglang_version() -> str:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        spec = importlib.util.find_spec("sglang")
        if spec is None or not spec.origin:
            raise ImportError(
                "SGLang is not importable here (no 'sglang' package on sys.path)"
            ) from None
        # An unzipped wheel without its .dist-info: setuptools-scm's generated _version.py.
        version_file = os.path.join(os.path.dirname(spec.origin), "_version.py")
        if os.path.exists(version_file):
            with open(version_file) as fh:
                found = re.search(
                    r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", fh.read(), re.M
                )
            if found:
                return found.group(1)
        return "unknown"


def _register_bare_parents(module: str) -> None:
    """Register ``module``'s parent packages as bare packages on the installed folders.

    Their ``__init__`` files do not run; submodules still load from the installed files.
    """
    try:  # finds the top-level package without running it (a bare one registered earlier too)
        root = str(sglang_package_dir())
    except FileNotFoundError:
        raise ImportError(
            "SGLang is not importable here (no 'sglang' package on sys.path)"
        ) from None
    parts = module.split(".")[:-1]
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name in sys.modules:
            continue
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, *parts[1:i])]
        pkg.__package__ = name
        sys.modules[name] = pkg


def _import(
    decode_mod: str, extend_mod: str, mode: str
) -> tuple[types.ModuleType, types.ModuleType]:
    if mode == "kernel-modules-only":
        _register_bare_parents(decode_mod)
    return importlib.import_module(decode_mod), importlib.import_module(extend_mod)


def load_attention_kernels(mode: str = "auto") -> AttentionKernels:
    """Import the installed SGLang's Triton attention kernels and check their signatures.

    ``mode``: ``"package"`` (plain import), ``"kernel-modules-only"`` (see the module
    docstring), or ``"auto"``: the plain import, then kernel modules only if that fails
    for a missing third-party library. Raises ImportError when SGLang is absent and
    UnsupportedSGLang when the kernels' signatures are not a shape this adapter knows.
    """
    allowed = ("auto", "package", "kernel-modules-only")
    if mode not in allowed:
        raise ValueError(f"mode must be one of {allowed}, got {mode!r}")
    version = sglang_version()
    errors: list[str] = []
    for decode_mod, extend_mod, meta_mod in KERNEL_LOCATIONS:
        modes = ["package", "kernel-modules-only"] if mode == "auto" else [mode]
        for how in modes:
            try:
                dec, ext = _import(decode_mod, extend_mod, how)
            except ModuleNotFoundError as exc:
                errors.append(f"{decode_mod} ({how}): missing module {exc.name!r}")
                if exc.name and exc.name.split(".")[0] == "sglang" and exc.name in decode_mod:
                    break  # this location does not exist in this release
                continue
            return _adapt(version, how, dec, ext, meta_mod)
    raise ImportError(
        f"SGLang {version}: could not import its Triton attention kernels: "
        + "; ".join(errors)
        + ". Install the missing libraries (see dpbench.sglang_compat.kernels' docstring)."
    )


def _adapt(
    version: str, how: str, dec: types.ModuleType, ext: types.ModuleType, meta_mod: str
) -> AttentionKernels:
    decode_fn = getattr(dec, "decode_attention_fwd", None)
    extend_fn = getattr(ext, "extend_attention_fwd", None)
    if decode_fn is None or extend_fn is None:
        raise UnsupportedSGLang(
            f"SGLang {version}: {dec.__name__} lacks decode_attention_fwd or {ext.__name__} lacks "
            f"extend_attention_fwd; supported: {SUPPORTED}"
        )
    dparams = tuple(inspect.signature(decode_fn).parameters)
    eparams = tuple(inspect.signature(extend_fn).parameters)
    if dparams[: len(DECODE_REQUIRED)] != DECODE_REQUIRED:
        raise UnsupportedSGLang(
            f"SGLang {version}: decode_attention_fwd takes ({', '.join(dparams[:14])}, …); "
            f"expected it to start ({', '.join(DECODE_REQUIRED)}). Supported: {SUPPORTED}"
        )
    if eparams[: len(EXTEND_REQUIRED)] != EXTEND_REQUIRED or "sm_scale" not in eparams:
        raise UnsupportedSGLang(
            f"SGLang {version}: extend_attention_fwd takes ({', '.join(eparams[:16])}, …); "
            f"expected it to start ({', '.join(EXTEND_REQUIRED)}) and take sm_scale. Supported: {SUPPORTED}"
        )
    split_fn = None
    if meta_mod:
        try:
            split_fn = getattr(importlib.import_module(meta_mod), "get_num_kv_splits_triton", None)
        except ModuleNotFoundError:
            split_fn = None
    return AttentionKernels(
        sglang_version=version,
        import_path=how,
        decode_module=dec.__name__,
        extend_module=ext.__name__,
        decode_fn=decode_fn,
        extend_fn=extend_fn,
        split_fn=split_fn,
        decode_params=dparams,
        extend_params=eparams,
    )
