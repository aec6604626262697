"""User-facing metrics, one definition for every tier.

Owns: :mod:`.latency` (TTFT, ITL, TPOT, E2E percentiles, the SLO and goodput),
:mod:`.outcomes` (the delayer's verdicts as counted on every tier) and :mod:`.balance`
(rank balance: tokens and busy time per DP rank).

May import: :mod:`dpbench.core` and numpy only. The tiers (twin, server, placement) and
the dashboard import it; it imports none of them.
"""
