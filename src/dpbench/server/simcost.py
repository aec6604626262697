"""The simulated forward's time: the twin's cost model, asked about one DP rank's own batch.

Every SGLang scheduler process of a simulated-forward server calls :func:`rank_cost`'s
result once per forward (named in the stand-in's config, so ``sglang_compat`` never
imports this). A rank is charged its own attention and LM head plus the parts every
rank runs over all ranks' tokens (MoE, collectives, dense MLP); the other ranks enter
as token counts only (SGLang's MLP-sync gather, ``global_num_tokens``). The ranks then
meet at SGLang's own MLP-sync all-gather before the next forward, so a step lasts as
long as its slowest rank — the twin's ``max over ranks`` made by real processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dpbench.twin.cost import RankWork, cost_block, make_cost_model
from dpbench.twin.profiles import DEFAULT_PROFILE
from dpbench.workload.models import load_model_config

FACTORY = "dpbench.server.simcost:rank_cost"

RankCost = Callable[[dict[str, Any], Sequence[int], int], float]


def cost_model(
    model: str, dp_size: int, calibration: str | None = None, profile: str = DEFAULT_PROFILE
) -> Any:
    """The twin's execution-time model for ``model`` at ``dp_size`` (its public factory)."""
    return make_cost_model(load_model_config(model), dp_size, calibration, profile=profile)


def rank_cost(
    model: str, dp_size: int, calibration: str | None = None, profile: str = DEFAULT_PROFILE
) -> RankCost:
    """cost(own_work, tokens_per_rank, rank) -> seconds of this rank's forward."""
    cm = cost_model(model, dp_size, calibration, profile)

    def cost(own: dict[str, Any], global_tokens: Sequence[int], rank: int) -> float:
        if len(global_tokens) != dp_size:
            raise ValueError(
                f"global_num_tokens has {len(global_tokens)} entries for {dp_size} DP ranks: "
                "the cost of a DP step needs every rank's tokens (a missing rank is not 0 tokens)"
            )
        ranks = []
        for r in range(dp_size):
            if r == rank:
                ranks.append(RankWork(**own))
            else:
                ranks.append(RankWork("idle", new_tokens=int(global_tokens[r])))
        return float(cm.step_time(ranks))

    return cost


def describe(
    model: str, dp_size: int, calibration: str | None = None, profile: str = DEFAULT_PROFILE
) -> dict[str, Any]:
    cm = cost_model(model, dp_size, calibration, profile)
    return {
        "name": str(cm.name),
        "description": cm.describe(),
        "model": model,
        "cost": cost_block(cm),
    }
