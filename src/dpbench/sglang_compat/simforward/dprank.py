"""This process's attention-DP rank, read off SGLang (a leaf: both the stand-in and the
virtual-clock hooks need it, and neither may import the other for it)."""

from __future__ import annotations

import importlib
from typing import Any

_DP_RANK_READERS = (
    ("sglang.srt.layers.dp_attention", "dp_gather_slot"),  # 0.5.23
    ("sglang.srt.layers.dp_attention", "get_attention_dp_rank"),  # 0.5.16
)


class StandInError(RuntimeError):
    """The stand-in could not read what it needs from this SGLang's objects."""


def dp_rank_reader() -> Any:
    """The function that returns this process's attention-DP rank; loud if none exists."""
    tried = []
    for module, name in _DP_RANK_READERS:
        fn = getattr(importlib.import_module(module), name, None)
        if fn is not None:
            return fn
        tried.append(f"{module}.{name}")
    raise StandInError(f"cannot tell this process's DP rank: none of {', '.join(tried)} exists")
