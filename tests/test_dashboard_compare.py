"""The comparison rules (noise band, direction, ratio) and commit naming, shared by page and terminal."""

from __future__ import annotations

import re

import pytest

from dpbench.dashboard.compare import CommitNotFound, Side, compare_values, resolve_commit


@pytest.mark.parametrize(
    ("a", "b", "better", "verdict", "winner"),
    [
        (Side(10, 9, 11), Side(10.5, 9.5, 11.5), "lower", "within noise", ""),  # bands overlap
        (Side(10, 9, 11), Side(20, 19, 21), "lower", "A better", "A"),  # disjoint bands
        (Side(10, 9, 11), Side(20, 19, 21), "higher", "B better", "B"),
        (Side(10, None, None), Side(20, None, None), "higher", "B better (single run)", "B"),
        (Side(1, None, None), Side(2, None, None), "none", "differs", ""),  # e.g. a placement code
        (Side(3, None, None), Side(3, None, None), "lower", "same", ""),
        (None, Side(3, None, None), "lower", "only B", ""),
    ],
)
def test_verdicts(a, b, better, verdict, winner):
    _ratio, got_winner, got = compare_values(a, b, better)
    assert (got, got_winner) == (verdict, winner)


def test_ratio_is_b_over_a_and_undefined_from_zero():
    assert compare_values(Side(4, None, None), Side(2, None, None), "lower")[0] == 0.5
    assert compare_values(Side(0, None, None), Side(2, None, None), "lower")[0] is None
    assert compare_values(Side(0, None, None), Side(0, None, None), "lower")[0] == 1.0


MODEL = {
    "commits": [
        {
            "sha": "33bf16ff81bf16e95fb61a3bbee70a21ed0c684b",
            "tags": ["v0.5.16"],
            "label": "v0.5.16 33bf16ff",
        },
        {"sha": "33bf0000000000000000000000000000000000aa", "tags": [], "label": "33bf0000"},
        {
            "sha": "3548a850339085c527aeacd78aa6c5977d3f592e",
            "tags": ["v0.5.23"],
            "label": "v0.5.23 3548a850",
        },
    ]
}


def test_commits_are_named_by_version_tag_or_hash_prefix():
    assert resolve_commit(MODEL, "0.5.16") == 0
    assert resolve_commit(MODEL, "v0.5.23") == 2
    assert resolve_commit(MODEL, "3548a8") == 2
    with pytest.raises(CommitNotFound, match="matches 2 commits"):
        resolve_commit(MODEL, "33bf")
    with pytest.raises(CommitNotFound, match=re.escape("commits with results: v0.5.16 33bf16ff")):
        resolve_commit(MODEL, "0.4.0")
