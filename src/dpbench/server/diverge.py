"""Where the twin and SGLang's real scheduler part: one server run against the twin replaying it.

The simulated-forward server's stand-in writes one record per scheduler pass with work
and per DP rank (``passes-rank<N>.jsonl``: the state the pass saw, the batch it chose,
the delayer's input and verdict; :class:`dpbench.sglang_compat.simforward.standin.PassRecorder`).
The twin, replaying that run's arrivals (each request on the rank and at the time its
scheduler took it in), records the same per step (its timeline). Both step through the
same passes: a pass with work on some rank, in lockstep over the DP ranks.

Each rank's pass is labelled by what it did and why, with one rule for both sides
(:func:`label`): ``extend:chunk`` (continued a chunked prefill), ``extend:new``,
``decode:empty`` (nothing waiting), ``decode:delayed`` (the delayer said no),
``decode:false-report`` (told the delayer "prefillable", was allowed, admitted nothing:
the early placement's false report), ``decode:refused`` (waiting requests, not reported
prefillable: a KV-budget or batch-full refusal), and the same for ``idle:*``. The report:

- **counts**: steps by kind (extend / decode / mixed / none) on each side;
- **why mixed**: for each DP-mixed step, the labels of its extending and decoding ranks,
  counted on each side (alignment-free: where the excess mixed steps come from);
- **first divergence**: the first step whose per-rank kinds differ, with both sides' state
  around it, and whether the ranks had seen the same state there (a *decision*
  divergence) or not (the *inputs* had already parted, e.g. an arrival one pass apart).
  A rank's state counts the running requests its decode would run: not those already
  finished that the next decode filters out (0.5.16/0.5.17), nor on 0.5.23 those whose
  in-flight step finishes them (``finished``/``finishing`` in both sides' records);
- **departures**: the two step sequences aligned (their shared start as it stands, the rest
  by ``difflib``), and for each stretch
  where they differ, which rank did what on each side, counted by label pair: the places
  they most often part.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpbench.server.steps import _jsonl, replay_records_view, trace_id

KIND_CODE = {"extend": "E", "decode": "D", "idle": "I", "none": "-"}


class DivergeError(RuntimeError):
    """The records cannot be compared: missing, from another run, or not lined up."""


@dataclass(frozen=True)
class RankPass:
    """One rank's pass: what it saw, what it did, what the delayer heard and said."""

    kind: str  # extend | decode | idle | none (no forward on any rank)
    waiting: int
    running: int
    chunked: str | None  # request id of the chunked prefill in flight
    bs: int = 0
    admitted: tuple[str, ...] = ()
    usage: float | None = None  # pool usage the delayer was given
    reported: bool | None = None  # told the delayer "prefillable" (first report of the pass)
    allow: bool | None = None
    reason: str | None = None  # input_estimation/output_reason
    # running requests the pass's decode leaves out because their in-flight step finishes
    # them (0.5.23's overlap loop); None: the release has no such rule
    finishing: int | None = None
    # running requests already finished, filtered out by the next decode (0.5.16/0.5.17);
    # None: not recorded (results before 2026-12-02)
    finished: int | None = None

    @property
    def decoding(self) -> int:
        """The running requests this pass's decode would run."""
        return self.running - (self.finishing or 0) - (self.finished or 0)

    def brief(self) -> str:
        delayer = ""
        if self.reported is not None:
            delayer = (
                f" told={'P' if self.reported else '-'}"
                f" verdict={'allow' if self.allow else 'delay'}"
                + (f"({self.reason})" if self.reason else "")
            )
        usage = f" usage={self.usage:.3f}" if self.usage is not None else ""
        chunk = " chunk" if self.chunked else ""
        if self.finished:
            chunk = f" done={self.finished}{chunk}"
        if self.finishing:
            chunk = f" f={self.finishing}{chunk}"
        adm = f" +{len(self.admitted)}" if self.admitted else ""
        return (
            f"{KIND_CODE[self.kind]} w={self.waiting} r={self.running}{chunk}{adm}{usage}{delayer}"
        )


Step = tuple[RankPass, ...]


def label(p: RankPass) -> str:
    """What a rank did in a pass and why, by one rule for both sides."""
    if p.kind == "extend":
        return "extend:chunk" if p.chunked else "extend:new"
    base = "idle" if p.kind in ("idle", "none") else "decode"
    if p.waiting == 0 and not p.chunked:
        return f"{base}:empty"
    if p.reported is None:  # no delayer
        return f"{base}:refused"
    if p.allow is False:
        return f"{base}:delayed"
    if p.reported:
        return f"{base}:false-report"
    return f"{base}:refused"


def signature(step: Step) -> str:
    return "".join(KIND_CODE[p.kind] for p in step)


def step_kind(step: Step) -> str:
    kinds = {p.kind for p in step}
    ext, dec = "extend" in kinds, "decode" in kinds
    return "mixed" if ext and dec else "extend" if ext else "decode" if dec else "none"


def _normalise(step: list[RankPass]) -> Step:
    """A step in which no rank runs a forward is ``none`` on every rank; otherwise a rank
    without a forward of its own runs SGLang's IDLE batch."""
    if all(p.kind in ("idle", "none") for p in step):
        return tuple(_with_kind(p, "none") for p in step)
    return tuple(_with_kind(p, "idle") if p.kind == "none" else p for p in step)


def _with_kind(p: RankPass, kind: str) -> RankPass:
    return p if p.kind == kind else RankPass(**{**p.__dict__, "kind": kind})


# -- the server's side ------------------------------------------------------------------
def server_steps(run: dict[str, Any]) -> list[Step]:
    """The server run's passes with work, from the first trace request's arrival on."""
    extra = run.get("extra", {})
    where = extra.get("step_records_dir")
    dp = int(extra.get("server_config", {}).get("dp_size", 0))
    if not where or dp < 1:
        raise DivergeError("not a simulated-forward server run (no extra.step_records_dir)")
    ids, suffix, t_end = replay_records_view(extra)  # one of several replays against one server
    arrivals = [
        rec["t"]
        for r in range(dp)
        for rec in _read(Path(where) / f"arrivals-rank{r}.jsonl")
        if rec["rid"] in ids
    ]
    if not arrivals:
        raise DivergeError(f"{where}: no trace request reached a scheduler (arrivals-rank*.jsonl)")
    t0 = min(arrivals)
    by_pass: dict[int, dict[int, dict[str, Any]]] = {}
    for r in range(dp):
        path = Path(where) / f"passes-rank{r}.jsonl"
        if not path.is_file():
            raise DivergeError(
                f"{path} is missing: this server run predates the pass records "
                "(run it again with this dpbench)"
            )
        for rec in _read(path):
            by_pass.setdefault(int(rec["pass"]), {})[r] = rec
    first = min(
        (p for p, recs in by_pass.items() if any(x["t"] >= t0 for x in recs.values())), default=None
    )
    if first is None:
        raise DivergeError(f"{where}: no pass after the first trace arrival")
    steps = []
    for p in sorted(k for k in by_pass if k >= first):
        recs = by_pass[p]
        if t_end is not None and any(x["t"] >= t_end for x in recs.values()):
            break  # the next replay's passes
        steps.append(_normalise([_server_pass(recs.get(r), suffix) for r in range(dp)]))
    return steps


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DivergeError(f"{path} is missing")
    return _jsonl(path)  # a torn last line (a killed rank) is dropped there


def _server_pass(rec: dict[str, Any] | None, suffix: str = "") -> RankPass:
    """A pass record as the finder compares it; request ids as the trace's (a replay after
    the first sent each as ``<id><suffix>``)."""
    if rec is None:  # not written: nothing waiting, running or chunked, no batch
        return RankPass(kind="none", waiting=0, running=0, chunked=None)
    reason = None
    if "estimation" in rec:
        reason = f"{rec['estimation']}/{rec['reason'] or 'none'}"
    return RankPass(
        kind=rec["kind"],
        waiting=int(rec["waiting"]),
        running=int(rec["running"]),
        chunked=None if rec["chunked"] is None else trace_id(rec["chunked"], suffix),
        bs=int(rec["bs"]),
        admitted=tuple(trace_id(i, suffix) for i in rec["admitted"]),
        usage=rec.get("usage"),
        reported=rec.get("reported"),
        allow=rec.get("allow"),
        reason=reason,
        finishing=rec.get("finishing"),
        finished=rec.get("finished"),
    )


# -- the twin's side --------------------------------------------------------------------
_TWIN_KIND = {0: "idle", 1: "decode", 2: "extend"}
_TIMELINE_KEYS = (
    "rank_kind",
    "rank_waiting",
    "rank_running",
    "rank_chunked",
    "rank_token_usage",
    "rank_reported",
    "rank_allowed",
    "rank_verdict",
    "rank_admitted_idx",
    "request_ids",
)


def twin_steps(result: dict[str, Any]) -> list[Step]:
    """The twin's steps from its timeline (``python -m dpbench.twin.run`` without ``--no-timeline``)."""
    tl = result.get("extra", {}).get("timeline")
    if not tl:
        raise DivergeError("the twin result has no timeline (run it without --no-timeline)")
    missing = [k for k in _TIMELINE_KEYS if k not in tl]
    if missing:
        raise DivergeError(f"the twin's timeline lacks {', '.join(missing)} (an older dpbench)")
    ids = tl["request_ids"]
    dp = len(tl["rank_kind"])
    finishing = tl.get("rank_finishing")  # these two are absent from results before 2026-12-02
    finished = tl.get("rank_finished")
    steps = []
    for i in range(len(tl["rank_kind"][0])):
        step = []
        for r in range(dp):
            reported = tl["rank_reported"][r][i]
            chunked = tl["rank_chunked"][r][i]
            verdict = tl["rank_verdict"][r][i]
            step.append(
                RankPass(
                    kind=_TWIN_KIND[tl["rank_kind"][r][i]],
                    waiting=tl["rank_waiting"][r][i],
                    running=tl["rank_running"][r][i],
                    chunked=ids[chunked] if chunked >= 0 else None,
                    bs=len(tl["rank_admitted_idx"][r][i]),
                    admitted=tuple(ids[j] for j in tl["rank_admitted_idx"][r][i]),
                    usage=tl["rank_token_usage"][r][i],
                    reported=None if reported < 0 else bool(reported),
                    allow=None if reported < 0 else bool(tl["rank_allowed"][r][i]),
                    reason=verdict or None,
                    finishing=None if finishing is None or finishing[r][i] < 0 else finishing[r][i],
                    finished=None if finished is None else finished[r][i],
                )
            )
        steps.append(_normalise(step))
    return steps


# -- the comparison ---------------------------------------------------------------------
def counts(steps: Sequence[Step]) -> dict[str, int]:
    c = Counter(step_kind(s) for s in steps)
    return {k: c.get(k, 0) for k in ("extend", "decode", "mixed", "none")} | {"steps": len(steps)}


def why_mixed(steps: Sequence[Step]) -> Counter[str]:
    """Per DP-mixed step: ``extending labels | decoding labels`` (sorted, so rank order does not matter)."""
    out: Counter[str] = Counter()
    for s in steps:
        if step_kind(s) != "mixed":
            continue
        ext = sorted(label(p) for p in s if p.kind == "extend")
        rest = sorted(label(p) for p in s if p.kind != "extend")
        out[f"{' '.join(ext)} | {' '.join(rest)}"] += 1
    return out


def _forward(p: RankPass) -> str:
    """A rank's own forward: extend, decode, or none (an IDLE batch beside others, or no step)."""
    return p.kind if p.kind in ("extend", "decode") else "none"


def _seen(p: RankPass) -> tuple[int, int, int, bool]:
    return (p.waiting, p.running, p.decoding, p.chunked is not None)


def _coarse(p: RankPass) -> tuple[bool, bool, bool]:
    """What decides a rank's kind of forward, qualitatively: requests waiting, requests its
    decode would run (not those already finished, nor on 0.5.23 those its in-flight step
    finishes), a chunk."""
    return (p.waiting > 0, p.decoding > 0, p.chunked is not None)


def first_divergence(
    server: Sequence[Step], twin: Sequence[Step], window: int = 3
) -> dict[str, Any]:
    """The first step whose per-rank kinds differ (index-aligned from the first pass), and the
    first whose ranks saw different states; with both sides' steps around the former."""
    n = min(len(server), len(twin))
    first_kind = next((i for i in range(n) if signature(server[i]) != signature(twin[i])), None)
    first_state = next(
        (i for i in range(n) if [_seen(p) for p in server[i]] != [_seen(p) for p in twin[i]]),
        None,
    )
    out: dict[str, Any] = {"first_kind_step": first_kind, "first_state_step": first_state}
    if first_kind is None:
        out["verdict"] = (
            "no divergence: every step ran the same kind on every rank"
            if len(server) == len(twin)
            else f"no divergence in the first {n} steps; one side has {abs(len(server) - len(twin))} more"
        )
        return out
    same_state = first_state is None or first_state > first_kind
    out["decision"] = same_state
    out["verdict"] = (
        f"step {first_kind}: the ranks saw the same state and chose differently (a decision)"
        if same_state
        else f"step {first_kind}: the inputs had parted first, at step {first_state} (a state the "
        "ranks saw differed)"
    )
    at = first_state if not same_state and first_state is not None else first_kind
    lo, hi = max(0, at - window), min(n, first_kind + window + 1)
    out["window"] = [
        {
            "step": i,
            "server": [p.brief() for p in server[i]],
            "twin": [p.brief() for p in twin[i]],
        }
        for i in range(lo, hi)
    ]
    return out


def departures(server: Sequence[Step], twin: Sequence[Step]) -> dict[str, Any]:
    """Align the two step sequences by their per-rank kinds; where they differ, count by label
    which rank did what on each side (``server label → twin label``, per rank, in stretches
    of equal length), and the step kinds one side had where the other had others."""
    a = [signature(s) for s in server]
    b = [signature(s) for s in twin]
    opcodes = _aligned(a, b)
    pairs: Counter[str] = Counter()
    decisions: Counter[str] = Counter()
    first_decision: dict[str, Any] | None = None
    kinds: Counter[str] = Counter()
    unmatched_server: Counter[str] = Counter()
    unmatched_twin: Counter[str] = Counter()
    matched = 0
    first_departure: dict[str, Any] | None = None
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            matched += i2 - i1
            continue
        # the first place the aligned sequences part, past passes one side ran with no
        # forward anywhere (an arrival a pass later: the alignment steps around it)
        idle_only = all(step_kind(x) == "none" for x in (*server[i1:i2], *twin[j1:j2]))
        if first_departure is None and not idle_only:
            first_departure = _departure_window(server, twin, op, i1, i2, j1, j2)
        for s in server[i1:i2]:
            unmatched_server[step_kind(s)] += 1
        for t in twin[j1:j2]:
            unmatched_twin[step_kind(t)] += 1
        if op == "replace" and i2 - i1 == j2 - j1:
            for k, (s, t) in enumerate(zip(server[i1:i2], twin[j1:j2], strict=True)):
                kinds[f"{step_kind(s)} → {step_kind(t)}"] += 1
                for ps, pt in zip(s, t, strict=True):
                    if _forward(ps) != _forward(pt):
                        pairs[f"{label(ps)} → {label(pt)}"] += 1
                # a decision: every rank saw the same kind of state, yet some ran another forward
                if [_coarse(p) for p in s] == [_coarse(p) for p in t]:
                    differ = [
                        (ps, pt)
                        for ps, pt in zip(s, t, strict=True)
                        if _forward(ps) != _forward(pt)
                    ]
                    for ps, pt in differ:
                        decisions[f"{label(ps)} → {label(pt)}"] += 1
                    if differ and first_decision is None:
                        first_decision = {
                            "server_step": i1 + k,
                            "twin_step": j1 + k,
                            "server": [p.brief() for p in s],
                            "twin": [p.brief() for p in t],
                        }
    return {
        "matched_steps": matched,
        "server_steps": len(server),
        "twin_steps": len(twin),
        "unmatched_server": dict(unmatched_server),
        "unmatched_twin": dict(unmatched_twin),
        "step_kind_pairs": dict(kinds.most_common()),
        "rank_label_pairs": dict(pairs.most_common()),
        # aligned steps where each rank saw the same kind of state (requests waiting, running,
        # a chunk in flight) on both sides and some rank still ran another kind of forward
        "decision_pairs": dict(decisions.most_common()),
        "first_decision": first_decision,
        "first_departure": first_departure,
    }


def _aligned(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """``difflib``'s opcodes for ``a`` against ``b``, the common prefix matched first.

    ``SequenceMatcher`` starts from the longest matching block wherever it lies. On runs of
    identical decode steps that block can take the last steps of the common prefix, so the
    first departure showed a step early (a fresh clone saw an injected one found at twin step
    4 instead of 5, both sides identical through step 4). Steps equal up to the first
    difference are matched as they stand; only the rest is aligned.
    """
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    rest = difflib.SequenceMatcher(a=a[k:], b=b[k:], autojunk=False).get_opcodes()
    shifted = [(op, i1 + k, i2 + k, j1 + k, j2 + k) for op, i1, i2, j1, j2 in rest]
    return ([("equal", 0, k, 0, k)] if k else []) + shifted


def _departure_window(
    server: Sequence[Step],
    twin: Sequence[Step],
    op: str,
    i1: int,
    i2: int,
    j1: int,
    j2: int,
    window: int = 3,
) -> dict[str, Any]:
    """Where the alignment first parts: each side's steps from ``window`` aligned steps
    before it to ``window`` past its start, with what every rank saw and did."""

    def span(steps: Sequence[Step], lo: int) -> list[dict[str, Any]]:
        return [
            {"step": i, "ranks": [p.brief() for p in steps[i]]}
            for i in range(max(0, lo - window), min(len(steps), lo + window + 1))
        ]

    return {
        "op": op,
        "server_step": i1,
        "twin_step": j1,
        "server_unmatched": i2 - i1,
        "twin_unmatched": j2 - j1,
        "server": span(server, i1),
        "twin": span(twin, j1),
    }


def compare(server: Sequence[Step], twin: Sequence[Step], top: int = 8) -> dict[str, Any]:
    if not server or not twin:
        raise DivergeError(
            f"nothing to compare: {len(server)} server steps, {len(twin)} twin steps"
        )
    if len(server[0]) != len(twin[0]):
        raise DivergeError(f"DP sizes differ: server {len(server[0])}, twin {len(twin[0])}")
    ws, wt = why_mixed(server), why_mixed(twin)
    keys = sorted(set(ws) | set(wt), key=lambda k: -(abs(ws[k] - wt[k])))
    return {
        "counts": {"server": counts(server), "twin": counts(twin)},
        "why_mixed": [{"ranks": k, "server": ws[k], "twin": wt[k]} for k in keys[:top]],
        "first_divergence": first_divergence(server, twin),
        "departures": departures(server, twin),
    }


def render(report: dict[str, Any], top: int = 8, width: int | None = None) -> str:
    """The report as text; with ``width``, a longer line wraps at its spaces (never inside a
    number or a rank's state), its continuation indented under its label."""
    lines = _report_lines(report, top)
    if width is None:
        return "\n".join(lines)
    return "\n".join(_wrapped(line, width) for line in lines)


def _wrapped(line: str, width: int) -> str:
    """A long line over several, its continuation under its label ("    server: "); the ranks'
    states (joined by " ; ") each kept whole on a line where one fits."""
    if len(line) <= width:
        return line
    label = re.match(r"\s*(?:\w+:\s+|step \d+\s*)?", line)
    head = label.group(0) if label else ""
    hang = " " * min(len(head), width // 2) or "  "
    parts = line[len(head) :].split(" ; ")
    out, current = [], head + parts[0]
    for part in parts[1:]:  # a line break stands for the " ; " between two ranks
        if len(current) + 3 + len(part) <= width:
            current += f" ; {part}"
        else:
            out.append(current)
            current = hang + part
    out.append(current)
    return "\n".join(
        "\n".join(
            textwrap.wrap(ln, width, subsequent_indent=hang, break_long_words=False,
                          break_on_hyphens=False)
        )
        for ln in out
    )  # fmt: skip


def _report_lines(report: dict[str, Any], top: int) -> list[str]:
    lines = []
    c = report["counts"]
    lines.append("steps            server   twin")
    for k in ("steps", "extend", "decode", "mixed", "none"):
        lines.append(f"  {k:<14} {c['server'][k]:>6} {c['twin'][k]:>6}")
    lines.append("")
    lines.append("why mixed (extending ranks | the others), by |server − twin|:")
    for row in report["why_mixed"][:top]:
        lines.append(f"  {row['server']:>5} {row['twin']:>5}  {row['ranks']}")
    fd = report["first_divergence"]
    lines.append("")
    lines.append(f"first divergence: {fd['verdict']}")
    for w in fd.get("window", []):
        lines.append(f"  step {w['step']}")
        lines.append("    server: " + " ; ".join(w["server"]))
        lines.append("    twin:   " + " ; ".join(w["twin"]))
    d = report["departures"]
    lines.append("")
    lines.append(
        f"aligned: {d['matched_steps']} steps match ({d['server_steps']} server, {d['twin_steps']} twin); "
        f"unmatched server {d['unmatched_server']}, twin {d['unmatched_twin']}"
    )
    lines.append("where a rank's kind differs (server label → twin label):")
    for k, v in list(d["rank_label_pairs"].items())[:top]:
        lines.append(f"  {v:>5}  {k}")
    lines.append("step kinds there (server → twin):")
    for k, v in list(d["step_kind_pairs"].items())[:top]:
        lines.append(f"  {v:>5}  {k}")
    lines.append("decisions (same kind of state on every rank, another forward), by label:")
    for k, v in list(d["decision_pairs"].items())[:top]:
        lines.append(f"  {v:>5}  {k}")
    fdep = d.get("first_departure")
    if fdep is None:
        lines.append("first departure after alignment: none")
    else:
        lines.append(
            f"first departure after alignment: server step {fdep['server_step']}, twin step "
            f"{fdep['twin_step']} ({fdep['op']}: {fdep['server_unmatched']} server step(s) "
            f"against {fdep['twin_unmatched']} twin step(s))"
        )
        for side in ("server", "twin"):
            for w in fdep[side]:
                lines.append(f"  {side:<6} {w['step']:>5}: " + " ; ".join(w["ranks"]))
    fd2 = d["first_decision"]
    if fd2 is None:
        lines.append("  none: every departure followed a difference in what the ranks saw")
    else:
        lines.append(
            f"first decision: server step {fd2['server_step']}, twin step {fd2['twin_step']}"
        )
        lines.append("    server: " + " ; ".join(fd2["server"]))
        lines.append("    twin:   " + " ; ".join(fd2["twin"]))
    return lines


def load(path: str | Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DivergeError(f"{path}: cannot read it as a run result ({exc})") from exc


def replay_twin(
    server_path: Path, out: Path, *, modes: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run the twin on the server run's own arrivals and idle-pass time, timeline on, with an
    arm's ``modes`` (``dpbench.twin.job.arm_overrides``) on top."""
    from dpbench.server.fidelity import Inputs, run_twin, server_idle_pass_ms
    from dpbench.server.run import release_python

    server = load(server_path)
    extra = server.get("extra", {})
    cfg = extra.get("server_config", {})
    release = server.get("sglang", {}).get("version")
    workload = server.get("workload", {})
    spec = workload.get("spec") or workload.get("name")  # runs before 2026-12-02: a shipped name
    if not release or not spec or not cfg:
        raise DivergeError(
            f"{server_path}: not a server run result (no sglang, workload or config)"
        )
    if cfg.get("chunked_prefill_size") is None:
        raise DivergeError(
            f"{server_path}: the server ran with SGLang's default --chunked-prefill-size, which "
            "the run does not record; run it with --chunked-prefill-size N to replay it"
        )
    inp = Inputs(
        spec=spec,
        dp=int(cfg["dp_size"]),
        release=release,
        chunked_prefill_size=int(cfg["chunked_prefill_size"]),
        delayer=bool(cfg["delayer"]["enabled"]),
    )
    idle = server_idle_pass_ms(server, inp.dp)
    own: dict[str, Any] = {}
    passes = cfg["delayer"].get("max_delay_passes")
    if passes is not None:  # the server's own setting, not SGLang's default
        own["prefill_delayer_max_delay_passes"] = int(passes)
    twin = run_twin(
        inp,
        out,
        release_python(release),
        replay=server_path,
        idle_pass_ms=None if math.isnan(idle) else idle,
        timeline=True,
        modes={**own, **(modes or {})},
    )
    if workload.get("hash") and twin.get("workload", {}).get("hash") != workload["hash"]:
        raise DivergeError(
            f"{server_path}: spec {spec!r} is not the one the server ran (its hash changed: "
            f"{workload['hash']} then, {twin.get('workload', {}).get('hash')} now)"
        )
    return twin
