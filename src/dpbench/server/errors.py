"""The server tier's errors: each message is one line saying what went wrong and what to do."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ServerRunError(RuntimeError):
    """The server run could not start or did not finish; the message is one line."""


class RunOptionsError(ServerRunError, ValueError):
    """Run options that contradict each other."""


class RunIncomplete(ServerRunError):
    """The server (or one of its ranks) died during the run; ``result`` holds what was measured,
    ``results`` the earlier replays' results (shared replays: one server, several replays)."""

    def __init__(
        self, message: str, result: dict[str, Any], results: Sequence[dict[str, Any]] = ()
    ) -> None:
        super().__init__(message)
        self.result = result
        self.results = list(results)
