"""The streaming client, load driver, stats and Prometheus parsing against the protocol test double."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import numpy as np
import pytest

from dpbench.core.procs import free_port
from dpbench.server.client import DONE, GenerateRequest, Malformed, parse_sse_line
from dpbench.server.loadgen import Schedule, ScheduleError, drive
from dpbench.server.metrics import ScrapeError, Snapshot, scrape, server_metrics
from dpbench.server.protocol_double import FAULTS, DoubleConfig, DoubleThread
from dpbench.server.stats import Slo, summarize


def _requests(n: int, out_tokens: int = 6, prompt: int = 32) -> list[GenerateRequest]:
    return [GenerateRequest(f"r{i}", list(range(i, i + prompt)), out_tokens) for i in range(n)]


def _double_stats(base_url: str) -> dict:
    with urllib.request.urlopen(f"{base_url}/double/stats") as resp:
        return json.load(resp)


def test_sse_line_parsing():
    assert parse_sse_line(b"\n") is None
    assert parse_sse_line(b": keep-alive\n") is None
    assert parse_sse_line(b"data: [DONE]\n") is DONE
    assert parse_sse_line(b'data: {"output_ids": [1]}\n') == {"output_ids": [1]}
    assert isinstance(parse_sse_line(b'data: {"output_ids": [1,\n'), Malformed)
    assert isinstance(parse_sse_line(b"data: [1, 2]\n"), Malformed)
    assert isinstance(parse_sse_line(b"event: x\n"), Malformed)


@pytest.mark.parametrize("emit_text", [True, False], ids=["text", "skip-tokenizer-init"])
def test_clean_streams_are_timed_and_counted(emit_text):
    cfg = DoubleConfig(first_token_delay_s=0.05, itl_s=0.01, emit_text=emit_text, dp_size=2)
    with DoubleThread(cfg) as d:
        res = asyncio.run(
            drive(_requests(12, out_tokens=6), Schedule.closed_loop(4), base_url=d.base_url)
        )
    assert [o.id for o in res.outcomes] == [f"r{i}" for i in range(12)]
    for o in res.outcomes:
        assert o.ok, o.error
        assert o.output_tokens == 6 and len(o.itl_s) == 5
        assert o.ttft_s is not None and 0.05 <= o.ttft_s < 0.5
        assert o.finish_reason == "length" and o.dp_rank in (0, 1)
        assert o.e2e_s >= 0.05 + 5 * 0.01 - 1e-3  # the double paces tokens from arrival
    m = summarize(res)
    assert m["requests_ok_total"].value == 12 and m["errors_total"].value == 0
    assert 50 <= m["ttft_ms_p50"].value < 500
    assert m["output_tokens_per_s"].value == pytest.approx(72 / res.duration_s)


def test_faults_are_counted_by_kind_and_never_crash_the_run():
    cfg = DoubleConfig(
        first_token_delay_s=0.01,
        itl_s=0.002,
        http_error_every=7,
        disconnect_every=5,
        malformed_every=6,
        server_error_every=11,
        slow_every=4,
        slow_factor=10.0,
    )
    n = 80
    with DoubleThread(cfg) as d:
        res = asyncio.run(
            drive(_requests(n, out_tokens=8), Schedule.closed_loop(10), base_url=d.base_url)
        )
        assigned = _double_stats(d.base_url)["faults"]
    kinds = {
        k: sum(o.error_kind == k for o in res.outcomes)
        for k in ("http", "disconnect", "malformed", "server_error")
    }
    # The double assigns faults by arrival order; the client must see exactly as many of each.
    assert kinds == {
        "http": assigned["http_error"],
        "disconnect": assigned["disconnect"],
        "malformed": assigned["malformed"],
        "server_error": assigned["server_error"],
    }
    assert all(v > 0 for v in kinds.values()) and assigned["slow"] > 0
    m = summarize(res)
    assert m["errors_total"].value == sum(kinds.values())
    assert m["errors_http_total"].value == assigned["http_error"]
    assert m["malformed_chunks_total"].value == assigned["malformed"]
    assert m["requests_ok_total"].value == n - sum(kinds.values())
    http = [o for o in res.outcomes if o.error_kind == "http"]
    assert all(o.http_status == 503 for o in http)
    # Slow streams complete, just later: their per-token gap is ~slow_factor × itl.
    ok_itl = sorted(np.mean(o.itl_s) for o in res.outcomes if o.ok)
    assert ok_itl[-1] > 5 * ok_itl[0]


def test_unreachable_server_is_a_connect_error_not_a_crash():
    port = free_port()
    res = asyncio.run(
        drive(_requests(3), Schedule.closed_loop(3), base_url=f"http://127.0.0.1:{port}")
    )
    assert [o.error_kind for o in res.outcomes] == ["connect"] * 3


def test_open_loop_sends_at_the_scheduled_offsets():
    rng = np.random.default_rng(7)
    sched = Schedule.poisson(20, rate_per_s=40.0, rng=rng)
    again = Schedule.poisson(20, rate_per_s=40.0, rng=np.random.default_rng(7))
    assert np.array_equal(sched.offsets_s, again.offsets_s)  # same seed, same schedule
    with DoubleThread(DoubleConfig(first_token_delay_s=0.005, itl_s=0.001)) as d:
        res = asyncio.run(drive(_requests(20, out_tokens=3), sched, base_url=d.base_url))
    starts = np.array([o.start_s for o in res.outcomes]) - res.t0
    # Sends follow the plan: no drift, at most a few ms late on a loaded machine.
    assert np.all(starts >= sched.offsets_s - 1e-3)
    assert np.max(starts - sched.offsets_s) < 0.05
    assert len(res.send_lateness_s) == 20
    assert "client_send_lateness_ms_p99" in summarize(res)


def test_schedule_validation():
    with pytest.raises(ScheduleError, match="sorted"):
        Schedule.from_arrivals([0.0, 2.0, 1.0])
    with pytest.raises(ScheduleError, match="either"):
        Schedule()
    with pytest.raises(ScheduleError, match="concurrency must be ≥ 1"):
        Schedule.closed_loop(0)


def test_goodput_counts_only_requests_within_both_slos():
    with DoubleThread(
        DoubleConfig(first_token_delay_s=0.03, itl_s=0.002, slow_every=2, slow_factor=20.0)
    ) as d:
        res = asyncio.run(
            drive(_requests(10, out_tokens=5), Schedule.closed_loop(5), base_url=d.base_url)
        )
    loose = summarize(res, Slo(ttft_ms=10_000, tpot_ms=10_000))
    strict_tpot = summarize(res, Slo(ttft_ms=10_000, tpot_ms=20))  # slow streams: ~40 ms/token
    strict_ttft = summarize(res, Slo(ttft_ms=1, tpot_ms=10_000))  # nobody beats a 30 ms first token
    per_s = 1 / res.duration_s
    assert loose["goodput_requests_per_s"].value == pytest.approx(10 * per_s)
    assert strict_tpot["goodput_requests_per_s"].value == pytest.approx(5 * per_s)
    assert strict_ttft["goodput_requests_per_s"].value == 0


SGLANG_EXPOSITION = """\
# HELP sglang:prefill_delayer_outcomes_total Prefill delayer outcome counts.
# TYPE sglang:prefill_delayer_outcomes_total counter
sglang:prefill_delayer_outcomes_total{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0",dp_rank="0",input_estimation="all",output_allow="true",output_reason="no_wait",actual_execution="true"} %d
sglang:prefill_delayer_outcomes_total{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0",moe_ep_rank="0",dp_rank="1",input_estimation="all",output_allow="true",output_reason="no_wait",actual_execution="true"} %d
sglang:prefill_delayer_outcomes_total{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0",moe_ep_rank="0",dp_rank="1",input_estimation="mixed",output_allow="false",output_reason="delay",actual_execution="false"} %d
# HELP sglang:prefill_delayer_wait_seconds Seconds waited.
# TYPE sglang:prefill_delayer_wait_seconds histogram
sglang:prefill_delayer_wait_seconds_bucket{dp_rank="0",le="0.0"} %d
sglang:prefill_delayer_wait_seconds_bucket{dp_rank="0",le="1.0"} %d
sglang:prefill_delayer_wait_seconds_bucket{dp_rank="0",le="+Inf"} %d
sglang:prefill_delayer_wait_seconds_count{dp_rank="0"} %d
sglang:prefill_delayer_wait_seconds_sum{dp_rank="0"} %f
# HELP sglang:token_usage KV token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0"} %f
sglang:token_usage{dp_rank="1"} %f
"""


def test_prometheus_deltas_by_label_and_rank():
    before = Snapshot.parse(SGLANG_EXPOSITION % (10, 4, 1, 2, 3, 3, 3, 0.5, 0.1, 0.2))
    after = Snapshot.parse(SGLANG_EXPOSITION % (15, 4, 7, 2, 6, 9, 9, 3.5, 0.9, 0.95))
    sm = server_metrics(before, after)
    assert sm.delayer_outcomes == {"all/true/no_wait/true": 5.0, "mixed/false/delay/false": 6.0}
    h = sm.wait_histograms["sglang:prefill_delayer_wait_seconds"]
    assert (
        h["count"] == 6
        and h["sum"] == pytest.approx(3.0)
        and h["buckets"] == {"+Inf": 6.0, "0.0": 0.0, "1.0": 3.0}
    )
    assert sm.token_usage["sglang:token_usage"] == {"0": 0.9, "1": 0.95}
    key = (
        "sglang:prefill_delayer_outcomes_total{actual_execution=true,input_estimation=all,"
        "output_allow=true,output_reason=no_wait}"
    )
    assert sm.per_dp_rank[key] == {"0": 5.0, "1": 0.0}
    m = sm.as_metrics()
    assert m["delayer_outcomes_total"].value == 11 and m[
        "delayer_delay_fraction"
    ].value == pytest.approx(6 / 11)
    # the gauge read once after the run is the pool's state then, not a maximum: not a metric
    assert "kv_token_usage_fraction_max" not in m


def test_scrape_of_the_double_matches_its_requests():
    with DoubleThread(
        DoubleConfig(first_token_delay_s=0.001, itl_s=0.001, http_error_every=5, dp_size=4)
    ) as d:
        before = scrape(d.base_url)
        asyncio.run(
            drive(_requests(20, out_tokens=2), Schedule.closed_loop(4), base_url=d.base_url)
        )
        after = scrape(d.base_url)
        stats = _double_stats(d.base_url)
    sm = server_metrics(before, after)
    admitted = stats["requests"] - stats["faults"].get("http_error", 0)
    assert sum(sm.delayer_outcomes.values()) == admitted == 16
    steps = next(
        v
        for k, v in sm.per_dp_rank.items()
        if k.startswith("sglang:dp_attention_steps_total{rank_state=active")
    )
    assert sorted(steps) == ["0", "1", "2", "3"] and sum(steps.values()) == 2 * admitted


def test_scrape_errors_say_what_to_check():
    with pytest.raises(ScrapeError, match="--enable-metrics"):
        scrape(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(ScrapeError, match="not valid Prometheus"):
        Snapshot.parse("sglang:x notanumber\n")


def test_fault_names_are_what_the_double_documents():
    assert set(FAULTS) == {"http_error", "disconnect", "malformed", "server_error", "slow"}


def test_client_comparison_reports_rate_and_ttft_error():
    """The side-by-side harness (benchmarks/server.py), this client only, at toy size."""
    from dpbench.server.client_bench import ComparisonConfig, compare

    cfg = ComparisonConfig(
        num_requests=30, concurrency=10, output_len=3, first_token_delay_s=0.05, itl_s=0.01
    )
    res = compare(cfg, sglang_python=None)
    (row,) = res["clients"]
    assert row["client"] == "dpbench" and row["completed"] == 30 and row["errors"] == 0
    assert 0 < row["request_rate_per_s"] <= cfg.ideal_request_rate_per_s * 1.05
    assert (
        row["ttft_error_ms_p50"] >= 0
    )  # a client cannot see the first token before the double sends it
    assert res["ideal_request_rate_per_s"] == pytest.approx(10 / 0.07)


def test_no_delayer_counter_means_no_delayer_count():
    """Delayer off: the server exports no outcome counter, so the count is absent, not 0."""
    from dpbench.server.metrics import ServerMetrics

    sm = ServerMetrics(
        delayer_outcomes={}, wait_histograms={}, token_usage={}, per_dp_rank={}, exported=[]
    )
    m = sm.as_metrics()
    assert "delayer_outcomes_total" not in m and "delayer_delay_fraction" not in m
    exported = ServerMetrics(
        delayer_outcomes={},
        wait_histograms={},
        token_usage={},
        per_dp_rank={},
        exported=["sglang:prefill_delayer_outcomes_total"],
    )
    assert exported.as_metrics()["delayer_outcomes_total"].value == 0


def test_delay_fraction_over_prefillable_passes_leaves_out_passes_with_nothing_to_prefill():
    """One definition for both tiers: the server's idle passes (``none``) count in the
    every-outcome fraction only."""
    from dpbench.metrics.outcomes import delay_fractions

    m = delay_fractions([("none", "true", 30.0), ("mixed", "false", 6.0), ("all", "true", 4.0)])
    assert m["delayer_delay_fraction"].value == pytest.approx(6 / 40)
    assert m["delayer_delay_fraction_prefillable"].value == pytest.approx(6 / 10)
    only_idle = delay_fractions([("none", "true", 12.0)])
    assert "delayer_delay_fraction_prefillable" not in only_idle  # nothing decided: absent
    assert delay_fractions([]) == {}


def test_prefix_hits_are_sglangs_cached_tokens_and_absent_when_unsaid():
    from dpbench.server.client import RequestOutcome
    from dpbench.server.loadgen import LoadResult, LoopLag
    from dpbench.server.stats import prefix_hits_by_rank, summarize

    def out(rid, rank, prompt, cached, ok=True):
        return RequestOutcome(
            id=rid, input_tokens=prompt, ok=ok, ttft_s=0.1, e2e_s=0.2, output_tokens=2,
            itl_s=[0.1], dp_rank=rank, cached_tokens=cached,
        )  # fmt: skip

    def load(outs):
        return LoadResult(
            outcomes=outs, duration_s=1.0, schedule_kind="open", send_lateness_s=[],
            loop_lag=LoopLag(), t0=0.0,
        )  # fmt: skip

    outs = [out("a", 0, 1000, 0), out("b", 0, 1000, 512), out("c", 1, 2000, 1536),
            out("d", 1, 500, 400, ok=False)]  # fmt: skip
    m = summarize(load(outs))
    assert m["prefix_hit_rate"].value == pytest.approx((512 + 1536) / 4000)  # completed only
    assert prefix_hits_by_rank(outs) == [
        {"rank": 0, "requests": 2, "prompt_tokens": 2000, "cached_tokens": 512, "hit_rate": 0.256},
        {"rank": 1, "requests": 1, "prompt_tokens": 2000, "cached_tokens": 1536, "hit_rate": 0.768},
    ]
    # a server that does not say (no meta_info.cached_tokens): not measured, so absent
    unsaid = [out("a", 0, 1000, None), out("b", 0, 1000, 512)]
    assert "prefix_hit_rate" not in summarize(load(unsaid))


class _RunningVirtualClock:
    """A virtual load clock that moves on whenever it is read (as the shared clock may once
    a token is counted), paced like the wall clock otherwise."""

    virtual = True

    def __init__(self) -> None:
        self.t0, self.reads = time.perf_counter(), 0

    def now(self) -> float:
        self.reads += 1
        return time.perf_counter() - self.t0 + self.reads  # one virtual second a read

    def begin(self) -> float:
        return self.now()

    def end(self) -> float:
        return self.now()

    async def sleep_until(self, t: float) -> None:
        return None

    def sending(self, next_send: float | None) -> None:
        return None

    def tokens(self, n: int) -> None:
        return None


def test_a_virtual_request_ends_at_its_last_token_not_when_done_is_read():
    """On the virtual clock nothing holds the clock between a request's last token and its
    ``[DONE]``: the end read there would move with this machine's timing. It is the last
    token's arrival instead; the wall clock still reads the end after ``[DONE]``."""
    cfg = DoubleConfig(first_token_delay_s=0.0, itl_s=0.0, dp_size=1)
    with DoubleThread(cfg) as d:
        clock = _RunningVirtualClock()
        res = asyncio.run(
            drive(
                _requests(1, out_tokens=3),
                Schedule(offsets_s=np.array([0.0])),
                base_url=d.base_url,
                clock=clock,
            )
        )
    (o,) = res.outcomes
    assert o.ok, o.error
    # each token chunk is read once before its count: the last chunk's read is the end
    assert o.ttft_s is not None and o.e2e_s == pytest.approx(o.ttft_s + sum(o.itl_s))
    assert clock.reads > 0 and o.e2e_s < clock.reads - 1
