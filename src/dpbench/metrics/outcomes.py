"""The PrefillDelayer's verdict fractions, one definition for the twin and the server.

Both tiers count SGLang's ``prefill_delayer_outcomes_total`` the way its metrics collector
does: one outcome per scheduler pass that reached the delayer, labelled by
``input_estimation`` (``all``/``mixed``/``none``: how many ranks were prefillable) and
``output_allow``. Two fractions come out of that:

- ``delayer_delay_fraction``: delays over every outcome. The server's loop also finalizes
  the delayer on passes where no rank had anything to prefill (``none``), and it runs many
  more such passes than the twin's lockstep steps (idle loop iterations between arrivals),
  so this one is not comparable between the two tiers.
- ``delayer_delay_fraction_prefillable``: delays over the outcomes where some rank was
  prefillable (``all`` or ``mixed``), the only passes where the delayer decides anything.
  This is the one the fidelity table compares.
"""

from __future__ import annotations

from collections.abc import Iterable

from dpbench.core.results import Metric

NOT_PREFILLABLE = "none"  # SGLang's input_estimation when no rank was prefillable


def delay_fractions(rows: Iterable[tuple[str, str, float]]) -> dict[str, Metric]:
    """``rows``: (input_estimation, output_allow "true"/"false", count). Absent when nothing counted."""
    total = delayed = prefillable = delayed_prefillable = 0.0
    for estimation, allow, count in rows:
        total += count
        is_delay = str(allow).lower() == "false"
        delayed += count if is_delay else 0
        if estimation != NOT_PREFILLABLE:
            prefillable += count
            delayed_prefillable += count if is_delay else 0
    out: dict[str, Metric] = {}
    if total:
        out["delayer_delay_fraction"] = Metric(delayed / total, "fraction", "none")
    if prefillable:
        out["delayer_delay_fraction_prefillable"] = Metric(
            delayed_prefillable / prefillable, "fraction", "none"
        )
    return out
