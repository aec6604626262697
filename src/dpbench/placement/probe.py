"""`python -m dpbench.placement.probe [--json] [--out PATH]`: the placement tier's run result for the installed SGLang.

Run it *inside* a release environment (``dpbench placement show`` does that for you).
It combines the static reading of ``schedule_policy.py`` (:mod:`.static`) and the
behavioural probe of the real ``PrefillAdder`` (:mod:`.behavioural`) into one run
result (``dpbench.core.results``, tier ``placement``).

Metrics (all ``better`` as noted; codes are stable, the dashboard decodes them):

========================================  =======  ======  =======================================
name                                      unit     better  meaning
========================================  =======  ======  =======================================
``placement_code``                        code     none    0 unknown, 1 early, 2 post-kv, 3 absent
``kv_exits_before_negotiation``           exits    none    static: KV-budget exits ahead of the
                                                           first negotiation in ``add_one_req``
                                                           (absent unless a negotiation was found)
``false_prefillable_reports``             reports  lower   behavioural: of the two KV-gated cases,
                                                           those where the delayer heard
                                                           ``local_prefillable=True`` and the
                                                           request then got ``NO_TOKEN``
``chunked_negotiates``                    bool     none    behavioural: ``add_chunked_req``
                                                           negotiates (1) or not (0)
``pr31835_conforming_cases``              cases    higher  of the five cases, how many behave as
                                                           PR #31835 specifies
========================================  =======  ======  =======================================

Exit status: 0 with a result; 3 when the installed SGLang's API shape is unsupported
(the message, naming what differs, goes to stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from dpbench.core import results
from dpbench.placement import behavioural, static

PLACEMENT_CODES: dict[str, int] = {"unknown": 0, "early": 1, "post-kv": 2, "absent": 3}
GATED_CASES = ("kv_budget_reject", "lock_recheck_reject")
EXIT_UNSUPPORTED = 3


def behavioural_label(run: behavioural.BehaviouralPlacement) -> str:
    """The placement the five cases imply: early / post-kv / absent / unknown."""
    by = {c.case: c for c in run.cases}
    gated = [by[n] for n in GATED_CASES if by[n].constructible]
    verdicts = [
        by[n] for n in ("delay_verdict_blocks", "allow_verdict_admits") if by[n].constructible
    ]
    if not verdicts or not gated:
        return "unknown"
    if not any(c.negotiations for c in verdicts):
        return "absent"
    if any(c.false_prefillable_report for c in gated):
        return "early"
    return "post-kv"


def build_result() -> dict[str, Any]:
    """The placement run result for the installed SGLang; UnsupportedSGLang if its adder's shape is unknown.

    A metric this release cannot give is absent, never a stand-in number: no
    ``kv_exits_before_negotiation`` unless the static reading found a negotiation
    (``unknown`` carries its reason instead; ``absent`` has no negotiation to count
    exits before), no behavioural metrics where SGLang has no PrefillDelayer.
    """
    from dpbench.sglang_compat.detect import detect
    from dpbench.sglang_compat.provenance import detected_placement, sglang_block

    started = time.perf_counter()
    gen = detect(components=("adder",))
    found = static.analyse_installed()
    notes: list[str] = []
    metrics: dict[str, results.Metric] = {}
    if found.kv_exits_before_negotiation is not None:
        metrics["kv_exits_before_negotiation"] = results.Metric(
            float(found.kv_exits_before_negotiation), "exits", "none"
        )
    placement: dict[str, Any] = {
        **detected_placement(found),
        "source": "static",
        "static": found.as_dict(),
    }
    extra: dict[str, Any] = {"placement_codes": PLACEMENT_CODES}
    if found.label == "unknown":
        notes.append(f"static analysis: unknown ({found.reason})")

    if gen.variant("PrefillAdder.__init__ keywords") == "no_delayer":
        notes.append(
            "behavioural probe not run: this SGLang's PrefillAdder takes no "
            "prefill_delayer_single_pass (no PrefillDelayer to negotiate with)"
        )
    else:
        run = behavioural.probe()
        beh = behavioural_label(run)
        placement["behavioural_label"] = beh
        placement["agree"] = beh == found.label
        placement["source"] = "static+behavioural"
        if found.label == "unknown" and beh != "unknown":
            placement["label"] = beh
            placement["source"] = "behavioural"
            notes.append(f"label from the behavioural probe ({beh}); the static reading gave none")
        elif beh != found.label:
            notes.append(f"static ({found.label}) and behavioural ({beh}) placement disagree")
        gated = [c for c in run.cases if c.case in GATED_CASES and c.constructible]
        if gated:
            metrics["false_prefillable_reports"] = results.Metric(
                float(sum(c.false_prefillable_report for c in gated)), "reports", "lower"
            )
        if run.chunked_negotiates is not None:
            metrics["chunked_negotiates"] = results.Metric(
                float(run.chunked_negotiates), "bool", "none"
            )
        metrics["pr31835_conforming_cases"] = results.Metric(
            float(run.conforming), "cases", "higher"
        )
        for name in run.not_constructible:
            case = next(c for c in run.cases if c.case == name)
            notes.append(f"case {name} not constructible on this release: {case.reason}")
        extra["cases"] = [c.as_dict() for c in run.cases]
        extra["objects"] = run.objects
    if placement["label"] == "unknown":
        placement["reason"] = (
            "; ".join(n for n in notes if n.startswith(("static analysis", "case ")))
            or found.reason
        )

    metrics["placement_code"] = results.Metric(
        float(PLACEMENT_CODES[placement["label"]]), "code", "none"
    )
    return results.make_run_result(
        tier="placement",
        sglang=sglang_block(gen, gen.compared),
        metrics=metrics,
        wall_time_s=time.perf_counter() - started,
        placement=placement,
        notes=notes,
        extra=extra,
    )


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send everything written to fd 1 (SGLang's import-time prints) to stderr, so stdout stays JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dpbench.placement.probe", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--json", action="store_true", help="print the run result as JSON on stdout"
    )
    parser.add_argument("--out", help="also save the run result (atomically) to this path")
    args = parser.parse_args(argv)

    from dpbench.sglang_compat.detect import UnsupportedSGLang

    try:
        with _stdout_to_stderr():
            result = build_result()
    except UnsupportedSGLang as exc:
        print(f"unsupported SGLang: {exc}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    if args.out:
        results.save(args.out, result)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        from rich.console import Console

        from dpbench.placement.table import render

        Console().print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
