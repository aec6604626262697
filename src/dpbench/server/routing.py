"""Which DP rank each request goes to: SGLang's own DP controller, or the load client as router.

With ``dispatch: cache_aware`` the load client routes in front of the server as SGLang's
router does (:class:`dpbench.twin.router.CacheAwareRouter`, the twin's router) and sends each
request's rank as ``routed_dp_rank``; the run result keeps every decision.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dpbench.server.client import GenerateRequest, RequestOutcome, sglang_generate
from dpbench.twin.router import CacheAwareRouter


def routed_requests(
    route_keys: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] | None, dp_size: int
) -> Any:
    """The load client's request function: SGLang's own dispatch (``route_keys`` None), or
    cache-aware routing in front of the server: at each send, the rank whose routed prompts
    share the longest prefix unless the in-flight loads are imbalanced, sent as
    ``routed_dp_rank``. The routed function's ``decisions`` map request id → rank."""
    if route_keys is None:
        return sglang_generate
    router = CacheAwareRouter(dp_size)
    in_flight = [0] * dp_size
    decisions: dict[str, int] = {}

    async def routed(session: Any, base_url: str, request: GenerateRequest) -> RequestOutcome:
        rank = router.route(*route_keys[request.id], in_flight)
        decisions[request.id] = rank
        in_flight[rank] += 1
        try:
            return await sglang_generate(session, base_url, replace(request, routed_dp_rank=rank))
        finally:
            in_flight[rank] -= 1

    routed.decisions = decisions  # type: ignore[attr-defined]  # the run result keeps them
    return routed
