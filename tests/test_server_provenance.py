"""A server run's SGLang provenance: read in the release's interpreter once, then kept under a
key made of the files it reads (real 0.5.23 wheel)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from dpbench.server import provenance


def test_the_key_follows_every_file_it_is_made_of(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    (pkg / "notes.txt").write_text("not read\n")
    dirs = [str(pkg)]
    stat_key, content_key = (provenance.tree_key(dirs, content=c) for c in (False, True))
    (pkg / "notes.txt").write_text("changed\n")
    assert provenance.tree_key(dirs, content=False) == stat_key  # only .py files count
    st = (pkg / "sub" / "b.py").stat()
    os.utime(pkg / "sub" / "b.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert provenance.tree_key(dirs, content=False) != stat_key  # an edited install
    assert provenance.tree_key(dirs, content=True) == content_key  # same bytes
    (pkg / "a.py").write_text("x = 2\n")  # same size, other bytes
    assert provenance.tree_key(dirs, content=True) != content_key
    (pkg / "c.py").write_text("")
    assert provenance.tree_key(dirs, content=True) != content_key


@pytest.mark.sglang
def test_a_release_is_read_once_then_from_the_cache(release_env, tmp_path, monkeypatch):
    from dpbench.server.run import provenance_of
    from dpbench.sglang_compat.detect import UnsupportedSGLang

    python = str(release_env("0.5.23").python)
    monkeypatch.setenv("DPBENCH_CACHE", str(tmp_path))
    first = provenance_of(python)
    assert first["sglang"]["version"] == "0.5.23" and first["placement"]["label"] == "post-kv"
    (kept,) = (tmp_path / "provenance").glob("*.json")
    assert json.loads(kept.read_text()) == first
    # the second read is the kept file's: what it says is what the run reports
    kept.write_text(json.dumps({**first, "placement": {**first["placement"], "label": "kept"}}))
    assert provenance_of(python)["placement"]["label"] == "kept"
    kept.write_text(json.dumps({"unsupported": "an API shape this suite does not know"}))
    with pytest.raises(UnsupportedSGLang, match="does not know"):
        provenance_of(python)
    # another interpreter is another key
    assert provenance.cache_key(python) != provenance.cache_key(sys.executable)


def test_an_interpreter_without_sglang_is_named_and_nothing_is_kept(tmp_path, monkeypatch):
    from dpbench.server.run import ServerRunError, provenance_of

    monkeypatch.setenv("DPBENCH_CACHE", str(tmp_path))
    assert provenance.cache_key(sys.executable) is None  # .venv holds no SGLang
    with pytest.raises(ServerRunError, match=rf"with {sys.executable}: .*sglang"):
        provenance_of(sys.executable)
    assert not (tmp_path / "provenance").exists()
