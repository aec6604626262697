"""TTFT, ITL, TPOT, E2E and goodput, pinned on hand-built timelines through both tiers' code paths
(the twin's rank results and the load client's request outcomes): one definition."""

from __future__ import annotations

import numpy as np
import pytest

from dpbench.metrics.latency import RequestLatency, Slo, latency_metrics


def _values(m, name):
    return {k: m[k].value for k in m if k.startswith(name)}


def test_latencies_as_bench_serving_defines_them():
    # a: sent at 0, tokens at 1.0, 1.1, 1.2, 2.2 (one long gap); b: sent at 0.5, tokens at 1.0, 1.5
    a = RequestLatency.from_token_times(0.0, [1.0, 1.1, 1.2, 2.2])
    b = RequestLatency.from_token_times(0.5, [1.0, 1.5])
    assert (a.ttft_s, a.e2e_s, a.output_tokens) == (1.0, 2.2, 4)
    assert a.itl_s == pytest.approx([0.1, 0.1, 1.0])
    assert a.tpot_s == pytest.approx((2.2 - 1.0) / 3)
    m = latency_metrics([a, b], duration_s=2.0, slo=Slo(ttft_ms=800.0, tpot_ms=500.0))
    assert m["ttft_ms_p50"].value == pytest.approx(750.0)  # 1000 and 500
    assert m["itl_ms_mean"].value == pytest.approx(np.mean([100, 100, 1000, 500]))
    assert m["itl_ms_p99"].value == pytest.approx(np.percentile([100, 100, 1000, 500], 99))
    assert m["tpot_ms_p50"].value == pytest.approx(np.median([400.0, 500.0]))
    assert m["e2e_ms_p50"].value == pytest.approx(np.median([2200.0, 1000.0]))
    # a misses the TTFT SLO (1000 > 800 ms); b meets both (TTFT 500, TPOT 500)
    assert m["goodput_requests_per_s"].value == pytest.approx(1 / 2.0)
    empty = latency_metrics([], 1.0)
    assert list(empty) == ["goodput_requests_per_s"] and empty["goodput_requests_per_s"].value == 0
    one = RequestLatency.from_token_times(0.0, [0.3])
    assert one.tpot_s is None and one.itl_s == [] and Slo(ttft_ms=500).met(one)


def test_the_twin_and_the_load_client_give_the_same_numbers_for_the_same_timeline():
    from dpbench.server.client import RequestOutcome
    from dpbench.server.loadgen import LoadResult, LoopLag
    from dpbench.server.stats import summarize

    tokens = {"a": (0.0, [1.0, 1.1, 1.2, 2.2]), "b": (0.5, [1.0, 1.5])}
    twin = latency_metrics([RequestLatency.from_token_times(s, t) for s, t in tokens.values()], 2.0)
    outs = [  # what the client measures: TTFT, E2E and the gaps, from the send
        RequestOutcome(
            id=rid, input_tokens=8, ok=True, ttft_s=t[0] - sent, e2e_s=t[-1] - sent,
            itl_s=np.diff(t).tolist(), output_tokens=len(t),
        )
        for rid, (sent, t) in tokens.items()
    ]  # fmt: skip
    load = LoadResult(
        outcomes=outs, duration_s=2.0, schedule_kind="open", send_lateness_s=[],
        loop_lag=LoopLag(), t0=0.0,
    )  # fmt: skip
    server = summarize(load)
    for name in ("ttft", "itl", "tpot", "e2e", "goodput"):
        assert _values(server, name) == pytest.approx(_values(twin, name)), name
