"""The placement bench's pure parts (bench/placement.py): the seed of each run, the trace of a
seed (the same arrivals for every mode of a pair, steered pods of no tenant among the tenants',
the one-GPU burst then the whole-node jobs), the DRA scenario's GPU nodes, what a run measures
of the shop and the chains, and the scoreboard's median, worst run and goal line."""

from __future__ import annotations

import dataclasses
import statistics
from fractions import Fraction
from typing import Any

import pytest

from bench.benchkit.placement_exporters import EXPORTERS
from bench.benchkit.placement_measure import Snapshot, measure
from bench.benchkit.placement_report import COLUMNS, goal_line, goals, summary, table
from bench.benchkit.placement_scenario import (
    BURST_GAPS,
    CHAIN,
    KIND_LABEL,
    NAMESPACES,
    NS_A,
    NS_B,
    NS_SHOP,
    PREEXISTING,
    SHOP_CHAIN,
    TRACE_LABEL,
    Arrival,
    NodeSpec,
    build_trace,
    scenarios,
    trace_pods,
)
from bench.benchkit.placement_seeds import SeedError, cycle_in_trace, parse_seeds, run_seeds
from kits.apistub.synthetic import synthetic_node
from kits.dra import DRIVER, resource_slice_body
from kits.simulated_cluster import SimCluster
from steer.core.quantity import parse_quantity

SEEDS = range(1, 21)

# -- seeds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seeds"),
    [("1-5", [1, 2, 3, 4, 5]), ("7", [7]), ("7,3,10-11", [7, 3, 10, 11]), (" 2 - 3 ,", [2, 3])],
)
def test_seeds_are_listed_and_ranged_in_the_order_given(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", ",", "a", "1-x", "5-1", "1-3,2"])
def test_seeds_that_name_nothing_run_backwards_or_twice_are_refused(text: str) -> None:
    with pytest.raises(SeedError, match="--seeds"):
        parse_seeds(text)


def test_runs_count_seeds_from_the_first_and_the_default_is_three() -> None:
    assert run_seeds(None, None, 1) == [1, 2, 3]
    assert run_seeds(None, 5, 7) == [7, 8, 9, 10, 11]
    assert run_seeds("4-5", None, 1) == [4, 5]
    with pytest.raises(SeedError, match="one of them"):
        run_seeds("1-5", 5, 1)
    with pytest.raises(SeedError, match="at least 1"):
        run_seeds(None, 0, 1)


def test_the_scorer_cycle_falls_at_a_point_of_the_trace_each_seed_draws() -> None:
    points = [cycle_in_trace(seed, 24.0, 30.0) for seed in SEEDS]
    assert points == [cycle_in_trace(seed, 24.0, 30.0) for seed in SEEDS]
    assert all(0.0 <= p <= 24.0 for p in points)
    assert len(set(points)) == len(points)
    assert max(points) - min(points) > 12.0  # early and late in the trace, not one phase
    assert all(0.0 <= cycle_in_trace(seed, 45.0, 30.0) <= 30.0 for seed in SEEDS)


# -- the trace of a seed --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "dra", "energy"])
def test_a_seed_gives_one_trace_and_another_seed_another(name: str) -> None:
    scenario = scenarios()[name]
    traces = [scenario.trace(seed, 4.0) for seed in SEEDS]
    assert all(t == scenario.trace(seed, 4.0) for seed, t in zip(SEEDS, traces, strict=True))
    orders = {tuple(a.name for a in t) for t in traces}
    assert len(orders) == len(traces)  # the arrival order varies with the seed
    assert len({tuple(round(a.at, 6) for a in t) for t in traces}) == len(traces)
    # The same work of each kind, in another order and with other sizes.
    counts = {tuple(sorted((a.kind, a.namespace) for a in t)) for t in traces}
    assert len(counts) == 1


def test_shop_pods_of_no_tenant_arrive_among_both_tenants_pods() -> None:
    assert NAMESPACES[NS_SHOP] == {"kube-steer.github.io/enabled": "true"}
    for seed in SEEDS:
        trace = build_trace(seed, 4.0)
        services = [a for a in trace if a.kind.startswith("svc-")]
        shop = [a for a in services if a.namespace == NS_SHOP]
        assert len(shop) == 12 and {a.kind for a in shop} == {"svc-shop"}
        # Guaranteed (limit = request) and burstable (1.5x) alike, sized as the tenants' are.
        assert any(a.cpu_limit_m == a.cpu_m and a.mem_limit_mi == a.mem_mi for a in shop)
        assert any(a.cpu_limit_m == a.cpu_m * 3 // 2 for a in shop)
        assert {a.cpu_m for a in shop} <= {500, 1000, 2000, 4000, 8000}
        # Interleaved: a shop service arrives between a dept-a one and a dept-b one.
        kinds = [a.kind for a in services]
        first = max(kinds.index("svc-a"), kinds.index("svc-b"))
        last = min(
            len(kinds) - 1 - kinds[::-1].index("svc-a"), len(kinds) - 1 - kinds[::-1].index("svc-b")
        )
        assert any(k == "svc-shop" for k in kinds[first:last])
        chains = {a.name: a for a in trace if a.kind == "chain"}
        assert set(chains) == {CHAIN, SHOP_CHAIN}
        cart = chains[SHOP_CHAIN]
        assert (cart.namespace, cart.replicas, cart.cpu_m, cart.cpu_limit_m) == (
            NS_SHOP,
            6,
            500,
            500,
        )
        assert trace.index(chains[CHAIN]) < trace.index(cart)


def test_sixteen_one_gpu_jobs_arrive_as_one_burst_before_the_whole_node_jobs() -> None:
    for seed in SEEDS:
        trace = build_trace(seed, 4.0)
        at = [i for i, a in enumerate(trace) if a.kind == "gpu-1"]
        assert len(at) == 16
        # Consecutive but for at most BURST_GAPS other arrivals (and a chain landing there).
        assert at[-1] - at[0] + 1 <= 16 + BURST_GAPS + 1
        assert trace[at[-1]].at - trace[at[0]].at < 10.0
        whole = [i for i, a in enumerate(trace) if a.kind == "gpu-8"]
        assert len(whole) == 2 and min(whole) > at[-1]
        assert all(trace[i].gpus == 8 for i in whole)


def test_the_dra_burst_alternates_the_claim_template_and_the_mapped_request() -> None:
    dra = scenarios()["dra"]
    for seed in SEEDS:
        trace = dra.trace(seed, 4.0)
        ones = [a for a in trace if a.kind == "gpu-1"]
        forms = [a.claim_template for a in ones]
        assert forms == ["one-gpu", None] * 8
        assert all("nvidia.com/gpu" in a.resources()["requests"] for a in ones[1::2])
        assert all(a.claim_template == "eight-gpus" for a in trace if a.kind == "gpu-8")
        # The same arrivals as the default scenario's, only the GPU form differs.
        plain = scenarios()["default"].trace(seed, 4.0)
        assert [dataclasses.replace(a, claim_template=None) for a in trace] == plain


def test_the_energy_trace_has_no_gpu_jobs_and_no_shop() -> None:
    trace = scenarios()["energy"].trace(1, 4.0)
    assert {a.kind for a in trace} == {"svc-a", "svc-b", "chain"}
    assert trace_pods(trace) == 72


@pytest.mark.parametrize(
    ("exporters", "node_label", "kepler"),
    [
        ("current", "hostname", "kepler_node_cpu_watts"),
        ("older", "Hostname", "kepler_node_package_joules_total"),
    ],
)
def test_the_exporter_variants_write_the_node_label_and_kepler_line_they_name(
    exporters: str, node_label: str, kepler: str
) -> None:
    """`--exporters older`: dcgm-exporter's `Hostname` and Kepler 0.7's joule counters alone
    (the example policy reads them: tests/test_policy_check_exporters.py)."""
    sim = SimCluster(**EXPORTERS[exporters])
    sim.update([synthetic_node("gpu-1", cpu="32", gpus=2)], [], now=1000.0)
    families = {f.name: f for f in sim.families(now=1030.0)}
    assert {node_label} <= set(families["DCGM_FI_DEV_GPU_UTIL"].samples[0][0])
    assert kepler in families
    other = (
        "kepler_node_package_joules_total" if exporters == "current" else "kepler_node_cpu_watts"
    )
    assert other not in families


def test_dra_nodes_leave_a_whole_node_per_whole_node_job_only_when_packed() -> None:
    dra = scenarios()["dra"]
    cool_dra = [s for s in dra.nodes if s.dra and not s.hot]
    assert [s.name for s in cool_dra] == ["gpu-1", "gpu-2", "gpu-3", "gpu-7", "gpu-8"]
    assert all(s.gpus == 8 for s in cool_dra)
    trace = dra.trace(1, 4.0)
    ones = sum(1 for a in trace if a.kind == "gpu-1")
    whole_jobs = [a for a in trace if a.kind == "gpu-8"]
    held = {job.node: job.gpus for job in dra.earlier_jobs}
    # Packed, the burst fills exactly the devices the earlier jobs left free...
    assert sum(8 - n for n in held.values()) == ones
    assert all(0 < n < 8 for n in held.values())
    # ... and every other cool DRA node stays whole, one per whole-node job.
    whole = [s for s in cool_dra if s.name not in held]
    assert len(whole) == len(whole_jobs)
    # One burst job on a whole node strands GPUs and leaves a whole-node job waiting.
    assert len(whole) - 1 < len(whole_jobs)


def test_cpu_and_memory_rank_the_whole_dra_nodes_above_the_partly_used_ones() -> None:
    """MostAllocated on cpu and memory alone (steer-binpack before the device counter) sends a
    claim job to a whole DRA node; the GPUs held say the opposite."""
    dra = scenarios()["dra"]
    spec = {s.name: s for s in dra.nodes}
    used: dict[str, list[Fraction]] = {s.name: [Fraction(0), Fraction(0)] for s in dra.nodes}
    for node_name, cpu, _, mem, _ in dra.preexisting:
        used[node_name][0] += parse_quantity(cpu)
        used[node_name][1] += parse_quantity(mem)
    for job in dra.earlier_jobs:
        body = job.body()
        requests = body["spec"]["containers"][0]["resources"]["requests"]
        used[job.node][0] += parse_quantity(requests["cpu"])
        used[job.node][1] += parse_quantity(requests["memory"])

    def most_allocated(name: str) -> Fraction:
        s = spec[name]
        return (used[name][0] / s.cpu + used[name][1] / (s.memory_gi * 2**30)) / 2

    partly = [job.node for job in dra.earlier_jobs]
    assert min(most_allocated(n) for n in ("gpu-7", "gpu-8")) > max(map(most_allocated, partly))
    # A whole-node job (32 cores, 256 GiB, dept-b: 0 %) fits within each whole node's limits.
    limits = {name: [Fraction(0), Fraction(0)] for name in ("gpu-7", "gpu-8")}
    for node_name, _, cpu_limit, _, mem_limit in dra.preexisting:
        if node_name in limits:
            limits[node_name][0] += parse_quantity(cpu_limit)
            limits[node_name][1] += parse_quantity(mem_limit)
    for name, (cpu, mem) in limits.items():
        assert cpu + 32 <= spec[name].cpu and mem + 256 * 2**30 <= spec[name].memory_gi * 2**30


def test_the_earlier_gpu_jobs_are_dept_a_claim_pods_the_scheduler_places() -> None:
    dra = scenarios()["dra"]
    assert {t: dra.claim_templates[t] for t in ("two-gpus", "four-gpus")} == {
        "two-gpus": 2,
        "four-gpus": 4,
    }
    for job in dra.earlier_jobs:
        body = job.body()
        assert body["metadata"]["namespace"] == NS_A
        assert TRACE_LABEL not in body["metadata"]["labels"]  # not a trace pod
        assert "nodeName" not in body["spec"]  # the scheduler allocates its claim
        terms = body["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert terms == [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [job.node]}]}
        ]
        claims = body["spec"]["resourceClaims"]
        assert claims == [{"name": "gpus", "resourceClaimTemplateName": job.template}]
        assert dra.claim_templates[job.template] == job.gpus
    assert not scenarios()["default"].earlier_jobs
    assert scenarios()["default"].preexisting == PREEXISTING


# -- what a run measures ---------------------------------------------------------------------------


def node(spec: NodeSpec) -> dict[str, Any]:
    return {
        "metadata": {
            "name": spec.name,
            "labels": {"topology.kubernetes.io/zone": spec.zone},
        },
        "spec": {},
        "status": {
            "allocatable": {
                "cpu": str(spec.cpu),
                "memory": f"{spec.memory_gi}Gi",
                "nvidia.com/gpu": str(spec.gpus),
            }
        },
    }


def pod(a: Arrival, node_name: str | None, index: int = 0) -> dict[str, Any]:
    labels = {TRACE_LABEL: "1", KIND_LABEL: a.kind}
    if a.kind == "chain":
        labels["order-chain"] = a.name
    return {
        "metadata": {"name": f"{a.name}-{index}", "namespace": a.namespace, "labels": labels},
        "spec": {**a.pod_spec(), **({"nodeName": node_name} if node_name else {})},
        "status": {},
    }


def test_a_run_counts_shop_pods_and_the_worst_chain_skew() -> None:
    specs = [NodeSpec("cpu-1", "zone-a", 16, 64), NodeSpec("cpu-2", "zone-b", 16, 64)]
    specs.append(NodeSpec("cpu-3", "zone-c", 16, 64))
    checkout = Arrival(0, "chain", NS_A, CHAIN, 1000, 1000, 2048, 2048, replicas=3)
    cart = Arrival(0, "chain", NS_SHOP, SHOP_CHAIN, 500, 500, 1024, 1024, replicas=3)
    shop = Arrival(0, "svc-shop", NS_SHOP, "s-svc-001", 500, 500, 1024, 1024)
    b = Arrival(0, "svc-b", NS_B, "b-svc-001", 15500, 15500, 2048, 2048)
    pods = [pod(checkout, n, i) for i, n in enumerate(["cpu-1", "cpu-2", "cpu-3"])]
    pods += [pod(cart, n, i) for i, n in enumerate(["cpu-1", "cpu-1", "cpu-2"])]
    pods += [pod(b, "cpu-3"), pod(shop, "cpu-3"), pod(shop, None, 1)]
    out = measure(Snapshot([node(s) for s in specs], pods), specs)
    assert out["chains"] == {CHAIN: [1, 1, 1], SHOP_CHAIN: [2, 1, 0]}
    assert out["chain_per_zone"] == [1, 1, 1]
    assert out["chain_skew"] == 2
    assert (out["bound_shop"], out["pending_shop"]) == (4, 1)
    # The shop's 500m beside dept-b's 15.5 cores (and checkout's 1) breaks dept-b's 0 %.
    assert out["over_budget_team-b"] == 1


def test_gpus_the_earlier_jobs_hold_count_in_whole_and_stranded() -> None:
    dra = scenarios()["dra"]
    specs = [s for s in dra.nodes if s.name in ("gpu-1", "gpu-7", "gpu-8")]
    earlier = dra.earlier_jobs[0]  # four GPUs on gpu-1
    one = next(a for a in dra.trace(1, 4.0) if a.claim_template == "one-gpu")
    pods = [
        {**earlier.body(), "spec": {**earlier.body()["spec"], "nodeName": "gpu-1"}},
        pod(one, "gpu-1"),
    ]

    def claim(name: str, namespace: str, holder: str, devices: range) -> dict[str, Any]:
        results = [{"driver": DRIVER, "pool": "gpu-1", "device": f"gpu-{i}"} for i in devices]
        return {
            "metadata": {"name": name, "namespace": namespace},
            "status": {
                "allocation": {"devices": {"results": results}},
                "reservedFor": [{"resource": "pods", "name": holder}],
            },
        }

    claims = [
        claim("earlier", NS_A, earlier.name, range(4)),
        claim("one", NS_A, pods[1]["metadata"]["name"], range(4, 5)),
    ]
    slices = [resource_slice_body(s.name) for s in specs]
    out = measure(Snapshot([node(s) for s in specs], pods, slices, claims), specs)
    assert out["nodes"]["gpu-1"]["gpus_allocated"] == 5
    assert out["nodes"]["gpu-1"]["gpus_before_trace"] == 4
    assert out["stranded_gpus"] == 3
    assert out["whole_gpu_nodes"] == 2
    assert out["bound"] == 1  # the earlier job is no trace pod
    assert out["gpu_forms"] == {"claim": 1}


# -- the scoreboard --------------------------------------------------------------------------------


def run(mode: str, index: int, seed: int, **goals: float) -> dict[str, Any]:
    r: dict[str, Any] = {
        "mode": mode,
        "run": index,
        "seed": seed,
        "bound": 120,
        "pending": 2,
        "pending_shop": 0,
        "rejected_count": 0,
        "cores": 300.0,
        "over_budget_team-a": 0,
        "over_budget_at_bind_team-a": 0,
        "bound_team-a": 50,
        "over_budget_team-b": 0,
        "over_budget_at_bind_team-b": 0,
        "bound_team-b": 36,
        "gpu_on_hot": 0,
        "chain_skew": 0,
        "chain_per_zone": [4, 4, 4],
        "chains": {CHAIN: [4, 4, 4], SHOP_CHAIN: [2, 2, 2]},
        "gpu8_pending": 0,
        "whole_gpu_nodes": 1,
        "stranded_gpus": 0,
        "cpu_pods_on_gpu_nodes": 10,
        "cpu_cores_on_gpu_nodes": 20.0,
        "active_nodes": 15,
        "active_kw": 20.0,
        "w_per_core": 60.0,
        "idle_w": 6000,
        "dyn_w_per_core": 6.0,
        "empty_nodes": 1,
        "create_to_last_bind_s": 25.0,
    }
    keys = {
        "b_over": "over_budget_team-b",
        "gpu8": "gpu8_pending",
        "skew": "chain_skew",
        "strand": "stranded_gpus",
    }
    for key, value in goals.items():
        r[keys[key]] = value
    return r


RESULTS = [
    run("stock", 1, 1, b_over=3, gpu8=1, strand=8),
    run("steered", 1, 1),
    run("stock", 2, 2, b_over=0, skew=2),
    run("steered", 2, 2, skew=1),
    run("stock", 3, 3, b_over=7, strand=16),
    run("steered", 3, 3, b_over=7),
]


def test_the_worst_run_is_the_largest_violation_and_the_fewest_bound() -> None:
    out = summary([*RESULTS, {**run("steered", 4, 4), "bound": 110}], ["stock", "steered"])
    assert out["stock"]["b_over"] == {"min": 0, "median": 3, "max": 7, "worst": 7}
    assert out["stock"]["strand"]["worst"] == 16
    assert out["steered"]["bound"]["worst"] == 110
    assert out["steered"]["bound"]["median"] == statistics.median([120, 120, 120, 110])


def test_the_goal_line_names_each_missed_goal_its_seeds_and_its_worst() -> None:
    stock = [r for r in RESULTS if r["mode"] == "stock"]
    line = goal_line("stock", stock)
    assert line.startswith("- stock: NOT every goal in every run: ")
    assert "B>0% missed in 2 of 3 (seeds 1, 3; worst 7)" in line
    assert "skew missed in 1 of 3 (seed 2; worst 2)" in line
    assert "8G pend missed in 1 of 3 (seed 1; worst 1)" in line
    assert "strand missed in 2 of 3 (seeds 1, 3; worst 16)" in line
    # Skew 1 is within its goal; only seed 3's budget is missed.
    steered = [r for r in RESULTS if r["mode"] == "steered"]
    assert "skew" not in goal_line("steered", steered)
    held = goal_line("steered", steered[:2])
    assert held.startswith("- steered: every goal held in every run (2 runs: ")
    assert "skew <= 1" in held and "B>0% 0" in held
    assert goals(RESULTS, ["stock", "steered"])["steered"]["missed"] == {"B>0%": [3]}
    assert not goals(RESULTS, ["stock", "steered"])["steered"]["every_goal_every_run"]


def test_the_table_has_a_row_per_run_with_its_seed_then_median_and_worst() -> None:
    text = table(RESULTS, ["stock", "steered"])
    lines = text.splitlines()
    header = lines[0].split(" | ")
    assert header[:3] == ["| mode", "run", "seed"]
    assert len(header) == 3 + len(COLUMNS)
    stock_rows = [line for line in lines if line.startswith("| stock | ")]
    assert [row.split(" | ")[2] for row in stock_rows[:3]] == ["1", "2", "3"]
    assert "| 2 (4/4/4, 2/2/2) |" in stock_rows[1]
    median = next(line for line in lines if line.startswith("| stock | 3 | median |"))
    worst = lines[lines.index(median) + 1]
    assert worst.startswith("|  |  | **worst** |")
    assert "**7**" in worst  # B>0%, a goal missed
    assert any(line.startswith("- stock: NOT every goal") for line in lines)
