"""The divergence finder's comparison on hand-built steps (its reading of real records is in
``test_server_simulated.py``, on a real server run and the real twin replaying it)."""

from __future__ import annotations

import difflib
import json

import pytest

from dpbench.server import diverge as dv


def _p(
    kind: str, waiting: int = 0, running: int = 1, chunked: str | None = None, **kw
) -> dv.RankPass:
    return dv.RankPass(kind=kind, waiting=waiting, running=running, chunked=chunked, **kw)


EXT = _p("extend", waiting=1, reported=True, allow=True, admitted=("a",))
DEC = _p("decode")
DELAYED = _p("decode", waiting=2, reported=True, allow=False)
FALSE = _p("decode", waiting=2, reported=True, allow=True)
REFUSED = _p("decode", waiting=2, reported=False, allow=True)


def test_labels_say_what_a_rank_did_and_why():
    assert dv.label(EXT) == "extend:new"
    assert dv.label(_p("extend", chunked="r1")) == "extend:chunk"
    assert dv.label(DEC) == "decode:empty"
    assert dv.label(DELAYED) == "decode:delayed"
    assert dv.label(FALSE) == "decode:false-report"
    assert dv.label(REFUSED) == "decode:refused"
    assert dv.label(_p("decode", waiting=2)) == "decode:refused"  # no delayer
    assert dv.label(_p("none", waiting=1, running=0, reported=True, allow=False)) == "idle:delayed"


def test_a_step_without_any_forward_is_none_on_every_rank_else_idle():
    assert dv.signature(dv._normalise([_p("none"), _p("idle")])) == "--"
    assert dv.signature(dv._normalise([_p("none"), EXT])) == "IE"


def test_identical_sequences_report_no_divergence():
    steps = [(EXT, DEC), (DEC, EXT), (DEC, DEC)]
    rep = dv.compare(steps, list(steps))
    assert rep["first_divergence"]["first_kind_step"] is None
    assert rep["first_divergence"]["verdict"].startswith("no divergence")
    assert rep["departures"]["rank_label_pairs"] == {}
    assert rep["departures"]["decision_pairs"] == {}
    assert rep["departures"]["first_decision"] is None
    assert rep["departures"]["first_departure"] is None
    assert rep["departures"]["matched_steps"] == 3
    assert rep["counts"]["server"] == rep["counts"]["twin"]


def test_a_decision_divergence_is_found_at_its_step_with_both_states():
    server = [(EXT, EXT), (DEC, DEC), (EXT, FALSE), (DEC, DEC)]
    twin = [(EXT, EXT), (DEC, DEC), (EXT, EXT), (DEC, DEC)]
    rep = dv.compare(server, twin)
    fd = rep["first_divergence"]
    assert fd["first_kind_step"] == 2
    assert fd["first_state_step"] == 2 and fd["decision"] is False  # FALSE saw 2 waiting
    assert any(w["step"] == 2 for w in fd["window"])
    assert rep["departures"]["rank_label_pairs"] == {"decode:false-report → extend:new": 1}
    assert rep["departures"]["step_kind_pairs"] == {"mixed → extend": 1}
    # both ranks had requests waiting and running on both sides: a decision, not an input
    assert rep["departures"]["decision_pairs"] == {"decode:false-report → extend:new": 1}
    assert rep["departures"]["first_decision"]["server_step"] == 2
    first = rep["departures"]["first_departure"]
    assert (first["op"], first["server_step"], first["twin_step"]) == ("replace", 2, 2)
    assert [w["step"] for w in first["server"]] == [0, 1, 2, 3]
    assert first["server"][2]["ranks"] == [EXT.brief(), FALSE.brief()]
    assert rep["why_mixed"][0] == {
        "ranks": "extend:new | decode:false-report",
        "server": 1,
        "twin": 0,
    }


def test_same_state_different_choice_is_a_decision():
    same_state_twin = _p("extend", waiting=2, reported=True, allow=True, admitted=("b",))
    server = [(EXT, DEC), (DEC, FALSE)]
    twin = [(EXT, DEC), (DEC, same_state_twin)]
    fd = dv.first_divergence(server, twin)
    assert fd["first_kind_step"] == 1 and fd["decision"] is True
    assert "a decision" in fd["verdict"]


def test_an_extra_pass_on_one_side_is_aligned_around():
    wait = (_p("none", waiting=1, running=0), _p("none", running=0))
    server = [(EXT, DEC), (DEC, DEC), (DEC, EXT)]
    twin = [(EXT, DEC), wait, (DEC, DEC), (DEC, EXT)]
    d = dv.departures(server, twin)
    assert d["matched_steps"] == 3
    assert d["unmatched_twin"] == {"none": 1} and d["unmatched_server"] == {}
    assert d["rank_label_pairs"] == {}
    assert d["first_departure"] is None  # a pass with no forward anywhere is stepped around
    # a step with a forward only one side ran is a departure, where it is
    extra = [*twin[:3], (EXT, EXT), *twin[3:]]
    first = dv.departures(server, extra)["first_departure"]
    assert (first["op"], first["server_step"], first["twin_step"]) == ("insert", 2, 3)
    assert (first["server_unmatched"], first["twin_unmatched"]) == (0, 1)


def test_the_first_departure_is_never_inside_the_steps_both_sides_share():
    """difflib aligns from the longest matching block first: here the twin's three decode steps
    match the server's last three, and alone it would part the two at step 0, although both
    decode at steps 0 and 1. A fresh clone saw this on a real run (an injected departure at
    twin step 5 reported at 4)."""
    dd, ee = (DEC, DEC), (EXT, EXT)
    server = [dd, dd, ee, dd, dd, dd]
    twin = [dd, dd, dd]
    sigs = ([dv.signature(x) for x in server], [dv.signature(x) for x in twin])
    alone = difflib.SequenceMatcher(a=sigs[0], b=sigs[1], autojunk=False).get_opcodes()
    assert alone[0][0] != "equal"  # the old alignment: parted at step 0
    d = dv.departures(server, twin)
    first = d["first_departure"]
    assert (first["server_step"], first["twin_step"]) == (2, 2)
    assert d["matched_steps"] == 3
    assert dv.departures(twin, twin)["first_departure"] is None
    assert dv.departures(twin, twin)["matched_steps"] == 3


def test_twin_steps_read_the_timeline_and_refuse_an_old_one():
    tl = {
        "rank_kind": [[2, 1], [1, 0]],
        "rank_waiting": [[1, 0], [0, 2]],
        "rank_running": [[0, 1], [1, 0]],
        "rank_chunked": [[-1, 0], [-1, -1]],
        "rank_token_usage": [[0.0, 0.5], [0.1, 0.2]],
        "rank_reported": [[1, 0], [0, 1]],
        "rank_allowed": [[1, 1], [1, 0]],
        "rank_verdict": [["all/no_wait", "none/none"], ["all/no_wait", "mixed/delay"]],
        "rank_admitted_idx": [[[0], []], [[], []]],
        "request_ids": ["r0", "r1"],
    }
    steps = dv.twin_steps({"extra": {"timeline": tl}})
    assert [dv.signature(s) for s in steps] == ["ED", "DI"]
    assert steps[0][0].admitted == ("r0",) and steps[1][0].chunked == "r0"
    assert dv.label(steps[1][1]) == "idle:delayed"
    del tl["rank_waiting"]
    with pytest.raises(dv.DivergeError, match="rank_waiting"):
        dv.twin_steps({"extra": {"timeline": tl}})
    with pytest.raises(dv.DivergeError, match="no timeline"):
        dv.twin_steps({"extra": {}})


def test_server_steps_need_pass_records(tmp_path):
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "arrivals-rank0.jsonl").write_text(json.dumps({"rid": "a", "t": 5.0}) + "\n")
    (steps / "arrivals-rank1.jsonl").write_text("")
    run = {
        "extra": {
            "step_records_dir": str(steps),
            "server_config": {"dp_size": 2},
            "scheduler_arrivals": {"a": [0.1, 0]},
        }
    }
    with pytest.raises(dv.DivergeError, match="predates the pass records"):
        dv.server_steps(run)
    rec = {
        "waiting": 1,
        "running": 0,
        "chunked": None,
        "kind": "extend",
        "bs": 1,
        "admitted": ["a"],
    }
    (steps / "passes-rank0.jsonl").write_text(
        "\n".join(
            json.dumps({**rec, "pass": p, "t": t})
            for p, t in ((3, 4.0), (4, 5.0))  # pass 3 is SGLang's warm-up, before the first arrival
        )
        + "\n"
    )
    (steps / "passes-rank1.jsonl").write_text("")
    got = dv.server_steps(run)
    assert [dv.signature(s) for s in got] == ["EI"]  # rank 1 wrote nothing: an IDLE forward
    assert got[0][0].admitted == ("a",)


def test_no_forward_and_an_idle_batch_are_the_same_for_a_rank():
    """A rank without a forward of its own (SGLang's IDLE batch beside others, or a pass with no
    forward anywhere) did the same thing on both sides; only the other rank's decode differs."""
    none = _p("none", running=0)
    server = [(EXT, DEC), (none, none), (DEC, EXT)]
    twin = [(EXT, DEC), (_p("idle", running=0), DEC), (DEC, EXT)]
    d = dv.departures(server, twin)
    assert d["rank_label_pairs"] == {"idle:empty → decode:empty": 1}
