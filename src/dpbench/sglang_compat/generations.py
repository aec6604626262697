"""The one table of SGLang scheduler API shapes (0.5.14 … 0.5.23) that detection and every adapter read.

Each :class:`Feature` is one thing an adapter must build or call a particular way
(``PrefillDelayer.__init__``, where ``PrefillAdder`` keeps its KV budget, how server
args are published, …). Its :class:`Variant` s are the shapes seen in SGLang's PyPI
wheels, each with the releases it was read off (``pip download --no-deps sglang==X``,
unzipped, signatures read). :mod:`.detect` observes the installed SGLang's shape of
every feature and maps it to a variant here; adapters (:mod:`.adder`, :mod:`.delayer`)
branch on the *variant name* (``detect.variant("PrefillDelayer.__init__")``), never
on version strings. A *generation* is a run of releases whose variants agree on every
compared feature (:func:`generations`); it is derived from this table, not kept beside it.

Nothing here imports SGLang.

=============================================  ===========================================
feature                                        variants (releases)
=============================================  ===========================================
``server args``                                global_setter (0.5.14), context_setter
                                               (0.5.15–0.5.16), publish (0.5.17–0.5.23)
``PrefillAdder budget``                        adder_offsets (0.5.14–0.5.20),
                                               prefill_budget (0.5.21–0.5.23)
``Req computed prefix``                        prefix_indices (0.5.14–0.5.21),
                                               prefix_len (0.5.22–0.5.23)
``Req admitted extend``                        extend_input_len (0.5.14), extend_range
                                               (0.5.15–0.5.21), extend_end (0.5.22–0.5.23)
``PrefillAdder.__init__ keywords``             with_delayer (0.5.14–0.5.23); no_delayer
                                               (a release before the PrefillDelayer)
``PrefillDelayer.__init__``                    args (0.5.14–0.5.18), sizes_group
                                               (0.5.19–0.5.20), group (0.5.21),
                                               runtime_context (0.5.22–0.5.23)
``PrefillDelayer DP-attention flag``           server_args (0.5.14–0.5.17),
                                               runtime_context (0.5.18–0.5.23)
``PrefillDelayerSinglePassExecutor.finalize``  actual_prefill (0.5.14–0.5.17),
                                               actual_prefill_bs (0.5.18–0.5.23)
``max_prefill_bs bookkeeping``                 running_max (0.5.14–0.5.16), decayed_max
                                               (0.5.17), recent_window (0.5.18–0.5.23)
(eight more features with one shape in every release: signatures of ``PrefillAdder``,
``add_one_req``, ``add_chunked_req``, ``TokenToKVPoolAllocator``, ``Req``,
``RadixCache.create_simulated``, the executor's ``__init__`` and negotiation)
=============================================  ===========================================
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# Every SGLang release the table was read off, oldest first.
RELEASES: tuple[str, ...] = (
    "0.5.14",
    "0.5.15",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
COMPONENTS = ("adder", "delayer")
# Keyword arguments AdderKit.new_adder passes to PrefillAdder, as the scheduler does.
ADDER_KEYWORDS = (
    "max_prefill_bs",
    "max_running_requests",
    "prefill_delayer_single_pass",
    "waiting_queue_len",
)


def span(first: str, last: str | None = None) -> tuple[str, ...]:
    """The releases from ``first`` to ``last`` (inclusive) in :data:`RELEASES`."""
    i = RELEASES.index(first)
    j = RELEASES.index(last or first)
    return RELEASES[i : j + 1]


def fmt_releases(releases: Iterable[str]) -> str:
    """``0.5.14-0.5.18, 0.5.21`` for a set of releases (contiguous runs joined by a dash)."""
    idx = sorted(RELEASES.index(r) for r in releases)
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(
        RELEASES[r[0]] if len(r) == 1 else f"{RELEASES[r[0]]}-{RELEASES[r[-1]]}" for r in runs
    )


@dataclass(frozen=True)
class Variant:
    """One shape of a feature: the name adapters branch on and the string :func:`detect.observe` reports."""

    name: str
    shape: str
    releases: tuple[str, ...] = field(
        metadata={"help": "releases whose wheel has this shape (empty: none in 0.5.14-0.5.23)"}
    )
    note: str = ""


@dataclass(frozen=True)
class Feature:
    key: str
    component: str
    variants: tuple[Variant, ...]

    def by_shape(self, shape: str) -> Variant | None:
        return next((v for v in self.variants if v.shape == shape), None)

    def by_name(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"{self.key} has no variant {name!r}; has {[v.name for v in self.variants]}")

    def in_release(self, release: str) -> Variant:
        return next(v for v in self.variants if release in v.releases)

    def known(self) -> str:
        """``name (shape; releases)`` for every variant, for error messages."""
        return "; ".join(
            f"{v.name} ({v.shape}; {fmt_releases(v.releases) if v.releases else 'no release in the table'})"
            for v in self.variants
        )


def _one(shape: str) -> tuple[Variant, ...]:
    return (Variant("common", shape, RELEASES),)


FEATURES: tuple[Feature, ...] = (
    # --- admission side (PrefillAdder, its allocator, tree cache, Req, server args) ---
    Feature(
        "server args",
        "adder",
        (
            Variant(
                "global_setter",
                "server_args.set_global_server_args_for_scheduler",
                span("0.5.14"),
                "RuntimeContext has no server_args slot yet",
            ),
            Variant(
                "context_setter",
                "RuntimeContext.set_server_args",
                span("0.5.15", "0.5.16"),
            ),
            Variant("publish", "runtime_context.publish", span("0.5.17", "0.5.23")),
        ),
    ),
    Feature(
        "PrefillAdder.__init__ required",
        "adder",
        _one(
            "page_size, tree_cache, token_to_kv_pool_allocator, running_batch, "
            "new_token_ratio, rem_input_tokens, rem_chunk_tokens"
        ),
    ),
    Feature(
        "PrefillAdder.__init__ keywords",
        "adder",
        (
            Variant("with_delayer", "has " + ", ".join(ADDER_KEYWORDS), RELEASES),
            Variant(
                "no_delayer",
                "no prefill_delayer_single_pass",
                (),
                "a release before the PrefillDelayer: add_one_req cannot negotiate",
            ),
        ),
    ),
    Feature(
        "PrefillAdder.add_one_req", "adder", _one("req, has_chunked_req, truncation_align_size")
    ),
    Feature("PrefillAdder.add_chunked_req", "adder", _one("req")),
    Feature(
        "PrefillAdder budget",
        "adder",
        (
            Variant(
                "adder_offsets",
                "adder offsets (no create_prefill_budget)",
                span("0.5.14", "0.5.20"),
                "rem_total_token_offset / cur_rem_token_offset on the adder",
            ),
            Variant(
                "prefill_budget",
                "allocator.create_prefill_budget",
                span("0.5.21", "0.5.23"),
                "the allocator hands the adder a PrefillBudget",
            ),
        ),
    ),
    Feature(
        "TokenToKVPoolAllocator.__init__", "adder", _one("size, dtype, device, kvcache, need_sort")
    ),
    Feature(
        "Req.__init__ leading",
        "adder",
        _one("rid, origin_input_text, origin_input_ids, sampling_params"),
    ),
    Feature("Req.init_next_round_input", "adder", _one("tree_cache=, cow_mamba=")),
    Feature(
        "Req computed prefix",
        "adder",
        (
            Variant("prefix_indices", "self.prefix_indices", span("0.5.14", "0.5.21")),
            Variant("prefix_len", "self.prefix_len", span("0.5.22", "0.5.23")),
        ),
    ),
    Feature(
        "Req admitted extend",
        "adder",
        (
            Variant(
                "extend_input_len",
                "Req.set_extend_input_len",
                span("0.5.14"),
                "the adder sets req.extend_input_len and req.fill_len",
            ),
            Variant("extend_range", "Req.set_extend_range", span("0.5.15", "0.5.21")),
            Variant("extend_end", "Req.extend_end", span("0.5.22", "0.5.23")),
        ),
    ),
    Feature("RadixCache.create_simulated", "adder", _one("disable=, mock_allocator=, page_size=")),
    # --- negotiation side (PrefillDelayer and its single-pass executor) ---
    Feature(
        "PrefillDelayer.__init__",
        "delayer",
        (
            Variant(
                "args",
                "dp_size, attn_tp_size, cpu_group, server_args, max_delay_passes, token_usage_low_watermark",
                span("0.5.14", "0.5.18"),
            ),
            Variant(
                "sizes_group",
                "dp_size, attn_tp_size, cpu_group, max_delay_passes, token_usage_low_watermark",
                span("0.5.19", "0.5.20"),
                "flags from the published runtime context",
            ),
            Variant(
                "group",
                "cpu_group, max_delay_passes, token_usage_low_watermark",
                span("0.5.21"),
                "sizes and flags from the runtime context",
            ),
            Variant(
                "runtime_context",
                "max_delay_passes, token_usage_low_watermark",
                span("0.5.22", "0.5.23"),
                "group, sizes and flags from runtime_context.get_parallel()",
            ),
        ),
    ),
    Feature(
        "PrefillDelayer DP-attention flag",
        "delayer",
        (
            Variant(
                "server_args",
                "server_args.enable_dp_attention",
                span("0.5.14", "0.5.17"),
                "read from the server_args the constructor is given",
            ),
            Variant(
                "runtime_context",
                "runtime_context.get_parallel()",
                span("0.5.18", "0.5.23"),
                "read from the published runtime context, even where server_args is still passed (0.5.18)",
            ),
        ),
    ),
    Feature(
        "PrefillDelayerSinglePassExecutor.__init__", "delayer", _one("prefill_delayer, token_usage")
    ),
    Feature(
        "PrefillDelayerSinglePassExecutor.finalize",
        "delayer",
        (
            Variant("actual_prefill", "actual_prefill", span("0.5.14", "0.5.17")),
            Variant(
                "actual_prefill_bs",
                "actual_prefill_bs",
                span("0.5.18", "0.5.23"),
                "returns the observed prefill batch size",
            ),
        ),
    ),
    Feature(
        "PrefillDelayerSinglePassExecutor.negotiate_should_allow_prefill",
        "delayer",
        _one(
            "local_prefillable, running_batch=, max_prefill_bs=, max_running_requests=, waiting_queue_len="
        ),
    ),
    Feature(
        "max_prefill_bs bookkeeping",
        "delayer",
        (
            Variant("running_max", "scheduler running maximum", span("0.5.14", "0.5.16")),
            Variant(
                "decayed_max",
                "scheduler running maximum decayed per pass",
                span("0.5.17"),
                "self.max_prefill_bs *= <factor> in scheduler.py",
            ),
            Variant(
                "recent_window",
                "RecentPrefillBatchSizeTracker",
                span("0.5.18", "0.5.23"),
                "max over the last N non-empty prefill attempts",
            ),
        ),
    ),
)
FEATURE_BY_KEY: dict[str, Feature] = {f.key: f for f in FEATURES}


def feature(key: str) -> Feature:
    try:
        return FEATURE_BY_KEY[key]
    except KeyError:
        raise KeyError(
            f"no feature {key!r} in the table; features: {sorted(FEATURE_BY_KEY)}"
        ) from None


def features_of(components: Iterable[str]) -> tuple[Feature, ...]:
    comps = tuple(components)
    bad = [c for c in comps if c not in COMPONENTS]
    if bad:
        raise ValueError(f"unknown component(s) {bad}; allowed: {list(COMPONENTS)}")
    return tuple(f for f in FEATURES if f.component in comps)


@dataclass(frozen=True)
class Generation:
    """Releases whose variants agree on every compared feature (derived from :data:`FEATURES`).

    ``variants`` maps feature key → variant name. ``releases`` is empty for a combination
    of known variants that no release in the table has (a commit between releases).
    """

    name: str
    releases: tuple[str, ...]
    variants: dict[str, str]
    compared: tuple[str, ...] = COMPONENTS

    def variant(self, key: str) -> str:
        return self.variants[key]

    def __str__(self) -> str:
        where = (
            f"SGLang {fmt_releases(self.releases)}" if self.releases else "no release in the table"
        )
        return f"{self.name} ({where}; compared: {', '.join(self.compared)})"


def release_variants(release: str, components: Iterable[str] = COMPONENTS) -> dict[str, str]:
    """feature key → variant name for one release of the table."""
    return {f.key: f.in_release(release).name for f in features_of(components)}


def generations(components: Iterable[str] = COMPONENTS) -> tuple[Generation, ...]:
    """Runs of consecutive releases with identical variants over ``components``, oldest first."""
    comps = tuple(components)
    out: list[Generation] = []
    runs: list[list[str]] = []
    for rel in RELEASES:
        if runs and release_variants(runs[-1][0], comps) == release_variants(rel, comps):
            runs[-1].append(rel)
        else:
            runs.append([rel])
    for run in runs:
        out.append(
            Generation(
                name=_gen_name(run),
                releases=tuple(run),
                variants=release_variants(run[0], comps),
                compared=comps,
            )
        )
    return tuple(out)


def _gen_name(run: list[str]) -> str:
    return f"g{run[0]}" if len(run) == 1 else f"g{run[0]}-{run[-1]}"


def generation_for(variants: dict[str, str], components: Iterable[str] = COMPONENTS) -> Generation:
    """The generation with exactly these variants, or one named after the differing variants."""
    comps = tuple(components)
    for gen in generations(comps):
        if gen.variants == variants:
            return gen
    # Known variants in a combination no release has: name it by what it is.
    parts = [f"{key}={name}" for key, name in variants.items() if len(feature(key).variants) > 1]
    return Generation(
        name="unreleased(" + ", ".join(parts) + ")", releases=(), variants=variants, compared=comps
    )


def supported(components: Iterable[str] = COMPONENTS) -> str:
    return ", ".join(str(g) for g in generations(components))
