"""The device counter of a pod class with DeviceClasses (steer/core/device_counter.py): how many
devices a claim takes, the units a pod requests in each form (and none when that is not known
exactly), the webhook's patch and its idempotence, and the capacity the scorer publishes on a
node: never below what is held, every device counted once, nothing where nothing is offered."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.explain.nodes import detail_view
from scorer.explain.render import node_text
from scorer.explain.view import NodeDetail, Served
from scorer.model import NodeState, with_devices
from steer.core.device_counter import (
    NodeDeviceCount,
    counter_capacity,
    device_counter,
    device_counters,
)
from steer.core.dra.catalog import ClaimDevices, requested_device_counts
from steer.core.dra.inventory import Inventory
from steer.core.mutation import MutationPlan, mutate_pod, read_trace
from steer.core.patch import apply_ops
from steer.core.policy import parse_policy
from steer.core.quantity import parse_amounts
from steer.core.steering import pod_classification
from tests.conftest import EXAMPLE_POLICY, load_fixture
from tests.dra_support import CLAIM_POD, DOUBLE_GPU_TEMPLATE, GPU_CLASS, NVIDIA, FakeCatalog

POLICY = parse_policy(EXAMPLE_POLICY.read_text())
PLAN = MutationPlan.from_policy(POLICY)
(COUNTER,) = device_counters(POLICY)
NS = "gpu-test1"
TRACE = "kube-steer.github.io/trace"


def claim_spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def exactly(**fields: Any) -> dict[str, Any]:
    return {"name": "r", "exactly": {"deviceClassName": GPU_CLASS, **fields}}


def template(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": NS, "name": name},
        "spec": {"spec": claim_spec(*requests)},
    }


def pod(resources: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "app"}
    if resources:
        container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": NS, "name": "p"},
        "spec": {"containers": [container], **spec},
    }


def units(p: dict[str, Any], devices: Any = NVIDIA) -> int | None:
    return pod_classification(POLICY, p["spec"], namespace=NS, devices=devices).device_units


# -- what a claim takes ------------------------------------------------------------------------


def test_the_example_names_one_counter_for_its_gpu_class() -> None:
    assert COUNTER.resource == "kube-steer.github.io/devices-gpu"
    assert COUNTER.device_classes == {GPU_CLASS}
    assert COUNTER.requests_any == {"nvidia.com/gpu"}
    assert device_counter(POLICY, None) is None


@pytest.mark.parametrize(
    ("requests", "count"),
    [
        ([exactly()], 1),  # ExactCount and count 1 are the defaults
        ([exactly(count=3)], 3),
        ([exactly(count=2), exactly(allocationMode="ExactCount", count=1)], 3),
        ([exactly(allocationMode="All")], None),  # as many as the node has
        ([exactly(adminAccess=True)], None),  # takes devices without consuming them
        ([exactly(capacity={"requests": {"memory": "10Gi"}})], None),  # a share of a device
        ([{"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": GPU_CLASS}]}], None),
        ([exactly(count=2), exactly(allocationMode="All")], None),
    ],
)
def test_a_claim_takes_an_exact_count_or_an_unknown_one(
    requests: list[dict[str, Any]], count: int | None
) -> None:
    assert requested_device_counts(claim_spec(*requests)).of({GPU_CLASS}) == count


def test_requests_of_other_classes_do_not_count() -> None:
    other = {"name": "nic", "exactly": {"deviceClassName": "nic.example.com", "count": 4}}
    devices = requested_device_counts(claim_spec(exactly(count=2), other))
    assert devices.of({GPU_CLASS}) == 2
    assert devices.of({"nic.example.com"}) == 4
    assert requested_device_counts(None) == ClaimDevices()


# -- the units a pod requests ------------------------------------------------------------------


def test_each_form_requests_the_devices_it_asks_for() -> None:
    assert units(CLAIM_POD) == 2  # the double-gpu template: count 2
    assert units(pod({"nvidia.com/gpu": "3"})) == 3  # the device plugin's or DRA-mapped name
    assert units(pod({"nvidia.com/gpu": "1"}), devices=None) == 1  # whichever serves it
    assert units(pod({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "2"})) == 2
    mapped = FakeCatalog.of(DOUBLE_GPU_TEMPLATE, extended={"example.com/dra-gpu": GPU_CLASS})
    both = pod({"nvidia.com/gpu": "1", "example.com/dra-gpu": "2"})
    assert units(both, devices=mapped) == 3
    # Every form at once: each ask's devices once.
    combined = pod({"nvidia.com/gpu": "1"}, resourceClaims=CLAIM_POD["spec"]["resourceClaims"])
    assert units(combined) == 3


def test_init_containers_and_sidecars_count_as_the_scheduler_sums_them() -> None:
    p = pod({"nvidia.com/gpu": "1"})
    gpu = {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}
    p["spec"]["initContainers"] = [{"name": "warm", "image": "app", "resources": gpu}]
    assert units(p) == 4  # an init container runs alone: max(4, 1)
    p["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    assert units(p) == 5  # a sidecar runs beside the container


@pytest.mark.parametrize(
    "case",
    [
        "unknown template",
        "no catalogue",
        "shared claim",
        "all devices",
        "first available",
        "admin access",
        "unmapped name, no catalogue",
        "fraction",
    ],
)
def test_nothing_is_requested_when_the_count_is_not_known_exactly(case: str) -> None:
    claims = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    catalogs = {
        "all devices": FakeCatalog.of(template("t", exactly(allocationMode="All"))),
        "first available": FakeCatalog.of(
            template(
                "t", {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": GPU_CLASS}]}
            )
        ),
        "admin access": FakeCatalog.of(template("t", exactly(adminAccess=True))),
    }
    p, devices = pod(resourceClaims=claims), catalogs.get(case, NVIDIA)
    if case == "no catalogue":
        devices = None
    elif case == "shared claim":
        claim = {
            "kind": "ResourceClaim",
            "metadata": {"namespace": NS, "name": "shared"},
            "spec": claim_spec(exactly()),
        }
        p, devices = (
            pod(resourceClaims=[{"name": "g", "resourceClaimName": "shared"}]),
            FakeCatalog.of(claim),
        )
    elif case == "unmapped name, no catalogue":
        p, devices = pod({"nvidia.com/gpu": "1", "example.com/dra-gpu": "1"}), None
    elif case == "fraction":
        p = pod({"nvidia.com/gpu": "500m"})
    found = pod_classification(POLICY, p["spec"], namespace=NS, devices=devices)
    assert found.device_units is None, found
    steered = mutate_pod(PLAN, p, None, namespace=NS, devices=devices).apply(p)
    for container in steered["spec"]["containers"]:
        for part in ("requests", "limits"):
            assert COUNTER.resource not in (container.get("resources") or {}).get(part, {})


def test_a_pod_never_requests_more_units_than_devices_it_asks_for() -> None:
    """Every form the webhook counts, against the devices the scheduler gives it: a claim of
    count n takes n devices, a mapped or plugin request of q takes q."""
    cases = [
        (CLAIM_POD, 2),
        (pod({"nvidia.com/gpu": "2"}), 2),
        (pod({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}), 1),
        (pod({"cpu": "1"}), None),  # no device: no class, no counter
    ]
    for p, devices in cases:
        assert units(p) == devices


# -- the webhook's patch -------------------------------------------------------------------------


def test_the_first_container_requests_the_units_as_an_equal_limit_idempotently() -> None:
    p = copy.deepcopy(CLAIM_POD)
    p["spec"]["containers"].append({"name": "side", "image": "app"})
    mutation = mutate_pod(PLAN, p, None, namespace=NS, devices=NVIDIA)
    steered = mutation.apply(p)
    first, second = steered["spec"]["containers"]
    assert first["resources"]["requests"][COUNTER.resource] == "2"
    assert first["resources"]["limits"][COUNTER.resource] == "2"
    assert COUNTER.resource not in (second.get("resources") or {}).get("requests", {})
    assert "devices:gpu" in mutation.added
    trace = read_trace(steered, TRACE)
    assert trace is not None and "devices:gpu" in trace["rules"]
    again = mutate_pod(PLAN, steered, None, namespace=NS, devices=NVIDIA)
    assert again.ops == () and "devices:gpu" in again.in_effect


def test_a_forged_count_is_replaced_and_a_pod_naming_its_node_gets_none() -> None:
    forged = pod({"nvidia.com/gpu": "1", COUNTER.resource: "7"})
    steered = mutate_pod(PLAN, forged, None, namespace=NS, devices=NVIDIA).apply(forged)
    assert steered["spec"]["containers"][0]["resources"]["requests"][COUNTER.resource] == "1"
    placed = pod({"nvidia.com/gpu": "1", COUNTER.resource: "1"}, nodeName="gpu-node-1")
    steered = apply_ops(placed, mutate_pod(PLAN, placed, None, namespace=NS, devices=NVIDIA).ops)
    resources = steered["spec"]["containers"][0]["resources"]
    assert COUNTER.resource not in resources["requests"]
    assert COUNTER.resource not in resources["limits"]


# -- the capacity the scorer publishes ---------------------------------------------------------


def test_capacity_is_never_below_what_is_held() -> None:
    eight = NodeDeviceCount(devices=8)
    assert counter_capacity(COUNTER, eight, parse_amounts({}), held=3, pods=110).capacity == 8
    assert counter_capacity(COUNTER, eight, parse_amounts({}), held=9, pods=110).capacity == 9
    gone = counter_capacity(COUNTER, NodeDeviceCount(), parse_amounts({}), held=2, pods=110)
    assert (gone.offered, gone.capacity) == (False, 2)
    plugin = counter_capacity(
        COUNTER, NodeDeviceCount(), parse_amounts({"nvidia.com/gpu": "4"}), 0, 110
    )
    assert (plugin.offered, plugin.capacity) == (True, 4)
    # A device claims may share bounds nothing per pod: it counts a unit per pod the node runs.
    shared = counter_capacity(
        COUNTER, NodeDeviceCount(devices=2, shared=1), parse_amounts({}), 0, pods=10
    )
    assert shared.capacity == 1 + 10


def _second_class(selected: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu-any.example.com"},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{selected}"'}}],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }


def test_each_device_counts_once_and_only_where_the_class_is_offered() -> None:
    """gpu-node-1 lists 4 GPUs; a second DeviceClass that also selects them, and maps the
    class's `nvidia.com/gpu`, counts none of them twice."""
    slice_ = load_fixture("dra/nvidia-resourceslice-gpu-node.json")
    classes = load_fixture("dra/deviceclasses.json")["items"]
    inventory = Inventory.from_objects([*classes, _second_class(GPU_CLASS)], [slice_])
    nodes = with_devices(
        [
            NodeState(name="gpu-node-1", allocatable={"cpu": "64", "pods": "110"}),
            NodeState(name="cpu-1", allocatable={"cpu": "16", "pods": "110"}),
        ],
        inventory,
    )
    plan, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), now=1000.0, pod_usages={})
    gpu_node, cpu_node = plan.node("gpu-node-1"), plan.node("cpu-1")
    assert gpu_node is not None and cpu_node is not None
    (counter,) = gpu_node.counters
    assert (counter.dra, counter.capacity) == (4, 4)
    assert gpu_node.resource_changes[COUNTER.resource] == "4"
    (none,) = cpu_node.counters
    assert not none.offered and COUNTER.resource not in cpu_node.resource_changes


def test_explain_node_shows_each_counter_with_what_decided_it() -> None:
    slice_ = load_fixture("dra/nvidia-resourceslice-gpu-node.json")
    classes = load_fixture("dra/deviceclasses.json")["items"]
    inventory = Inventory.from_objects(classes, [slice_])
    nodes = with_devices(
        [NodeState(name="gpu-node-1", allocatable={"cpu": "64", "pods": "110"})], inventory
    )
    plan, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), now=1000.0, pod_usages={})
    detail = detail_view(POLICY, plan, "gpu-node-1", inventory)
    assert detail is not None
    (counter,) = detail.budget_pools.counters
    assert (counter.resource, counter.published, counter.devices, counter.held) == (
        COUNTER.resource,
        "4",
        4,
        0,
    )
    assert counter.why == "4 = max(0 held by its pods, 4 DRA devices of the class)"
    assert NodeDetail.from_json(detail.to_json()) == detail
    assert "device counter kube-steer.github.io/devices-gpu = 4" in node_text(
        detail, Served(leader=True)
    )
