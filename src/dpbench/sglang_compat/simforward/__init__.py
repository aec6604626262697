"""SGLang's real server with only the model forward simulated: hooks, stand-in and their wiring.

A server launched with :func:`server_env` runs every SGLang process (HTTP server,
tokenizer manager, DP controller, one scheduler per DP rank) unchanged except for the
members :mod:`.hooks` lists: what needs CUDA or weights. The forward stand-in
(:mod:`.standin`) sleeps the time a cost model gives for the rank's own batch, returns
valid token ids and appends one record per forward to a per-rank file.

- :mod:`.hooks`: the one hook registry (target, member, why), installed on first import.
- :mod:`.standin`: the replacements themselves.
- :mod:`.config`: what the launcher hands every SGLang process (``$DPBENCH_SIMFORWARD``).
- :mod:`.check`: ``python -m dpbench.sglang_compat.simforward.check`` — can this install be hooked?

Nothing here imports anything of dpbench above :mod:`dpbench.sglang_compat`: the cost
model is named in the config (``module:function``) and loaded by name in the server.
"""

from dpbench.sglang_compat.simforward.config import (
    CONFIG_ENV,
    SimForwardConfig,
    boot_dir,
    server_env,
)

__all__ = ["CONFIG_ENV", "SimForwardConfig", "boot_dir", "server_env"]
