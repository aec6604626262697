"""The server's own counts: scrape SGLang's Prometheus ``/metrics`` before and after a run, report deltas.

Parsing is prometheus-client's text-format parser. From two snapshots this module
derives the PrefillDelayer outcome deltas by ``(input_estimation, output_allow,
output_reason, actual_execution)``, the wait histograms (forward passes, seconds),
token-usage gauges at the end, and per-DP-rank deltas of every series that carries a
``dp_rank`` label (which series exist depends on the SGLang version).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from dpbench.core.results import Metric
from dpbench.metrics.outcomes import delay_fractions

OUTCOMES = "sglang:prefill_delayer_outcomes_total"
OUTCOME_LABELS = ("input_estimation", "output_allow", "output_reason", "actual_execution")
WAIT_HISTOGRAMS = (
    "sglang:prefill_delayer_wait_forward_passes",
    "sglang:prefill_delayer_wait_seconds",
)
USAGE_GAUGES = (
    "sglang:token_usage",
    "sglang:num_used_tokens",
    "sglang:max_total_num_tokens",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
)


class ScrapeError(RuntimeError):
    pass


SampleKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class Snapshot:
    """Every sample of one scrape: (sample name, sorted labels) → value, plus each family's type."""

    samples: dict[SampleKey, float] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)  # sample name → family type

    @classmethod
    def parse(cls, text: str) -> Snapshot:
        snap = cls()
        try:
            for fam in text_string_to_metric_families(text):
                for s in fam.samples:
                    key = (s.name, tuple(sorted((k, str(v)) for k, v in s.labels.items())))
                    snap.samples[key] = float(s.value)
                    snap.types[s.name] = fam.type
        except ValueError as exc:
            raise ScrapeError(f"/metrics is not valid Prometheus text format: {exc}") from exc
        return snap

    def select(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


def scrape(base_url: str, *, timeout_s: float = 10.0) -> Snapshot:
    url = f"{base_url.rstrip('/')}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return Snapshot.parse(resp.read().decode("utf-8", errors="replace"))
    except (urllib.error.URLError, OSError) as exc:
        raise ScrapeError(
            f"could not read {url} ({exc}); was the server started with --enable-metrics?"
        ) from exc


def _delta(
    before: Snapshot, after: Snapshot, name: str
) -> dict[tuple[tuple[str, str], ...], float]:
    b = before.select(name)
    return {labels: v - b.get(labels, 0.0) for labels, v in after.select(name).items()}


def _group(
    values: dict[tuple[tuple[str, str], ...], float], keep: tuple[str, ...]
) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for labels, v in values.items():
        d = dict(labels)
        out[tuple(d.get(k, "") for k in keep)] += v
    return dict(out)


@dataclass
class ServerMetrics:
    """What the server counted during the run."""

    delayer_outcomes: dict[str, float]  # "estimation/allow/reason/executed" → count
    wait_histograms: dict[str, dict[str, Any]]  # name → {"count", "sum", "buckets": {le: count}}
    token_usage: dict[str, dict[str, float]]  # gauge → {dp_rank or "all": value at the end}
    per_dp_rank: dict[str, dict[str, float]]  # counter sample → {dp_rank: delta}
    exported: list[str]  # every sglang: sample name seen

    def as_metrics(self) -> dict[str, Metric]:
        """Headline numbers for the run result (the rest goes to ``extra``)."""
        m: dict[str, Metric] = {}
        total = sum(self.delayer_outcomes.values())
        if self.delayer_outcomes or any(n.startswith(OUTCOMES) for n in self.exported):
            # only a counter the server exported is a measured count (delayer off: absent)
            m["delayer_outcomes_total"] = Metric(total, "outcomes")
        by_reason: dict[str, float] = defaultdict(float)
        for key, v in self.delayer_outcomes.items():
            by_reason[key.split("/")[2] or "no_reason"] += v
        for reason, v in sorted(by_reason.items()):
            m[f"delayer_{reason}_total"] = Metric(v, "outcomes")
        m.update(
            delay_fractions(
                (key.split("/")[0], key.split("/")[1], v)
                for key, v in self.delayer_outcomes.items()
            )
        )
        for name, h in self.wait_histograms.items():
            short = name.split(":")[1]
            if h["count"]:
                unit = "s" if short.endswith("seconds") else "passes"
                m[f"{short}_mean"] = Metric(h["sum"] / h["count"], unit, "lower")
        secs = self.wait_histograms.get("sglang:prefill_delayer_wait_seconds")
        passes = self.wait_histograms.get("sglang:prefill_delayer_wait_forward_passes")
        if secs and passes and passes["sum"] > 0:
            # how long one scheduler pass lasted while a rank waited (SGLang's own two sums)
            m["prefill_delayer_wait_pass_ms"] = Metric(
                secs["sum"] / passes["sum"] * 1e3, "ms", "none"
            )
        # SGLang's DP cooperation counters (SGLANG_ENABLE_METRICS_DP_ATTENTION=1): decode
        # tokens per number of ranks prefilling in the same step.
        coop = [
            (series, sum(by_rank.values()))
            for series, by_rank in self.per_dp_rank.items()
            if series.startswith("sglang:dp_cooperation_realtime_tokens_total{")
            and "mode=decode" in series
        ]
        if coop:
            decode = sum(v for _, v in coop)
            beside = sum(v for s, v in coop if "num_prefill_ranks=0" not in s)
            m["dp_coop_decode_tokens_total"] = Metric(decode, "tokens", "none")
            m["dp_coop_decode_tokens_beside_prefill_total"] = Metric(beside, "tokens", "lower")
            if decode:
                m["dp_coop_decode_tokens_beside_prefill_fraction"] = Metric(
                    beside / decode, "fraction", "lower"
                )
        # token_usage gauges are read once, after the run (the pool's state then, not a
        # maximum); they stay in ``extra``. The simulated server's step records give the
        # real per-step maximum (kv_pool_occupied_max).
        return m


def server_metrics(before: Snapshot, after: Snapshot) -> ServerMetrics:
    outcomes = _group(_delta(before, after, OUTCOMES), OUTCOME_LABELS)
    hists: dict[str, dict[str, Any]] = {}
    for name in WAIT_HISTOGRAMS:
        count = sum(_delta(before, after, f"{name}_count").values())
        total = sum(_delta(before, after, f"{name}_sum").values())
        buckets = _group(_delta(before, after, f"{name}_bucket"), ("le",))
        if after.select(f"{name}_count"):
            hists[name] = {
                "count": count,
                "sum": total,
                "buckets": {k[0]: v for k, v in sorted(buckets.items())},
            }
    usage: dict[str, dict[str, float]] = {}
    for name in USAGE_GAUGES:
        vals = after.select(name)
        if vals:
            usage[name] = {dict(labels).get("dp_rank", "all"): v for labels, v in vals.items()}
    per_rank: dict[str, dict[str, float]] = defaultdict(dict)
    for (name, labels), _v in after.samples.items():
        d = dict(labels)
        if "dp_rank" not in d or after.types.get(name) not in ("counter", "histogram"):
            continue
        if name.endswith("_bucket") or name.endswith("_created"):
            continue
        extra = ",".join(f"{k}={v}" for k, v in labels if k not in _RANK_NOISE)
        series = f"{name}{{{extra}}}" if extra else name
        per_rank[series][d["dp_rank"]] = per_rank[series].get(d["dp_rank"], 0.0) + (
            after.samples[(name, labels)] - before.samples.get((name, labels), 0.0)
        )
    return ServerMetrics(
        delayer_outcomes={"/".join(k): v for k, v in sorted(outcomes.items())},
        wait_histograms=hists,
        token_usage=usage,
        per_dp_rank={k: dict(sorted(v.items())) for k, v in sorted(per_rank.items())},
        exported=sorted({n for n, _ in after.samples if n.startswith("sglang:")}),
    )


# Labels that identify the process, not what was counted.
_RANK_NOISE = frozenset(
    {"dp_rank", "tp_rank", "pp_rank", "moe_ep_rank", "model_name", "engine_type", "pid"}
)
