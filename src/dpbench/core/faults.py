"""Fault injection for the suite's own tests: make a named tier's scenario fail on request.

`DPBENCH_INJECT_FAILURE=twin,server-sim` makes every scenario of those tiers raise
:class:`InjectedFailure` where it would start its work. The suite's tests use it to check
that a failed scenario fails `asv run` and `make bench` (never reads as a skip); nothing
else sets it.
"""

from __future__ import annotations

import os

ENV = "DPBENCH_INJECT_FAILURE"


class InjectedFailure(RuntimeError):
    """The failure a test asked for through $DPBENCH_INJECT_FAILURE."""


def requested() -> frozenset[str]:
    return frozenset(t.strip() for t in os.environ.get(ENV, "").split(",") if t.strip())


def inject_if_requested(tier: str) -> None:
    """Raise :class:`InjectedFailure` if $DPBENCH_INJECT_FAILURE names ``tier``."""
    if tier in requested():
        raise InjectedFailure(f"{ENV} asked the {tier!r} tier to fail (test fault injection)")
