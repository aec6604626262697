"""A change to SGLang (a patch, or a local source tree) benchmarked as a commit of its own.

A change is a base release plus a unified diff against SGLang's ``python/`` tree. It
becomes a child commit of its base in the release history (branch ``change/NAME``, tag
``NAME``), holding the base's files plus ``change.json`` (:mod:`.record`) and
``change.patch``. It installs like its base: the base's wheel and pins, then the changed
files written over the installed package (:mod:`.apply`). A source tree is turned into
the diff between it and the base's wheel (:mod:`.diff`), so every change commit is a
patch and installs anywhere without the tree.

Owns: :mod:`.diff` (parse and normalise unified diffs; a tree's diff against a wheel),
:mod:`.apply` (apply a diff to a wheel's sources with ``git apply``; overlay the result
on an installed SGLang), :mod:`.record` (the change's provenance record) and
:mod:`.history` (change commits in the release-history git repository).

May import: :mod:`dpbench.core` and :mod:`dpbench.sglang_compat` (the static placement of
the changed code). Nothing here imports SGLang or builds environments
(:mod:`dpbench.envs.change_env` does that).
"""


class ChangeError(RuntimeError):
    """A change could not be added, read or installed; the message is one line saying why."""
