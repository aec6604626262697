"""The lockstep's two contracts, asserted: thread ranks issue the same collectives in the same
order, and the overlap lag keeps its invariant (no SGLang needed)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from dpbench.twin.lag import ResultLag
from dpbench.twin.threads import Baton, BatonAborted


def _ranks(baton: Baton, plans: dict[int, list[str]]) -> dict[int, object]:
    out: dict[int, object] = {}

    def main(rank: int) -> None:
        try:
            baton.begin(rank)
            out[rank] = [
                baton.gather(rank, rank * 10 + i, tag) for i, tag in enumerate(plans[rank])
            ]
            baton.end(rank)
        except BatonAborted as exc:
            out[rank] = exc

    threads = [threading.Thread(target=main, args=(r,)) for r in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    return out


def test_ranks_taking_turns_gather_every_contribution_and_count_them():
    baton = Baton(2, timeout_s=5)
    out = _ranks(baton, {0: ["step", "delayer"], 1: ["step", "delayer"]})
    assert out == {0: [[0, 10], [1, 11]], 1: [[0, 10], [1, 11]]}
    assert baton.counts() == [2, 2]


def test_a_rank_issuing_another_collective_aborts_the_run_naming_both():
    baton = Baton(2, timeout_s=5)
    out = _ranks(baton, {0: ["step"], 1: ["delayer"]})
    assert all(isinstance(v, BatonAborted) for v in out.values()), out
    assert "collective 0: rank 0 step, rank 1 delayer" in str(out[0])


def _t(i: int) -> SimpleNamespace:
    return SimpleNamespace(index=i)


def test_the_overlap_lag_releases_a_step_late_and_keeps_its_invariant():
    lag = ResultLag(overlap=True, filter_at_decode=True)
    a, b = _t(1), _t(2)
    release, cache = lag.step_done([a], [(b, 100)])
    assert (release, cache) == ([], [])  # step k's results wait for step k+1
    assert lag.is_lagged(a) and not lag.is_lagged(b)
    lag.check([a, b])
    with pytest.raises(AssertionError, match=r"not in the running batch \[1\]"):
        lag.check([b])  # a lagged request must still hold its slot
    release, cache = lag.step_done([], [])
    assert release == [a] and cache == [(b, 100)]
    assert lag.released(release) is False  # 0.5.16/0.5.17: it stays until the next decode
    lag.check([a, b])
    assert lag.take_finished_in_running() == {1} and lag.take_finished_in_running() == set()
    off = ResultLag(overlap=False, filter_at_decode=False)
    assert off.step_done([a], [(b, 5)]) == ([a], [(b, 5)]) and off.released([a]) is True


def test_a_retracted_request_is_not_cached_with_a_later_step():
    lag = ResultLag(overlap=True, filter_at_decode=False)
    b = _t(2)
    lag.step_done([], [(b, 64)])
    lag.retracted([b])
    assert lag.step_done([], []) == ([], [])
