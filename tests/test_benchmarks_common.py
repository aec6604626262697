"""The asv suites' metric reading: a delayer metric is NaN only when the delayer was off."""

from __future__ import annotations

import math

import pytest

from benchmarks.common import delayer_metric


def _result(**metrics: float) -> dict:
    return {"metrics": {k: {"value": v} for k, v in metrics.items()}}


def test_delayer_metric_is_not_measured_only_with_the_delayer_off():
    assert math.isnan(delayer_metric(_result(ttft_ms_p50=1.0), "delayer_delay_count", "off"))
    assert delayer_metric(_result(delayer_delay_count=7), "delayer_delay_count", "on") == 7


def test_a_delayer_on_run_missing_a_delayer_metric_fails_naming_it():
    """A renamed counter or a broken scrape must not read as "not measured"."""
    with pytest.raises(KeyError, match="delayer_delay_fraction"):
        delayer_metric(_result(ttft_ms_p50=1.0), "delayer_delay_fraction", "on")


def test_a_delayer_metric_in_a_delayer_off_run_is_an_error():
    with pytest.raises(KeyError, match="delayer-off run"):
        delayer_metric(_result(delayer_delay_count=3), "delayer_delay_count", "off")


def test_completed_settings_are_kept_when_a_later_one_fails_or_is_unsupported():
    """One failing setting fails only its benchmark; an unsupported shape skips it and the rest;
    what ran before either is kept (asv reads it as usual)."""
    from benchmarks.common import SettingFailed, cache_settings, cached
    from dpbench.sglang_compat.detect import UnsupportedSGLang

    ran: list[str] = []

    def ok(key):
        ran.append(key)
        return {"metrics": {"m": {"value": 1.0}}}

    def boom():
        raise KeyError("a metric the run should have produced")

    def unsupported():
        raise UnsupportedSGLang("SGLang 9.9: PrefillAdder.add_one_req has no known shape")

    cache = cache_settings(
        [("a", lambda: ok("a")), ("b", boom), ("c", lambda: ok("c")), ("d", unsupported),
         ("e", lambda: ok("e"))]
    )  # fmt: skip
    assert ran == ["a", "c"]  # e never ran: the same SGLang keeps the unknown shape
    assert cached(cache, "a") == cached(cache, "c") == {"metrics": {"m": {"value": 1.0}}}
    with pytest.raises(SettingFailed, match=r"setting b failed.*KeyError.*should have produced"):
        cached(cache, "b")
    for key in ("d", "e"):
        with pytest.raises(NotImplementedError, match="no known shape"):
            cached(cache, key)
    with pytest.raises(NotImplementedError, match="needs 2 GPUs"):
        cached({"skip": "needs 2 GPUs"}, "a")
