"""Workload specs: the shipped ones load; each class of bad spec gets one clear error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dpbench.workload.spec import (
    WorkloadSpec,
    WorkloadSpecError,
    known_specs,
    load_spec,
    parse_spec,
    spec_hash,
)

SHIPPED = [
    "agentic-multiturn",
    "agentic-multiturn-small",  # CPU-sized shared-prefix high-KV spec (twin vs server)
    "balanced-baseline",
    "long-context-chat",
    "long-prompt-burst",
    "long-prompt-burst-small",  # the simulated-forward server tier's CPU-sized high-KV spec
    "mooncake-conversation",  # real traffic: windows of the shared Mooncake trace
    "mooncake-conversation-small",  # the same, CPU-sized for the simulated-forward server
]

GOOD = textwrap.dedent(
    """\
    name: tiny-test
    description: a small valid spec the bad ones are made from
    model: deepseek-v3-tiny
    num_requests: 50
    input_len: {kind: uniform, low: 10, high: 20}
    output_len: {kind: fixed, value: 8}
    arrival: {process: poisson, rate_per_s: 5}
    target_kv_util: 0.9
    dp_size: 2
    seed: 3
    """
)


def test_shipped_specs_are_the_eight_named_ones():
    assert known_specs() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_spec_loads_with_a_comment_saying_what_it_stresses(name):
    spec = load_spec(name)
    assert spec.name == name
    assert Path(spec.model).is_file()
    text = (Path(spec.model).parents[2] / f"{name}.yaml").read_text()
    assert text.startswith("# Stresses:")


def test_long_prompt_burst_targets_at_least_95_percent():
    assert load_spec("long-prompt-burst").target_kv_util >= 0.95


def test_balanced_baseline_targets_about_60_percent():
    assert load_spec("balanced-baseline").target_kv_util == pytest.approx(0.6)


def test_good_spec_parses_and_relative_model_paths_resolve(tmp_path):
    spec = parse_spec(GOOD)
    assert spec.model.name == "config.json" and spec.model.parent.name == "deepseek-v3-tiny"
    cfg = tmp_path / "m" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(spec.model.read_text())
    relative = parse_spec(GOOD.replace("model: deepseek-v3-tiny", "model: m"), base=tmp_path)
    assert relative.model == cfg.resolve()


def test_spec_hash_is_stable_and_sensitive():
    spec = parse_spec(GOOD)
    assert spec_hash(spec) == spec_hash(parse_spec(GOOD))
    assert spec_hash(spec).startswith("sha256:") and len(spec_hash(spec)) == 7 + 64
    assert spec_hash(spec) != spec_hash(spec.with_overrides(seed=4))


def test_with_overrides_revalidates():
    spec = parse_spec(GOOD)
    assert spec.with_overrides(num_requests=7).num_requests == 7
    with pytest.raises(WorkloadSpecError, match=r"`num_requests`: found -1"):
        spec.with_overrides(num_requests=-1)


def _bad(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new)


# (case, YAML text, fragments the single error line must contain: field, value found, allowed)
BAD_SPECS = [
    (
        "missing field",
        _bad("num_requests: 50\n", ""),
        ["`num_requests` is required but missing", "required: name, description"],
    ),
    (
        "unknown field (typo)",
        _bad("seed: 3", "seed: 3\nnum_request: 5"),
        ["`num_request` is not a known field", "found 5", "num_requests"],
    ),
    (
        "wrong type",
        _bad("num_requests: 50", "num_requests: many"),
        ["`num_requests`", "found 'many'", "allowed: a valid integer"],
    ),
    (
        "boolean where an integer belongs",
        _bad("num_requests: 50", "num_requests: true"),
        ["`num_requests`", "found True", "valid integer"],
    ),
    (
        "out of range",
        _bad("num_requests: 50", "num_requests: 0"),
        ["`num_requests`", "found 0", "greater than 0"],
    ),
    (
        "utilization above 1",
        _bad("target_kv_util: 0.9", "target_kv_util: 1.5"),
        ["`target_kv_util`", "found 1.5", "less than or equal to 1"],
    ),
    (
        "unknown distribution kind",
        _bad("{kind: fixed, value: 8}", "{kind: zipf, value: 8}"),
        [
            "`output_len`",
            "found",
            "`kind` must be one of 'fixed', 'uniform', 'lognormal', 'empirical'",
        ],
    ),
    (
        "distribution without kind",
        _bad("{kind: fixed, value: 8}", "{value: 8}"),
        [
            "`output_len`",
            "found {'value': 8}",
            "`kind` must be one of 'fixed', 'uniform', 'lognormal', 'empirical'",
        ],
    ),
    (
        "parameter of another kind",
        _bad("{kind: fixed, value: 8}", "{kind: fixed, value: 8, sigma: 1}"),
        ["`output_len.sigma` is not a known field", "found 1", "fields allowed here: value"],
    ),
    (
        "uniform bounds reversed",
        _bad("{kind: uniform, low: 10, high: 20}", "{kind: uniform, low: 30, high: 20}"),
        ["`input_len`", "`high` (20) must be ≥ `low` (30)"],
    ),
    (
        "lognormal clip reversed",
        _bad(
            "{kind: uniform, low: 10, high: 20}",
            "{kind: lognormal, median: 50, sigma: 0.5, min: 90, max: 80}",
        ),
        ["`input_len`", "`max` (80) must be ≥ `min` (90)"],
    ),
    (
        "lognormal sigma not positive",
        _bad(
            "{kind: uniform, low: 10, high: 20}", "{kind: lognormal, median: 50, sigma: 0, max: 80}"
        ),
        ["`input_len.sigma`", "found 0", "greater than 0"],
    ),
    (
        "histogram weights do not match bins",
        _bad(
            "{kind: uniform, low: 10, high: 20}",
            "{kind: empirical, edges: [1, 10, 100], weights: [1]}",
        ),
        ["`input_len`", "one entry per bin", "len(edges) - 1 = 2", "found 1"],
    ),
    (
        "histogram edges not increasing",
        _bad(
            "{kind: uniform, low: 10, high: 20}", "{kind: empirical, edges: [10, 5], weights: [1]}"
        ),
        ["`input_len`", "strictly increasing", "[10, 5]"],
    ),
    (
        "unknown arrival process",
        _bad("process: poisson", "process: hawkes"),
        ["`arrival`", "`process` must be one of 'poisson', 'gamma', 'bursts', 'closed_loop'"],
    ),
    (
        "burst shares not summing to 1",
        _bad(
            "{process: poisson, rate_per_s: 5}",
            "{process: bursts, bursts: [{at_s: 0, share: 0.5}, {at_s: 5, share: 0.3}]}",
        ),
        ["`arrival`", "must sum to 1", "sum of 0.8"],
    ),
    (
        "negative burst time",
        _bad(
            "{process: poisson, rate_per_s: 5}", "{process: bursts, bursts: [{at_s: -1, share: 1}]}"
        ),
        ["`arrival.bursts[0].at_s`", "found -1", "greater than or equal to 0"],
    ),
    (
        "sessions with closed-loop arrivals",
        _bad(
            "{process: poisson, rate_per_s: 5}",
            "{process: closed_loop, concurrency: 4}\nsessions: {turns: {kind: fixed, value: 3}, "
            "think_time_s: {kind: fixed, value: 1}}",
        ),
        ["bad.yaml: `sessions` need an open-loop", "found closed_loop"],
    ),
    (
        "model that does not exist",
        _bad("model: deepseek-v3-tiny", "model: no-such-model"),
        ["`model`", "'no-such-model'", "deepseek-v3-tiny", "deepseek-v2-lite"],
    ),
    (
        "bad name",
        _bad("name: tiny-test", "name: Tiny Test"),
        ["`name`", "found 'Tiny Test'", "lower-case letters, digits and '-'"],
    ),
    (
        "unknown planner dispatch",
        _bad("seed: 3", "seed: 3\nplanner: {dispatch: random}"),
        [
            "`planner.dispatch`",
            "found 'random'",
            "'round_robin'",
            "'shortest_queue'",
            "'total_tokens'",
        ],
    ),
    (
        "shared prefix share above 1",
        _bad("seed: 3", "seed: 3\nshared_prefix: {groups: 2, prefix_len: 5, share: 2}"),
        ["`shared_prefix.share`", "found 2", "less than or equal to 1"],
    ),
    ("not a mapping", "- just\n- a list\n", ["a YAML mapping of fields", "found list"]),
    ("not YAML", GOOD + "input_len: [unclosed\n", ["not valid YAML at line"]),
]


@pytest.mark.parametrize(
    ("text", "fragments"), [c[1:] for c in BAD_SPECS], ids=[c[0] for c in BAD_SPECS]
)
def test_bad_spec_gets_one_clear_error(text, fragments):
    with pytest.raises(WorkloadSpecError) as info:
        parse_spec(text, source="bad.yaml")
    message = str(info.value)
    assert message.startswith("bad.yaml:")
    assert "\n" not in message, "one error, one line"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_bad_spec_cases_are_distinct_and_many():
    assert len({c[0] for c in BAD_SPECS}) == len(BAD_SPECS) >= 10


def test_several_problems_are_all_listed_each_with_field_value_and_what_is_allowed():
    text = (
        _bad("num_requests: 50", "num_requests: 0")
        .replace("seed: 3", "seed: -3")
        .replace("target_kv_util: 0.9", "target_kv_util: 1.5")
    )
    text += "colour: blue\n"
    with pytest.raises(WorkloadSpecError) as info:
        parse_spec(text, source="bad.yaml")
    message = str(info.value)
    assert message.startswith("bad.yaml: 4 problems:\n")
    assert "more problem" not in message
    problems = info.value.problems
    assert len(problems) == 4 and message.count("\n  - ") == 4
    by_field = {p.split("`")[1]: p for p in problems}
    assert set(by_field) == {"num_requests", "seed", "target_kv_util", "colour"}
    assert "found 0" in by_field["num_requests"] and "greater than 0" in by_field["num_requests"]
    assert "found -3" in by_field["seed"] and "greater than or equal to 0" in by_field["seed"]
    assert (
        "found 1.5" in by_field["target_kv_util"]
        and "less than or equal to 1" in by_field["target_kv_util"]
    )
    assert (
        "found 'blue'" in by_field["colour"] and "fields allowed here: name" in by_field["colour"]
    )


def test_unknown_spec_name_lists_the_shipped_ones():
    with pytest.raises(WorkloadSpecError, match=r"'nope'.*long-prompt-burst"):
        load_spec("nope")


def test_load_spec_from_a_path_names_the_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(_bad("seed: 3", "seed: x"))
    with pytest.raises(WorkloadSpecError, match=rf"^{path}: `seed`: found 'x'"):
        load_spec(path)


def test_spec_is_frozen():
    spec = parse_spec(GOOD)
    with pytest.raises(Exception, match="frozen"):
        spec.num_requests = 3  # type: ignore[misc]
    assert isinstance(spec, WorkloadSpec)
