"""Everything that depends on the installed SGLang's version: API-generation detection and adapters.

- :mod:`.detect`: :func:`detect` tells the installed API generation from signatures and
  attributes; :class:`UnsupportedSGLang` names what differs; :func:`sglang_info` gives the
  ``{"version", "commit", "generation"}`` block of run results.
- :mod:`.adder`: :class:`AdderKit` builds SGLang's real ``PrefillAdder``, allocator, radix
  cache and ``Req`` on CPU.
- :mod:`.source`: where the installed SGLang's source files are (without importing it).
- :mod:`.delayer`, :mod:`.kernels`, :mod:`.server`: the twin, kernel and server tiers' adapters.

Nothing here imports SGLang at import time; the functions do, when called. The
function ``detect`` is not re-exported here, so ``from dpbench.sglang_compat import
detect`` keeps giving the module.
"""

from dpbench.sglang_compat.detect import GENERATIONS, Generation, UnsupportedSGLang, sglang_info

__all__ = ["GENERATIONS", "Generation", "UnsupportedSGLang", "sglang_info"]
