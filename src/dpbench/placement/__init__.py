"""The placement tier: where ``PrefillAdder`` negotiates with the PrefillDelayer, read statically and observed.

- :mod:`.static`: AST of ``schedule_policy.py`` → early / post-kv / absent / unknown.
- :mod:`.behavioural`: SGLang's real ``PrefillAdder`` driven through PR #31835's five cases.
- :mod:`.probe`: ``python -m dpbench.placement.probe`` (inside a release environment) → run result.
- :mod:`.bench`: the probe's run for the asv benchmark, filed beside asv's results.
- :mod:`.cli`: ``dpbench placement show`` / ``dpbench placement static``.
"""
