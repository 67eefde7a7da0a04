"""Tenant overcommit budgets that hold at the end state, enforced by the scheduler itself.

A tenant with budget b % is promised: on every node where one of its pods runs, the sum of the
containers' limits stays within (1 + b/100) x allocatable, for cpu and memory, whatever arrives
later. Labels cannot keep that promise: every pod of a burst sees the same labels, so early pods
fill a node and later burstable pods push it over. The scheduler's own accounting can:

- NodeResourcesFit already keeps sum(requests) <= allocatable. So sum(limits) stays within
  (1 + b) x allocatable whenever the node's **burst** (limit - request, summed over its pods)
  stays within b x allocatable.
- Each positive budget level b is a **pool** of extended resources, `<prefix>burst-<b>pct-cpu`
  (millicores) and `<prefix>burst-<b>pct-memory` (MiB). The scorer publishes on every node
  capacity = floor(b x allocatable) - the burst of the pods that take nothing from that pool
  (pods of other namespaces, say); the webhook makes a tenant pod request its burst + 1 from
  its level's pool and from every higher one (the +1 keeps a Guaranteed pod off a node whose
  foreign burst already spends the whole budget). The scheduler then refuses any node where a
  pod would break a budget: exact at any arrival rate, as with Koordinator's batch resources.
- Budget 0 has no burst to spend, and needs its neighbours to have none either. Its pods take
  one unit of the guard `<prefix>burst-0pct` (capacity: the node's pod count while nothing on it
  bursts outside the pools, else 0), and every tenant pod carries a **required pod
  anti-affinity** (per hostname, every namespace) to pods labelled `<prefix>burst` with a higher
  level than its own, a label every pod that bursts from a pool carries. The scheduler applies
  an existing pod's anti-affinity to newcomers too, so a later burstable pod cannot land next
  to a budget-0 pod, nor a level-5 burst next to level-2 pods.

Foreign pods (not steered) are seen only once the scorer republishes the pools; their arrival
can break a budget in between, which no admission-time mechanism can prevent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from steer.core.policy import Policy, Tenant
from steer.core.quantity import QuantityError, parse_quantity

MIB = 1024 * 1024
HOSTNAME = "kubernetes.io/hostname"
BURST_RESOURCES = ("cpu", "memory")


def level_text(percent: float) -> str:
    """A budget as it appears in resource names and label values: 5.0 -> "5", 2.5 -> "2.5"."""
    return f"{percent:g}"


def enforced(policy: Policy) -> bool:
    return policy.spec.overcommit.enforcement == "scheduler"


def levels(policy: Policy) -> tuple[float, ...]:
    """The distinct positive budgets of the policy's tenants, ascending."""
    return tuple(
        sorted(
            {
                t.overcommit_percent
                for t in policy.spec.tenants
                if t.overcommit_percent is not None and t.overcommit_percent > 0
            }
        )
    )


def pool_resource(policy: Policy, level: float, resource: str) -> str:
    """The extended resource of one pool: `<prefix>burst-5pct-cpu`."""
    return f"{policy.spec.label_prefix}burst-{level_text(level)}pct-{resource}"


def guard_resource(policy: Policy) -> str:
    """The budget-0 guard: one unit per pod, none left on a node where something bursts."""
    return f"{policy.spec.label_prefix}burst-0pct"


def burst_label_key(policy: Policy) -> str:
    """Pod label naming the budget level a bursting pod draws on."""
    return f"{policy.spec.label_prefix}burst"


def owned_resources(policy: Policy) -> frozenset[str]:
    """Every extended resource the scorer publishes on nodes (and the webhook adds to pods)."""
    if not enforced(policy):
        return frozenset()
    names = {pool_resource(policy, lv, r) for lv in levels(policy) for r in BURST_RESOURCES}
    if any(t.overcommit_percent == 0 for t in policy.spec.tenants):
        names.add(guard_resource(policy))
    return frozenset(names)


# -- pods ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Burst:
    """A pod's limit - request per resource: cpu in millicores, memory in bytes (exact)."""

    cpu_m: Fraction = Fraction(0)
    memory: Fraction = Fraction(0)

    @property
    def any(self) -> bool:
        return self.cpu_m > 0 or self.memory > 0

    def units(self) -> dict[str, int]:
        """Pool units (millicores, MiB) rounded up, so a pool never understates a burst."""
        return {"cpu": math.ceil(self.cpu_m), "memory": math.ceil(self.memory / MIB)}

    def __add__(self, other: Burst) -> Burst:
        return Burst(self.cpu_m + other.cpu_m, self.memory + other.memory)


def _amount(resources: Mapping[str, Any], part: str, name: str) -> Fraction | None:
    values = resources.get(part)
    if not isinstance(values, Mapping) or values.get(name) is None:
        return None
    return parse_quantity(values[name])


def _container_amount(container: Mapping[str, Any], part: str, name: str) -> Fraction | None:
    """One container's request (defaulting to its limit, as the apiserver does) or limit;
    None for an unset limit (unbounded)."""
    resources = container.get("resources") or {}
    value = _amount(resources, part, name)
    if value is None and part == "requests":
        value = _amount(resources, "limits", name)
    if value is None and part == "requests":
        return Fraction(0)
    return value


def _effective(spec: Mapping[str, Any], part: str, name: str) -> Fraction | None:
    """The scheduler's view of a pod's request (or limit) of one resource: the larger of the
    containers' sum and the largest init container; None when a container leaves a limit
    unset (unbounded)."""
    total = Fraction(0)
    for container in spec.get("containers") or ():
        value = _container_amount(container, part, name)
        if value is None:
            return None
        total += value
    init_max = Fraction(0)
    for container in spec.get("initContainers") or ():
        value = _container_amount(container, part, name)
        if value is None:
            return None
        init_max = max(init_max, value)
    return max(total, init_max)


def pod_burst(spec: Mapping[str, Any]) -> Burst:
    """limit - request of cpu and memory; a resource without limits counts no burst (the
    tenant validation refuses such pods; a foreign one is unbounded and cannot be priced).
    Raises QuantityError for a malformed quantity."""
    parts = {}
    for name in BURST_RESOURCES:
        limit = _effective(spec, "limits", name)
        request = _effective(spec, "requests", name) or Fraction(0)
        parts[name] = Fraction(0) if limit is None else max(Fraction(0), limit - request)
    return Burst(cpu_m=parts["cpu"] * 1000, memory=parts["memory"])


@dataclass(frozen=True)
class BudgetSteering:
    """What the webhook adds to a tenant pod: pool requests, the burst label, anti-affinity."""

    requests: Mapping[str, int] = field(default_factory=dict)
    label: tuple[str, str] | None = None
    anti_affinity: Mapping[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return not self.requests and self.label is None and self.anti_affinity is None


def anti_affinity_term(policy: Policy, tenant: Tenant) -> dict[str, Any] | None:
    """The required podAntiAffinity term of a tenant's pods: no pod bursting from a higher
    level on the same node, in any namespace; None when no level is higher."""
    budget = tenant.overcommit_percent or 0.0
    higher = [level_text(lv) for lv in levels(policy) if lv > budget]
    if not higher:
        return None
    return {
        "labelSelector": {
            "matchExpressions": [
                {"key": burst_label_key(policy), "operator": "In", "values": higher}
            ]
        },
        "namespaceSelector": {},
        "topologyKey": HOSTNAME,
    }


@dataclass(frozen=True)
class TenantBudget:
    """What a tenant's budget asks of its pods, fixed by the policy: computed once per policy
    version (the webhook keeps it with its per-tenant pieces), applied per pod by `steering`."""

    pools: tuple[tuple[str, str], ...]  # (extended resource, "cpu" | "memory")
    guard: str | None
    label: tuple[str, str] | None  # set on pods that burst
    anti_affinity: Mapping[str, Any] | None

    def steering(self, burst: Burst) -> BudgetSteering:
        units = burst.units()
        requests = {name: units[resource] + 1 for name, resource in self.pools}
        if self.guard is not None:
            requests[self.guard] = 1
        label = self.label if burst.any else None
        return BudgetSteering(requests, label, self.anti_affinity)


def tenant_budget(policy: Policy, tenant: Tenant | None) -> TenantBudget | None:
    """The tenant's pool names, guard, burst label and anti-affinity; None when the policy does
    not enforce budgets through the scheduler or the tenant has none."""
    if tenant is None or tenant.overcommit_percent is None or not enforced(policy):
        return None
    budget = tenant.overcommit_percent
    pools = tuple(
        (pool_resource(policy, lv, resource), resource)
        for lv in levels(policy)
        if lv >= budget
        for resource in BURST_RESOURCES
    )
    return TenantBudget(
        pools=pools,
        guard=guard_resource(policy) if budget == 0 else None,
        label=(burst_label_key(policy), level_text(budget)) if budget > 0 else None,
        anti_affinity=anti_affinity_term(policy, tenant),
    )


def budget_steering(policy: Policy, tenant: Tenant | None, burst: Burst) -> BudgetSteering:
    """The pool requests, label and anti-affinity for a pod of `tenant` bursting `burst`."""
    budget = tenant_budget(policy, tenant)
    return BudgetSteering() if budget is None else budget.steering(burst)


# -- nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodShare:
    """A bound pod as the pools see it: its burst and the pool resources it requests."""

    burst: Burst
    pools: frozenset[str]


def pod_share(policy: Policy, spec: Mapping[str, Any]) -> PodShare:
    """Reduce a bound pod to its burst and the pools it takes from (malformed quantities count
    as no burst: the apiserver accepted the pod, so this is not expected)."""
    owned = owned_resources(policy)
    pools: set[str] = set()
    for container in spec.get("containers") or ():
        requests = (container.get("resources") or {}).get("requests") or {}
        pools.update(name for name in requests if name in owned)
    try:
        burst = pod_burst(spec)
    except QuantityError:
        burst = Burst()
    return PodShare(burst, frozenset(pools))


def pool_capacities(
    policy: Policy, allocatable: Mapping[str, str], pods: Iterable[PodShare]
) -> dict[str, str]:
    """The pool capacities to publish on a node (resource name -> integer quantity text).

    Level b: floor(b% of allocatable) minus the burst of the node's pods that take nothing from
    the pool, never below 0. Guard: the node's pod capacity while no pod outside the pools
    bursts there, else 0.
    """
    if not enforced(policy):
        return {}
    shares: Sequence[PodShare] = tuple(pods)
    out: dict[str, str] = {}
    try:
        cpu_m = parse_quantity(allocatable.get("cpu", "0")) * 1000
        memory_mib = parse_quantity(allocatable.get("memory", "0")) / MIB
        max_pods = int(parse_quantity(allocatable.get("pods", "110")))
    except QuantityError:
        return {}
    base = {"cpu": cpu_m, "memory": memory_mib}
    for lv in levels(policy):
        for resource in BURST_RESOURCES:
            name = pool_resource(policy, lv, resource)
            outside = Burst()
            for share in shares:
                if name not in share.pools:
                    outside = outside + share.burst
            spent = outside.units()[resource]
            out[name] = str(max(0, math.floor(base[resource] * Fraction(lv) / 100) - spent))
    guard = guard_resource(policy)
    if guard in owned_resources(policy):
        # Pools the guard's pods share: any burst outside them disqualifies the node.
        bursting = any(share.burst.any and not share.pools for share in shares)
        out[guard] = "0" if bursting else str(max_pods)
    return out
