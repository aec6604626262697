"""Options that several commands take, each declared once: its flag, metavar, type and help.

A command uses an alias as its parameter's annotation and gives the default it wants:
``seeds: SeedsOpt = 20``. The arm options are those of every comparison of releases
(``twin sweep``, ``twin capacity``); ``--output`` is an optional JSON result file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SpecArg = Annotated[
    str, typer.Argument(metavar="SPEC", help="workload spec: a shipped name or a YAML path")
]
ArmsOpt = Annotated[
    list[str],
    typer.Option(
        "--sglang",
        metavar="ARM",
        help="an arm: a release (0.5.16) or a change (dpbench change list), optionally with modes after ':', e.g. 0.5.17:ablation "
        "(add_chunked_req without the delayer), no-radix, no-overlap, no-chunk-reset, physical, "
        "conservativeness=X, batch-is-full=always|if_admitted_or_running, "
        "finished-filter=every_pass|at_decode, or any 'dpbench twin run' option as NAME=VALUE "
        "(overlap_schedule=false). Repeat it: each arm is compared with the first",
    ),
]
SeedsOpt = Annotated[
    int, typer.Option(metavar="N", help="seeds 0 … N−1, the same through every arm")
]
DpOpt = Annotated[
    list[int] | None, typer.Option(metavar="N", help="DP sizes (repeatable; default 4)")
]
ChunkOpt = Annotated[
    list[int] | None,
    typer.Option(
        metavar="TOKENS", help="global --chunked-prefill-size values (repeatable; default 8192)"
    ),
]
RequestsOpt = Annotated[
    int | None, typer.Option(metavar="N", help="override the spec's num_requests")
]
JobsOpt = Annotated[int, typer.Option(metavar="N", help="arms run at once (one process each)")]
TimeoutOpt = Annotated[
    float, typer.Option(metavar="SECONDS", help="wall-clock limit per arm, seconds")
]
OutputOpt = Annotated[
    Path | None,
    typer.Option("-o", "--output", metavar="FILE", help="write the result as JSON here"),
]
