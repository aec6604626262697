"""The simulated forward's coupled virtual devices (no SGLang needed)."""

from __future__ import annotations

from dpbench.sglang_compat.simforward.standin import DeviceClock


def test_a_step_starts_on_every_rank_after_the_slowest_ranks_previous_step(tmp_path):
    path = tmp_path / "device-clock.f64"
    ranks = [DeviceClock(path, 3, r) for r in range(3)]  # three processes sharing the file
    assert ranks[0].start(0, launch=5.0) == 5.0
    for r, end in enumerate((10.0, 12.5, 11.0)):  # step 0 ends at different times per rank
        ranks[r].publish(0, end)
    # step 1 may be launched early (overlap schedule) but starts after rank 1's step 0
    assert [c.start(1, launch=9.0) for c in ranks] == [12.5, 12.5, 12.5]
    assert ranks[2].start(1, launch=13.0) == 13.0  # a late launch starts when launched
    # step 1's ends go to the other half: a rank already at step 1 does not disturb the
    # reading of step 0 by a rank still launching step 1
    ranks[0].publish(1, 20.0)
    assert ranks[1].start(1, launch=9.0) == 12.5
    for r in (1, 2):
        ranks[r].publish(1, 21.0)
    assert ranks[0].start(2, launch=0.0) == 21.0
