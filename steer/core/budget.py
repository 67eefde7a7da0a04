"""Tenant overcommit budgets that hold at the end state, enforced by the scheduler itself, and
that no kubelet restart can turn against a running pod.

A tenant with budget b % is promised: on every node where one of its pods runs, the sum of the
pods' limits stays within (100 + b) % of allocatable, for cpu and memory, whatever arrives
later. Labels cannot keep that promise (every pod of a burst sees the same labels); the
scheduler's own accounting can, because it counts the pods it has just assumed on every bind.

**One pool per node.** Every pod kube-steer steers requests its limits from the node's pool
(a pod of no tenant as one of the highest budget would: `tenant_budget`),
`<resourcePrefix>pool-cpu` (millicores) and `pool-memory` (MiB): each container requests its
own limit (its request when it sets none), so the pod's pool request is its limits summed the
way the scheduler sums requests (init containers and sidecars included). The scorer publishes
capacity = max(held, floor((100 + f) % of allocatable) - the limits of every pod outside the
pool), where f is the node's **floor** and held what the pool's bound pods request. So on every
node, the limits of all pods stay within (100 + f) % of allocatable, and never is the pool
published below what its bound pods hold: a kubelet that restarts re-admits every one of them.

**The floor is the smallest budget the node must keep.** Pods of budget b may run only where
f <= b: a pod whose budget is below the highest level requests one unit of the gate
`<resourcePrefix>budget-<b>pct` (steer/core/gates.py), open where f <= b and closed elsewhere.
A node's floor is the lowest level by default, so every tenant may use it; it rises to level c
only while pods bursting at c (limits above requests) run there and no pod of a lower budget
does, so a 5 % tenant gets its 5 % on the nodes it has to itself. A rise is made in two
writes: first the lower gates close (capacity = what is held, i.e. nothing), and only a later
write, `FLOOR_SETTLE_S` after and with still no lower pod bound, publishes the larger room. A
pod of a lower budget that the scheduler placed before it saw the gate close therefore lands
under the old, smaller room. A floor falls as soon as its reason leaves: that only shrinks the
room, never below what is held.

This replaces per-level pools with a burst label and a required pod anti-affinity: the
anti-affinity made every pod's PreFilter scan every pod in the cluster (measured in upstream
scheduler_perf: 24 pods/s at 5,000 nodes), and a pool published at (100 + b) % less the limits
of outside pods dropped below what its pods held as soon as an outside pod landed, which a
kubelet restart then turned into `OutOf<pool>` for every running tenant pod.

Pods outside the pool are those kube-steer does not steer: namespaces not opted in, DaemonSet
and static pods, pods created while no admission path was up. Their limits are subtracted from
the room when the scorer republishes (it does so on every pod event); one that lands between can
still break a budget, which no admission-time mechanism prevents, since infrastructure is never
refused. That residual risk is measured, not hidden: `node_overrun` says by how much a node's
limits exceed the room of the lowest budget of a pod there, and the scorer reports it per node
(`/explain/node`) and as metrics.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import orjson

from steer.core.gates import Gate
from steer.core.policy import Policy, Tenant
from steer.core.quantity import QuantityError, parse_quantity
from steer.core.scheduling import container_amount, pod_amount

MIB = 1024 * 1024
POOL_KINDS = ("cpu", "memory")
# A floor rises (the larger room is published) this long after the lower gates closed.
FLOOR_SETTLE_S = 5.0


def level_text(percent: float) -> str:
    """A budget as it appears in resource names: 5.0 -> "5", 2.5 -> "2.5"."""
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


def pool_resource(policy: Policy, kind: str) -> str:
    """The node's pool of room for limits: `<resourcePrefix>pool-cpu` or `pool-memory`."""
    return f"{policy.spec.resource_prefix}pool-{kind}"


def budget_gate(policy: Policy, level: float) -> Gate:
    """The gate pods of budget `level` request: open on nodes whose floor is at most `level`."""
    text = level_text(level)
    return Gate(f"{policy.spec.resource_prefix}budget-{text}pct", f"budget:{text}")


def overcommit_gate(policy: Policy, level: float) -> Gate:
    """`enforcement: labels`: open on nodes whose `overcommit-pct` is within `level`."""
    text = level_text(level)
    return Gate(f"{policy.spec.resource_prefix}overcommit-{text}pct", f"overcommit:{text}")


def gated_levels(policy: Policy) -> tuple[float, ...]:
    """The levels whose pods carry a budget gate: all but the highest, which every floor
    admits."""
    return levels(policy)[:-1]


def under_prefix(policy: Policy, names: Iterable[str], prefix: str) -> tuple[str, ...]:
    """`names` (under the current resource prefix) as they read under `prefix`, in order."""
    current = policy.spec.resource_prefix
    return tuple(prefix + name.removeprefix(current) for name in names if name.startswith(current))


def former_names(policy: Policy, names: Iterable[str]) -> dict[str, str]:
    """The names `names` (under the current resource prefix) had under each former prefix:
    former name -> current name. Pods admitted before a prefix change hold the former ones."""
    names = tuple(n for n in names if n.startswith(policy.spec.resource_prefix))
    return {
        former_name: name
        for former in policy.spec.former_resource_prefixes
        for former_name, name in zip(under_prefix(policy, names, former), names, strict=True)
    }


def owned_resources(policy: Policy) -> frozenset[str]:
    """The budget resources the scorer publishes on nodes (and the webhook adds to pods)."""
    if enforced(policy):
        names = {pool_resource(policy, kind) for kind in POOL_KINDS}
        names |= {budget_gate(policy, lv).resource for lv in gated_levels(policy)}
        return frozenset(names)
    if any(t.overcommit_percent is not None for t in policy.spec.tenants):
        return frozenset(overcommit_gate(policy, lv).resource for lv in levels(policy))
    return frozenset()


# -- pods ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Amount:
    """Cpu in millicores and memory in bytes, exact: a pod's limits."""

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


def container_pool_units(container: Mapping[str, Any]) -> dict[str, int]:
    """What one container requests from the pool: its limits in pool units, rounded up (a
    limit it does not set counts its request). Raises QuantityError for a malformed one.
    Cached by the quantities' text: the webhook computes this for every container it admits,
    and a cluster's pods repeat a few hundred sizes."""
    cpu_m, mib = _container_pool_units(container)
    return {"cpu": cpu_m, "memory": mib}


def _container_pool_units(container: Mapping[str, Any]) -> tuple[int, int]:
    """`container_pool_units` as (millicores, MiB)."""
    resources = container.get("resources") or {}
    texts = (_limit_text(resources, "cpu"), _limit_text(resources, "memory"))
    try:
        for text in texts:
            if isinstance(text, str) and len(text) > 32:
                raise TypeError("long texts are not cached")  # a hostile pod cannot fill it
        return _pool_units(texts)
    except TypeError:  # unhashable (a list, say) or long: judged uncached, refused there if bad
        units = Amount(
            cpu_m=container_amount(container, "limits", "cpu") * 1000,
            memory=container_amount(container, "limits", "memory"),
        ).units()
        return units["cpu"], units["memory"]


def _limit_text(resources: Mapping[str, Any], kind: str) -> Any:
    for part in ("limits", "requests"):
        values = resources.get(part)
        # A parsed request holds dicts: test that type before the ABC.
        if values is None or (type(values) is not dict and not isinstance(values, Mapping)):
            continue
        value = values.get(kind)
        if value is not None:
            return value
    return None


@functools.lru_cache(maxsize=4096)
def _pool_units(texts: tuple[Any, ...]) -> tuple[int, int]:
    cpu, memory = (Fraction(0) if t is None else parse_quantity(t) for t in texts)
    return math.ceil(cpu * 1000), math.ceil(memory / MIB)


def pod_bursts(spec: Mapping[str, Any]) -> bool:
    """Limits above requests for cpu or memory. Raises QuantityError for a malformed one."""
    return any(pod_amount(spec, "limits", r) > pod_amount(spec, "requests", r) for r in POOL_KINDS)


def limit_overcommit_pct(amounts: Mapping[str, Fraction], limits: Amount) -> float | None:
    """The node's overcommit by limits, in %: max over cpu and memory of the pods' limits /
    allocatable (`amounts`, parsed) - 1 (a node without pods reads -100). A resource whose
    allocatable is missing or zero is left out; None when both are."""
    ratios = []
    for name, amount in (("cpu", limits.cpu_m / 1000), ("memory", limits.memory)):
        offered = amounts.get(name, Fraction(0))
        if offered > 0:
            ratios.append(amount / offered)
    if not ratios:
        return None
    return float(max(ratios) * 100 - 100)


@dataclass(frozen=True)
class TenantBudget:
    """What a tenant's budget asks of its pods, fixed by the policy (computed once per policy
    version): pool requests from every container and, below the highest level, its gate."""

    level: float
    pools: tuple[tuple[str, str], ...]  # (resource, "cpu" | "memory"); () under `labels`
    gate: Gate | None
    # False for pods of no tenant (or of a tenant without a budget): they share the pool, at
    # the highest level, but no promise is made to them (`tenant_budget`).
    budgeted: bool = True

    def container_requests(self, container: Mapping[str, Any]) -> dict[str, int]:
        """The pool requests of one container. Raises QuantityError for a malformed one."""
        if not self.pools:
            return {}
        cpu_m, mib = _container_pool_units(container)
        out = {}
        for name, kind in self.pools:
            units = cpu_m if kind == "cpu" else mib
            if units > 0:
                out[name] = units
        return out


def tenant_budget(policy: Policy, tenant: Tenant | None) -> TenantBudget | None:
    """The pools and gate a steered pod of `tenant` (None: of no tenant) requests; None when it
    requests none.

    Under `enforcement: scheduler` a steered pod of no tenant, or of a tenant without a budget,
    requests its limits from the pool too, as a pod of the highest budget does (no gate): the
    room a budget keeps on a node is shared by every pod kube-steer steers there, so none of
    them can land between two publications and break it. Its burst raises the node's floor as
    one at the highest budget would (`wanted_floor`)."""
    if tenant is None or tenant.overcommit_percent is None:
        all_levels = levels(policy)
        if not enforced(policy) or not all_levels:
            return None
        return TenantBudget(
            level=all_levels[-1],
            pools=tuple((pool_resource(policy, kind), kind) for kind in POOL_KINDS),
            gate=None,
            budgeted=False,
        )
    level = tenant.overcommit_percent
    if not enforced(policy):
        return TenantBudget(level, (), overcommit_gate(policy, level))
    return TenantBudget(
        level=level,
        pools=tuple((pool_resource(policy, kind), kind) for kind in POOL_KINDS),
        gate=budget_gate(policy, level) if level in gated_levels(policy) else None,
    )


# -- nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodUsage:
    """A bound pod as the gates, the pool and the sources count it, a hundred-odd bytes instead
    of the pod's kilobytes: its limits and requests of cpu (millicores, rounded up as the
    scheduler rounds them) and memory (bytes), whether it bursts, and what it requests of every
    scalar resource (pools, gates, GPUs), each summed as the scheduler sums requests."""

    limit_cpu_m: int
    limit_memory: int
    request_cpu_m: int = 0
    request_memory: int = 0
    held: Mapping[str, int] = field(default_factory=dict)
    # False for DaemonSet and mirror pods: they run where they are put, so they neither make a
    # node active nor keep it from being drained (steer/core/policy/energy.py).
    movable: bool = True
    # False for a pod no controller owns (a bare pod): evicted, nothing makes it again, so its
    # node is never a drain candidate.
    replaced: bool = True

    @property
    def bursting(self) -> bool:
        return self.limit_cpu_m > self.request_cpu_m or self.limit_memory > self.request_memory

    @property
    def limits(self) -> tuple[int, int]:
        """Its limits in pool units: (millicores, MiB), rounded up."""
        return (self.limit_cpu_m, -(-self.limit_memory // MIB))


# Requests NodeResourcesFit sums natively; everything else a pod requests is a scalar resource.
CORE_REQUESTS = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})


def pod_usage(spec: Mapping[str, Any], *, movable: bool = True, replaced: bool = True) -> PodUsage:
    """Reduce a bound pod to what the gates, the pool and the sources count. A malformed
    quantity counts as nothing: the apiserver accepted the pod, so this is not expected.

    The replicas of a workload carry the same resources, so a reduction is kept per distinct
    set of container resources (and flags), and pods that share one share its `PodUsage`:
    the first list of 100,000 pods sums quantities for a few hundred shapes, not for every
    pod (measured 50 -> 8 us a pod)."""
    key = _resources_key(spec, movable, replaced)
    if key is None:
        return _reduce(spec, movable, replaced)
    usage = _USAGES.get(key)
    if usage is None:
        if len(_USAGES) >= _USAGES_MAX:
            _USAGES.clear()  # hostile variety: start over rather than grow
        usage = _USAGES[key] = _reduce(spec, movable, replaced)
    return usage


_USAGES: dict[tuple[Any, ...], PodUsage] = {}
_USAGES_MAX = 4096


def _resources_key(
    spec: Mapping[str, Any], movable: bool, replaced: bool
) -> tuple[Any, ...] | None:
    """What `_reduce` reads of a pod: each container's resources and each init container's
    restartPolicy, canonical; None when a field is not what the API serves (no caching)."""
    parts: list[Any] = [movable, replaced]
    for part in ("initContainers", "containers"):
        containers = spec.get(part) or []
        if not isinstance(containers, list):
            return None
        parts.append(part)
        for c in containers:
            if not isinstance(c, dict):
                return None
            restart = c.get("restartPolicy") if part == "initContainers" else None
            try:
                resources = orjson.dumps(c.get("resources"), option=orjson.OPT_SORT_KEYS)
            except TypeError:
                return None
            parts.append((restart, resources))
    return tuple(parts)


def _reduce(spec: Mapping[str, Any], movable: bool, replaced: bool) -> PodUsage:
    try:
        amounts = [
            math.ceil(pod_amount(spec, part, kind) * scale)
            for part in ("limits", "requests")
            for kind, scale in (("cpu", 1000), ("memory", 1))
        ]
    except QuantityError:
        amounts = [0, 0, 0, 0]
    names = {
        name
        for part in ("containers", "initContainers")
        for c in spec.get(part) or ()
        if isinstance(c, Mapping)
        for name in ((c.get("resources") or {}).get("requests") or {})
        if name not in CORE_REQUESTS and not str(name).startswith("hugepages-")
    }
    held: dict[str, int] = {}
    for name in sorted(names):
        try:
            amount = math.ceil(pod_amount(spec, "requests", name))
        except QuantityError:
            continue
        if amount > 0:
            held[name] = amount
    limit_cpu, limit_memory, request_cpu, request_memory = amounts
    return PodUsage(
        limit_cpu, limit_memory, request_cpu, request_memory, held or _NOTHING, movable, replaced
    )


_NOTHING: Mapping[str, int] = {}


@dataclass(frozen=True)
class NodeUsage:
    """A node's pods as the gates and the pool see them."""

    held: Mapping[str, int]  # per published resource, what its bound pods request
    outside: tuple[int, int]  # limits of the pods outside the pool (millicores, MiB)
    outside_pods: int
    members: Mapping[float, int]  # pool pods per budget level
    bursting: Mapping[float, int]  # pool pods bursting, per budget level
    # What pool pods hold of the pools' former names (millicores, MiB): room they take that the
    # pool under the current name must leave them.
    former: tuple[int, int] = (0, 0)

    @property
    def lowest_member(self) -> float | None:
        return min(self.members) if self.members else None


@dataclass(frozen=True)
class BudgetNames:
    """What the per-node budget arithmetic needs of a policy, derived once per cycle (a cycle
    plans 5,000 nodes)."""

    enforced: bool
    levels: tuple[float, ...]
    pools: tuple[str, ...]  # by POOL_KINDS, () without enforcement
    gate_level: Mapping[str, float]  # budget gate resource -> its level, former names too
    # A pool's former names (formerResourcePrefixes) -> its index in POOL_KINDS.
    former_pools: Mapping[str, int] = field(default_factory=dict)

    @property
    def top(self) -> float:
        return self.levels[-1] if self.levels else 0.0

    @classmethod
    def of(cls, policy: Policy | BudgetNames) -> BudgetNames:
        if isinstance(policy, BudgetNames):
            return policy
        all_levels = levels(policy)
        on = enforced(policy)
        pools = tuple(pool_resource(policy, kind) for kind in POOL_KINDS) if on else ()
        gate_level = {budget_gate(policy, lv).resource: lv for lv in all_levels[:-1]}
        for former, name in former_names(policy, tuple(gate_level)).items():
            gate_level[former] = gate_level[name]
        return cls(
            enforced=on,
            levels=all_levels,
            pools=pools,
            gate_level=gate_level,
            former_pools={f: pools.index(n) for f, n in former_names(policy, pools).items()},
        )


def node_usage(policy: Policy | BudgetNames, pods: Iterable[PodUsage]) -> NodeUsage:
    """Sum a node's pods. A pod is in the pool when it requests from it; its level is the
    budget gate it requests, or the highest level without one. A pod admitted under a former
    resource prefix is a member by its former names as well."""
    names = BudgetNames.of(policy)
    pools, gate_level, top = frozenset(names.pools), names.gate_level, names.top
    former_pools = names.former_pools
    former = [0, 0]
    held: dict[str, int] = {}
    outside_cpu = outside_memory = outside_pods = 0
    members: dict[float, int] = {}
    bursting: dict[float, int] = {}
    for pod in pods:
        level: float | None = None
        member = False
        for name, amount in pod.held.items():
            held[name] = held.get(name, 0) + amount
            gate = gate_level.get(name)
            if gate is not None:
                level = gate if level is None else min(level, gate)
                member = True
            elif name in pools:
                member = True
            elif name in former_pools:
                former[former_pools[name]] += amount
                member = True
        if not member:
            cpu, memory = pod.limits
            outside_cpu += cpu
            outside_memory += memory
            outside_pods += 1 if cpu or memory else 0
            continue
        level = top if level is None else level
        members[level] = members.get(level, 0) + 1
        if pod.bursting:
            bursting[level] = bursting.get(level, 0) + 1
    return NodeUsage(
        held, (outside_cpu, outside_memory), outside_pods, members, bursting, (former[0], former[1])
    )


def wanted_floor(policy: Policy | BudgetNames, usage: NodeUsage) -> float:
    """The floor the node's pods call for: the lowest level, raised to the highest level
    bursting here, but never above the lowest level of a pod here."""
    all_levels = BudgetNames.of(policy).levels
    if not all_levels:
        return 0.0
    floor = max(usage.bursting, default=all_levels[0])
    lowest = usage.lowest_member
    return floor if lowest is None else min(floor, lowest)


@dataclass(frozen=True)
class Floor:
    """A node's floor as published: `gates` (budget gates below it are closed) and `room` (the
    room published is (100 + room) %); `room < gates` while a rise settles."""

    gates: float
    room: float
    closed_at: float | None = None  # when the gates last rose


def next_floor(
    policy: Policy | BudgetNames, usage: NodeUsage, previous: Floor | None, now: float
) -> Floor:
    """The node's floor after this write: falls at once, rises in two writes (module doc)."""
    names = BudgetNames.of(policy)
    want = wanted_floor(names, usage)
    lowest = names.levels[0] if names.levels else 0.0
    if previous is None:
        previous = Floor(lowest, lowest)
    if want <= previous.room:
        return Floor(want, want)
    gates, closed_at = previous.gates, previous.closed_at
    if want != gates:
        gates, closed_at = want, now
    room = previous.room
    lower = usage.lowest_member
    settled = closed_at is None or now - closed_at >= FLOOR_SETTLE_S
    if settled and (lower is None or lower >= gates):
        room = gates
    return Floor(gates, room, closed_at)


def observed_floor(policy: Policy, amounts: Mapping[str, Fraction], usage: NodeUsage) -> Floor:
    """The floor a node's published gates show (`amounts`: its allocatable, parsed), for a
    scorer that starts with no memory: the gates closed there count as settled, since they
    closed before this scorer started."""
    gated = gated_levels(policy)
    closed = [
        lv
        for lv in gated
        if amounts.get(budget_gate(policy, lv).resource) == 0
        and usage.held.get(budget_gate(policy, lv).resource, 0) == 0
    ]
    all_levels = levels(policy)
    if not all_levels:
        return Floor(0.0, 0.0)
    # The floor is the lowest level whose gate is open (the highest level has none).
    open_levels = [lv for lv in all_levels if lv not in closed]
    floor = min(open_levels) if open_levels else all_levels[-1]
    return Floor(floor, floor, None)


@dataclass(frozen=True)
class PoolCapacity:
    """The node's pool of one kind and what decided it:
    capacity = max(taken, room - outside_limits)."""

    resource: str
    kind: str  # "cpu" | "memory"
    floor: float  # the budget whose room is published, in %
    room: int  # floor((100 + floor) % of allocatable), in pool units
    outside_limits: int  # limits of the node's pods outside the pool, or in it by a former name
    outside_pods: int
    taken: int  # what the pool's bound pods request from it
    # The lowest budget of a pool pod on the node (None: none there), in %, and its room:
    # what the node's limits are promised to stay within.
    promise: float | None = None
    promise_room: int = 0

    @property
    def overrun(self) -> int:
        """By how much the node's limits (the pool's pods by what they hold, the others by
        their limits) exceed the room of the lowest budget of a pool pod there, in pool units:
        0 while every budget holds. Only pods kube-steer does not steer, landing between two
        publications, can make it positive (module doc)."""
        if self.promise is None:
            return 0
        return max(0, self.taken + self.outside_limits - self.promise_room)

    @property
    def unit(self) -> str:
        return "millicores" if self.kind == "cpu" else "MiB"

    @property
    def capacity(self) -> int:
        return max(self.taken, self.room - self.outside_limits)

    @property
    def free(self) -> int:
        """What a new pod may still request from the pool on this node."""
        return self.capacity - self.taken


def node_pools(
    policy: Policy | BudgetNames, amounts: Mapping[str, Fraction], usage: NodeUsage, floor: float
) -> tuple[PoolCapacity, ...]:
    """The node's pools with their arithmetic (`amounts`: its allocatable, parsed; a node
    that offers no cpu or memory has no room, and its pools hold what is taken); () without
    enforcement."""
    names = BudgetNames.of(policy)
    if not names.enforced:
        return ()
    cpu, memory = amounts.get("cpu", Fraction(0)), amounts.get("memory", Fraction(0))
    promise = usage.lowest_member
    rooms = _rooms(cpu, memory, floor)
    promised = rooms if promise is None else _rooms(cpu, memory, promise)
    out = []
    for i, (kind, name) in enumerate(zip(POOL_KINDS, names.pools, strict=True)):
        out.append(
            PoolCapacity(
                resource=name,
                kind=kind,
                floor=floor,
                room=rooms[i],
                outside_limits=usage.outside[i] + usage.former[i],
                outside_pods=usage.outside_pods,
                taken=usage.held.get(name, 0),
                promise=promise,
                promise_room=promised[i],
            )
        )
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _rooms(cpu: Fraction, memory: Fraction, floor: float) -> tuple[int, int]:
    """floor((100 + floor) % of allocatable) in pool units (millicores, MiB); nodes of one
    shape share it."""
    factor = (100 + Fraction(level_text(floor))) / 100
    return (
        math.floor(cpu * 1000 * factor),
        math.floor(memory / MIB * factor),
    )
