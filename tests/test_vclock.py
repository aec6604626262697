"""The virtual clock's rules (sglang_compat/simforward/vclock.py), on real shared files and processes.

Each rule of the contract gets a case where the clock must not jump and one where it must;
a last test runs two "ranks" and a client in three processes through one clock file.
"""

from __future__ import annotations

import math
import multiprocessing as mp

import pytest

from dpbench.sglang_compat.simforward.vclock import (
    ACTIVE,
    IDLE,
    WAIT,
    ClockStalled,
    VirtualClock,
)


@pytest.fixture
def clock(tmp_path):
    c = VirtualClock(tmp_path / "clock.f64", 2, create=True)
    yield c
    c.close()


def _both(clock, state, target=0.0):
    for r in range(2):
        clock.set_state(r, state, target)


def test_a_fresh_clock_starts_at_an_active_rank_and_never_jumps(clock):
    t = clock.now()
    assert clock.jump_target() is None and not clock.try_advance() and clock.now() == t


def test_waiting_ranks_jump_to_the_earliest_target(clock):
    t = clock.now()
    clock.set_state(0, WAIT, t + 0.5)
    clock.set_state(1, WAIT, t + 0.2)
    assert clock.try_advance() and clock.now() == t + 0.2
    # rank 1's target is reached: it is about to wake, so nothing jumps until it blocks again
    assert not clock.try_advance() and clock.now() == t + 0.2


def test_an_active_rank_holds_the_clock(clock):
    t = clock.now()
    clock.set_state(0, WAIT, t + 1)
    clock.set_state(1, ACTIVE)
    assert not clock.try_advance()


def test_an_idle_rank_beside_a_waiting_one_holds_the_clock(clock):
    """It is about to join the waiting ranks' next step (an idle forward)."""
    t = clock.now()
    clock.set_state(0, WAIT, t + 1)
    clock.set_state(1, IDLE)
    assert not clock.try_advance()


def test_all_idle_jumps_to_the_clients_next_send_and_not_further(clock):
    t = clock.attach()
    _both(clock, IDLE)
    assert clock.jump_target() is None  # no send due: nothing to jump to
    clock.set_next_send(t + 3.0)
    assert clock.try_advance() and clock.now() == t + 3.0
    clock.set_state(0, WAIT, t + 10.0)
    clock.set_state(1, WAIT, t + 10.0)
    clock.set_next_send(t + 4.0)
    assert clock.try_advance() and clock.now() == t + 4.0  # the send comes before the device


def test_a_request_on_its_way_holds_the_clock_until_a_rank_has_it(clock):
    t = clock.attach()
    _both(clock, WAIT, t + 1.0)
    clock.add_sent(1)  # sent, not yet dispatched by SGLang's DP controller
    assert not clock.try_advance()
    clock.add(1, "dispatched", 1)  # sent to rank 1's socket; rank 1 is blocked on its device
    assert not clock.try_advance()  # not read off the socket yet
    clock.add(1, "arrived", 1)  # the waiting rank read it: the next receive takes it in
    assert clock.try_advance() and clock.now() == t + 1.0
    clock.add(1, "received", 1)  # rank 1 woke and took it in
    # an idle rank with a dispatched request it has not taken in is not blocked
    _both(clock, IDLE)
    clock.set_next_send(t + 5.0)
    clock.add_sent(1)
    clock.add(0, "dispatched", 1)
    clock.add(0, "arrived", 1)
    assert not clock.try_advance()
    clock.add(0, "received", 1)
    assert clock.try_advance() and clock.now() == t + 5.0


def test_an_output_token_on_its_way_holds_the_clock(clock):
    t = clock.attach()
    _both(clock, WAIT, t + 1.0)
    clock.add(0, "emitted", 3)
    assert not clock.try_advance()
    clock.add_consumed(2)
    assert not clock.try_advance()
    clock.add_consumed(1)
    assert clock.try_advance()


def test_attach_counts_from_the_servers_totals_and_moves_the_clock_on(clock):
    """SGLang's own warm-up request is not the client's: attaching starts from what exists."""
    clock.add(0, "dispatched", 1)
    clock.add(0, "received", 1)
    clock.add(0, "emitted", 1)
    t = clock.now()
    t1 = clock.attach()
    assert t1 > t
    snap = clock.snapshot()
    assert snap["sent"] == 1 and snap["consumed"] == 1 and snap["attached"]
    clock.detach()
    assert not clock.snapshot()["attached"] and math.isinf(clock.snapshot()["next_send"])


def test_the_client_sends_only_when_every_rank_is_blocked(clock):
    t = clock.attach()
    clock.set_state(0, WAIT, t + 1)
    clock.set_state(1, ACTIVE)
    assert not clock.quiescent()
    clock.set_state(1, IDLE)
    assert clock.quiescent()
    clock.add_sent(1)
    assert not clock.quiescent() and not clock.all_dispatched()
    clock.add(1, "dispatched", 1)
    assert clock.all_dispatched() and not clock.quiescent()  # idle rank 1 must take it in
    clock.add(1, "received", 1)
    assert clock.quiescent()


def test_a_clock_file_of_another_size_is_refused(tmp_path):
    VirtualClock(tmp_path / "c.f64", 2, create=True).close()
    with pytest.raises(ValueError, match="not a virtual clock of 4 ranks"):
        VirtualClock(tmp_path / "c.f64", 4)


def _rank(path, rank, steps, out):
    """A rank that runs ``steps`` forwards of 0.1 s each, then goes idle."""
    c = VirtualClock(path, 2)
    ends = []
    for _ in range(steps):
        c.wait_until(rank, c.now() + 0.1)
        ends.append(c.now())
    c.set_state(rank, IDLE)
    out.put((rank, ends))


def test_two_rank_processes_and_a_client_share_one_clock(tmp_path):
    """Real processes: the ranks' device waits jump the clock in 0.1 s steps (both wait for the
    same target, as a group end makes them), then the idle ranks let the client's send at
    +5 s jump it there; no wall time is spent on either."""
    path = tmp_path / "clock.f64"
    main = VirtualClock(path, 2, create=True)
    t0 = main.attach()
    main.set_next_send(t0 + 5.0)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(path, r, 3, out)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    for r in range(2):
        assert got[r] == pytest.approx([t0 + 0.1, t0 + 0.2, t0 + 0.3], abs=1e-9)
    deadline = 0
    while main.now() < t0 + 5.0 and deadline < 10_000:
        main.try_advance()
        deadline += 1
    assert main.now() == t0 + 5.0
    main.close()


def _charger(path, rank, costs, out):
    """A rank that publishes a measured cost for each of its charges and reports what it got."""
    c = VirtualClock(path, 2)
    got = []
    for cost in costs:
        got.append(c.charge_all(rank, cost, timeout_s=30))
        c.wait_until(rank, c.now() + got[-1])
    out.put((rank, got, c.now()))


def test_a_measured_charge_is_the_largest_over_the_ranks_for_each_pass(tmp_path):
    """Two rank processes publish different costs for the same charges: both get the larger
    one each time, and their clock waits then move virtual time by exactly that."""
    path = tmp_path / "clock.f64"
    main = VirtualClock(path, 2, create=True)
    t0 = main.now()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    costs = {0: [0.002, 0.010, 0.003], 1: [0.005, 0.001, 0.003]}
    procs = [ctx.Process(target=_charger, args=(path, r, costs[r], out)) for r in range(2)]
    for p in procs:
        p.start()
    got = {r: (charges, end) for r, charges, end in (out.get(timeout=60) for _ in procs)}
    for p in procs:
        p.join(timeout=30)
    for r in range(2):
        assert got[r][0] == [0.005, 0.010, 0.003]
        assert got[r][1] == pytest.approx(t0 + 0.018, abs=1e-9)
    assert [r["charges"] for r in main.snapshot()["ranks"]] == [3, 3]
    main.close()


def test_a_rank_that_never_charges_stalls_the_charge_by_name(clock):
    with pytest.raises(ClockStalled, match="charge 1: not every rank charged within"):
        clock.charge_all(0, 0.001, timeout_s=0.05)
    with pytest.raises(ValueError, match="finite number"):
        clock.charge_all(1, math.nan)
