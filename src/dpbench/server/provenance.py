"""The SGLang a server run uses, read once per installed SGLang and kept in ``.cache/provenance/``.

Reading it (version, API generation, the negotiation's placement) imports SGLang's
scheduler in the environment's interpreter: ~8 s of CPU on these cores, once per server
run before this cache (13 times in one ``make test``). The answer depends only on the
files read, so it is kept under a key made of them:

- the interpreter's path (each environment has its own),
- every ``.py`` under the ``sglang`` package that interpreter finds: path, size and
  modification time (an installed wheel, or a checkout edited in place),
- the source of the ``dpbench.sglang_compat`` that interpreter finds (the reading itself).

Any change to one of them is another key, so a stale answer is never read; a failed
reading is not kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from dpbench.core.atomic import write_json
from dpbench.core.paths import cache_dir
from dpbench.envs import zygote
from dpbench.server.errors import ServerRunError
from dpbench.sglang_compat.detect import UnsupportedSGLang

_LOCATE = """
import importlib.util, json
def where(name):
    spec = importlib.util.find_spec(name)
    return None if spec is None else list(spec.submodule_search_locations or [])
print(json.dumps({"sglang": where("sglang"), "compat": where("dpbench.sglang_compat")}))
"""

_PROBE = """
import json
from dpbench.sglang_compat.detect import UnsupportedSGLang
try:
    from dpbench.sglang_compat.provenance import provenance
    print(json.dumps(provenance()))
except UnsupportedSGLang as exc:
    print(json.dumps({"unsupported": str(exc)}))
"""


class ProvenanceError(RuntimeError):
    """The interpreter could not say which SGLang it has."""


def tree_key(dirs: list[str], *, content: bool) -> str:
    """A digest of every ``.py`` under ``dirs``: its path and, with ``content``, its bytes,
    else its size and modification time."""
    h = hashlib.sha256()
    for d in dirs:
        root = Path(d)
        h.update(f"dir {root}\n".encode())
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if content:
                h.update(f"{rel}\n".encode() + hashlib.sha256(path.read_bytes()).digest())
            else:
                st = path.stat()
                h.update(f"{rel} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def cache_key(python: str) -> str | None:
    """The key of ``python``'s SGLang and dpbench reading, or None where it has either not
    (the reading itself then says what is missing)."""
    proc = subprocess.run([python, "-c", _LOCATE], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    if not found["sglang"] or not found["compat"]:
        return None
    h = hashlib.sha256(f"python {python}\n".encode())
    h.update(tree_key(found["sglang"], content=False).encode())
    h.update(tree_key(found["compat"], content=True).encode())
    return h.hexdigest()[:32]


def read(python: str) -> dict[str, Any]:
    """``{"sglang": …, "placement": …}`` or ``{"unsupported": reason}`` for ``python``'s SGLang:
    from the cache where the key matches, else read in ``python`` (and kept)."""
    key = cache_key(python)
    kept = cache_dir() / "provenance" / f"{key}.json" if key else None
    if kept is not None and kept.is_file():
        return json.loads(kept.read_text())
    proc = zygote.run([python, "-c", _PROBE], cwd=os.getcwd(), env=os.environ, timeout=300)
    if proc.returncode != 0:
        last = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise ProvenanceError(
            f"could not read SGLang's version/generation with {python}: "
            f"{last[-1] if last else proc.returncode}"
        )
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if kept is not None:
        kept.parent.mkdir(parents=True, exist_ok=True)
        write_json(kept, data)
    return data


def provenance_of(python: str) -> dict[str, Any]:
    """``{"sglang": …, "placement": …}`` of the SGLang installed for ``python`` (raises; never
    guesses): :func:`read`'s answer, or a one-line error a server run can show."""
    try:
        data = read(python)
    except ProvenanceError as exc:
        raise ServerRunError(str(exc)) from None
    if "unsupported" in data:
        raise UnsupportedSGLang(data["unsupported"])
    return data
