"""KV pool buffers that cost no memory until written: the simulated forward never touches them.

SGLang's pools allocate their buffers with ``torch.zeros`` in the scheduler process:
``MLATokenToKVPool._create_buffers`` (one buffer per layer) and ``ReqToTokenPool.__init__``
(``req_to_token``: every request slot × the model's context length, int32). On a CPU that
zero-fill writes every page, so each scheduler holds the whole pool resident. At
``long-prompt-burst``'s DP 2 plan that is 5.1 GB of KV pool and 2.3 GB of ``req_to_token``
per scheduler, though the simulated forward reads and writes neither.

:func:`lazy_buffers` runs the original member with its module's ``torch`` swapped for
:class:`_LazyZeros` for the call's length: ``torch.zeros`` of a CPU tensor then maps fresh
anonymous pages (:func:`lazy_zeros`). The kernel backs those with its shared zero page until
a write, so the tensor reads as zeros, as ``torch.zeros`` promises, and costs nothing until a
page is written (SGLang writes the few ``req_to_token`` rows its requests use). Everything
else in the member stays SGLang's own.
"""

from __future__ import annotations

import functools
import math
import mmap
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where used: this module loads in every SGLang process
    import torch


class LazyPoolError(RuntimeError):
    """The hooked SGLang module does not allocate through a module-level ``torch``."""


def nbytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    return math.prod(int(n) for n in shape) * dtype.itemsize


def lazy_zeros(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of zeros on private anonymous pages: resident only once written."""
    import torch

    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
    pages = mmap.mmap(-1, nbytes(shape, dtype), flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    # the tensor holds ``pages`` (a buffer export), so the mapping lives as long as it does
    return torch.frombuffer(pages, dtype=dtype).view(tuple(shape))


def _shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):  # torch.Size is a tuple
        return tuple(size[0])
    return tuple(size)


class _LazyZeros:
    """``torch`` as a hooked member sees it: the same module, but a CPU ``zeros`` of at least
    a page maps lazily backed pages. Anything unusual (``out=``, a layout, gradients, another
    device) goes to the real ``torch.zeros``."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def zeros(self, *size: Any, dtype: torch.dtype | None = None, device: Any = None, **kw: Any):
        dtype = dtype or self._real.get_default_dtype()
        where = self._real.device(device) if device is not None else self._real.get_default_device()
        shape = _shape(size)
        if kw or where.type != "cpu" or nbytes(shape, dtype) < mmap.PAGESIZE:
            return self._real.zeros(*size, dtype=dtype, device=device, **kw)
        return lazy_zeros(shape, dtype)


def lazy_buffers(original: Any, module: ModuleType) -> Any:
    """The hook: ``original`` with ``module``'s CPU ``torch.zeros`` lazily backed for the call."""
    import torch

    if getattr(module, "torch", None) is not torch:
        raise LazyPoolError(
            f"{module.__name__} has no module-level torch; the lazy pool hook swaps it while "
            f"{original.__qualname__} allocates"
        )
    lazy = _LazyZeros(torch)

    @functools.wraps(original)
    def allocate_lazily(*args: Any, **kwargs: Any) -> Any:
        before, module.torch = module.torch, lazy  # a nested hooked call restores the outer's
        try:
            return original(*args, **kwargs)
        finally:
            module.torch = before

    return allocate_lazily
