"""Start-up module on PYTHONPATH: installs dpbench's simulated-forward hooks in every SGLang process.

Python imports ``sitecustomize`` at interpreter start; SGLang's DP controller and
schedulers are processes of their own, so this is how the hooks reach them. It does
nothing unless ``$DPBENCH_SIMFORWARD`` is set.
"""

import os

if os.environ.get("DPBENCH_SIMFORWARD"):
    from dpbench.sglang_compat.simforward.hooks import install

    install()
