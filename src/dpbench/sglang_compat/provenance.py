"""What every tier's run result says about the SGLang it ran: version, commit, API generation, detected placement.

One call, one shape, for every tier::

    from dpbench.sglang_compat.provenance import provenance
    result = results.make_run_result(tier="twin", **provenance(), metrics=..., wall_time_s=...)

:func:`provenance` returns ``{"sglang": {...}, "placement": {...}}``, the two run-result
fields ``results.make_run_result`` takes by those names:

- ``sglang``: ``version`` and ``commit`` (package metadata / ``_version.py``; null for
  a release wheel), ``generation`` (the API generation over ``components``, see
  :mod:`.generations`), ``generation_compared`` and ``variants`` (feature → variant).
- ``placement``: the negotiation's placement read statically from the installed
  ``schedule_policy.py`` (:mod:`.negotiation`): ``label`` (early / post-kv / absent /
  unknown), ``source`` ("static"), ``kv_exits_before_negotiation`` (null unless a
  negotiation was found), ``chunked_negotiates``, and ``reason`` when the label is
  ``unknown`` or ``absent``.

An API shape this suite does not know raises :class:`.detect.UnsupportedSGLang` (one
line naming the difference); tiers turn that into their skip. ``components=()`` (the
kernel tier, which does not drive the scheduler) compares nothing: ``generation`` is
then null and ``generation_compared`` empty, saying so rather than guessing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dpbench.sglang_compat.detect import (
    COMPONENTS,
    detect,
    installed_change,
    installed_commit,
    installed_version,
)
from dpbench.sglang_compat.generations import Generation
from dpbench.sglang_compat.negotiation import StaticPlacement, analyse_installed


def detected_placement(found: StaticPlacement | None = None) -> dict[str, Any]:
    """The run result's ``placement`` block from the static reading of ``schedule_policy.py``."""
    found = found or analyse_installed()
    out: dict[str, Any] = {
        "label": found.label,
        "source": "static",
        "kv_exits_before_negotiation": found.kv_exits_before_negotiation,
        "chunked_negotiates": found.chunked_negotiates,
    }
    if found.reason:
        out["reason"] = found.reason
    return out


def sglang_block(generation: Generation | None, components: Iterable[str]) -> dict[str, Any]:
    comps = tuple(components)
    out = {
        "version": installed_version(),
        "commit": installed_commit(),
        "generation": None if generation is None else generation.name,
        "generation_compared": list(comps),
        "variants": {} if generation is None else dict(generation.variants),
    }
    change = installed_change()
    if change is not None:
        out["change"] = change
    return out


def provenance(
    components: Iterable[str] = COMPONENTS, *, generation: Generation | None = None
) -> dict[str, Any]:
    """``{"sglang": …, "placement": …}`` for the installed SGLang (see the module docstring).

    ``generation``: one the caller already detected (over ``components``), to skip a second
    detection. UnsupportedSGLang when the shape over ``components`` is unknown.
    """
    comps = tuple(components)
    if generation is None and comps:
        generation = detect(components=comps)
    if generation is not None:
        comps = generation.compared
    return {"sglang": sglang_block(generation, comps), "placement": detected_placement()}
