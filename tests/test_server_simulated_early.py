"""``test_server_simulated.py``'s checks on SGLang 0.5.16 (the early placement): one server,
every assertion about its run shares it (a file of its own: pytest's workers take files, so
this server starts beside 0.5.23's instead of after it)."""

from __future__ import annotations

import pytest
from test_server_simulated import *  # noqa: F403  (the same tests, collected here too)
from test_server_simulated import served

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


@pytest.fixture(scope="module", params=["0.5.16"])
def sim_run(request, tmp_path_factory):
    return served(request.param, tmp_path_factory)
