"""Tenant overcommit budgets that hold at the end state, enforced by the scheduler itself.

A tenant with budget b % is promised: on every node where one of its pods runs, the sum of the
pods' limits stays within (100 + b) % of allocatable, for cpu and memory, whatever arrives
later. Labels cannot keep that promise: every pod of a burst sees the same labels, so early pods
fill a node and later burstable pods push it over. The scheduler's own accounting can:

- Each budget level b of the policy's tenants (0 included) is a **pool** of extended
  resources, `<prefix>limits-<b>pct-cpu` (millicores) and `<prefix>limits-<b>pct-memory` (MiB).
  The scorer publishes on every node capacity = floor((100 + b) % of allocatable) - the limits
  of the pods that take nothing from that pool (pods of other namespaces, say). The webhook
  makes a tenant pod request its **limits** from its level's pool and from every higher one;
  NodeResourcesFit then refuses a node where the pod would push the limits of a pool's members
  past the pool: exact at any arrival rate, as with Koordinator's batch resources. A container
  without a limit counts its request (kube-state-metrics counts no limit at all).
- A pod that does not burst (limits = requests) also takes from every lower pool: it may share
  a node with a lower-budget tenant only while that tenant's budget holds with it.
- A pod that bursts cannot take from lower pools (a 5 % tenant would then get a 0 % budget).
  It carries the label `<prefix>burst=<b>` instead, and every tenant pod carries a **required
  pod anti-affinity** (per hostname, every namespace) to pods bursting at a higher level than
  its own. The scheduler applies an existing pod's anti-affinity to newcomers too, so a later
  5 % burst cannot land next to a 0 % pod, nor a 0 % pod next to a 5 % burst.

So on a node holding a pod of budget b, every steered pod takes its limits from pool b (lower
and equal budgets directly, higher ones because they do not burst), and every other pod is
subtracted from the pool's capacity: the node's limits stay within (100 + b) % of allocatable.

Foreign pods (not steered) are seen only once the scorer republishes the pools; their arrival
can break a budget in between, which no admission-time mechanism can prevent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from steer.core.policy import Policy, Tenant
from steer.core.quantity import QuantityError, parse_quantity
from steer.core.scheduling import pod_amount

MIB = 1024 * 1024
HOSTNAME = "kubernetes.io/hostname"
BURST_RESOURCES = ("cpu", "memory")


def level_text(percent: float) -> str:
    """A budget as it appears in resource names and label values: 5.0 -> "5", 2.5 -> "2.5"."""
    return f"{percent:g}"


def enforced(policy: Policy) -> bool:
    return policy.spec.overcommit.enforcement == "scheduler"


def levels(policy: Policy) -> tuple[float, ...]:
    """The distinct budgets of the policy's tenants (0 included), ascending."""
    return tuple(
        sorted(
            {
                t.overcommit_percent
                for t in policy.spec.tenants
                if t.overcommit_percent is not None and t.overcommit_percent >= 0
            }
        )
    )


def pool_resource(policy: Policy, level: float, resource: str) -> str:
    """The extended resource of one pool: `<prefix>limits-5pct-cpu`."""
    return f"{policy.spec.label_prefix}limits-{level_text(level)}pct-{resource}"


def burst_label_key(policy: Policy) -> str:
    """Pod label naming the budget level a bursting pod draws on."""
    return f"{policy.spec.label_prefix}burst"


def owned_resources(policy: Policy) -> frozenset[str]:
    """Every extended resource the scorer publishes on nodes (and the webhook adds to pods)."""
    if not enforced(policy):
        return frozenset()
    return frozenset(pool_resource(policy, lv, r) for lv in levels(policy) for r in BURST_RESOURCES)


# -- pods ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Amount:
    """Cpu in millicores and memory in bytes, exact: a pod's limits, or its burst."""

    cpu_m: Fraction = Fraction(0)
    memory: Fraction = Fraction(0)

    @property
    def any(self) -> bool:
        return self.cpu_m > 0 or self.memory > 0

    def units(self) -> dict[str, int]:
        """Pool units (millicores, MiB) rounded up, so a pool never understates an amount."""
        return {"cpu": math.ceil(self.cpu_m), "memory": math.ceil(self.memory / MIB)}

    def __add__(self, other: Amount) -> Amount:
        return Amount(self.cpu_m + other.cpu_m, self.memory + other.memory)


def pod_limits(spec: Mapping[str, Any]) -> Amount:
    """The pod's limits of cpu and memory (a container without one counts its request).
    Raises QuantityError for a malformed quantity."""
    return Amount(
        cpu_m=pod_amount(spec, "limits", "cpu") * 1000, memory=pod_amount(spec, "limits", "memory")
    )


def limit_overcommit_pct(allocatable: Mapping[str, str], limits: Amount) -> float | None:
    """The node's overcommit by limits, in %: max over cpu and memory of the pods' limits /
    allocatable - 1 (a node without pods reads -100). A resource whose allocatable is missing,
    zero or malformed is left out; None when both are."""
    ratios = []
    for name, amount in (("cpu", limits.cpu_m / 1000), ("memory", limits.memory)):
        try:
            offered = parse_quantity(allocatable.get(name, "0"))
        except QuantityError:
            continue
        if offered > 0:
            ratios.append(amount / offered)
    if not ratios:
        return None
    return float(max(ratios) * 100 - 100)


def pod_burst(spec: Mapping[str, Any], limits: Amount | None = None) -> Amount:
    """limits - requests of cpu and memory, never below 0 (`limits`: the pod's, when already
    computed). Raises QuantityError for a malformed quantity."""
    if limits is None:
        limits = pod_limits(spec)
    requests = Amount(
        cpu_m=pod_amount(spec, "requests", "cpu") * 1000,
        memory=pod_amount(spec, "requests", "memory"),
    )
    return Amount(
        cpu_m=max(Fraction(0), limits.cpu_m - requests.cpu_m),
        memory=max(Fraction(0), limits.memory - requests.memory),
    )


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

    pools: tuple[tuple[str, str], ...]  # (extended resource, "cpu" | "memory"), level >= own
    lower_pools: tuple[tuple[str, str], ...]  # level < own: taken only by pods that do not burst
    label: tuple[str, str]  # set on pods that burst
    anti_affinity: Mapping[str, Any] | None

    def steering(self, limits: Amount, burst: Amount) -> BudgetSteering:
        units = limits.units()
        pools = self.pools if burst.any else self.pools + self.lower_pools
        requests = {name: units[resource] for name, resource in pools}
        label = self.label if burst.any else None
        return BudgetSteering(requests, label, self.anti_affinity)

    def steering_for(self, spec: Mapping[str, Any]) -> BudgetSteering:
        """`steering` for a pod spec, its limits summed once. Raises QuantityError for a
        malformed quantity."""
        limits = pod_limits(spec)
        return self.steering(limits, pod_burst(spec, limits))


def tenant_budget(policy: Policy, tenant: Tenant | None) -> TenantBudget | None:
    """The tenant's pool names, burst label and anti-affinity; None when the policy does not
    enforce budgets through the scheduler or the tenant has none."""
    if tenant is None or tenant.overcommit_percent is None or not enforced(policy):
        return None
    budget = tenant.overcommit_percent

    def pools(keep: Any) -> tuple[tuple[str, str], ...]:
        return tuple(
            (pool_resource(policy, lv, resource), resource)
            for lv in levels(policy)
            if keep(lv)
            for resource in BURST_RESOURCES
        )

    return TenantBudget(
        pools=pools(lambda lv: lv >= budget),
        lower_pools=pools(lambda lv: lv < budget),
        label=(burst_label_key(policy), level_text(budget)),
        anti_affinity=anti_affinity_term(policy, tenant),
    )


def budget_steering(
    policy: Policy, tenant: Tenant | None, spec: Mapping[str, Any]
) -> BudgetSteering:
    """The pool requests, label and anti-affinity for a pod `spec` of `tenant`. Raises
    QuantityError for a malformed quantity."""
    budget = tenant_budget(policy, tenant)
    return BudgetSteering() if budget is None else budget.steering_for(spec)


# -- nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodShare:
    """A bound pod as the pools see it: its limits, the pool resources it requests, the budget
    level it bursts at (its burst label) and the levels its anti-affinity keeps away."""

    limits: Amount
    pools: frozenset[str]
    burst_level: str | None = None
    repels: frozenset[str] = frozenset()


def repelled_levels(policy: Policy, spec: Mapping[str, Any]) -> frozenset[str]:
    """The burst levels a pod's required anti-affinity keeps off its node (per hostname)."""
    anti = (spec.get("affinity") or {}).get("podAntiAffinity") or {}
    key = burst_label_key(policy)
    out: set[str] = set()
    for term in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ():
        if not isinstance(term, Mapping) or term.get("topologyKey") != HOSTNAME:
            continue
        for expr in (term.get("labelSelector") or {}).get("matchExpressions") or ():
            if expr.get("key") == key and expr.get("operator") == "In":
                out.update(str(v) for v in expr.get("values") or ())
    return frozenset(out)


def pod_share(
    policy: Policy, spec: Mapping[str, Any], labels: Mapping[str, str] | None = None
) -> PodShare:
    """Reduce a bound pod to what the pools count (malformed quantities count as nothing: the
    apiserver accepted the pod, so this is not expected)."""
    owned = owned_resources(policy)
    pools: set[str] = set()
    for container in spec.get("containers") or ():
        requests = (container.get("resources") or {}).get("requests") or {}
        pools.update(name for name in requests if name in owned)
    try:
        limits = pod_limits(spec)
    except QuantityError:
        limits = Amount()
    return PodShare(
        limits,
        frozenset(pools),
        burst_level=(labels or {}).get(burst_label_key(policy)),
        repels=repelled_levels(policy, spec),
    )


@dataclass(frozen=True)
class PoolCapacity:
    """One pool on one node and what decided it: capacity = max(0, room - outside_limits)."""

    resource: str
    level: float
    kind: str  # "cpu" | "memory"
    room: int  # floor((100 + level) % of allocatable), in pool units
    outside_limits: int  # limits of the node's pods taking nothing from this pool
    outside_pods: int
    taken: int = 0  # limits of the node's pods in the pool (what they request from it)

    @property
    def unit(self) -> str:
        return "millicores" if self.kind == "cpu" else "MiB"

    @property
    def capacity(self) -> int:
        return max(0, self.room - self.outside_limits)

    @property
    def free(self) -> int:
        """What a new pod may still request from the pool on this node."""
        return self.capacity - self.taken


def node_pools(
    policy: Policy, allocatable: Mapping[str, str], pods: Iterable[PodShare]
) -> tuple[PoolCapacity, ...]:
    """Every pool of a node with its arithmetic; () without enforcement or with an unreadable
    allocatable."""
    if not enforced(policy):
        return ()
    try:
        base = {
            "cpu": parse_quantity(allocatable.get("cpu", "0")) * 1000,
            "memory": parse_quantity(allocatable.get("memory", "0")) / MIB,
        }
    except QuantityError:
        return ()
    # Each pod's limits in pool units, rounded once (not once per pool).
    shares = tuple((s.pools, s.limits.units()) for s in pods)
    out = []
    for lv in levels(policy):
        for kind in BURST_RESOURCES:
            name = pool_resource(policy, lv, kind)
            outside = [units[kind] for pools, units in shares if name not in pools]
            out.append(
                PoolCapacity(
                    resource=name,
                    level=lv,
                    kind=kind,
                    room=math.floor(base[kind] * (100 + Fraction(level_text(lv))) / 100),
                    outside_limits=sum(outside),
                    outside_pods=sum(1 for units in outside if units > 0),
                    taken=sum(units[kind] for pools, units in shares if name in pools),
                )
            )
    return tuple(out)


def pool_capacities(
    policy: Policy, allocatable: Mapping[str, str], pods: Iterable[PodShare]
) -> dict[str, str]:
    """The pool capacities to publish on a node (resource name -> integer quantity text)."""
    return {p.resource: str(p.capacity) for p in node_pools(policy, allocatable, pods)}
