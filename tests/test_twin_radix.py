"""The twin keeps requests' KV in SGLang's real radix tree (prefix reuse), on real wheels in release envs.

Scheduler-level scenarios drive one ``RankScheduler`` (no delayer) inside the release's
environment and read the tree, the allocator and every admitted extend; run-level tests
replay ``agentic-multiturn`` (two shared 4k-token preambles, multi-turn sessions) through
``python -m dpbench.twin.run`` with the radix cache on and off.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from conftest import release_run
from twinjob import run_twin_jobs, twin_job

VERSIONS = ("0.5.16", "0.5.23")
SHARED = 600  # tokens of the shared prefix in the scheduler scenarios
WALL_METRICS = {"scheduler_pass_us_p50", "passes_per_s", "pass_wall_over_rank_work"}

SCRIPT = textwrap.dedent("""
    import json
    from dpbench.twin.config import SchedulerSettings, TwinConfig
    from dpbench.twin.run import prepare_release
    from dpbench.twin.scheduler import KIND_EXTEND, RankScheduler, TrackedReq

    SHARED = list(range(1000, 1000 + %(shared)d))
    # arrival step -> (request, own tokens after the shared prefix, max_new_tokens)
    WAVES = {0: [(0, 100, 20)], 3: [(1, 100, 20), (2, 200, 30)],
             40: [(3, 300, 20), (4, 300, 40), (5, 700, 30), (6, 700, 30)],
             90: [(7, 900, 200), (8, 900, 200), (9, 900, 200)]}
    # one request a step with a long output (a 200-token shared prefix): with a low
    # --schedule-conservativeness the adder over-admits and the rank retracts
    PRESSURE = {i: [(i, 20, 300)] for i in range(30)}

    def run(scenario, radix, overlap, capacity):
        pressure = scenario == "pressure"
        config = TwinConfig(dp_size=2, scheduler=SchedulerSettings(
            enable_prefill_delayer=False, radix_cache=radix, overlap_schedule=overlap,
            schedule_conservativeness=0.3 if pressure else None))
        kit, _, defaults = prepare_release(config)
        sched = RankScheduler(kit=kit, settings=config.scheduler, defaults=defaults,
                              kv_tokens=capacity, delayer=None, collector=None)
        tree = sched.tree_cache
        arrivals = WAVES if scenario == "shared" else PRESSURE
        reqs, extends, evictable, occupied, used, tree_size = [], {}, [], [], [], []
        step = 0
        while sched.has_work or step <= max(arrivals):
            for i, own, out in arrivals.get(step, []):
                ids = SHARED[:200 if pressure else None] + [50000 + 1000 * i + j for j in range(own)]
                # ignore_eos=False: the adder then reserves decode tokens at the new-token
                # ratio (0.5.23 reserves all of an ignore_eos request's), so it can over-admit
                req = kit.new_req(f"r{i}", ids, max_new_tokens=out, ignore_eos=not pressure)
                t = TrackedReq(i, req, 0.0, out)
                reqs.append(t)
                sched.enqueue(t)
            plan = sched.plan()
            if plan.kind == KIND_EXTEND:
                for t in plan.batch:  # first admission of each request: prompt vs extended
                    extends.setdefault(t.req.rid, [len(t.req.origin_input_ids), kit.extend_tokens(t.req)])
            sched.complete(plan)
            evictable.append(int(tree.evictable_size()))
            occupied.append(sched.kv_pool_occupied)
            used.append(sched.kv_used)
            tree_size.append(int(tree.evictable_size()) + int(tree.protected_size()))
            step += 1
            assert step < 20000, "the scenario did not finish"
        end = {"occupied": sched.kv_pool_occupied, "tree": int(tree.total_size()),
               "protected": int(tree.protected_size()), "evictable": int(tree.evictable_size())}
        kit.evict(tree, capacity)  # SGLang's eviction can give every slot back
        end["free_after_evicting_all"] = int(sched.allocator.available_size())
        return {"extends": extends, "evictable": evictable, "occupied": occupied, "used": used,
                "tree_size": tree_size, "end": end, "capacity": capacity,
                "finished": sum(len(t.req.output_ids) >= t.max_new_tokens for t in reqs),
                "requests": len(reqs), "retractions": sum(t.retractions for t in reqs)}

    out = {
        "shared": run("shared", True, True, 3000),
        "shared_again": run("shared", True, True, 3000),
        "shared_no_overlap": run("shared", True, False, 3000),
        "shared_no_radix": run("shared", False, True, 3000),
        "pressure": run("pressure", True, True, 1200),
    }
    print(json.dumps(out))
""") % {"shared": SHARED}


@pytest.fixture(scope="module")
def scenarios(release_env):
    out = {}
    for version in VERSIONS:
        proc = release_run([str(release_env(version).python), "-c", SCRIPT], timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[version] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _leak_free(run: dict) -> None:
    end = run["end"]
    assert max(run["occupied"]) <= run["capacity"]  # the pool never over-allocates
    assert end["protected"] == 0  # every lock the adder took was released
    # nothing leaked: what the pool holds at the end is the tree, and evicting it frees all
    assert end["occupied"] == end["tree"] == end["evictable"]
    assert end["free_after_evicting_all"] == run["capacity"]
    assert run["finished"] == run["requests"]


@pytest.mark.sglang
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("arm", ["shared", "shared_no_overlap"])
def test_later_requests_extend_only_past_the_cached_prefix(scenarios, version, arm):
    run = scenarios[version][arm]
    extends = run["extends"]
    assert extends["r0"] == [SHARED + 100, SHARED + 100]  # the first request computes it all
    for rid, (prompt, extended) in extends.items():
        if rid != "r0":  # every later one finds the shared prefix in the tree
            assert extended == prompt - SHARED, rid
    _leak_free(run)


@pytest.mark.sglang
@pytest.mark.parametrize("version", VERSIONS)
def test_finished_requests_stay_evictable_and_are_evicted_when_the_pool_fills(scenarios, version):
    run = scenarios[version]["shared"]
    evictable, occupied, used = (np.asarray(run[k]) for k in ("evictable", "occupied", "used"))
    assert evictable.max() > 0 and run["end"]["evictable"] > 0
    # SGLang's token_usage excludes evictable entries; the pool occupancy includes them
    assert (occupied - used == evictable).all()
    assert occupied.max() == run["capacity"]  # the pool filled up with cached entries ...
    assert (np.diff(run["tree_size"]) < 0).any()  # ... and the tree gave some back (LRU eviction)
    _leak_free(run)


@pytest.mark.sglang
@pytest.mark.parametrize("version", VERSIONS)
def test_retraction_frees_the_requests_own_kv_and_keeps_the_tree_consistent(scenarios, version):
    run = scenarios[version]["pressure"]
    assert run["retractions"] > 0
    _leak_free(run)


@pytest.mark.sglang
@pytest.mark.parametrize("version", VERSIONS)
def test_no_radix_cache_no_prefix_hits(scenarios, version):
    run = scenarios[version]["shared_no_radix"]
    assert all(extended == prompt for prompt, extended in run["extends"].values())
    assert max(run["evictable"]) == 0
    assert run["occupied"] == run["used"]
    assert run["end"]["occupied"] == 0 and run["finished"] == run["requests"]


@pytest.mark.sglang
@pytest.mark.parametrize("version", VERSIONS)
def test_scheduler_scenario_is_deterministic(scenarios, version):
    assert scenarios[version]["shared"] == scenarios[version]["shared_again"]


# -- whole twin runs --------------------------------------------------------------------
SPEC = "agentic-multiturn"
REQUESTS = 60


def _extend_tokens(result: dict) -> int:
    tl = result["extra"]["timeline"]
    return sum(
        n
        for kinds, tokens in zip(tl["rank_kind"], tl["rank_new_tokens"], strict=True)
        for k, n in zip(kinds, tokens, strict=True)
        if k == 2  # KIND_EXTEND
    )


def _prompt_tokens() -> int:
    from dpbench.workload.spec import load_spec
    from dpbench.workload.trace import generate_trace

    spec = load_spec(SPEC).with_overrides(num_requests=REQUESTS)
    return sum(r.input_len for r in generate_trace(spec, None))


@pytest.mark.sglang
@pytest.mark.parametrize("version", VERSIONS)
def test_agentic_sessions_reuse_their_prefixes(version, release_env, tmp_path):
    # one process of the release's environment, SGLang imported once (tests/twin_batch.py)
    on, again, off = run_twin_jobs(release_env(version), [
        twin_job(SPEC, tmp_path / "on.json", requests=REQUESTS),
        twin_job(SPEC, tmp_path / "again.json", requests=REQUESTS),
        twin_job(SPEC, tmp_path / "off.json", requests=REQUESTS, radix_cache=False),
    ])  # fmt: skip
    prompts = _prompt_tokens()
    for r in (on, off):
        assert r["metrics"]["requests_finished_count"]["value"] == REQUESTS
        assert r["metrics"]["kv_utilization_max"]["value"] <= 1.0
    # radix off: every prompt token is extended (retractions re-extend, never less)
    assert _extend_tokens(off) >= prompts
    # radix on: preambles and earlier turns come from the tree
    assert _extend_tokens(on) < prompts / 2
    # determinism: same release, spec, seed → identical simulated numbers and steps
    simulated = [
        {k: v for k, v in r["metrics"].items() if k not in WALL_METRICS} for r in (on, again)
    ]
    assert simulated[0] == simulated[1]
    assert (
        on["extra"]["timeline"]["rank_new_tokens"] == again["extra"]["timeline"]["rank_new_tokens"]
    )


def test_pool_occupancy_metric_counts_evictable_entries():
    """``kv_pool_occupied_*`` reads the pool with evictable entries; ``kv_utilization_*`` without (SGLang's token_usage)."""
    from dpbench.twin.metrics import compute
    from dpbench.twin.ranks import RankResult

    n = 4
    rank = RankResult(
        rank=0,
        steps=n,
        kind=np.array([2, 1, 1, 0], dtype=np.int8),
        new_tokens=np.ones(n, dtype=np.int32),
        kv_used=np.array([40, 50, 60, 0], dtype=np.int32),
        outcome=np.full(n, -1, dtype=np.int16),
        reported=np.full(n, -1, dtype=np.int8),
        allowed=np.full(n, -1, dtype=np.int8),
        admitted=np.array([1, 0, 0, 0], dtype=np.int16),
        chunk_continued=np.zeros(n, dtype=np.int8),
        pass_us=np.full(n, 100.0, dtype=np.float32),
        outcome_labels=[],
        requests=[(0, 0.0, 1.0, 3.0, 3, 0)],
        token_s=[[1.0, 2.0, 3.0]],
        retractions=0,
        kv_capacity=100,
        step_end_s=np.arange(1, n + 1, dtype=np.float64),
        step_dur_s=np.ones(n, dtype=np.float64),
        loop_wall_s=1.0,
        loop_cpu_s=0.5,
        max_prefill_bs_kind="running_max",
    )
    m, _ = compute([rank], delayer_on=False)
    assert "kv_pool_occupied_p50" not in m  # not recorded: absent, never a made-up number
    rank.kv_pool_occupied = np.array(
        [40, 70, 90, 60], dtype=np.int32
    )  # evictable kept after finish
    m, _ = compute([rank], delayer_on=False)
    assert m["kv_utilization_max"].value == pytest.approx(0.6)
    assert m["kv_pool_occupied_max"].value == pytest.approx(0.9)
    assert m["kv_pool_occupied_p50"].value == pytest.approx(0.65)
