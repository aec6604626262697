"""Static placement: the AST walk over PrefillAdder.add_one_req, on snippets and on the real wheels."""

from __future__ import annotations

import textwrap

import pytest

from dpbench.placement.static import analyse_file, analyse_source

NEGOTIATE = """
        if (self.prefill_delayer_single_pass is not None) and (
            not self.prefill_delayer_single_pass.negotiate_should_allow_prefill(local_prefillable=True)
        ):
            return AddReqResult.OTHER
"""


def adder(
    add_one_req_body: str, *, chunked_body: str = "        return None\n", extra: str = ""
) -> str:
    body = textwrap.indent(textwrap.dedent(add_one_req_body), " " * 8)
    return (
        "class PrefillAdder:\n"
        "    def add_one_req(self, req, has_chunked_req, truncation_align_size):\n"
        f"{body}\n"
        "    def add_chunked_req(self, req):\n"
        f"{chunked_body}\n"
        f"{extra}"
    )


def test_negotiation_first_is_early():
    src = adder(
        textwrap.dedent(NEGOTIATE)
        + """
if total >= self.rem_total_tokens:
    return AddReqResult.NO_TOKEN
"""
    )
    found = analyse_source(src)
    assert found.label == "early"
    assert found.kv_exits_before_negotiation == 0
    assert found.kv_exits_after_negotiation == 1
    assert found.chunked_negotiates is False


def test_negotiation_after_one_gate_is_post_kv():
    src = adder("""
if total >= self.rem_total_tokens:
    return AddReqResult.NO_TOKEN
if self.prefill_delayer_single_pass.negotiate_should_allow_prefill(local_prefillable=True) is False:
    return AddReqResult.OTHER
return self.budget_state()
""")
    found = analyse_source(src)
    assert (found.label, found.kv_exits_before_negotiation) == ("post-kv", 1)
    assert [e.kind for e in found.events] == ["kv-exit", "negotiation"]


def test_gates_inside_with_and_if_blocks_are_walked_in_source_order():
    src = adder("""
if total >= self.rem_total_tokens:
    return AddReqResult.NO_TOKEN
with self._lock_node(req.last_node):
    if total >= self.rem_total_tokens:
        return AddReqResult.NO_TOKEN
    if swa:
        if swa_needed >= self.rem_swa_tokens:
            return AddReqResult.NO_TOKEN
    if not self.prefill_delayer_single_pass.negotiate_should_allow_prefill(local_prefillable=True):
        return AddReqResult.OTHER
    if load_back_failed:
        return AddReqResult.NO_TOKEN
""")
    found = analyse_source(src)
    assert found.label == "post-kv"
    assert found.kv_exits_before_negotiation == 3
    assert found.kv_exits_after_negotiation == 1


def test_budget_admission_call_counts_as_an_exit_but_budget_state_does_not():
    extra = """
    def _select_prefill_admission(self, req, *, total_tokens):
        if not self._check(req):
            return AddReqResult.NO_TOKEN
        return object()

    def budget_state(self):
        return AddReqResult.NO_TOKEN
"""
    src = adder(
        """
with self._lock_node(req.last_node):
    admission = self._select_prefill_admission(req, total_tokens=total)
    if isinstance(admission, AddReqResult):
        return admission
    if not self.prefill_delayer_single_pass.negotiate_should_allow_prefill(local_prefillable=True):
        return AddReqResult.OTHER
return self.budget_state()
""",
        extra=extra,
    )
    found = analyse_source(src)
    assert (found.label, found.kv_exits_before_negotiation) == ("post-kv", 1)
    assert [e.kind for e in found.events] == ["admission", "negotiation"]


def test_delegation_to_a_negotiating_path_is_recorded_not_counted():
    extra = """
    def add_one_req_ignore_eos(self, req):
        if big:
            return AddReqResult.NO_TOKEN
        self.prefill_delayer_single_pass.negotiate_should_allow_prefill(local_prefillable=True)
"""
    src = adder(
        """
if req.sampling_params.ignore_eos:
    return self.add_one_req_ignore_eos(req)
"""
        + textwrap.dedent(NEGOTIATE),
        extra=extra,
    )
    found = analyse_source(src)
    assert found.label == "early"
    assert [e.kind for e in found.events] == ["delegation", "negotiation"]


def test_nested_function_bodies_do_not_run_in_line():
    src = adder(
        """
def helper():
    return AddReqResult.NO_TOKEN
"""
        + textwrap.dedent(NEGOTIATE)
    )
    assert analyse_source(src).kv_exits_before_negotiation == 0


def test_no_negotiation_is_absent_and_chunked_negotiation_is_seen():
    chunked = "        self.prefill_delayer_single_pass.negotiate_should_allow_prefill(local_prefillable=True)\n"
    found = analyse_source(
        adder(
            """
if total >= self.rem_total_tokens:
    return AddReqResult.NO_TOKEN
""",
            chunked_body=chunked,
        )
    )
    assert found.label == "absent"
    assert found.kv_exits_before_negotiation is None
    assert found.chunked_negotiates is True


@pytest.mark.parametrize(
    "source, reason",
    [
        ("class PrefillAdder(:\n    pass\n", "does not parse"),
        ("class SomethingElse:\n    pass\n", "no class PrefillAdder"),
        (
            "class PrefillAdder:\n    def add_chunked_req(self, req):\n        pass\n",
            "has no add_one_req",
        ),
    ],
)
def test_unreadable_shapes_are_unknown_with_a_reason(source, reason):
    found = analyse_source(source)
    assert found.label == "unknown"
    assert reason in found.reason


def test_missing_file_is_unknown(tmp_path):
    found = analyse_file(tmp_path / "nope.py")
    assert found.label == "unknown" and "cannot read" in found.reason


@pytest.mark.sglang
@pytest.mark.parametrize(
    "version, label, exits_before, chunked",
    [("0.5.16", "early", 0, False), ("0.5.17", "post-kv", 4, True), ("0.5.23", "post-kv", 2, True)],
)
def test_real_wheels(version, label, exits_before, chunked, release_env):
    env = release_env(version)
    (path,) = env.path.glob("lib/python3*/site-packages/sglang/srt/managers/schedule_policy.py")
    found = analyse_file(path)
    assert (found.label, found.kv_exits_before_negotiation, found.chunked_negotiates) == (
        label,
        exits_before,
        chunked,
    )
