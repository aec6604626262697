"""The simulated server's step records: lined up across ranks and summarised like the twin's metrics."""

from __future__ import annotations

import json

import pytest

from dpbench.server.steps import StepRecordError, read_records, since, summarise


def _rec(step, t, kind, model_s, bs=1, ext=0, kv=10):
    return {
        "step": step, "pid": 1, "t": t, "mode": kind.upper(), "kind": kind, "bs": bs,
        "extend_tokens": ext, "ctx_tokens": 0, "kv_used": kv, "kv_total": 100,
        "global_tokens": [], "model_s": model_s, "sleep_s": model_s,
    }  # fmt: skip


def _write(tmp_path, ranks):
    for r, rows in enumerate(ranks):
        (tmp_path / f"rank{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


def test_mixed_steps_and_decode_rank_time_beside_prefill(tmp_path):
    # 3 ranks, 4 steps: extend-only, mixed (1 extend + 2 decode), decode, idle
    kinds = [
        ("extend", "extend", "idle"),
        ("extend", "decode", "decode"),
        ("decode",) * 3,
        ("idle",) * 3,
    ]
    step_s = [0.1, 0.2, 0.05, 0.0]
    ranks = [
        [
            _rec(i, 10 + i * 0.3 + 0.001 * r, kinds[i][r], step_s[i] * (1 if r == 0 else 0.5))
            for i in range(4)
        ]
        for r in range(3)
    ]
    _write(tmp_path, ranks)
    m, table = summarise(read_records(tmp_path, 3))
    assert table["step_kind"] == ["extend", "mixed", "decode", "idle"]
    assert m["dp_mixed_step_fraction"].value == pytest.approx(1 / 3)
    # the slowest rank sets the step; 2 decoding ranks beside the prefill for 0.2 s
    assert m["decode_rank_s_beside_prefill"].value == pytest.approx(0.4)
    assert m["decode_rank_time_beside_prefill_fraction"].value == pytest.approx(
        0.4 / (0.4 + 3 * 0.05)
    )
    # records without device times (forward slept at launch): a step's device start is the
    # last rank's launch, its end the last rank's launch + sleep. Steps 1 and 2 decode (work
    # pending): 10.302 - 10.1 and 10.602 - 10.5 s of device idle before them
    assert m["device_idle_ms_p50"].value == pytest.approx(152.0, abs=0.5)
    assert m["device_idle_fraction"].value == pytest.approx(0.304 / (0.304 + 0.25), rel=1e-3)
    assert m["kv_pool_occupied_max"].value == pytest.approx(0.1)


def test_a_virtual_device_kept_busy_reads_no_idle_time(tmp_path):
    # the overlap schedule launches step k+1 before step k ends: the device queue starts
    # it at k's end, so no device time is lost however early the launch
    # a 5 s pause with nothing to run, then a new request's extend: waiting for arrivals,
    # not device time lost to the scheduler's CPU work
    ranks = []
    for _ in range(2):
        rows, end = [], 0.0
        for i in range(6):
            rec = _rec(i, 1.0 + 0.01 * i, "decode", 0.05)
            if i == 5:
                rec = _rec(i, 10.0, "extend", 0.05)
            rec["start"] = max(rec["t"], end)
            rec["end"] = end = rec["start"] + 0.05
            rows.append(rec)
        ranks.append(rows)
    _write(tmp_path, ranks)
    m, _ = summarise(read_records(tmp_path, 2))
    assert m["device_idle_ms_p50"].value == 0.0 and m["device_idle_ms_p90"].value == 0.0
    assert m["device_idle_fraction"].value == 0.0


def test_a_truncated_last_line_is_dropped_and_steps_since_a_time(tmp_path):
    _write(
        tmp_path,
        [
            [_rec(0, 1.0, "decode", 0.01), _rec(1, 2.0, "decode", 0.01)],
            [_rec(0, 1.0, "decode", 0.01)],
        ],
    )
    with open(tmp_path / "rank1.jsonl", "a") as fh:
        fh.write('{"step": 1, "t": 2.0, "ki')  # a rank killed mid-write
    records = read_records(tmp_path, 2)
    assert [len(r) for r in records] == [2, 1]
    assert [len(r) for r in since(records, 1.5)] == [1, 0]
    with pytest.raises(StepRecordError, match="no complete steps"):
        summarise(since(records, 1.5))
    with pytest.raises(StepRecordError, match=r"DP rank\(s\) 1 wrote fewer step records"):
        summarise(records)  # rank 1 lost its last record: fail naming it, never truncate


def test_a_missing_rank_file_is_named(tmp_path):
    _write(tmp_path, [[_rec(0, 1.0, "decode", 0.01)]])
    with pytest.raises(StepRecordError, match="DP rank 1"):
        read_records(tmp_path, 2)


def test_arrivals_and_idle_passes_are_read_per_rank(tmp_path):
    from dpbench.server.steps import read_arrivals, read_idle_passes

    (tmp_path / "arrivals-rank0.jsonl").write_text(
        '{"rid": "warmup", "t": 99.0}\n{"rid": "a", "t": 100.25}\n'
    )
    (tmp_path / "arrivals-rank1.jsonl").write_text('{"rid": "b", "t": 100.5}\n{"rid": "c", "t"')
    found, m = read_arrivals(tmp_path, 2, {"a": 100.05, "b": 100.1, "c": 100.2}, t0=100.0)
    # SGLang's warm-up request is not ours; a truncated last line (killed rank) is dropped
    assert found == {"a": [0.25, 0], "b": [0.5, 1]}
    assert m["pickup_ms_p50"].value == pytest.approx(300.0)  # 200 and 400 ms
    (tmp_path / "idle-passes-rank0.jsonl").write_text(
        '{"t": 99.5, "s": 9.0}\n{"t": 100.1, "s": 0.004}\n{"t": 100.2, "s": 0.006}\n'
    )
    idle = read_idle_passes(tmp_path, 2, t0=100.0)  # the pass before t0 (warm-up) left out
    assert idle["idle_pass_ms_p50"].value == pytest.approx(5.0)
    assert idle["idle_passes_count"].value == 2
    assert read_idle_passes(tmp_path, 2, t0=200.0) == {}  # none measured: absent, not 0


def test_kv_utilization_is_read_from_the_pass_records(tmp_path):
    """SGLang's token_usage (pool − free − evictable) after each pass, as the twin's
    kv_utilization_max: the maximum over ranks and the passes of the run's window."""
    from dpbench.server.steps import read_kv_utilization

    def passes(rank: int, rows: list[tuple[float, int]]) -> None:
        (tmp_path / f"passes-rank{rank}.jsonl").write_text(
            "".join(json.dumps({"t": t, "kv_used": u, "kv_total": 1000}) + "\n" for t, u in rows)
        )

    passes(0, [(99.0, 990), (100.1, 400), (100.3, 700)])  # 99.0: warm-up, before the window
    passes(1, [(100.2, 650), (101.0, 900)])
    assert read_kv_utilization(tmp_path, 2, t0=100.0)["kv_utilization_max"].value == 0.9
    assert read_kv_utilization(tmp_path, 2, t0=100.0, t1=100.5)["kv_utilization_max"].value == 0.7
    assert read_kv_utilization(tmp_path, 2, t0=200.0) == {}  # none recorded: absent, not 0
