"""Production request traces as workloads: one reader per format behind one interface.

``dpbench.workload.importers.load.import_trace(source, window=k)`` reads the file ``source.path`` with its format's reader
(:mod:`.mooncake`, :mod:`.azure`), takes window ``k``, rescales its rate, caps it and fits its
prompts to the model (:mod:`.fit`), and returns the suite's trace requests (same inputs →
identical requests) with an :class:`~.fit.ImportReport` of what was kept, dropped and cut.
"""
