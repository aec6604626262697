"""Core utilities every package may use.

Owns: :mod:`.results` (the run-result schema and its atomic save), :mod:`.schema`
(option tables that generate CLI options), :mod:`.atomic` (atomic writes),
:mod:`.paths` (the repository's folders), :mod:`.procs` (starting and reaping child
processes), :mod:`.progress` (rich progress on a terminal, quiet under asv),
:mod:`.tables` (tables that fit the terminal, no number ever cut), :mod:`.faults` (a
tier's failure injected on purpose, for the suite's own tests) and :mod:`.asvcache` (an
asv ``setup_cache``'s settings: run side by side, kept, keyed, filed).

May import: the standard library and third-party packages only, never another part of
dpbench.
"""
