"""Everything that depends on the installed SGLang's version: the shape table, detection, adapters, provenance.

- :mod:`.generations`: the one table of scheduler API shapes (features × variants ×
  releases, 0.5.14 … 0.5.23) that detection and every adapter read.
- :mod:`.detect`: :func:`~.detect.detect` maps the installed shapes to variants and a
  :class:`Generation`; :func:`~.detect.variant` gives one feature's variant to an adapter;
  :class:`UnsupportedSGLang` is one line naming what differs. The one place that reads
  the installed SGLang's version and commit.
- :mod:`.provenance`: :func:`~.provenance.provenance` → ``{"sglang", "placement"}`` for
  every tier's run result.
- :mod:`.negotiation`: where ``add_one_req`` negotiates, read from the AST of
  ``schedule_policy.py`` (the static placement).
- :mod:`.source`: where the installed SGLang's source files are (without importing it).
- :mod:`.adder`, :mod:`.delayer`, :mod:`.kernels`, :mod:`.server`: the adapters.

Nothing here imports SGLang at import time; the functions do, when called. Nothing here
imports any other part of dpbench (check: ``grep -rn "from dpbench\\|import dpbench"
src/dpbench/sglang_compat`` names only ``dpbench.sglang_compat``). The function
``detect`` is not re-exported here, so ``from dpbench.sglang_compat import detect``
keeps giving the module.
"""

from dpbench.sglang_compat.detect import GENERATIONS, UnsupportedSGLang, sglang_info
from dpbench.sglang_compat.generations import Generation

__all__ = ["GENERATIONS", "Generation", "UnsupportedSGLang", "sglang_info"]
