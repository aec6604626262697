"""Changes as patches: parsing, applying to the real wheels' sources, a tree's diff, bad patches.

Every patch here is applied to the sources of the real SGLang wheels (``.cache/wheels``);
nothing builds an environment.
"""

from __future__ import annotations

import zipfile

import pytest
from conftest import sglang_checkout

from dpbench.changes import ChangeError, diff
from dpbench.changes.apply import changed_files
from dpbench.changes.record import SCHEDULE_POLICY, check_name, prepare
from dpbench.core.paths import project_root
from dpbench.envs.venv import wheel_path

PATCHES = project_root() / "patches"
POLICY = SCHEDULE_POLICY


def _patch(name: str) -> str:
    return (PATCHES / name).read_text()


def _wheel_file(version: str, rel: str) -> bytes:
    with zipfile.ZipFile(wheel_path(version)) as zf:
        return zf.read(rel)


@pytest.mark.parametrize(
    "patch, base, label, exits, chunked",
    [
        # negotiate first again, add_chunked_req silent: 0.5.16's placement on 0.5.17
        ("0.5.17-revert-31835.patch", "0.5.17", "early", 0, False),
        # the PR on 0.5.16: 0.5.17's placement and chunk negotiation
        ("0.5.16-apply-31835.patch", "0.5.16", "post-kv", 4, True),
        # only add_chunked_req's negotiation gone: the twin's ablation arm in source
        ("0.5.17-no-chunked-negotiation.patch", "0.5.17", "post-kv", 4, False),
    ],
)
def test_shipped_patches_apply_and_move_the_negotiation(patch, base, label, exits, chunked):
    change, files = prepare("x", base, _patch(patch), {"kind": "patch"}, wheel_path(base))
    assert change.files == [POLICY] and set(files) == {POLICY}
    assert change.path_form == "python"
    p = change.placement
    assert (p["label"], p["kv_exits_before_negotiation"], p["chunked_negotiates"]) == (
        label,
        exits,
        chunked,
    )
    # the release itself reads the other way round
    shipped = diff.parse(_patch(patch))
    assert files[POLICY] != _wheel_file(base, POLICY)
    assert shipped.touched() == [POLICY]


def test_the_pr_applied_to_0516_is_0517s_negotiation_code():
    """0.5.16 + the PR and 0.5.17 differ in schedule_policy.py only where 0.5.17 has other
    changes: the negotiation calls (three in add_one_req/add_chunked_req) read the same."""
    _, files = prepare(
        "x", "0.5.16", _patch("0.5.16-apply-31835.patch"), {"kind": "patch"}, wheel_path("0.5.16")
    )
    from dpbench.sglang_compat.negotiation import analyse_source

    mine = analyse_source(files[POLICY].decode())
    real = analyse_source(_wheel_file("0.5.17", POLICY).decode())
    assert [e.kind for e in mine.events] == [e.kind for e in real.events]
    assert mine.chunked_negotiates is real.chunked_negotiates is True


def test_package_paths_and_python_tree_paths_give_the_same_files():
    text = _patch("0.5.17-revert-31835.patch")
    package_form = text.replace("a/python/sglang/", "sglang/").replace(
        "b/python/sglang/", "sglang/"
    )
    a = diff.parse(text)
    b = diff.parse(package_form)
    assert (a.form, a.strip, b.form, b.strip) == ("python", 2, "package", 0)
    wheel = wheel_path("0.5.17")
    assert changed_files(wheel, a) == changed_files(wheel, b)


def test_files_outside_the_package_are_left_out_and_listed():
    extra = (
        "--- a/test/registered/unit/managers/test_prefill_adder.py\n"
        "+++ b/test/registered/unit/managers/test_prefill_adder.py\n"
        "@@ -1,1 +1,2 @@\n"
        " import unittest\n"
        "+import torch\n"
    )
    parsed = diff.parse(_patch("0.5.17-revert-31835.patch") + extra)
    assert parsed.touched() == [POLICY]
    assert parsed.skipped == ("b/test/registered/unit/managers/test_prefill_adder.py",)


def test_a_patch_that_does_not_apply_names_the_file_and_hunks():
    with pytest.raises(ChangeError) as err:
        prepare(
            "x",
            "0.5.16",
            _patch("0.5.17-revert-31835.patch"),
            {"kind": "patch"},
            wheel_path("0.5.16"),
        )
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("the patch does not apply to SGLang 0.5.16: ")
    assert "python/sglang/srt/managers/schedule_policy.py hunks 1, 2, 3 of 3" in msg
    assert "@@ -883,17 @@" in msg


def test_one_stale_hunk_is_named_alone():
    """Hunk 2's context edited so it cannot match: git applies 1 and 3, the message names 2."""
    text = _patch("0.5.17-revert-31835.patch").replace(
        "     def add_one_req(\n", "     def add_one_request(\n"
    )
    with pytest.raises(ChangeError, match=r"schedule_policy\.py hunk 2 of 3 \(@@ -1059,6 @@\)"):
        changed_files(wheel_path("0.5.17"), diff.parse(text))


@pytest.mark.parametrize(
    "text, needle",
    [
        ("just words\n", "no file diffs found"),
        (
            "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-a\n+b\n",
            "changes no file of the sglang package",
        ),
        (
            "diff --git a/python/sglang/a.py b/python/sglang/b.py\nsimilarity index 90%\n"
            "rename from python/sglang/a.py\nrename to python/sglang/b.py\n",
            "renames",
        ),
        (
            "--- a/python/sglang/srt/managers/schedule_policy.py\n"
            "+++ b/python/sglang/srt/managers/schedule_policy.py\n"
            "@@ -1,3 +1,3 @@\n-import x\n",
            "ends early",
        ),
        (
            "--- a/python/sglang/srt/nope.py\n+++ b/python/sglang/srt/nope.py\n"
            "@@ -1 +1 @@\n-a\n+b\n",
            "changes python/sglang/srt/nope.py, which SGLang 0.5.17 does not have",
        ),
    ],
)
def test_bad_patches_get_one_line(text, needle):
    with pytest.raises(ChangeError) as err:
        changed_files(wheel_path("0.5.17"), diff.parse(text))
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["0.5.17", "v0.5.16", "-x", "a b", "x" * 64, "a/b"])
def test_bad_names(name):
    with pytest.raises(ChangeError, match="change name"):
        check_name(name)


def test_a_tree_becomes_the_patch_that_makes_it(tmp_path):
    tree = sglang_checkout(tmp_path / "sglang", "0.5.17")
    _, files = prepare(
        "x", "0.5.17", _patch("0.5.17-revert-31835.patch"), {"kind": "patch"}, wheel_path("0.5.17")
    )
    (tree / "python" / POLICY).write_bytes(files[POLICY])
    (tree / "python" / "sglang" / "srt" / "new_module.py").write_text("X = 1")  # no newline
    (tree / "python" / "sglang" / "srt" / "__pycache__").mkdir(exist_ok=True)
    (tree / "python" / "sglang" / "srt" / "__pycache__" / "junk.pyc").write_bytes(b"\0\1")
    (tree / "python" / "sglang" / "README.md").unlink()
    text, kept = diff.diff_tree(tree, wheel_path("0.5.17"))
    assert kept == 1  # the file the tree lacks stays as the wheel has it
    change, made = prepare("x", "0.5.17", text, {"kind": "tree"}, wheel_path("0.5.17"))
    assert made == {POLICY: files[POLICY], "sglang/srt/new_module.py": b"X = 1"}
    assert change.placement["label"] == "early"


def test_a_tree_that_is_not_sglang(tmp_path):
    (tmp_path / "python" / "sglang").mkdir(parents=True)
    with pytest.raises(ChangeError, match="is not an SGLang checkout: no python/sglang/srt/"):
        diff.diff_tree(tmp_path, wheel_path("0.5.17"))
