"""``test_server_production_trace.py``'s Mooncake window on SGLang 0.5.16 (the early
placement), a file of its own: pytest's workers take files, so this server runs beside
0.5.23's instead of after it."""

from __future__ import annotations

import pytest
from test_server_production_trace import (  # noqa: F401  (collected here too)
    test_the_server_and_the_replayed_twin_agree_on_a_mooncake_window,
)

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


@pytest.fixture(params=[("0.5.16", "round_robin")], ids=lambda p: "-".join(p))
def setting(request):
    return request.param
