"""The scheduler bench's pod shapes: a base pod per shape, mutated by the webhook's own code, and
its unsteered twin.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import reduce
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
    # What selects the pods (a Deployment's pods are selected by their ReplicaSet): the bench
    # creates a Service with this selector, so the unsteered twin gets the scheduler's default
    # topology spreading as it would in a cluster (a pod with constraints of its own does not).
    service_selector: Mapping[str, str] | None = None
    # An option: the steered pod of shape `option_of` changed by `option` (see OPTIONS).
    option_of: str | None = None
    option: Callable[[dict[str, Any]], None] | None = None
    about: str = ""

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
        service_selector={"order-chain": "x"},
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
    with the schedulerName the mutation ends with. An option's pods are its shape's, the
    steered pod changed by the option (the twin is the shape's own)."""
    if shape.option_of is not None and shape.option is not None:
        of = shape_pods(plan, SHAPE_BY_NAME[shape.option_of])
        steered = copy.deepcopy(of.steered)
        shape.option(steered["spec"])
        return ShapePods(shape, steered, of.twin, of.rules, of.patch_ops)
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


# -- options: what another mechanism would put in the steered pod ----------------------------
#
# Not what the webhook does: each option changes one thing of a shape's steered pod, so that
# one run measures what that thing costs the scheduler (against the shape's own twin) and what
# an alternative would buy. `bench/scale.py scheduler --options`.

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = spec["affinity"]["nodeAffinity"][PREFERRED]
    return terms


def _keep_terms(spec: dict[str, Any], terms: list[dict[str, Any]]) -> None:
    """Set the preferred node-affinity terms; none left removes them (and an emptied
    nodeAffinity or affinity with them), nothing else of the pod's affinity."""
    affinity = spec["affinity"]
    if terms:
        affinity["nodeAffinity"][PREFERRED] = terms
        return
    del affinity["nodeAffinity"][PREFERRED]
    if not affinity["nodeAffinity"]:
        del affinity["nodeAffinity"]
    if not affinity:
        del spec["affinity"]


def merge_terms(spec: dict[str, Any]) -> None:
    """Terms of the same preference merged into one (their weights summed), every weight then
    divided by the weights' greatest common divisor: the same order of nodes and the same
    normalised NodeAffinity score, in fewer terms."""
    merged: dict[str, dict[str, Any]] = {}
    for term in _terms(spec):
        key = repr(term["preference"])
        if key in merged:
            merged[key]["weight"] += term["weight"]
        else:
            merged[key] = copy.deepcopy(term)
    terms = list(merged.values())
    divisor = reduce(math.gcd, (t["weight"] for t in terms))
    for t in terms:
        t["weight"] //= divisor
    if max(t["weight"] for t in terms) > 100:
        raise ValueError("merged terms weigh more than 100")
    _keep_terms(spec, terms)


def bucket_terms_only(spec: dict[str, Any]) -> None:
    """Only the binary-weighted terms on the composite label (no "not reserved" terms)."""
    _keep_terms(spec, [t for t in _terms(spec) if "DoesNotExist" not in repr(t["preference"])])


def one_term(spec: dict[str, Any]) -> None:
    _keep_terms(spec, _terms(spec)[:1])


def no_terms(spec: dict[str, Any]) -> None:
    _keep_terms(spec, [])


def _requests(spec: dict[str, Any]) -> dict[str, str]:
    requests_: dict[str, str] = spec["containers"][0]["resources"]["requests"]
    return requests_


def no_pool(spec: dict[str, Any]) -> None:
    """The budget's pool and gate requests left out (the budget is then not enforced)."""
    requests_ = _requests(spec)
    for name in [k for k in requests_ if k.startswith("kube-steer.kubernetes.io/")]:
        del requests_[name]


def soft_zone(spec: dict[str, Any]) -> None:
    for c in spec["topologySpreadConstraints"]:
        c["whenUnsatisfiable"] = "ScheduleAnyway"


def zone_only(spec: dict[str, Any]) -> None:
    spec["topologySpreadConstraints"] = [
        c for c in spec["topologySpreadConstraints"] if c["topologyKey"] != "kubernetes.io/hostname"
    ]


def no_spread(spec: dict[str, Any]) -> None:
    del spec["topologySpreadConstraints"]


def _option(of: str, name: str, change: Callable[[dict[str, Any]], None], about: str) -> Shape:
    return dataclasses.replace(
        SHAPE_BY_NAME[of], name=f"{of}:{name}", option_of=of, option=change, about=about
    )


SHAPE_BY_NAME = {s.name: s for s in SHAPES}
OPTIONS = (
    _option("no-tenant", "merged", merge_terms, "same-preference terms merged (exact)"),
    _option("no-tenant", "bucket-terms", bucket_terms_only, "only the 4 bucket terms"),
    _option("no-tenant", "one-term", one_term, "one preferred term"),
    _option("a-burstable", "no-terms", no_terms, "pool requests, no preferred terms"),
    _option("a-burstable", "no-pool", no_pool, "preferred terms, no pool requests"),
    _option("b-guaranteed", "no-terms", no_terms, "pool and gate requests, no preferred terms"),
    _option("a-chain", "soft-zone", soft_zone, "zone spread ScheduleAnyway"),
    _option("a-chain", "zone-only", zone_only, "hard zone spread, no hostname spread"),
    _option("a-chain", "no-spread", no_spread, "no spread constraints"),
)
