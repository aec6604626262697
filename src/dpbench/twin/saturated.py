"""A single twin rank in a fixed, KV-saturated state, for timing one scheduler pass (asv ``time_`` benchmark).

The rank runs SGLang's real ``PrefillAdder`` and ``PrefillDelayer`` (over a gloo group
of one process). Its running batch holds most of the KV pool and its waiting queue
holds prompts that no longer fit, so every :func:`admission_pass` is the same pass:
build the executor and the adder, ``add_one_req`` → ``NO_TOKEN``, ``finalize``, then
the decode check. ``plan`` does not apply the step, so the state does not drift.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpbench.twin.config import SchedulerSettings
from dpbench.twin.scheduler import RankScheduler, TrackedReq

KV_TOKENS = 100_000


def saturated_rank(
    *, running: int = 20, prompt: int = 4000, waiting: int = 16
) -> tuple[RankScheduler, Callable[[], None]]:
    """A rank whose KV pool is ~80 % full of decoding requests with ``waiting`` prompts that do not fit."""
    import torch.distributed as dist

    from dpbench.core.procs import free_port
    from dpbench.sglang_compat import delayer as compat
    from dpbench.sglang_compat.adder import AdderKit
    from dpbench.sglang_compat.scheduling import (
        delayer_needs_runtime_context,
        resolve_scheduler_defaults,
    )

    settings = SchedulerSettings()
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
        )
    if delayer_needs_runtime_context():
        compat.publish_runtime_context(1, compat.DelayerSettings())
    kit = AdderKit(page_size=settings.page_size)
    collector = compat.RecordingCollector()
    delayer = compat.build_delayer(
        dp_size=1,
        cpu_group=dist.group.WORLD,
        settings=compat.DelayerSettings(),
        metrics_collector=collector,
    )
    rank = RankScheduler(
        kit=kit,
        settings=settings,
        defaults=resolve_scheduler_defaults(
            dp_size=1, tp_size=1, chunked_prefill_size=settings.chunked_prefill_size
        ),
        kv_tokens=KV_TOKENS,
        delayer=delayer,
        collector=collector,
    )

    def add(i: int, n: int, out: int) -> None:
        req = kit.new_req(
            f"bench{i}", [1 + (i + j) % 1000 for j in range(n)], max_new_tokens=out, ignore_eos=True
        )
        rank.enqueue(TrackedReq(i, req, 0.0, out))

    for i in range(running):
        add(i, prompt, 512)
    steps = 0
    while rank.waiting or rank.chunked is not None:
        rank.complete(rank.plan())
        steps += 1
        if steps > 10 * running:
            raise RuntimeError(
                f"could not admit {running} × {prompt}-token prompts into {KV_TOKENS} KV tokens"
            )
    for i in range(waiting):
        add(running + i, 4 * prompt, 512)

    def close() -> None:
        if owned and dist.is_initialized():
            dist.destroy_process_group()

    return rank, close


def admission_pass(rank: RankScheduler) -> Any:
    """One pass that reaches the adder: SGLang clears ``batch_is_full`` when a request leaves; do it here."""
    rank.batch_is_full = False
    return rank.plan()
