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
