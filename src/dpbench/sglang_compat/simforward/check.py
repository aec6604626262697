"""``python -m dpbench.sglang_compat.simforward.check``: can this SGLang install be hooked? (JSON on stdout)

Installs the hooks, imports every hooked module (as the server's processes would) and
resolves the DP-rank reader. Prints ``{"ok": true, "hooked": [...]}`` or
``{"ok": false, "error": "<one line naming the member>"}``. Needs the server tier's
extras in the environment (``dpbench.envs.venv.ensure_server_env``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys


def check() -> dict[str, object]:
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    from dpbench.sglang_compat.simforward import hooks, standin

    hooks.install()
    hooked: list[str] = []
    try:
        for name in sorted({h.module for h in hooks.REGISTRY}):
            module = importlib.import_module(name)
            for h in hooks.hooks_for(name):
                owner, member = hooks._owner_and_name(module, h)
                replaced = getattr(owner, member)
                if getattr(replaced, "__dpbench_hook__", None) != h.target:
                    return {"ok": False, "error": f"{h.target} was not replaced"}
                hooked.append(h.target)
        standin.dp_rank_reader()
    except (hooks.HookTargetChanged, standin.StandInError) as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "hooked": hooked}


def main() -> int:
    result = check()
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
