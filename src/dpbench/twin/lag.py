"""The overlap scheduler's one-step lag, as one object: which requests a rank's next pass still
holds although their work is done, and when they let go.

SGLang's overlap scheduler processes step k's results after it has scheduled step k+1. So:

- a request that produced its last token in step k is *lagged*: it keeps its KV and its
  slot in the running batch through step k+1 (decoding once more, output discarded) and is
  released when step k+1 completes;
- a request prefilled in step k is cached in the radix tree with step k's results, i.e.
  after step k+1 (its *pending prefill*);
- on 0.5.16/0.5.17 a released request still stays in the running batch until that rank's
  next decode pass filters it out (``update_running_batch``): it is *finished in running*.
  0.5.23 filters it before the next pass.

With 0.5.23's ``skip_finishing_decode`` a lagged request leaves the running batch at the
next decode pass instead (it does not decode again; its KV stays until the release).

Invariants (``check``, asserted by the rank after every step): every finished-in-running
request, and every lagged one unless it left for a decode (0.5.23), is in the running
batch; no request is both; a retracted request has no pending prefill. Requests are tracked by their trace index, which is unique
per rank and survives retraction (the same request is re-queued), never by ``id()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class Tracked(Protocol):
    index: int


@dataclass
class ResultLag:
    overlap: bool  # the overlap scheduler's lag (SGLang's default); off: results apply at once
    filter_at_decode: bool  # 0.5.16/0.5.17: released requests leave the batch at the next decode
    # 0.5.23: a lagged request sits out the next decode (it leaves the running batch then)
    skip_finishing_decode: bool = False
    lagged: dict[int, Any] = field(default_factory=dict)
    pending_prefills: dict[int, tuple[Any, int]] = field(default_factory=dict)
    finished_in_running: dict[int, Any] = field(default_factory=dict)

    def is_lagged(self, t: Tracked) -> bool:
        return t.index in self.lagged

    @property
    def skips_finishing(self) -> bool:
        """Lagged requests leave the next decode batch (only with the overlap lag)."""
        return self.overlap and self.skip_finishing_decode

    def step_done(
        self, finished: list[Any], prefilled: list[tuple[Any, int]]
    ) -> tuple[list[Any], list[tuple[Any, int]]]:
        """The step's results: ``(to release now, (request, tokens) to cache now)``. With the
        overlap lag those are the previous step's, and this step's wait one step."""
        if not self.overlap:
            return finished, prefilled
        release, cache = list(self.lagged.values()), list(self.pending_prefills.values())
        self.lagged = {t.index: t for t in finished}
        self.pending_prefills = {t.index: (t, n) for t, n in prefilled}
        return release, cache

    def released(self, ts: list[Any]) -> bool:
        """``ts`` were released; True when they leave the running batch now (0.5.23), False
        when they stay in it until the rank's next decode pass (0.5.16/0.5.17)."""
        if self.filter_at_decode:
            self.finished_in_running.update((t.index, t) for t in ts)
            return False
        return True

    def take_finished_in_running(self) -> set[int]:
        """The indices the next decode pass filters out (and forgets)."""
        out = set(self.finished_in_running)
        self.finished_in_running = {}
        return out

    def retracted(self, ts: list[Any]) -> None:
        for t in ts:
            self.pending_prefills.pop(t.index, None)

    def check(self, running: list[Any]) -> None:
        held = {t.index for t in running}
        must = set(self.finished_in_running)
        if not self.skips_finishing:  # else a lagged request may have left for its decode
            must |= set(self.lagged)
        lost = must - held
        both = set(self.lagged) & set(self.finished_in_running)
        if lost or both:
            raise AssertionError(
                f"overlap lag out of step: not in the running batch {sorted(lost)}, "
                f"lagged and finished both {sorted(both)}"
            )
