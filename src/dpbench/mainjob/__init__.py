"""The main job (``make bench``): its plan, its steps, the release history and asv's configs.

Owns: :mod:`.job` (``dpbench bench``: builds the history, runs the plan's steps, publishes),
:mod:`.plan` (the default plan: steps, picks, reference costs), :mod:`.side` (the
simulated-server steps in an asv run of their own), :mod:`.releases` and
:mod:`.releases_cli` (SGLang's PyPI releases as a local git history), :mod:`.changes_cli`
(``dpbench change``: a patch or source tree on a release as a commit of that history, see
:mod:`dpbench.changes`) and :mod:`.asvconf` (``dpbench asv-config``).

May import: :mod:`dpbench.core`, :mod:`dpbench.envs`, :mod:`dpbench.changes`,
:mod:`dpbench.dashboard` (it publishes) and the tiers' entry points. No tier's library
imports the main job; a tier's command line may read its release list
(:data:`.releases.KNOWN_VERSIONS`).
"""
