"""Virtual time agrees with real time on the smoke trace: a real-clock server is the reference.

A real-clock run measures this machine as much as SGLang: the scheduler's own work takes
wall time, and the forward's sleep starts only when that work is done. Beside three busy
pytest workers it is no reference. On a fresh clone at 6075824 (2026-12-06) its TTFT at the
scheduler read 269 ms against virtual time's 168, and its schedulers' main threads waited
for a CPU 31 % of the run; on CI (2026-12-05) the client's TTFT read 220 against 167. Alone
it reads 171 against 168. So this file is marked ``quiet``: ``make test`` runs it after the
parallel suite, on a machine nothing else uses. No retry: a real run the health rules call
spoiled fails the test, naming why.

Alone is not enough on a slow CPU. On a VM about half as fast per core (2026-12-07) the real
run's device waited for the scheduler's CPU work before 6.5-8.2 % of its decode steps (the
health bound is 5 %), alone, three times here and once on CI. So both runs play the trace at
``TIME_SCALE`` 2: every simulated step and arrival gap takes twice as long, the scheduler's
CPU work does not, and the real reference holds its clock. Measured with the server pinned
to one core (``taskset -c 0``, half this machine): at scale 1 the device waited 2.5-7.1 %
(one of three replays over the bound, and all three over the main threads' 20 %); at scale
2, 0.0-0.5 %, all three valid. The health bound stays as it is.

One virtual-clock server and one real-clock server (0.5.23, DP 2, the same device sync),
each replaying the smoke trace once (without the late request of
``test_server_virtual_clock.py``: real time would wait its 30 s out). Agreement: the step
count within 15 %, TTFT at the scheduler and ITL within 25 %, and the client's TTFT once
the real run's way back to the client (its ``first_token_return``) is taken off.
"""

from __future__ import annotations

import pytest
from simserver import sim_options
from test_server_virtual_clock import CHARGE_MS

from dpbench.server.health import check
from dpbench.server.run import execute_replays, prepare

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.quiet]

SHOWN = ("ttft_ms_p50", "scheduler_ttft_ms_p50", "first_token_return_ms_p50", "itl_ms_p50",
         "steps_count", "server_main_thread_wait_fraction", "device_idle_fraction")  # fmt: skip
TIME_SCALE = 2.0  # steps and arrival gaps twice as long: the real clock holds on a slow CPU


def _one_replay(tmp, **clock) -> dict:
    prep = prepare(sim_options("0.5.23", tmp, max_requests=16, time_scale=TIME_SCALE, **clock))
    return execute_replays(prep, 1)[0]


def test_virtual_and_real_time_agree_on_the_smoke_trace(tmp_path):
    v = _one_replay(tmp_path / "virtual", clock="virtual", pass_charge_ms=CHARGE_MS)["metrics"]
    result = _one_replay(tmp_path / "real", device_sync="group")
    health = check(result)
    real = result["metrics"]
    seen = {k: (real[k]["value"], v.get(k, {}).get("value")) for k in SHOWN}
    why = f"real, virtual: {seen}; real run's health: {health.broken or 'valid'}"
    assert health.valid_for("scheduling") and health.valid_for("client"), why
    assert real["steps_count"]["value"] == pytest.approx(v["steps_count"]["value"], rel=0.15), why
    # TTFT at the scheduler is what the clock claims (the twin's TTFT); the client's TTFT adds
    # the way back (detokenizer, HTTP), which real time pays and virtual time does not
    for key in ("scheduler_ttft_ms_p50", "itl_ms_p50"):
        assert real[key]["value"] == pytest.approx(v[key]["value"], rel=0.25), f"{key}: {why}"
    back = real["first_token_return_ms_p50"]["value"]
    assert real["ttft_ms_p50"]["value"] - back == pytest.approx(v["ttft_ms_p50"]["value"],
                                                               rel=0.25), f"ttft_ms_p50: {why}"  # fmt: skip
