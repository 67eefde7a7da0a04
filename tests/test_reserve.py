"""Nodes kept for a pod class (`reserveNodes`) and the default composite's dimensions: the
policy fields, the label the scorer writes from a Node's allocatable, and the terms the webhook
injects into pods of other classes."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.model import NodeState
from steer.core.encoding import preference_weight
from steer.core.policy import Policy, PolicyError, parse_policy
from steer.core.quantity import parse_amounts
from steer.core.steering import (
    class_preferences,
    composite_weights,
    offers,
    owned_label_keys,
    pod_gates,
)
from tests.conftest import EXAMPLE_POLICY
from tests.scorer_support import readings_for


def _policy(reserve: str = "prefer", composite_dims: list[str] | None = None) -> Policy:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["podClasses"][0]["reserveNodes"] = reserve
    if composite_dims is not None:
        doc["spec"]["scoring"]["compositeDimensions"] = composite_dims
    return parse_policy(yaml.safe_dump(doc))


def _node(name: str, gpus: str | None) -> NodeState:
    allocatable = {"cpu": "32", "memory": "256Gi"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    return NodeState(name=name, allocatable=allocatable)


def test_offers_reads_positive_allocatable_of_the_class_resources() -> None:
    gpu = _policy().spec.pod_classes[0]
    assert offers(gpu, parse_amounts({"nvidia.com/gpu": "8"}))
    assert not offers(gpu, parse_amounts({"nvidia.com/gpu": "0"}))
    assert not offers(gpu, parse_amounts({"cpu": "8"}))
    assert not offers(gpu, parse_amounts({"nvidia.com/gpu": "lots"}))  # unparsable: not offered


def test_scorer_labels_reserved_nodes_from_allocatable_without_any_metric() -> None:
    policy = _policy()
    nodes = [_node("gpu-1", "8"), _node("cpu-1", None), _node("gpu-0", "0")]
    plan, _ = plan_cycle(policy, nodes, {}, ScorerMemory(), now=1000.0)
    key = "kube-steer.github.io/reserved-for-gpu"
    assert key in owned_label_keys(policy)
    assert plan.node("gpu-1").label_changes == {key: "true"}
    assert key not in plan.node("cpu-1").labels
    assert key not in plan.node("gpu-0").labels


def test_reserved_label_is_withdrawn_when_the_class_stops_reserving() -> None:
    key = "kube-steer.github.io/reserved-for-gpu"
    labelled = NodeState(
        name="gpu-1",
        labels={key: "true"},
        annotations={
            "kube-steer.github.io/managed": '{"labels":["kube-steer.github.io/reserved-for-gpu"]}'
        },
        allocatable={"nvidia.com/gpu": "8"},
    )
    plan, _ = plan_cycle(_policy("none"), [labelled], {}, ScorerMemory(), now=1000.0)
    assert plan.node("gpu-1").label_changes == {key: None}


def test_prefer_steers_other_pods_off_reserved_nodes_by_the_largest_weight() -> None:
    policy = _policy("prefer")
    gpu = policy.spec.pod_classes[0]
    other = class_preferences(policy, None)
    away = [t for t in other if t.operator == "DoesNotExist"]
    assert [(t.key, t.weight) for t in away] == [
        ("kube-steer.github.io/reserved-for-gpu", 100),
        ("kube-steer.github.io/reserved-for-gpu", 10),
    ]
    assert away[0].to_k8s() == {
        "weight": 100,
        "preference": {
            "matchExpressions": [
                {"key": "kube-steer.github.io/reserved-for-gpu", "operator": "DoesNotExist"}
            ]
        },
    }
    # The worst unreserved node still outranks the best reserved one for a CPU pod...
    cpu_node = {"kube-steer.github.io/score": "0"}
    gpu_node = {
        "kube-steer.github.io/score": "100",
        "kube-steer.github.io/reserved-for-gpu": "true",
    }
    assert preference_weight(cpu_node, other) > preference_weight(gpu_node, other)
    # ...while the class's own pods are not pushed off their nodes.
    assert all(t.operator == "In" for t in class_preferences(policy, gpu))
    assert pod_gates(policy, None, None) == ()


def test_require_excludes_reserved_nodes_for_other_pods_only() -> None:
    policy = _policy("require")
    gpu = policy.spec.pod_classes[0]
    # A gate every other pod requests, closed on the nodes reserved for the class.
    assert [g.rule for g in pod_gates(policy, None, None)] == ["reserved:gpu"]
    assert "reserved:gpu" not in {g.rule for g in pod_gates(policy, None, gpu)}
    node = NodeState(
        "gpu-1",
        allocatable={"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8", "pods": "110"},
    )
    plan, _ = plan_cycle(policy, [node], {}, ScorerMemory(), 0.0, pod_usages={})
    gates = {g.rule: g for g in plan.nodes[0].gates}
    assert not gates["reserved:gpu"].open and gates["reserved:gpu"].capacity == "0"
    assert all(t.operator == "In" for t in class_preferences(policy, None))


def test_default_composite_takes_only_the_listed_dimensions() -> None:
    policy = _policy(composite_dims=["idle-power", "health"])
    assert composite_weights(policy, None) == {"idle-power": 1, "health": 2}
    gpu = policy.spec.pod_classes[0]
    assert set(composite_weights(policy, gpu)) == {"gpu-util", "health"}  # the class's own


def test_a_gpu_dimension_no_longer_ranks_gpu_nodes_first_for_cpu_pods() -> None:
    policy = _policy(composite_dims=["idle-power", "health"])
    nodes = [_node("gpu-1", "8"), _node("cpu-1", None)]
    readings = readings_for(
        policy,
        nodes,
        {
            "gpu-util": {"gpu-1": 0.0},
            "gpu-free": {"gpu-1": 8.0},
            "idle-power": {"gpu-1": 300.0, "cpu-1": 300.0},
            "health": {"gpu-1": 1.0, "cpu-1": 1.0},
        },
        at=1000.0,
    )
    plan, _ = plan_cycle(policy, nodes, readings, ScorerMemory(), now=1000.0)
    assert (
        plan.node("gpu-1").labels["kube-steer.github.io/score"]
        == plan.node("cpu-1").labels["kube-steer.github.io/score"]
    )


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            {"scoring": {"compositeDimensions": ["gpu-util", "nope"]}},
            "spec.scoring.compositeDimensions[1]",
            "unknown dimension 'nope'",
        ),
        (
            {"scoring": {"compositeDimensions": ["overcommit-pct"]}},
            "spec.scoring.compositeDimensions",
            "needs at least one score dimension with weight > 0",
        ),
        (
            {"podClasses": [{"name": "big", "requestsAny": ["cpu"], "reserveNodes": "prefer"}]},
            "spec.podClasses[0].reserveNodes",
            "every node offers cpu",
        ),
        (
            {"podClasses": [{"name": "gpu", "requestsAny": ["x/y"], "reserveNodes": "always"}]},
            "spec.podClasses[0].reserveNodes",
            "",
        ),
    ],
)
def test_bad_reserve_and_composite_fields_are_named(
    change: dict[str, Any], path: str, message: str
) -> None:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_POLICY.read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            doc["spec"][key].update(value)
        else:
            doc["spec"][key] = value
    with pytest.raises(PolicyError) as caught:
        parse_policy(yaml.safe_dump(doc))
    found = [str(issue) for issue in caught.value.issues if issue.path == path]
    assert found, [str(i) for i in caught.value.issues]
    assert message in found[0]


def _gpu_readings(policy: Policy, nodes: list[NodeState], util: dict[str, float], at: float) -> Any:
    return readings_for(
        policy,
        nodes,
        {
            "gpu-util": util,
            "power": {n.name: 300.0 for n in nodes},
            "health": {n.name: 1.0 for n in nodes},
        },
        at=at,
    )


def test_a_node_with_a_taint_the_class_avoids_is_not_reserved() -> None:
    """gpu-5's free GPUs are busy from outside: GPU pods avoid it (gpu-hot), so keeping CPU pods
    off it would waste it; it loses the reserved label once the taint is on, and gets it back
    when the taint clears."""
    policy = _policy()
    key = "kube-steer.github.io/reserved-for-gpu"
    nodes = [_node("gpu-1", "8"), _node("gpu-5", "8")]
    memory = ScorerMemory()
    hot = {"gpu-1": 0.0, "gpu-5": 95.0}
    plan, memory = plan_cycle(policy, nodes, _gpu_readings(policy, nodes, hot, 1000), memory, 1000)
    assert plan.node("gpu-5").labels[key] == "true"  # setAfterCycles 2: not hot yet
    plan, memory = plan_cycle(policy, nodes, _gpu_readings(policy, nodes, hot, 1030), memory, 1030)
    assert [t.key for t in plan.node("gpu-5").taints] == ["kube-steer.github.io/gpu-hot"]
    assert key not in plan.node("gpu-5").labels
    assert plan.node("gpu-1").labels[key] == "true"
    cool = {"gpu-1": 0.0, "gpu-5": 0.0}
    for t in (1060, 1090, 1120):  # clearAfterCycles 3
        plan, memory = plan_cycle(policy, nodes, _gpu_readings(policy, nodes, cool, t), memory, t)
    assert not plan.node("gpu-5").taints
    assert plan.node("gpu-5").labels[key] == "true"


def test_the_hot_node_penalty_spares_the_composite_of_a_bin_packing_class() -> None:
    """Pods just bound to gpu-1 lower its default composite (anti-herding), but not the GPU
    class's: steer-binpack piles GPU jobs onto the node that just took one, on purpose. (The
    example's default composite consolidates, so this runs it without consolidation.)"""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["energy"]["consolidation"]["weight"] = 0
    policy = parse_policy(yaml.safe_dump(doc))
    nodes = [_node("gpu-1", "8"), _node("gpu-2", "8")]
    readings = _gpu_readings(policy, nodes, {"gpu-1": 0.0, "gpu-2": 0.0}, 1000)
    plan, _ = plan_cycle(policy, nodes, readings, ScorerMemory(), 1000, hot={"gpu-1": 4})
    one, two = plan.node("gpu-1"), plan.node("gpu-2")
    assert int(one.labels["kube-steer.github.io/score"]) < int(
        two.labels["kube-steer.github.io/score"]
    )
    assert (
        one.labels["kube-steer.github.io/score-class-gpu"]
        == two.labels["kube-steer.github.io/score-class-gpu"]
        == "100"
    )
    by_key = {c.key: c for c in one.composites}
    assert (
        by_key["kube-steer.github.io/score"].penalty == 20
        and by_key["kube-steer.github.io/score-class-gpu"].penalty == 0
    )
    # A class on the spread profile is penalised like the default composite.
    doc["spec"]["podClasses"][0]["schedulerProfile"] = "steer-spread"
    spread = parse_policy(yaml.safe_dump(doc))
    plan, _ = plan_cycle(spread, nodes, readings, ScorerMemory(), 1000, hot={"gpu-1": 4})
    assert plan.node("gpu-1").labels["kube-steer.github.io/score-class-gpu"] == "80"
    # With the example's consolidation, the default composite is spared too (it fills nodes).
    plan, _ = plan_cycle(_policy(), nodes, readings, ScorerMemory(), 1000, hot={"gpu-1": 4})
    assert {c.key: c.penalty for c in plan.node("gpu-1").composites} == {
        "kube-steer.github.io/score": 0,
        "kube-steer.github.io/score-class-gpu": 0,
    }


def test_dra_devices_reserve_a_node_and_count_for_the_class() -> None:
    """A node whose ResourceSlices hold GPUs (no nvidia.com/gpu in allocatable) is offered to
    the gpu class by the DeviceClass's extended name or by the class's deviceClasses, and is
    reserved like a device-plugin GPU node."""
    policy = _policy()
    gpu = policy.spec.pod_classes[0]
    assert offers(gpu, parse_amounts({"cpu": "8"}), {"nvidia.com/gpu": 8})
    implicit = {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 8}
    assert offers(
        gpu, parse_amounts({"cpu": "8"}), implicit
    )  # the example gpu class names gpu.nvidia.com
    assert not offers(
        gpu, parse_amounts({"cpu": "8"}), {"deviceclass.resource.kubernetes.io/other": 8}
    )
    assert not offers(gpu, parse_amounts({"cpu": "8"}), {"nvidia.com/gpu": 0})
    dra = NodeState(name="dra-1", allocatable={"cpu": "32"}, devices={"nvidia.com/gpu": 8})
    plan, _ = plan_cycle(policy, [dra, _node("cpu-1", None)], {}, ScorerMemory(), now=1000.0)
    key = "kube-steer.github.io/reserved-for-gpu"
    assert plan.node("dra-1").label_changes == {key: "true"}
    assert key not in plan.node("cpu-1").labels
