"""Shared pytest set-up: the SGLang releases the tests run, and per-release environments."""

from __future__ import annotations

import pytest

# The real wheels the CPU tests exercise: the before/after pair of PR #31835 and the newest.
TEST_RELEASES = ("0.5.16", "0.5.17", "0.5.23")


@pytest.fixture(scope="session")
def release_env():
    """Build-or-reuse an SGLang release environment: ``release_env("0.5.23").python``."""
    from dpbench.envs import ensure_env

    return ensure_env
