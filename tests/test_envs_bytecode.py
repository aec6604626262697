"""An environment's bytecode is compiled once per source content and reused wherever that content lies."""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

from dpbench.envs.bytecode import Interpreter, compile_bytecode

MODULES = {
    "pkg/__init__.py": "",
    "pkg/calc.py": "def answer():\n    return 6 * 7\n",
    "pkg/sub/where.py": "def here():\n    return here.__code__.co_filename\n",
}


def _tree(root: Path, mtime: int) -> Path:
    for name, text in MODULES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (mtime, mtime))
    return root


def _import(root: Path) -> dict:
    """Import the package from ``root`` in a process that may not write bytecode."""
    code = (
        "import json, os, pkg.calc, pkg.sub.where as w\n"
        "mods = [pkg.calc, w]\n"
        "print(json.dumps({'answer': pkg.calc.answer(), 'here': w.here(),\n"
        "  'from_pyc': [os.path.exists(m.__cached__) for m in mods]}))"
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_second_tree_of_the_same_sources_gets_compileall_s_bytecode_without_compiling(tmp_path):
    store = tmp_path / "store"
    first = _tree(tmp_path / "first", 1_600_000_000)
    got = compile_bytecode(sys.executable, first, store_root=store)
    assert (got.compiled, got.restored, got.fresh) == (3, 0, 0)

    second = _tree(tmp_path / "second", 1_700_000_000)  # other place, other mtimes
    got = compile_bytecode(sys.executable, second, store_root=store)
    assert (got.compiled, got.restored, got.fresh) == (0, 3, 0)
    interp = Interpreter.of(sys.executable)
    for name in MODULES:
        source = second / name
        restored = interp.pyc(source).read_bytes()
        here = py_compile.compile(str(source), cfile=str(tmp_path / "here.pyc"), doraise=True)
        there = py_compile.compile(
            str(first / name), cfile=str(tmp_path / "there.pyc"), doraise=True
        )
        # the header compileall writes for this file (its mtime and size), and the code it
        # compiled for the same source in the first tree (which names that tree's file)
        assert restored[:16] == Path(here).read_bytes()[:16], name
        assert restored[16:] == Path(there).read_bytes()[16:], name
    seen = _import(second)
    assert seen["answer"] == 42 and seen["from_pyc"] == [True, True]
    # Python names the code after the file it imported, not the file it was compiled from
    assert seen["here"] == str(second / "pkg/sub/where.py")

    again = compile_bytecode(sys.executable, second, store_root=store)
    assert (again.compiled, again.restored, again.fresh) == (0, 0, 3)


def test_changed_sources_are_compiled_not_served_old_code(tmp_path):
    store = tmp_path / "store"
    tree = _tree(tmp_path / "tree", 1_600_000_000)
    compile_bytecode(sys.executable, tree, store_root=store)
    calc = tree / "pkg/calc.py"
    calc.write_text("def answer():\n    return 43\n")  # the same size: only the content moved
    os.utime(calc, (1_600_000_000, 1_600_000_000))  # and the same mtime: a stale .pyc looks valid
    shutil.rmtree(tree / "pkg/__pycache__")
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy)
    got = compile_bytecode(sys.executable, copy, store_root=store)
    assert (got.compiled, got.restored, got.fresh) == (1, 1, 1)
    assert _import(copy)["answer"] == 43


def test_a_file_that_does_not_compile_is_skipped_as_pip_skips_it(tmp_path):
    tree = _tree(tmp_path / "tree", 1_600_000_000)
    (tree / "pkg/py2.py").write_text('print "python 2"\n')
    got = compile_bytecode(sys.executable, tree, store_root=tmp_path / "store")
    assert (got.compiled, got.restored, got.fresh) == (3, 0, 0)
    assert not Interpreter.of(sys.executable).pyc(tree / "pkg/py2.py").exists()


def test_two_builds_at_once_in_one_process_write_the_same_entries(tmp_path):
    """``dpbench env create --jobs 2``: two environments build in threads of one process and
    keep the same files' code at once (a shared temporary name once lost one rename)."""
    from concurrent.futures import ThreadPoolExecutor

    store = tmp_path / "store"
    trees = []
    for i in range(4):  # the same 300 modules in each tree
        trees.append(_tree(tmp_path / f"t{i}", 1_600_000_000))
        for k in range(300):
            (trees[-1] / f"pkg/m{k}.py").write_text(f"VALUE = {k}\n")
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda t: compile_bytecode(sys.executable, t, store_root=store), trees))
    assert all(g.compiled + g.restored == 303 for g in got), got
    assert sorted(p.name for p in store.rglob("*") if p.is_file() and p.name.startswith(".")) == []
