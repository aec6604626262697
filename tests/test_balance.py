"""Rank balance (dpbench.metrics.balance): one definition, computed from the twin's arrays and from the
simulated-forward server's step and pass records alike (hand-built; the real runs are in
test_twin_production_trace and the fidelity tests)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpbench.metrics.balance import rank_balance
from dpbench.server.steps import rank_balance_of, read_step_waiting

# 2 ranks × 4 steps: rank 0 extends 100 tokens, then decodes 2, 2, idles; rank 1 idles while
# its queue holds 3 requests (the delayer kept it back), then decodes 1, 1, 1
BUSY = np.array([[True, True, True, False], [False, True, True, True]])
TOKENS = np.array([[100, 2, 2, 0], [0, 1, 1, 1]])
STEP_S = np.array([0.5, 0.1, 0.1, 0.1])
WAITING = np.array([[0, 0, 0, 0], [3, 0, 0, 0]])


def test_the_definitions_on_a_hand_built_run():
    m, table = rank_balance(BUSY, TOKENS, STEP_S, WAITING, [3, 5])
    assert m["rank_tokens_imbalance"].value == pytest.approx(104 / ((104 + 3) / 2))
    assert m["rank_busy_imbalance"].value == pytest.approx(0.7 / 0.5)  # 0.7 vs 0.3 rank·s
    assert m["dispatch_imbalance"].value == pytest.approx(5 / 4)
    # step 0: rank 0 worked and rank 1 ran nothing, but rank 1's own queue does not count:
    # nobody else was waiting. No step strands capacity.
    assert m["rank_idle_while_others_wait_fraction"].value == 0.0
    assert table == [
        {"rank": 0, "tokens": 104, "busy_s": pytest.approx(0.7), "requests": 3},
        {"rank": 1, "tokens": 3, "busy_s": pytest.approx(0.3), "requests": 5},
    ]
    # rank 0 idles at step 3 while rank 1 has two waiting: one stranded step of four working
    waiting = WAITING.copy()
    waiting[1, 3] = 2
    m2, _ = rank_balance(BUSY, TOKENS, STEP_S, waiting)
    assert m2["rank_idle_while_others_wait_fraction"].value == pytest.approx(1 / 4)
    assert "dispatch_imbalance" not in m2  # not given: absent, never 0


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="ranks × steps arrays"):
        rank_balance(BUSY, TOKENS[:, :3], STEP_S)
    with pytest.raises(ValueError, match="one count per rank"):
        rank_balance(BUSY, TOKENS, STEP_S, requests=[1, 2, 3])


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_server_records_give_the_same_numbers(tmp_path):
    """The same run as the stand-in records it: a step per rank per forward (kind, extend
    tokens, decode batch size, modelled seconds), a pass per loop iteration (waiting; passes
    without a forward interleaved), plus a warm-up step before the load that is cut off."""
    kinds = {True: None, False: "idle"}
    for r in range(2):
        steps = [{"kind": "extend", "extend_tokens": 9, "bs": 1, "model_s": 0.02, "t": 0.0}]
        passes = [{"kind": "extend", "waiting": 0}, {"kind": "none", "waiting": 7}]
        for i in range(4):
            kind = kinds[bool(BUSY[r, i])] or ("extend" if TOKENS[r, i] > 2 else "decode")
            steps.append(
                {
                    "kind": kind,
                    "extend_tokens": int(TOKENS[r, i]) if kind == "extend" else 0,
                    "bs": int(TOKENS[r, i]) if kind == "decode" else 0,
                    # the slowest rank's time is the step's
                    "model_s": float(STEP_S[i]) if r == 0 else float(STEP_S[i]) / 2,
                    "t": 1.0 + i,
                }
            )
            passes.append({"kind": kind, "waiting": int(WAITING[r, i])})
            passes.append({"kind": "none", "waiting": 99})
        _write(tmp_path / f"rank{r}.jsonl", steps)
        _write(tmp_path / f"passes-rank{r}.jsonl", passes)
    records = [[json.loads(x) for x in (tmp_path / f"rank{r}.jsonl").open()] for r in range(2)]
    waiting = read_step_waiting(tmp_path, 2)
    assert waiting is not None
    cut = [rows[1:] for rows in records]  # the load starts after the warm-up step
    got, table = rank_balance_of(cut, [w[1:] for w in waiting], [3, 5])
    want, want_table = rank_balance(BUSY, TOKENS, STEP_S, WAITING, [3, 5])
    assert {k: v.value for k, v in got.items()} == pytest.approx(
        {k: v.value for k, v in want.items()}
    )
    assert table == want_table
    (tmp_path / "passes-rank1.jsonl").unlink()
    assert read_step_waiting(tmp_path, 2) is None
