"""Cluster scores for OCM Placement (scorer/cycle/clusterscore.py): the formulas on a planned cycle,
the -100..100 mapping and when the publisher must write."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scorer.cycle.clusterscore import (
    PublishedScores,
    cluster_scores,
    published,
    requested_resources,
    scale,
    status_patch,
    valid_until,
    write_reason,
)
from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.model import NodeState, Taint
from scorer.watch.ledger import PodLedger
from steer.core.budget import Amount, PodUsage
from steer.core.policy import Policy, parse_policy
from tests.scorer_support import SMALL_POLICY, readings_for

GIB = 1024**3
NOW = 1_800_000_000.0
HOT = Taint("kube-steer.github.io/gpu-hot", "true", "NoSchedule")

POLICY = parse_policy(
    SMALL_POLICY
    + """\
  clusterScores:
    enabled: true
    clusterName: cluster-a
    validForSeconds: 120
    scores:
      - {name: free-gpus, kind: freeResource, best: 16}
      - {name: gpu-block, kind: freeResource, aggregate: max, best: 8}
      - {name: dept-b-cpu, kind: tenantHeadroom, tenant: dept-b, best: 128}
      - {name: dept-b-mem, kind: tenantHeadroom, tenant: dept-b, resource: memory, best: 512}
      - {name: watts-per-core, kind: powerPerCore, dimension: power, worst: 100, best: 10}
"""
)


def node(
    name: str,
    *,
    cpu: str = "64",
    memory: str = "256Gi",
    gpus: int = 0,
    hot: bool = False,
    unschedulable: bool = False,
) -> NodeState:
    allocatable = {"cpu": cpu, "memory": memory}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return NodeState(
        name=name,
        labels={"kube-steer.github.io/gpu-hot": "true"} if hot else {},
        taints=(HOT,) if hot else (),
        addresses=(name,),
        unschedulable=unschedulable,
        allocatable=allocatable,
        capacity=allocatable,
    )


def share(cpu_cores: float = 0, memory_gib: float = 0) -> PodUsage:
    amount = Amount(Fraction(cpu_cores) * 1000, Fraction(memory_gib) * GIB)
    return PodUsage(math.ceil(amount.cpu_m), math.ceil(amount.memory))


# n1: 8 GPUs, 3 held, 70 cores of limits; n2: 8 GPUs, none held but hot (gpu-hot active);
# n3: CPU only; n4: 4 GPUs, cordoned.
NODES = (
    node("n1", gpus=8),
    node("n2", gpus=8, hot=True),
    node("n3", cpu="32", memory="128Gi"),
    node("n4", gpus=4, unschedulable=True),
)
UTIL = {"n1": 20.0, "n2": 95.0, "n3": 10.0, "n4": 0.0}
POWER = {"n1": 300.0, "n2": 400.0}  # n3, n4: no power data
REQUESTS = {
    "n1": {"nvidia.com/gpu": Fraction(3), "cpu": Fraction(8)},
    "n2": {"nvidia.com/gpu": Fraction(0), "cpu": Fraction(2)},
    "n3": {"nvidia.com/gpu": Fraction(0), "cpu": Fraction(30)},
}
SHARES = {"n1": (share(70, 16), share(0, 0)), "n3": (share(8, 100),)}


def scores(
    policy: Policy = POLICY,
    nodes: tuple[NodeState, ...] = NODES,
    requests: dict[str, dict[str, Fraction]] | None = REQUESTS,
    shares: dict[str, tuple[PodUsage, ...]] | None = SHARES,
    power: dict[str, float] | None = None,
) -> dict[str, tuple[float | None, int | None]]:
    readings = readings_for(policy, nodes, {"util": UTIL, "power": power or POWER}, NOW)
    plan, _ = plan_cycle(policy, nodes, readings, ScorerMemory(), NOW)
    values = cluster_scores(policy, plan, nodes, requests, shares)
    return {v.name: (v.raw, v.value) for v in values}


def test_scale_maps_worst_and_best_to_the_ends_and_clamps() -> None:
    assert scale(0, 0, 16) == -100
    assert scale(16, 0, 16) == 100
    assert scale(8, 0, 16) == 0
    assert scale(40, 0, 16) == 100
    assert scale(-3, 0, 16) == -100
    # lower is better: best below worst
    assert scale(10, 100, 10) == 100
    assert scale(100, 100, 10) == -100
    assert scale(70, 100, 10) == -33  # -100 + 200 * 30/90 = -33.3
    # halves round up: -100 + 200 * 5/16 = -37.5
    assert scale(5, 0, 16) == -37


@given(
    raw=st.floats(-1e9, 1e9),
    worst=st.floats(-1e6, 1e6),
    span=st.floats(1e-3, 1e6),
    flip=st.booleans(),
)
def test_scale_stays_in_range_and_is_monotonic(
    raw: float, worst: float, span: float, flip: bool
) -> None:
    best = worst - span if flip else worst + span
    value = scale(raw, worst, best)
    assert isinstance(value, int)
    assert -100 <= value <= 100
    better = raw - 1 if flip else raw + 1
    assert scale(better, worst, best) >= value


def test_free_whole_gpus_skip_avoided_and_cordoned_nodes() -> None:
    got = scores()
    # n1: 8 - 3 = 5; n2 is under gpu-hot, which the gpu class avoids; n4 is cordoned.
    assert got["free-gpus"] == (5.0, -37)
    assert got["gpu-block"] == (5.0, 25)  # -100 + 200 * 5/8


def test_free_gpus_count_every_gpu_node_when_nothing_is_hot() -> None:
    nodes = (node("n1", gpus=8), node("n2", gpus=8), NODES[2], NODES[3])
    util = {"n1": 20.0, "n2": 30.0, "n3": 10.0, "n4": 0.0}
    readings = readings_for(POLICY, nodes, {"util": util, "power": POWER}, NOW)
    plan, _ = plan_cycle(POLICY, nodes, readings, ScorerMemory(), NOW)
    values = {v.name: v for v in cluster_scores(POLICY, plan, nodes, REQUESTS, SHARES)}
    assert values["free-gpus"].raw == 13  # 5 + 8
    assert values["free-gpus"].value == 63  # -100 + 200 * 13/16 = 62.5
    assert values["gpu-block"].raw == 8
    assert values["free-gpus"].nodes == 2
    assert "13 free nvidia.com/gpu in total on 2 nodes" in values["free-gpus"].why


def test_fractional_requests_leave_no_whole_unit() -> None:
    requests = {"n1": {"nvidia.com/gpu": Fraction(15, 2), "cpu": Fraction(1)}}
    assert scores(requests=requests)["free-gpus"][0] == 0.0  # floor(8 - 7.5)


def test_tenant_headroom_is_the_free_part_of_the_budget() -> None:
    got = scores()
    # dept-b (0 %), cpu: n1 max(0, 64 - 70) = 0, n2 excluded (gpu-hot is NoSchedule and
    # dept-b may not tolerate it), n3 32 - 8 = 24, n4 cordoned -> 24 cores.
    raw, value = got["dept-b-cpu"]
    assert raw == 24
    assert value == -62  # -100 + 200 * 24/128 = -62.5 -> -62
    # memory: n1 256 - 16 = 240 GiB, n3 128 - 100 = 28 GiB -> 268 GiB of 512
    assert got["dept-b-mem"] == (268.0, 5)  # -100 + 200 * 268/512 = 4.7


def test_tenant_headroom_counts_its_budget() -> None:
    policy = parse_policy(
        SMALL_POLICY.replace("overcommitPercent: 0", "overcommitPercent: 10")
        + """\
  clusterScores:
    enabled: true
    clusterName: c
    scores: [{name: h, kind: tenantHeadroom, tenant: dept-b, best: 100}]
"""
    )
    nodes = (node("n3", cpu="32"),)
    got = scores(policy, nodes, shares={"n3": (share(8),)})
    assert got["h"][0] == pytest.approx(27.2)  # floor(32000 * 1.1) = 35200 - 8000 millicores


def test_power_per_requested_core() -> None:
    got = scores()
    # (300 + 400) W over the 8 + 2 cores requested on the nodes with power data
    assert got["watts-per-core"] == (70.0, -33)


def test_power_without_requested_cores_is_not_published() -> None:
    requests = {"n3": {"nvidia.com/gpu": Fraction(0), "cpu": Fraction(4)}}
    got = scores(requests=requests)
    assert got["watts-per-core"] == (None, None)


def test_unknown_pods_leave_the_pod_scores_out() -> None:
    readings = readings_for(POLICY, NODES, {"util": UTIL, "power": POWER}, NOW)
    plan, _ = plan_cycle(POLICY, NODES, readings, ScorerMemory(), NOW)
    values = cluster_scores(POLICY, plan, NODES, None, None)
    assert all(v.value is None for v in values)
    assert published(values) == ()
    assert values[0].why == "bound pods not known yet"


def test_published_keeps_policy_order_and_drops_unknown() -> None:
    requests = {"n3": {"nvidia.com/gpu": Fraction(0), "cpu": Fraction(4)}}
    readings = readings_for(POLICY, NODES, {"util": UTIL, "power": POWER}, NOW)
    plan, _ = plan_cycle(POLICY, NODES, readings, ScorerMemory(), NOW)
    values = cluster_scores(POLICY, plan, NODES, requests, SHARES)
    assert [name for name, _ in published(values)] == [
        "free-gpus",
        "gpu-block",
        "dept-b-cpu",
        "dept-b-mem",
    ]


def test_requested_resources() -> None:
    assert requested_resources(POLICY) == ("nvidia.com/gpu", "cpu")


# -- when to write ----------------------------------------------------------------------------

SCORES = (("free-gpus", 10), ("h", -3))
LAST = PublishedScores("cluster-a", "kube-steer", SCORES, NOW + 120)


def test_first_write_and_changes_write() -> None:
    assert write_reason(None, "cluster-a", "kube-steer", SCORES, NOW, 120) == "first write"
    changed = (("free-gpus", 11), ("h", -3))
    assert write_reason(LAST, "cluster-a", "kube-steer", changed, NOW, 120) == "scores changed"
    assert write_reason(LAST, "cluster-a", "other", SCORES, NOW, 120) == "new target"
    assert write_reason(LAST, "cluster-a", "kube-steer", SCORES[:1], NOW, 120) == ("scores changed")


def test_nothing_known_writes_nothing() -> None:
    assert write_reason(None, "cluster-a", "kube-steer", (), NOW, 120) is None
    assert write_reason(LAST, "cluster-a", "kube-steer", (), NOW + 100, 120) is None


def test_unchanged_scores_are_rewritten_at_half_life_only() -> None:
    assert write_reason(LAST, "cluster-a", "kube-steer", SCORES, NOW + 59, 120) is None
    assert (
        write_reason(LAST, "cluster-a", "kube-steer", SCORES, NOW + 60, 120)
        == "refresh before validUntil"
    )


def test_status_patch_and_valid_until() -> None:
    until = valid_until(NOW + 0.7, 120)
    assert until == NOW + 120
    assert status_patch(SCORES, until) == {
        "status": {
            "scores": [{"name": "free-gpus", "value": 10}, {"name": "h", "value": -3}],
            "validUntil": "2027-01-15T08:02:00Z",
        }
    }


# -- the ledger's requests (the input of freeResource and powerPerCore) ------------------------


def bound(
    uid: str, node: str, requests: dict[str, str], *, phase: str = "Running"
) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid},
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"requests": requests}}],
            "initContainers": [
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}
            ],
        },
        "status": {"phase": phase},
    }


def test_ledger_sums_requests_per_node() -> None:
    ledger = PodLedger()
    assert ledger.requested(("nvidia.com/gpu", "cpu")) is None  # not synced
    ledger.replace(
        [
            bound("a", "n1", {"nvidia.com/gpu": "2", "cpu": "1"}),
            bound("b", "n1", {"nvidia.com/gpu": "1", "cpu": "bogus"}),
            bound("c", "n2", {"cpu": "250m"}),
            bound("d", "n2", {"nvidia.com/gpu": "8"}, phase="Succeeded"),
        ]
    )
    got = ledger.requested(("nvidia.com/gpu", "cpu"))
    # sidecars count beside the containers; a malformed quantity counts as nothing
    assert got == {
        "n1": {"nvidia.com/gpu": Fraction(3), "cpu": Fraction(3, 2)},
        "n2": {"nvidia.com/gpu": Fraction(0), "cpu": Fraction(3, 4)},
    }
    ledger.apply("DELETED", bound("a", "n1", {}))
    ledger.apply("MODIFIED", bound("c", "n2", {"cpu": "2"}))
    assert ledger.requested(("nvidia.com/gpu", "cpu")) == {
        "n1": {"nvidia.com/gpu": Fraction(1), "cpu": Fraction(0)},
        "n2": {"nvidia.com/gpu": Fraction(0), "cpu": Fraction(5, 2)},
    }
    assert ledger.requested(("memory",)) == {
        "n1": {"memory": Fraction(0)},
        "n2": {"memory": Fraction(0)},
    }


def test_free_gpus_on_dra_nodes_are_the_devices_no_claim_holds() -> None:
    """A DRA node lists no nvidia.com/gpu in allocatable: its devices (counted by the extended
    name their DeviceClass maps) and the free ones stand in, and pod requests are not
    subtracted again (the scheduler turned them into claims whose allocations are counted)."""
    dra = NodeState(
        name="d1",
        addresses=("d1",),
        allocatable={"cpu": "64", "memory": "256Gi"},
        devices={"nvidia.com/gpu": 8, "deviceclass.resource.kubernetes.io/gpu.nvidia.com": 8},
        free_devices={"nvidia.com/gpu": 6, "deviceclass.resource.kubernetes.io/gpu.nvidia.com": 6},
    )
    nodes = (NODES[0], dra, NODES[2])
    requests = {**REQUESTS, "d1": {"nvidia.com/gpu": Fraction(2), "cpu": Fraction(8)}}
    util = {"n1": 20.0, "d1": 30.0, "n3": 10.0}
    readings = readings_for(POLICY, nodes, {"util": util, "power": POWER}, NOW)
    plan, _ = plan_cycle(POLICY, nodes, readings, ScorerMemory(), NOW)
    values = {v.name: v for v in cluster_scores(POLICY, plan, nodes, requests, SHARES)}
    assert values["free-gpus"].raw == 11  # n1: 8 - 3; d1: 6 devices free
    assert values["free-gpus"].nodes == 2
    assert values["gpu-block"].raw == 6
