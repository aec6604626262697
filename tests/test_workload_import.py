"""Production traces as workloads: the Mooncake and Azure importers on the real files in
``../shared/traces/``, their windows, rate scale, caps and over-long prompts, the prefix reuse
the produced token ids carry, trace specs, and every bad input's one line."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from dpbench.core.paths import shared_traces_dir
from dpbench.workload.importers.base import TraceFileMissing, TraceImportError
from dpbench.workload.importers.load import import_trace
from dpbench.workload.importers.reuse import block_reuse, token_reuse
from dpbench.workload.importers.source import TraceSource
from dpbench.workload.trace import load_trace, write_trace

MOONCAKE = shared_traces_dir() / "mooncake-fast25" / "conversation_trace.jsonl"
AZURE = shared_traces_dir() / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
VOCAB = 129280  # DeepSeek-V3's
CONTEXT = 163840


@pytest.fixture(scope="module", autouse=True)
def _traces_present():
    for path in (MOONCAKE, AZURE):
        assert path.is_file(), (
            f"the shared trace {path} is missing (see ../shared/traces/README.md)"
        )


def _mooncake(**kw) -> TraceSource:
    return TraceSource("mooncake", str(MOONCAKE), **kw)


def _azure(**kw) -> TraceSource:
    return TraceSource("azure", str(AZURE), **kw)


def _raw_mooncake() -> list[dict]:
    return [json.loads(line) for line in MOONCAKE.read_text().splitlines()]


# -- both formats, whole and windowed -----------------------------------------------------


def test_the_whole_mooncake_trace_imports_as_the_file_says():
    reqs, report = import_trace(_mooncake(), context_len=CONTEXT)
    raw = _raw_mooncake()
    assert len(reqs) == report.requests == report.trace_requests == len(raw) == 12031
    assert [r.input_len for r in reqs] == [o["input_length"] for o in raw]
    assert [r.max_new_tokens for r in reqs] == [o["output_length"] for o in raw]
    assert [list(r.blocks) for r in reqs] == [o["hash_ids"] for o in raw]
    assert [r.arrival_s for r in reqs] == [o["timestamp"] / 1000 for o in raw]
    assert all(r.ignore_eos and r.block_size == 512 for r in reqs)
    assert len({r.id for r in reqs}) == len(reqs)
    # the trace's documented reuse (../shared/traces/README.md: 37.4 % of prompt tokens)
    reused, total = block_reuse(reqs)
    assert total == sum(o["input_length"] for o in raw)
    assert round(reused / total, 3) == 0.374


def test_the_whole_azure_trace_imports_as_the_file_says():
    reqs, report = import_trace(_azure(), context_len=CONTEXT)
    with AZURE.open() as fh:
        rows = list(csv.DictReader(fh))
    stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in rows]  # to microseconds
    assert len(reqs) == report.requests == len(rows) == 19366
    assert [r.input_len for r in reqs] == [int(r["ContextTokens"]) for r in rows]
    assert [r.max_new_tokens for r in reqs] == [int(r["GeneratedTokens"]) for r in rows]
    want = np.array([(s - stamps[0]).total_seconds() for s in stamps])
    assert np.abs(np.array([r.arrival_s for r in reqs]) - want).max() < 2e-6
    assert all(r.blocks is None for r in reqs)


@pytest.mark.parametrize("fmt", ["mooncake", "azure"])
def test_the_same_inputs_give_a_byte_identical_trace(fmt, tmp_path):
    src = TraceSource(
        fmt,
        str(MOONCAKE if fmt == "mooncake" else AZURE),
        window_s=120.0,
        rate_scale=1.5,
        max_requests=200,
    )
    a = write_trace(import_trace(src, window=4, context_len=CONTEXT)[0], tmp_path / "a.jsonl")
    b = write_trace(import_trace(src, window=4, context_len=CONTEXT)[0], tmp_path / "b.jsonl")
    assert a.read_bytes() == b.read_bytes()
    again = load_trace(a)  # the file reads back as the same requests, blocks included
    assert again == import_trace(src, window=4, context_len=CONTEXT)[0]
    ids = [r.token_ids(VOCAB) for r in again[:5]]
    assert ids == [r.token_ids(VOCAB) for r in load_trace(b)[:5]]


def test_windows_rate_scale_and_cap():
    raw = _raw_mooncake()
    seconds = np.array([o["timestamp"] / 1000 for o in raw])
    src = _mooncake(window_start_s=100.0, window_s=300.0)
    reqs, report = import_trace(src, window=2, context_len=CONTEXT)
    inside = np.flatnonzero((seconds >= 700.0) & (seconds < 1000.0))
    assert report.window_requests == len(reqs) == inside.size
    assert [list(r.blocks) for r in reqs] == [raw[i]["hash_ids"] for i in inside]
    assert reqs[0].arrival_s == 0.0
    assert reqs[-1].arrival_s == pytest.approx(seconds[inside[-1]] - seconds[inside[0]])
    fast, _ = import_trace(
        _mooncake(window_start_s=100.0, window_s=300.0, rate_scale=4.0),
        window=2,
        context_len=CONTEXT,
    )
    assert [r.id for r in fast] == [r.id for r in reqs]
    assert np.allclose([4 * r.arrival_s for r in fast], [r.arrival_s for r in reqs], atol=1e-5)
    capped, rep = import_trace(_mooncake(window_s=300.0, max_requests=50), window=1)
    assert len(capped) == 50 and rep.capped == rep.window_requests - 50
    # disjoint windows: no request in two of them
    w0 = {r.id for r in import_trace(_mooncake(window_s=300.0), window=0)[0]}
    w1 = {r.id for r in import_trace(_mooncake(window_s=300.0), window=1)[0]}
    assert w0 and w1 and not w0 & w1


def test_over_long_prompts_are_dropped_or_truncated_and_counted():
    raw = _raw_mooncake()[:2000]
    src = dict(window_s=600.0, max_input_len=8192)
    n_long = sum(o["input_length"] > 8192 for o in raw if o["timestamp"] < 600_000)
    kept, rep = import_trace(_mooncake(**src), context_len=CONTEXT)
    assert rep.dropped_overlong == n_long > 0 and rep.truncated_overlong == 0
    assert max(r.input_len for r in kept) <= 8192
    cut, rep2 = import_trace(_mooncake(**src, overlong="truncate"), context_len=CONTEXT)
    assert rep2.truncated_overlong == n_long and rep2.dropped_overlong == 0
    assert len(cut) == len(kept) + n_long
    whole = {r.id: r for r in import_trace(_mooncake(window_s=600.0), context_len=CONTEXT)[0]}
    for r in cut:
        full = whole[r.id]
        if full.input_len > 8192:
            assert r.input_len == 8192 and len(r.blocks) == 16
            assert r.token_ids(VOCAB) == full.token_ids(VOCAB)[:8192]
    assert rep2.truncated_tokens == sum(
        w.input_len - 8192 for w in whole.values() if w.input_len > 8192
    )
    # the model's context counts the output too
    tight, rep3 = import_trace(_mooncake(window_s=600.0), context_len=8192 + 400)
    assert rep3.dropped_overlong == sum(
        o["input_length"] + o["output_length"] > 8592 for o in raw if o["timestamp"] < 600_000
    )
    assert all(r.input_len + r.max_new_tokens <= 8592 for r in tight)


def test_a_windows_token_ids_share_exactly_the_blocks_the_trace_shares():
    """Measured on the produced token ids with an unbounded cache, a window's prefix reuse is
    the trace's block-level reuse for that window, exactly (at block granularity)."""
    for window in (0, 7):
        reqs, _ = import_trace(
            _mooncake(window_s=90.0, max_requests=300), window=window, context_len=CONTEXT
        )
        by_blocks = block_reuse(reqs)
        assert by_blocks[0] > 0
        assert token_reuse(reqs, VOCAB) == by_blocks
    # renumbering one shared block (the same lengths, other ids) takes exactly its reuse away
    i = next(
        k
        for k, r in enumerate(reqs)
        if k and r.blocks[0] in {b for q in reqs[:k] for b in q.blocks}
    )
    alone = [
        *reqs[:i],
        dataclasses.replace(reqs[i], blocks=tuple(10**9 + j for j in range(len(reqs[i].blocks)))),
        *reqs[i + 1 :],
    ]
    lost = by_blocks[0] - block_reuse(alone)[0]
    assert lost > 0 and token_reuse(alone, VOCAB) == (by_blocks[0] - lost, by_blocks[1])


# -- trace specs --------------------------------------------------------------------------


def _spec(tmp_path: Path, trace: str, extra: str = "") -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(
        "name: t\ndescription: d\nmodel: deepseek-v3\ntarget_kv_util: 0.9\ndp_size: 2\n"
        f"seed: 0\ntrace: {trace}\n{extra}"
    )
    return p


def test_a_spec_names_a_trace_source_and_its_seed_picks_the_window(tmp_path):
    from dpbench.workload.spec import load_spec, spec_hash
    from dpbench.workload.trace import generate_columns, generate_trace

    copy = tmp_path / "traces" / "mc.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(MOONCAKE.read_bytes())
    spec = load_spec(
        _spec(tmp_path, "{format: mooncake, path: traces/mc.jsonl, window_s: 60, rate_scale: 2}")
    )
    assert spec.trace.path == str(copy.resolve())  # relative to the spec's folder
    direct = import_trace(_mooncake(window_s=60.0, rate_scale=2.0), window=3, context_len=CONTEXT)[
        0
    ]
    assert generate_trace(spec, 3) == direct
    assert len(generate_columns(spec, 3)) == len(direct)
    assert generate_trace(spec.with_overrides(num_requests=10), 3) == direct[:10]
    # the hash follows the file's content and the import options, not where the file lies
    other = tmp_path / "b"
    other.mkdir()
    (other / "traces").mkdir()
    (other / "traces" / "mc.jsonl").write_bytes(copy.read_bytes())
    moved = load_spec(
        _spec(other, "{format: mooncake, path: traces/mc.jsonl, window_s: 60, rate_scale: 2}")
    )
    assert spec_hash(moved) == spec_hash(spec)
    faster = load_spec(
        _spec(other, "{format: mooncake, path: traces/mc.jsonl, window_s: 60, rate_scale: 3}")
    )
    assert spec_hash(faster) != spec_hash(spec)


def test_the_shipped_mooncake_spec_reads_the_shared_trace():
    from dpbench.workload.spec import load_spec
    from dpbench.workload.trace import generate_trace

    spec = load_spec("mooncake-conversation")
    assert Path(spec.trace.path) == MOONCAKE.resolve()
    reqs = generate_trace(spec, 1)
    assert reqs and all(r.blocks for r in reqs)


def test_a_missing_trace_file_names_the_spec_field_and_where_to_get_a_published_one(tmp_path):
    from dpbench.workload.spec import load_spec
    from dpbench.workload.trace import generate_trace

    spec = load_spec(_spec(tmp_path, "{format: mooncake, path: nowhere.jsonl}"))
    with pytest.raises(TraceFileMissing) as exc:
        generate_trace(spec)
    assert str(exc.value) == (
        f"trace.path {tmp_path / 'nowhere.jsonl'}: no such file; allowed: an existing mooncake "
        "trace file"
    )  # no upstream file named: nowhere.jsonl is not one
    spec = load_spec(_spec(tmp_path, "{format: mooncake, path: t/conversation_trace.jsonl}"))
    with pytest.raises(
        TraceFileMissing,
        match=r"^trace\.path .*/t/conversation_trace\.jsonl: no such file; allowed: an existing "
        r"mooncake trace file; get it from github\.com/kvcache-ai/Mooncake, "
        r"FAST25-release/traces/conversation_trace\.jsonl \(Apache-2\.0\)$",
    ):
        generate_trace(spec)


# -- bad input: one line naming file, line, field and what is allowed; nothing written -----

BAD_MOONCAKE = {
    "malformed": ('{"timestamp": 0, "input_length": 10', r":2: not valid JSON"),
    "missing": (
        '{"timestamp": 0, "input_length": 10, "hash_ids": [1]}',
        r":2: field 'output_length': missing",
    ),
    "negative": (
        '{"timestamp": 0, "input_length": -5, "output_length": 3, "hash_ids": []}',
        r":2: field 'input_length': -5; allowed: an integer ≥ 1",
    ),
    "blocks": (
        '{"timestamp": 0, "input_length": 1000, "output_length": 3, "hash_ids": [1]}',
        r":2: field 'hash_ids': 1 block ids for input_length 1000; allowed: ceil\(input_length / 512\) = 2",
    ),
    "time": (
        '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [1]}\n{"timestamp": -1, "input_length": 10, "output_length": 3, "hash_ids": [1]}',
        r":3: field 'timestamp': -1; allowed: milliseconds ≥ 0",
    ),
    "back": (
        '{"timestamp": 1000, "input_length": 10, "output_length": 3, "hash_ids": [1]}\n{"timestamp": 999, "input_length": 10, "output_length": 3, "hash_ids": [1]}',
        r":3: field 'timestamp': timestamps out of order",
    ),
}
GOOD_LINE = '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [7]}'


@pytest.mark.parametrize("case", sorted(BAD_MOONCAKE))
def test_a_bad_mooncake_line_is_named(case, tmp_path):
    text, pattern = BAD_MOONCAKE[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD_LINE + "\n" + text + "\n")
    with pytest.raises(TraceImportError, match=pattern) as exc:
        import_trace(TraceSource("mooncake", str(path)))
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


BAD_AZURE = {
    "header": (
        "when,in,out\n2023-11-16 18:15:46.6805900,374,44\n",
        r":1: header 'when,in,out'; allowed: TIMESTAMP,ContextTokens,GeneratedTokens",
    ),
    "stamp": (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nyesterday,374,44\n",
        r":3: field 'TIMESTAMP': 'yesterday'; allowed: YYYY-MM-DD HH:MM:SS",
    ),
    "negative": (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,-3,44\n",
        r":2: field 'ContextTokens': '-3'; allowed: an integer ≥ 1",
    ),
    "missing": (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374\n",
        r":2: 2 fields; allowed: 3",
    ),
    "order": (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:45.0,374,44\n",
        r":3: field 'TIMESTAMP': timestamps out of order",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_AZURE))
def test_a_bad_azure_line_is_named(case, tmp_path):
    text, pattern = BAD_AZURE[case]
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceImportError, match=pattern) as exc:
        import_trace(TraceSource("azure", str(path)))
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_bad_sources_and_windows_are_named_as_a_spec_names_them():
    with pytest.raises(
        TraceImportError, match=r"^trace\.format is 'sharegpt'; allowed: mooncake, azure$"
    ):
        TraceSource("sharegpt", "x")
    with pytest.raises(TraceImportError, match=r"^trace\.rate_scale is 0; allowed: a number > 0$"):
        _mooncake(rate_scale=0)
    with pytest.raises(
        TraceImportError,
        match=rf"^seed 100 starts at 30000 s, past the end of {MOONCAKE.resolve()} \(its last request "
        r"arrives at 3537 s\); allowed: seed 0 to 11$",
    ):
        import_trace(_mooncake(window_s=300.0), window=100)
    with pytest.raises(
        TraceImportError,
        match=r"^seed is 1, but without trace\.window_s the trace is one window; allowed: seed 0",
    ):
        import_trace(_mooncake(), window=1)


def test_an_empty_trace_file_says_what_a_file_needs(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("")
    for fmt, want in (
        ("azure", "an Azure trace CSV, first line TIMESTAMP,ContextTokens,GeneratedTokens"),
        ("mooncake", "a Mooncake trace, one JSON object a line"),
    ):
        with pytest.raises(TraceImportError) as exc:
            import_trace(TraceSource(fmt, str(empty)))
        assert str(exc.value) == f"{empty}: empty file; allowed: {want}"
    header = tmp_path / "header.csv"
    header.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(TraceImportError, match=r"a header and no requests; allowed: one or more"):
        import_trace(TraceSource("azure", str(header)))


def test_a_window_past_the_traces_end_is_recorded_and_warned():
    """Azure's trace ends at 3501.72 s: a 100 s window from 3478.8 s holds 22.9 s of it."""
    reqs, report = import_trace(_azure(window_start_s=3478.8, window_s=100.0))
    assert report.trace_end_s == pytest.approx(3501.72, abs=0.01)
    assert report.cut_short_s == pytest.approx(3578.8 - report.trace_end_s)
    assert report.as_dict()["cut_short_s"] == report.cut_short_s
    assert report.warning("--window") == (
        f"--window 0 (3478.8–3578.8 s) runs past the trace's end at 3501.72 s: {len(reqs)} "
        "requests from 22.9 s of a 100 s window"
    )
    assert "cut short: the trace ends at 3501.72 s, 77.1 s before the window does" in (
        report.lines()
    )
    inside = import_trace(_azure(window_s=100.0), window=34)[1]  # 3400–3500 s: within the trace
    assert inside.cut_short_s == 0.0 and inside.warning() is None
    assert not any("cut short" in line for line in inside.lines())
    whole = import_trace(_azure())[1]  # to the trace's end: never cut short
    assert whole.cut_short_s == 0.0 and whole.warning() is None


def test_the_cli_writes_nothing_on_bad_input(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(GOOD_LINE + "\n" + BAD_MOONCAKE["back"][0] + "\n")
    cli = [sys.executable, "-m", "dpbench", "workload", "import"]
    proc = subprocess.run(
        [*cli, "mooncake", str(bad), "-o", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "timestamps out of order" in lines[0] and f"{bad}:3" in lines[0]
    assert out.read_text() == "previous\n"
    proc = subprocess.run(
        [
            *cli,
            "mooncake",
            str(MOONCAKE),
            "-o",
            str(out),
            "--window-s",
            "60",
            "--window",
            "2",
            "--rate-scale",
            "2",
            "--max-requests",
            "40",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "window 2: 120 s – 180 s of the trace" in proc.stdout
    assert (
        load_trace(out)
        == import_trace(
            _mooncake(window_s=60.0, rate_scale=2.0, max_requests=40), window=2, context_len=CONTEXT
        )[0]
    )


def test_the_trace_benchmarks_skip_naming_the_missing_file(tmp_path, monkeypatch):
    from benchmarks.server import SimulatedProductionTrace
    from benchmarks.twin import TwinProductionTrace
    from benchmarks.workloads import TraceImport
    from dpbench.workload.importers.source import shared_trace

    assert shared_trace("mooncake") == MOONCAKE
    monkeypatch.setenv("DPBENCH_TRACES", str(tmp_path))
    want = (
        rf"needs the mooncake trace at {tmp_path}/mooncake-fast25/conversation_trace\.jsonl "
        r"\(from github\.com/kvcache-ai/Mooncake"
    )
    with pytest.raises(NotImplementedError, match=want):
        TraceImport().setup("mooncake")
    cache = TwinProductionTrace().setup_cache()  # skips before any SGLang is needed
    with pytest.raises(NotImplementedError, match=want):
        TwinProductionTrace().setup(cache, 4, "round_robin")
    cache = SimulatedProductionTrace().setup_cache()  # before SGLang's hooks are checked
    with pytest.raises(NotImplementedError, match=want):
        SimulatedProductionTrace().setup(cache, "mooncake-conversation-small", 2, "on")


# -- `dpbench workload import`: each bad input in one line, named by the flag typed --------


def _import_cli(*args: str):
    from typer.testing import CliRunner

    from dpbench.workload.cli import app

    return CliRunner().invoke(app, ["import", *args], env={"COLUMNS": "200"})


def _err_lines(result) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if ln.strip()]


def test_import_names_the_argument_or_flag_that_was_wrong(tmp_path):
    out = str(tmp_path / "out.jsonl")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    missing = tmp_path / "nope.jsonl"
    cases = [
        (
            ["azure", str(empty)],
            f"error: {empty}: empty file; allowed: an Azure trace CSV, first line "
            "TIMESTAMP,ContextTokens,GeneratedTokens",
        ),
        (
            ["mooncake", str(missing)],
            f"error: PATH {missing}: no such file; allowed: an existing mooncake trace file",
        ),
        (
            ["mooncake", str(MOONCAKE), "--window-start-s", "1e9"],
            f"error: --window-start-s 1e+09 is past the end of {MOONCAKE.resolve()} (its last request "
            "arrives at 3537 s); allowed: 0 to 3537",
        ),
        (
            ["mooncake", str(MOONCAKE), "--window-s", "100", "--window", "36"],
            f"error: --window 36 starts at 3600 s, past the end of {MOONCAKE.resolve()} (its last "
            "request arrives at 3537 s); allowed: --window 0 to 35",
        ),
    ]
    for args, want in cases:
        result = _import_cli(*args, "-o", out)
        assert result.exit_code == 2, result.output
        assert _err_lines(result) == [want]
    result = _import_cli("mooncake", str(MOONCAKE), "--rate-scale", "0", "-o", out)
    assert result.exit_code == 2
    assert (
        _err_lines(result)[-1] == "Error: Invalid value: --rate-scale is 0.0; allowed: a number > 0"
    )
    assert not Path(out).exists()


def test_import_warns_in_one_line_when_the_trace_ends_inside_the_window(tmp_path):
    out = tmp_path / "out.jsonl"
    args = ["azure", str(AZURE), "--window-start-s", "3478.8", "--window-s", "100", "-o", str(out)]
    result = _import_cli(*args)
    assert result.exit_code == 0, result.output
    n = len(load_trace(out))
    assert _err_lines(result) == [
        f"warning: --window 0 (3478.8–3578.8 s) runs past the trace's end at 3501.72 s: {n} "
        "requests from 22.9 s of a 100 s window"
    ]
    assert "cut short: the trace ends at 3501.72 s, 77.1 s before the window does" in result.stdout
    result = _import_cli("azure", str(AZURE), "--window-s", "100", "-o", str(out))
    assert result.exit_code == 0 and not _err_lines(result)  # window 0 lies inside the trace
