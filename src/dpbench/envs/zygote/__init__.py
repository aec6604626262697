"""Runs in a release environment forked from one process that imported SGLang once (a zygote).

Importing SGLang's scheduler costs ~11 s of CPU on the 2-core machines (6,000+ modules), and
the test suite starts ~100 such processes: the twin's runs, the placement probes, the tests'
own probes. With ``DPBENCH_ZYGOTE_DIR`` set (``tests/conftest.py`` sets it for a pytest
session), :func:`popen` and :func:`run` start ``python -m MOD``/``python -c CODE`` of a release
environment by forking its zygote instead: the zygote imported :data:`.protocol.PRELOAD` once, and each
run is its own process from there on (its own session, working directory, environment,
standard streams, exit status), as ``subprocess`` would have started it.

A run starts afresh (``subprocess``) when no directory is set, or when the command is not
``python -m``/``-c``. Variables the preloaded modules read at import (:data:`.protocol.IMPORT_TIME`:
Triton's, torch's, SGLang's, …) are part of a zygote's identity: a run that sets one to another
value forks from a zygote started with it. A zygote lives until its owner
(``DPBENCH_ZYGOTE_OWNER``, the pytest session) exits, or until :func:`stop_all`; it then kills
the runs it still has. Runs are reaped by their zygote, so ``getrusage`` in the caller does not
count them.

Not for a server with simulated forwards: its hooks must see SGLang's modules being imported.
"""

from dpbench.envs.zygote.client import ZygoteProcess, kill_session, popen, run, stop_all
from dpbench.envs.zygote.protocol import ENV_DIR, ENV_OWNER

__all__ = ["ENV_DIR", "ENV_OWNER", "ZygoteProcess", "kill_session", "popen", "run", "stop_all"]
