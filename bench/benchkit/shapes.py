"""The scheduler bench's pod shapes: a base pod per shape, mutated by the webhook's own code, and
its unsteered twin.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonpatch

from steer.core.mutation import MutationPlan, mutate_pod

from .nodes import GPU

IMAGE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True)
class Shape:
    name: str
    namespace: str
    namespace_labels: Mapping[str, str]
    cpu_m: int = 100
    memory_mi: int = 128
    burst: bool = False  # limits = floor(1.05 x requests) for cpu and memory
    gpus: int = 0
    labels: Mapping[str, str] | None = None

    def base_pod(self) -> dict[str, Any]:
        requests_ = {"cpu": f"{self.cpu_m}m", "memory": f"{self.memory_mi}Mi"}
        limits = dict(requests_)
        if self.burst:
            limits = {
                "cpu": f"{math.floor(self.cpu_m * 1.05)}m",
                "memory": f"{math.floor(self.memory_mi * 1.05)}Mi",
            }
        if self.gpus:
            requests_[GPU] = limits[GPU] = str(self.gpus)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "namespace": self.namespace,
                "labels": {"app": f"scale-{self.name}", **(self.labels or {})},
            },
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "resources": {"requests": requests_, "limits": limits},
                    }
                ],
            },
        }


OPT_IN = {"kube-steer.github.io/enabled": "true"}
NS_NONE = {**OPT_IN}
NS_A = {"tenant": "dept-a", **OPT_IN}
NS_B = {"tenant": "dept-b", **OPT_IN}
SHAPES = (
    Shape("no-tenant", "scale-none", NS_NONE),
    Shape("a-burstable", "scale-a", NS_A, burst=True),
    Shape("b-guaranteed", "scale-b", NS_B),
    Shape("a-gpu", "scale-a", NS_A, burst=True, gpus=1),
    Shape(
        "a-chain",
        "scale-a",
        NS_A,
        labels={"order-chain": "x", "pod-template-hash": "6d4b8c7f9"},
    ),
)
VARIANTS = ("twin", "steered")


@dataclass(frozen=True)
class ShapePods:
    """A shape's two pods (names left out) and what the mutation did."""

    shape: Shape
    steered: dict[str, Any]
    twin: dict[str, Any]
    rules: tuple[str, ...]
    patch_ops: int

    def pod(self, variant: str) -> dict[str, Any]:
        return self.steered if variant == "steered" else self.twin


def shape_pods(plan: MutationPlan, shape: Shape) -> ShapePods:
    """The base pod mutated by the webhook's own code, and its unsteered twin: the base pod
    with the schedulerName the mutation ends with."""
    base = shape.base_pod()
    if not plan.opted_in(shape.namespace, shape.namespace_labels):
        raise RuntimeError(f"{shape.name}: namespace {shape.namespace} is not opted in")
    mutation = mutate_pod(plan, base, plan.tenant(shape.namespace_labels))
    steered = jsonpatch.apply_patch(base, list(mutation.ops))
    twin = copy.deepcopy(base)
    scheduler = steered["spec"].get("schedulerName")
    if scheduler:
        twin["spec"]["schedulerName"] = scheduler
    return ShapePods(shape, steered, twin, mutation.in_effect, len(mutation.ops))


def gpus_per_node(nodes: int, pods: int, gpu_every: int = 4) -> int:
    """8, or enough that the GPU pods of one run take at most half of all GPUs (some GPU
    nodes are hot, over dept-a's budget or unhealthy, so not every GPU is usable)."""
    gpu_nodes = max(1, math.ceil(nodes / gpu_every))
    return max(8, math.ceil(2 * pods / gpu_nodes))
