"""What a policy means for nodes and pods: label keys, pod classes, preference and required
terms, tolerations.

This is the one place where label and taint keys, preferred-term weights, hard rules and the
tolerations a tenant gets are derived from the policy. The scorer writes exactly these keys;
`steer_pod` (steer/core/mutation.py) merges exactly these terms, requests and tolerations into
a pod, for the webhook and for `/explain`. Change a rule here and all three follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from steer.core.budget import TenantBudget, former_names, owned_resources, tenant_budget
from steer.core.device_counter import (
    DeviceCounter,
    device_counter,
    device_counters,
    pod_device_units,
)
from steer.core.dra.catalog import DeviceCatalog
from steer.core.dra.claims import DeviceAsk, claim_asks, extended_asks
from steer.core.dra.classes import implicit_extended_name
from steer.core.encoding import SCORE_MAX, PreferenceTerm, preference_terms
from steer.core.gates import Gate, avoid_gate, unreserved_gate
from steer.core.pod_shape import Json, UninterpretablePod, pod_objects, requested_resources
from steer.core.policy import (
    ALWAYS_EXCLUDED_NAMESPACES,
    DEFAULT_SCHEDULER,
    DRAIN_LABEL,
    DRAIN_REASON_ANNOTATION,
    RESERVED_PREFIX,
    Dimension,
    PodClass,
    Policy,
    TaintRule,
    Tenant,
    routed_scheduler,
)
from steer.core.quantity import QuantityError

CONDITION_VALUE = "true"
GPU_RESOURCE = "nvidia.com/gpu"


def dimension_key(policy: Policy, dim: Dimension) -> str:
    """`<prefix>score-<name>` for a score, `<prefix><name>` (unit in the name) for a raw value."""
    return policy.label_key(dim.label_suffix)


def composite_key(policy: Policy, pod_class: PodClass | None) -> str:
    return policy.label_key(policy.composite_suffix(pod_class.name if pod_class else None))


def condition_key(policy: Policy, rule: TaintRule) -> str:
    """Label (and taint) key the scorer sets to `true` while a taint rule's condition holds."""
    return policy.label_key(rule.name)


def reserved_key(policy: Policy, pod_class: PodClass) -> str:
    """Label the scorer sets to `true` on nodes that offer a resource the class reserves."""
    return policy.label_key(f"{RESERVED_PREFIX}{pod_class.name}")


def drain_keys(policy: Policy) -> tuple[str, str] | None:
    """The drain-candidate label and its reason annotation, when the policy marks them."""
    if not policy.spec.energy.drain_candidates.enabled:
        return None
    return policy.label_key(DRAIN_LABEL), policy.label_key(DRAIN_REASON_ANNOTATION)


def drain_taint_key(policy: Policy) -> str | None:
    """The PreferNoSchedule taint on drain candidates, when the descheduler's consolidation
    profile keys on it (steer/core/descheduling.py): it also keeps new pods elsewhere."""
    if drain_keys(policy) is None or not policy.spec.descheduling.consolidation.enabled:
        return None
    return policy.label_key(DRAIN_LABEL)


def energy_composites(policy: Policy) -> frozenset[str | None]:
    """The pod classes (None: no class) whose composite counts `energy.wattsPerCore` and
    consolidates: an "active" term beside its dimensions, and no hot-node penalty."""
    energy = policy.spec.energy
    if not energy.consolidates:
        return frozenset()
    return frozenset(
        c.name if c else None
        for c, _ in composites(policy)
        if energy.watts_per_core in composite_weights(policy, c)
    )


def reserving_classes(policy: Policy) -> tuple[PodClass, ...]:
    return tuple(c for c in policy.spec.pod_classes if c.reserve_nodes != "none")


def offers(
    pod_class: PodClass, amounts: Mapping[str, Fraction], devices: Mapping[str, int] | None = None
) -> bool:
    """Whether a node with this `status.allocatable` (`amounts`: parsed, `parse_amounts`)
    offers one of the class's `requestsAny`
    (a positive quantity), or holds DRA devices the class asks for: `devices` counts the
    node's devices by every extended-resource name their DeviceClasses map
    (steer/core/dra/classes.py), the implicit `deviceclass.resource.kubernetes.io/<class>`
    included. Read from the Node and its ResourceSlices, not from metrics: a GPU node stays
    reserved while its exporter is down."""
    if devices:
        names = (*pod_class.requests_any, *map(implicit_extended_name, pod_class.device_classes))
        if any(devices.get(name, 0) > 0 for name in names):
            return True
    return any(amounts.get(name, 0) > 0 for name in pod_class.requests_any)


def overcommit_key(policy: Policy) -> str:
    return policy.label_key("overcommit-pct")


def trace_annotation_key(policy: Policy) -> str:
    """Pod annotation where the webhook records what it applied (read back by `/explain`)."""
    return policy.label_key("trace")


def composite_weights(policy: Policy, pod_class: PodClass | None) -> dict[str, float]:
    """Dimension weights of a class's composite; for no class, `scoring.compositeDimensions`
    (every weighted score dimension when that is empty)."""
    if pod_class is not None and pod_class.dimensions:
        names: set[str] | None = set(pod_class.dimensions)
    else:
        names = set(policy.spec.scoring.composite_dimensions) or None
    return {
        d.name: d.weight
        for d in policy.spec.dimensions
        if d.publish == "score" and d.weight > 0 and (names is None or d.name in names)
    }


def composites(policy: Policy) -> tuple[tuple[PodClass | None, str], ...]:
    """Every composite label the scorer writes: the default one, then one per pod class."""
    out: list[tuple[PodClass | None, str]] = [(None, composite_key(policy, None))]
    out += [(c, composite_key(policy, c)) for c in policy.spec.pod_classes if c.dimensions]
    return tuple(out)


def owned_label_keys(policy: Policy) -> frozenset[str]:
    """Every label key the scorer may write; anything else on a node is never touched."""
    keys = {dimension_key(policy, d) for d in policy.spec.dimensions}
    keys |= {condition_key(policy, r) for r in policy.spec.taints}
    keys |= {key for _, key in composites(policy)}
    keys |= {reserved_key(policy, c) for c in reserving_classes(policy)}
    drain = drain_keys(policy)
    if drain is not None:
        keys.add(drain[0])
    return frozenset(keys)


def owned_taint_keys(policy: Policy) -> frozenset[str]:
    keys = {condition_key(policy, r) for r in policy.spec.taints}
    drain = drain_taint_key(policy)
    if drain is not None:
        keys.add(drain)
    return frozenset(keys)


@dataclass(frozen=True)
class PodClassification:
    """Which pod class a pod is in, and what it asks of DRA devices (steer/core/dra/claims.py).

    `pod_class` is the first class (policy order) the pod is in by what is known. An ask whose
    DeviceClasses are not known (a claim template the catalogue has not seen yet) may put the
    pod in another class that has `deviceClasses` (`doubt`); the pod is then classified without
    it, and steered so that nothing added can keep it off the nodes it may need: `spared`
    names the other `reserveNodes: require` classes whose "unreserved" gate it is not given,
    those whose resources or devices it asks for (or, in doubt, may ask for). `device_units`:
    the units of its class's device counter it requests (steer/core/device_counter.py), None
    when its class has none or the devices it gets are not known exactly."""

    pod_class: PodClass | None
    asks: tuple[DeviceAsk, ...] = ()
    doubt: tuple[str, ...] = ()
    spared: frozenset[str] = frozenset()
    device_units: int | None = None

    @property
    def unresolved(self) -> tuple[DeviceAsk, ...]:
        return tuple(a for a in self.asks if not a.known)

    def notes(self) -> tuple[str, ...]:
        """One line per unresolved ask that leaves the class in doubt, e.g. `claim template
        gpu-1 not known yet: classified by requests only`."""
        if not self.doubt:
            return ()
        basis = "what is known" if any(a.known for a in self.asks) else "requests only"
        return tuple(f"{a.text()}: classified by {basis}" for a in self.unresolved)


def _ours(policy: Policy) -> tuple[str, ...]:
    """Prefixes of the resources the webhook itself sets (pools, gates): no device's."""
    return (policy.spec.resource_prefix, *policy.spec.former_resource_prefixes)


def pod_classification(
    policy: Policy,
    pod_spec: Mapping[str, Any],
    *,
    namespace: str | None = None,
    devices: DeviceCatalog | None = None,
) -> PodClassification:
    """The pod's class and DRA asks (`PodClassification`). A class takes the pod when it
    requests (or limits) one of its `requestsAny`, or asks, by a claim, a claim template or an
    extended resource a DeviceClass maps, for a device of one of its `deviceClasses`.
    `devices` answers which classes the claims in `namespace` request; without it every claim
    is unresolved. Raises UninterpretablePod for a malformed `spec.resourceClaims`."""
    classes = policy.spec.pod_classes
    requested = requested_resources(pod_spec)
    asks: tuple[DeviceAsk, ...] = ()
    if any(c.device_classes for c in classes):  # else no ask can put the pod in a class
        ours = _ours(policy)
        asks = claim_asks(pod_spec, namespace, devices) + extended_asks(
            (n for n in requested if not n.startswith(ours)), devices
        )
    known: set[str] = set()
    for ask in asks:
        if ask.device_classes is not None:
            known |= ask.device_classes
    pod_class = next(
        (
            c
            for c in classes
            if not requested.isdisjoint(c.requests_any) or not known.isdisjoint(c.device_classes)
        ),
        None,
    )
    doubt: tuple[str, ...] = ()
    if any(not a.known for a in asks):
        doubt = tuple(c.name for c in classes if c is not pod_class and c.device_classes)
    spared = frozenset(
        c.name
        for c in classes
        if c.reserve_nodes == "require"
        and c is not pod_class
        and (
            c.name in doubt
            or not requested.isdisjoint(c.requests_any)
            or not known.isdisjoint(c.device_classes)
        )
    )
    counter = device_counter(policy, pod_class)
    units = None if counter is None else pod_device_units(counter, pod_spec, asks)
    return PodClassification(pod_class, asks, doubt, spared, units)


def classify_pod(
    policy: Policy,
    pod_spec: Mapping[str, Any],
    *,
    namespace: str | None = None,
    devices: DeviceCatalog | None = None,
) -> PodClass | None:
    """The first pod class (policy order) the pod is in, or None (`pod_classification`)."""
    return pod_classification(policy, pod_spec, namespace=namespace, devices=devices).pod_class


def tenant_for(policy: Policy, namespace_labels: Mapping[str, str]) -> Tenant | None:
    for tenant in policy.spec.tenants:
        if tenant.namespace_selector.matches(namespace_labels):
            return tenant
    return None


def class_preferences(policy: Policy, pod_class: PodClass | None) -> tuple[PreferenceTerm, ...]:
    """Preferred terms for a pod of this class: binary-weighted terms on its composite label,
    then, per other class that reserves its nodes by preference, "not reserved" terms weighing
    100 + step in all (a term may weigh at most 100), so even an unreserved node of bucket 0
    outranks a reserved node of bucket 100."""
    own = pod_class if pod_class is not None and pod_class.dimensions else None
    step = policy.spec.scoring.step
    terms = preference_terms(composite_key(policy, own), step)
    away = tuple(
        PreferenceTerm(weight, reserved_key(policy, c), (), operator="DoesNotExist")
        for c in reserving_classes(policy)
        if c.reserve_nodes == "prefer" and c is not pod_class
        for weight in (SCORE_MAX, step)
    )
    return terms + away


def pod_gates(
    policy: Policy,
    tenant: Tenant | None,
    pod_class: PodClass | None,
    spared: frozenset[str] = frozenset(),
) -> tuple[Gate, ...]:
    """The gates a pod of this tenant and class requests (steer/core/gates.py): one per taint
    rule its class avoids, one per other class that reserves its nodes outright (but those in
    `spared`, whose nodes the pod may need: `PodClassification`), and its tenant's budget gate.
    Each is a hard rule no kubelet restart turns against a running pod, which a required term
    on a label that moves with load would be."""
    gates: list[Gate] = []
    if pod_class is not None:
        gates += [avoid_gate(policy, policy.taint_rule(name)) for name in pod_class.avoid]
    gates += [
        unreserved_gate(policy, other)
        for other in reserving_classes(policy)
        if other.reserve_nodes == "require" and other is not pod_class and other.name not in spared
    ]
    budget = tenant_budget(policy, tenant)
    if budget is not None and budget.gate is not None:
        gates.append(budget.gate)
    return tuple(gates)


def owned_resource_keys(policy: Policy) -> frozenset[str]:
    """Every resource the scorer publishes on nodes and the webhook adds to pods: the budget
    pools and gates, the gates of the rules classes avoid or reserve by, and the classes'
    device counters."""
    names = set(owned_resources(policy))
    names |= {c.resource for c in device_counters(policy)}
    for pod_class in policy.spec.pod_classes:
        names |= {avoid_gate(policy, policy.taint_rule(n)).resource for n in pod_class.avoid}
        if pod_class.reserve_nodes == "require":
            names.add(unreserved_gate(policy, pod_class).resource)
    return frozenset(names)


@dataclass(frozen=True)
class ResourceSteering:
    """What the webhook makes a pod of one (tenant, class) request of the resources kube-steer
    publishes, fixed by the policy: pool requests from every container (each its own limits),
    one unit of each gate from the first container, the units of its class's device counter
    (the pod's own: `PodClassification.device_units`) from the first container too, and nothing
    else under those names (a request the policy would not make is removed)."""

    budget: TenantBudget | None
    gates: tuple[Gate, ...]
    owned: frozenset[str]  # pools, gates, counters, under the current and former prefixes
    # Extended resources (the default) need a limit equal to the request; native-prefixed ones
    # (`nativeResourceNames`) take the request alone.
    limits: bool = True
    counter: DeviceCounter | None = None

    @property
    def empty(self) -> bool:
        return self.budget is None and not self.gates and self.counter is None

    def container_requests(
        self,
        field: str,
        index: int,
        container: Mapping[str, Any],
        *,
        node_preset: bool,
        device_units: int | None = None,
    ) -> dict[str, int]:
        """What one container must request of the owned resources. A pod that names its node
        skips the scheduler, so only its budget holds it there (the kubelet enforces the pool
        and the budget gate at admission); the other gates and the device counter would only
        make the kubelet refuse a node someone chose. Raises QuantityError for a malformed
        quantity."""
        out = self.budget.container_requests(container) if self.budget is not None else {}
        if field == "containers" and index == 0:
            for gate in self.gates:
                if not node_preset or gate.rule.startswith("budget:"):
                    out[gate.resource] = 1
            if self.counter is not None and device_units and not node_preset:
                out[self.counter.resource] = device_units
        return out


def resource_steering(
    policy: Policy,
    tenant: Tenant | None,
    pod_class: PodClass | None,
    spared: frozenset[str] = frozenset(),
) -> ResourceSteering:
    owned = owned_resource_keys(policy)
    return ResourceSteering(
        tenant_budget(policy, tenant),
        pod_gates(policy, tenant, pod_class, spared),
        owned | frozenset(former_names(policy, owned)),
        limits=not policy.spec.native_resource_names,
        counter=device_counter(policy, pod_class),
    )


CONTAINER_FIELDS = ("containers", "initContainers")


def steered_container_requests(
    steering: ResourceSteering, spec: Mapping[str, Any], device_units: int | None = None
) -> dict[tuple[str, int], dict[str, int]]:
    """Per container, (field, index) -> the owned requests it carries once steered
    (`device_units`: the pod's, `PodClassification.device_units`). Raises
    UninterpretablePod for a malformed field or quantity."""
    node_preset = bool(spec.get("nodeName"))
    out: dict[tuple[str, int], dict[str, int]] = {}
    for field in CONTAINER_FIELDS:
        for i, container in enumerate(pod_objects(spec, field, f"spec.{field}")):
            try:
                out[(field, i)] = steering.container_requests(
                    field, i, container, node_preset=node_preset, device_units=device_units
                )
            except QuantityError as exc:
                raise UninterpretablePod(f"spec.{field}[{i}].resources", str(exc)) from None
    return out


def excluded_namespace_list(policy: Policy) -> tuple[str, ...]:
    """Namespaces never mutated or validated, whatever their labels (the control plane's, the
    project's own and the policy's `optIn.excludedNamespaces`), in order and without repeats (for objects written out, e.g. the admission policy)."""
    spec = policy.spec
    names = (*ALWAYS_EXCLUDED_NAMESPACES, spec.project_namespace, *spec.opt_in.excluded_namespaces)
    return tuple(dict.fromkeys(names))


def excluded_namespaces(policy: Policy) -> frozenset[str]:
    """The same namespaces as a set, for lookups on the request path."""
    return frozenset(excluded_namespace_list(policy))


def scheduler_for(policy: Policy, tenant: Tenant | None, pod_class: PodClass | None) -> str | None:
    """The schedulerName to set on a pod that left it unset, or None to leave it alone
    (`routed_scheduler`: the policy validator applies the same rule)."""
    return routed_scheduler(policy.spec, tenant, pod_class)


def scheduler_after(policy: Policy, routed: str | None, current: str | None) -> str | None:
    """The schedulerName a pod has after the webhook: the routed one when it left the field
    unset (or, with `defaultSchedulerIsUnset`, at default-scheduler), its own otherwise."""
    if routed is None:
        return current
    unset = not current or (
        current == DEFAULT_SCHEDULER and policy.spec.scheduler_profiles.default_scheduler_is_unset
    )
    return routed if unset else current


def injected_toleration(policy: Policy, rule_name: str) -> Json:
    """The toleration of a taint rule's taint, exactly as the scorer sets that taint."""
    rule = policy.taint_rule(rule_name)
    return {
        "key": condition_key(policy, rule),
        "operator": "Equal",
        "value": CONDITION_VALUE,
        "effect": rule.effect,
    }


def injected_tolerations(
    policy: Policy, tenant: Tenant | None, pod_class: PodClass | None
) -> tuple[tuple[str, Json], ...]:
    """(taint rule, toleration) for each reserved taint the tenant may tolerate.

    A class that must avoid a tainted node gets no toleration for that taint: its gate keeps
    it off the node anyway, and the toleration would only confuse readers.
    """
    avoided = set(pod_class.avoid) if pod_class is not None else set()
    allowed = tenant.allowed_tolerations if tenant is not None else ()
    return tuple(
        (name, injected_toleration(policy, name)) for name in allowed if name not in avoided
    )
