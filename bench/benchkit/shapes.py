"""The scheduler bench's pod shapes: a base pod per shape, mutated by the webhook's own code, and
its unsteered twin; the same for the shape's realistic pod (bench/benchkit/realistic.py).
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
from .realistic import UNCREATED_UID, pod_bytes, realistic_pod

IMAGE = "registry.k8s.io/pause:3.10"

# An option changes a steered pod's spec; the plan it was steered by says what the policy owns
# (e.g. its resource prefix).
Option = Callable[[dict[str, Any], MutationPlan], None]


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
    # What selects the bare pods (a Deployment's pods are selected by their ReplicaSet): the
    # bench creates a Service with this selector, so the bare twin gets the scheduler's default
    # topology spreading as it would in a cluster (a pod with constraints of its own does not).
    # Realistic pods have a Service and a ReplicaSet of their own (bench/benchkit/realistic.py).
    service_selector: Mapping[str, str] | None = None
    # An option: the steered pods of shape `option_of` changed by `option` (see OPTIONS).
    option_of: str | None = None
    option: Option | None = None
    # An option that changes the twins instead: both carry the spread constraints of the
    # shape's steered pods as if the user had written them (the steered pods are the shape's).
    twin_spread: bool = False
    about: str = ""

    def resources(self, cpu_m: int, memory_mi: int, gpus: int) -> dict[str, dict[str, str]]:
        """A container's requests and limits by the shape's rule (limits = requests, or
        floor(1.05 x requests) for cpu and memory when it bursts)."""
        requests_ = {"cpu": f"{cpu_m}m", "memory": f"{memory_mi}Mi"}
        limits = dict(requests_)
        if self.burst:
            limits = {
                "cpu": f"{math.floor(cpu_m * 1.05)}m",
                "memory": f"{math.floor(memory_mi * 1.05)}Mi",
            }
        if gpus:
            requests_[GPU] = limits[GPU] = str(gpus)
        return {"requests": requests_, "limits": limits}

    def base_pod(self) -> dict[str, Any]:
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
                        "resources": self.resources(self.cpu_m, self.memory_mi, self.gpus),
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


@dataclass(frozen=True)
class Pair:
    """Two variants run as adjacent runs, compared as steered / twin (--variants NAME)."""

    name: str
    twin: str
    steered: str

    @property
    def variants(self) -> tuple[str, str]:
        return (self.twin, self.steered)


BARE = Pair("bare", "twin", "steered")
REALISTIC = Pair("realistic", "realistic-twin", "realistic-steered")
PAIRS = (BARE, REALISTIC)
VARIANTS = tuple(v for p in PAIRS for v in p.variants)


def pair_of(variant: str) -> Pair:
    return next(p for p in PAIRS if variant in p.variants)


@dataclass(frozen=True)
class Steered:
    """A pod as the webhook's mutation leaves it, and what the mutation did."""

    pod: dict[str, Any]
    rules: tuple[str, ...]
    patch_ops: int


def steer(plan: MutationPlan, shape: Shape, pod: Mapping[str, Any]) -> Steered:
    """`pod` mutated by the webhook's own code, the patch applied with jsonpatch."""
    if not plan.opted_in(shape.namespace, shape.namespace_labels):
        raise RuntimeError(f"{shape.name}: namespace {shape.namespace} is not opted in")
    mutation = mutate_pod(plan, pod, plan.tenant(shape.namespace_labels))
    steered = jsonpatch.apply_patch(pod, list(mutation.ops))
    return Steered(steered, mutation.in_effect, len(mutation.ops))


@dataclass(frozen=True)
class ShapePods:
    """A shape's four pods (names left out) and what the mutation did to each base pod.

    - twin: the bare base pod with the steered pod's schedulerName;
    - steered: the bare base pod mutated;
    - realistic_twin: the realistic pod exactly as the user created it (no schedulerName:
      default-scheduler);
    - realistic_steered: the realistic pod mutated.
    """

    shape: Shape
    steered: dict[str, Any]
    twin: dict[str, Any]
    rules: tuple[str, ...]
    patch_ops: int
    realistic_steered: dict[str, Any]
    realistic_twin: dict[str, Any]
    realistic_rules: tuple[str, ...]
    realistic_patch_ops: int

    def pod(self, variant: str) -> dict[str, Any]:
        pods = {
            BARE.twin: self.twin,
            BARE.steered: self.steered,
            REALISTIC.twin: self.realistic_twin,
            REALISTIC.steered: self.realistic_steered,
        }
        return pods[variant]

    def summary(self) -> dict[str, Any]:
        """What the results document keeps of the pods."""
        return {
            "rules": list(self.rules),
            "patch_ops": self.patch_ops,
            "steered": self.steered,
            "realistic": {
                "rules": list(self.realistic_rules),
                "patch_ops": self.realistic_patch_ops,
                "twin_bytes": pod_bytes(self.realistic_twin),
                "steered_bytes": pod_bytes(self.realistic_steered),
                "twin": self.realistic_twin,
                "steered": self.realistic_steered,
            },
        }


def base_shape(shape: Shape) -> Shape:
    """The shape whose pods an option changes (a shape is its own)."""
    return SHAPE_BY_NAME[shape.option_of] if shape.option_of is not None else shape


def shape_pods(plan: MutationPlan, shape: Shape, replica_set_uid: str = UNCREATED_UID) -> ShapePods:
    """The base pod mutated by the webhook's own code, and its unsteered twin: the base pod
    with the schedulerName the mutation ends with; the realistic pod (owned by the shape's
    ReplicaSet, `replica_set_uid`) mutated the same way, and its twin, the realistic pod
    unchanged. An option's pods are its shape's, both steered pods changed by the option (the
    twins are the shape's own)."""
    if shape.option_of is not None and shape.twin_spread:
        of = shape_pods(plan, SHAPE_BY_NAME[shape.option_of], replica_set_uid)
        return dataclasses.replace(
            of,
            shape=shape,
            twin=_with_spread_of(of.twin, of.steered),
            realistic_twin=_with_spread_of(of.realistic_twin, of.realistic_steered),
        )
    if shape.option_of is not None and shape.option is not None:
        of = shape_pods(plan, SHAPE_BY_NAME[shape.option_of], replica_set_uid)
        steered = copy.deepcopy(of.steered)
        shape.option(steered["spec"], plan)
        realistic_steered = copy.deepcopy(of.realistic_steered)
        shape.option(realistic_steered["spec"], plan)
        return dataclasses.replace(
            of, shape=shape, steered=steered, realistic_steered=realistic_steered
        )
    bare = steer(plan, shape, shape.base_pod())
    twin = shape.base_pod()
    scheduler = bare.pod["spec"].get("schedulerName")
    if scheduler:
        twin["spec"]["schedulerName"] = scheduler
    user_pod = realistic_pod(shape, replica_set_uid)
    realistic = steer(plan, shape, user_pod)
    return ShapePods(
        shape,
        bare.pod,
        twin,
        bare.rules,
        bare.patch_ops,
        realistic.pod,
        user_pod,
        realistic.rules,
        realistic.patch_ops,
    )


def gpus_per_node(nodes: int, pods: int, gpu_every: int = 4) -> int:
    """8, or enough that the GPU pods of one run take at most half of all GPUs (some GPU
    nodes are hot, over dept-a's budget or unhealthy, so not every GPU is usable)."""
    gpu_nodes = max(1, math.ceil(nodes / gpu_every))
    return max(8, math.ceil(2 * pods / gpu_nodes))


# -- options: what another mechanism would put in the steered pod ----------------------------
#
# Not what the webhook does: each option changes one thing of a shape's steered pods (bare and
# realistic), so that one run measures what that thing costs the scheduler (against the shape's
# own twin) and what an alternative would buy. `bench/scale.py scheduler --options`. An option
# is given the spec and the plan the pod was steered by (what the policy owns).

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


def merge_terms(spec: dict[str, Any], _plan: MutationPlan) -> None:
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


def bucket_terms_only(spec: dict[str, Any], _plan: MutationPlan) -> None:
    """Only the binary-weighted terms on the composite label (no "not reserved" terms)."""
    _keep_terms(spec, [t for t in _terms(spec) if "DoesNotExist" not in repr(t["preference"])])


def one_term(spec: dict[str, Any], _plan: MutationPlan) -> None:
    _keep_terms(spec, _terms(spec)[:1])


def no_terms(spec: dict[str, Any], _plan: MutationPlan) -> None:
    _keep_terms(spec, [])


def _container_resources(spec: dict[str, Any]) -> list[dict[str, dict[str, str]]]:
    return [
        c.get("resources") or {}
        for field in ("initContainers", "containers")
        for c in spec.get(field) or ()
    ]


def no_pool(spec: dict[str, Any], plan: MutationPlan) -> None:
    """The budget's pool and gate requests left out (the budget is then not enforced): every
    request and limit under the policy's resource prefix, in every container. Limits too: an
    extended resource (a prefix without `kubernetes.io`) is requested with limit = request.
    A former prefix cannot appear: the base pods request nothing of kube-steer's."""
    prefix = plan.policy.spec.resource_prefix
    for resources in _container_resources(spec):
        for part in ("requests", "limits"):
            amounts = resources.get(part) or {}
            for name in [k for k in amounts if k.startswith(prefix)]:
                del amounts[name]


def _soften(topology_key: str) -> Option:
    def soften(spec: dict[str, Any], _plan: MutationPlan) -> None:
        for c in spec["topologySpreadConstraints"]:
            if c["topologyKey"] == topology_key:
                c["whenUnsatisfiable"] = "ScheduleAnyway"

    return soften


def zone_only(spec: dict[str, Any], _plan: MutationPlan) -> None:
    spec["topologySpreadConstraints"] = [
        c for c in spec["topologySpreadConstraints"] if c["topologyKey"] != "kubernetes.io/hostname"
    ]


def no_spread(spec: dict[str, Any], _plan: MutationPlan) -> None:
    del spec["topologySpreadConstraints"]


def _with_spread_of(twin: Mapping[str, Any], steered: Mapping[str, Any]) -> dict[str, Any]:
    """The twin with the steered pod's spread constraints, as its user's own."""
    out = copy.deepcopy(dict(twin))
    out["spec"]["topologySpreadConstraints"] = copy.deepcopy(
        steered["spec"]["topologySpreadConstraints"]
    )
    return out


def _option(of: str, name: str, change: Option, about: str) -> Shape:
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
    _option(
        "a-chain", "soft-zone", _soften("topology.kubernetes.io/zone"), "zone spread ScheduleAnyway"
    ),
    _option(
        "a-chain", "soft-hosts", _soften("kubernetes.io/hostname"), "host spread ScheduleAnyway"
    ),
    _option("a-chain", "zone-only", zone_only, "hard zone spread, no hostname spread"),
    _option("a-chain", "no-spread", no_spread, "no spread constraints"),
    dataclasses.replace(
        SHAPE_BY_NAME["a-chain"],
        name="a-chain:own-spread",
        option_of="a-chain",
        twin_spread=True,
        about="the twins carry the chain's spread constraints as their user's own",
    ),
)
