"""Static placement (the AST of ``schedule_policy.py``); the reader lives in :mod:`dpbench.sglang_compat.negotiation`."""

from dpbench.sglang_compat.negotiation import (
    ADDER_CLASS,
    NEGOTIATE,
    Event,
    Label,
    StaticPlacement,
    analyse_file,
    analyse_installed,
    analyse_source,
)

__all__ = [
    "ADDER_CLASS",
    "NEGOTIATE",
    "Event",
    "Label",
    "StaticPlacement",
    "analyse_file",
    "analyse_installed",
    "analyse_source",
]
