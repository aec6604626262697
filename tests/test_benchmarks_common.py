"""The asv suites' glue and the settings' runner behind it: a delayer metric is NaN only when
the delayer was off; settings keep what ran when one fails or is unsupported."""

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
    from benchmarks.common import SettingFailed, cached
    from dpbench.core.asvcache import run_settings
    from dpbench.sglang_compat.detect import UnsupportedSGLang

    ran: list[str] = []

    def ok(key):
        ran.append(key)
        return {"metrics": {"m": {"value": 1.0}}}

    def boom():
        raise KeyError("a metric the run should have produced")

    def unsupported():
        raise UnsupportedSGLang("SGLang 9.9: PrefillAdder.add_one_req has no known shape")

    cache = run_settings(
        [("a", lambda: ok("a")), ("b", boom), ("c", lambda: ok("c")), ("d", unsupported),
         ("e", lambda: ok("e"))],
        skip_on=(UnsupportedSGLang,),
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


def _settings(parent: int):
    import os

    from dpbench.sglang_compat.detect import UnsupportedSGLang

    def ok(key):
        return {"metrics": {"m": {"value": 1.0}}, "key": key, "forked": os.getpid() != parent}

    def boom():
        raise KeyError("a metric the run should have produced")

    def dies():
        os._exit(3)  # a crash no exception reports (OOM killer, segfault)

    def unsupported():
        raise UnsupportedSGLang("SGLang 9.9: PrefillAdder.add_one_req has no known shape")

    return [("a", lambda: ok("a")), ("b", boom), ("c", lambda: ok("c")), ("x", dies),
            ("d", unsupported), ("e", lambda: ok("e"))]  # fmt: skip


def test_settings_run_side_by_side_give_what_one_at_a_time_gives():
    """``jobs`` > 1 runs each setting in its own forked process (the twin tier's settings on
    the main job's 2 cores); the entries are those of the serial run, in the same order,
    with a process that died named as its setting's failure."""
    import os

    from benchmarks.common import SettingFailed, cached
    from dpbench.core.asvcache import run_settings
    from dpbench.sglang_compat.detect import UnsupportedSGLang

    parent = os.getpid()
    skip = (UnsupportedSGLang,)
    serial = run_settings([s for s in _settings(parent) if s[0] != "x"], skip_on=skip)
    forked = run_settings(_settings(parent), jobs=2, skip_on=skip)
    assert list(forked) == ["a", "b", "c", "x", "d", "e"]
    assert cached(forked, "a")["forked"] and cached(forked, "c")["forked"]
    assert not cached(serial, "a")["forked"]
    for key in ("a", "c"):
        assert {**cached(forked, key), "forked": None} == {**cached(serial, key), "forked": None}
    assert forked["b"]["error"].splitlines()[0] == serial["b"]["error"].splitlines()[0]
    with pytest.raises(SettingFailed, match="process died with exit code 3"):
        cached(forked, "x")
    for key in ("d", "e"):  # the unsupported shape skips it and every later setting, as serially
        with pytest.raises(NotImplementedError, match="no known shape"):
            cached(forked, key)
        assert forked[key] == serial[key]


def test_bench_jobs_reads_its_variable_and_names_a_bad_value(monkeypatch):
    from dpbench.core.asvcache import bench_jobs

    monkeypatch.setenv("DPBENCH_BENCH_JOBS", "3")
    assert bench_jobs() == 3
    monkeypatch.setenv("DPBENCH_BENCH_JOBS", "two")
    with pytest.raises(
        ValueError, match="DPBENCH_BENCH_JOBS must be a whole number ≥ 1, got 'two'"
    ):
        bench_jobs()
    monkeypatch.delenv("DPBENCH_BENCH_JOBS")
    assert 1 <= bench_jobs() <= 8
