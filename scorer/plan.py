"""Observations + what the nodes carry now + memory → the labels and taints each node should carry.

Pure: no clock, no network. The caller passes `now`, the nodes as read, this cycle's readings
and the memory returned by the previous call; it gets back a `CyclePlan` (what to write and
why) and the memory for the next cycle.

Rules that shape the result (DESIGN decisions 2, 4, 5):

- Per (dimension, node) the last observation is remembered. A node missing from this cycle's
  reading, or a failed query, keeps its label until the observation is older than the TTL;
  then the label is withdrawn, the composites are recomputed without it, and no taint is
  kept from it. A node that was never observed gets no label, never a zero.
- Hysteresis compares with the value the node carries now (its label), so a restarted scorer
  or a new leader continues from the cluster's state, not from an empty memory.
- After a restart the memory is empty; a label whose `<prefix>observed-at` annotation is still
  within the TTL is carried unchanged until fresh data arrives or the TTL passes.
- Only keys from `owned_label_keys` / `owned_taint_keys` ever appear in a plan's changes,
  plus retired ones: keys this scorer wrote to the node (recorded in the `<prefix>managed`
  annotation) whose rule has since left the policy. Without the record a removed taint rule
  would leave its NoSchedule taint on nodes forever; with it, only keys we wrote are removed.
- Gates and budget pools (steer/core/gates.py, budget.py) are resources in the node's status,
  planned from the pods bound to each node: never below what those pods hold, so no kubelet
  restart refuses a running pod. Without a complete pod ledger (`pod_usages` None) none is
  set: a capacity computed from missing pods could be below what they hold. A resource the
  managed record lists but the policy no longer has is published at what pods still hold
  until none does, then removed; no other resource of the node is ever touched.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from scorer.model import NodeState, parse_rfc3339, rfc3339
from scorer.observe import DimensionFailure, DimensionReading
from steer.core.budget import (
    BudgetNames,
    Floor,
    NodeUsage,
    PodUsage,
    budget_gate,
    enforced,
    gated_levels,
    levels,
    next_floor,
    node_pools,
    node_usage,
    observed_floor,
    overcommit_gate,
)
from steer.core.encoding import composite, normalise, quantise, quantise_raw
from steer.core.gates import Gate, avoid_gate, gate_capacity, unreserved_gate
from steer.core.policy import Dimension, Direction, PodClass, Policy, TaintRule
from steer.core.quantity import QuantityError, parse_quantity
from steer.core.scheduling import Taint
from steer.core.steering import (
    CONDITION_VALUE,
    composite_weights,
    composites,
    condition_key,
    dimension_key,
    offers,
    overcommit_key,
    owned_label_keys,
    owned_resource_keys,
    owned_taint_keys,
    reserved_key,
    reserving_classes,
)

OBSERVED_AT_SUFFIX = "observed-at"
MANAGED_SUFFIX = "managed"


def observed_at_key(policy: Policy) -> str:
    """The annotation (not a label: it changes with every value) holding, per dimension, the
    Prometheus evaluation time of the observation behind the node's current label."""
    return policy.label_key(OBSERVED_AT_SUFFIX)


def managed_key(policy: Policy) -> str:
    """The annotation listing the label and taint keys this scorer has written to the node."""
    return policy.label_key(MANAGED_SUFFIX)


@dataclass(frozen=True)
class ManagedRecord:
    """What this scorer wrote to a node: label keys, taint keys and (budget pools) extended
    resource names. `resources` is left out of the JSON when empty, so records of nodes
    without pools read exactly as before pools existed."""

    labels: frozenset[str] = frozenset()
    taints: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str | None) -> ManagedRecord:
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except ValueError:
            return cls()  # hand-edited: nothing is known to be ours
        if not isinstance(data, dict):
            return cls()
        return cls(
            labels=frozenset(str(k) for k in data.get("labels") or () if isinstance(k, str)),
            taints=frozenset(str(k) for k in data.get("taints") or () if isinstance(k, str)),
            resources=frozenset(str(k) for k in data.get("resources") or () if isinstance(k, str)),
        )

    def text(self) -> str | None:
        if not self.labels and not self.taints and not self.resources:
            return None
        data = {"labels": sorted(self.labels), "taints": sorted(self.taints)}
        if self.resources:
            data["resources"] = sorted(self.resources)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


_RECORD_FIELDS = frozenset({"labels", "taints", "resources"})


def recorded_prefixes(node: NodeState) -> tuple[str, ...]:
    """The label prefixes under which the node carries a managed record, sorted."""
    found = []
    for key, text in node.annotations.items():
        if not key.endswith(MANAGED_SUFFIX):
            continue
        prefix = key[: -len(MANAGED_SUFFIX)]
        if _is_record(prefix, text):
            found.append(prefix)
    return tuple(sorted(found))


def _is_record(prefix: str, text: str) -> bool:
    if "/" not in prefix:
        return False  # a label prefix always has a domain part
    try:
        data = json.loads(text)
    except ValueError:
        return False
    if not isinstance(data, dict) or not data or not set(data) <= _RECORD_FIELDS:
        return False
    for name, entries in data.items():
        if not isinstance(entries, list):
            return False
        # Resources live under the resource prefix, labels and taints under this one.
        if not all(
            isinstance(e, str) and (name == "resources" or e.startswith(prefix)) for e in entries
        ):
            return False
    return True


class DataStatus(StrEnum):
    FRESH = "fresh"  # observed in this cycle's reading
    RETAINED = "retained"  # observed earlier, still within the TTL
    CARRIED = "carried"  # no observation in memory; label kept on its annotation's age
    STALE = "stale"  # data past the TTL: label withdrawn
    MISSING = "missing"  # never observed: no label


@dataclass(frozen=True)
class Observation:
    value: float
    observed_at: float


@dataclass(frozen=True)
class TaintCounter:
    """Debounce state of one taint rule on one node: `streak` counts consecutive observed
    cycles in which the condition disagreed with `active`."""

    active: bool
    streak: int = 0


@dataclass(frozen=True)
class ScorerMemory:
    observations: Mapping[str, Mapping[str, Observation]] = field(default_factory=dict)
    counters: Mapping[tuple[str, str], TaintCounter] = field(default_factory=dict)
    last_success: Mapping[str, float] = field(default_factory=dict)
    # Each node's budget floor as last published (steer/core/budget.py).
    floors: Mapping[str, Floor] = field(default_factory=dict)


@dataclass(frozen=True)
class DimensionScore:
    dimension: str
    status: DataStatus
    raw: float | None
    score: float | None  # normalised 0..100, 100 best
    label: str | None  # the value the node should carry; None = no label
    observed_at: float | None
    age_s: float | None


@dataclass(frozen=True)
class CompositeScore:
    key: str
    pod_class: str | None
    score: float | None  # after the hot-node penalty
    unpenalised: float | None
    penalty: float
    label: str | None


@dataclass(frozen=True)
class ConditionState:
    rule: str
    key: str
    effect: str
    status: DataStatus
    observed: float | None  # the value the condition compared (raw or score)
    holds: bool | None  # None when there was no fresh observation this cycle
    active: bool
    streak: int


@dataclass(frozen=True)
class PoolState:
    """The node's budget pool of one kind and what decided its capacity (for `/explain`):
    capacity = max(taken, room - outside_limits), room = floor((100 + floor) % of allocatable)
    in pool units (millicores, MiB)."""

    resource: str
    kind: str
    unit: str  # "millicores" or "MiB"
    floor: float  # the budget whose room is published, in %
    capacity: str  # what the node should carry
    current: str | None  # what its status.allocatable holds now
    room: int
    outside_limits: int
    outside_pods: int
    taken: int  # what the pool's bound pods request from it

    @property
    def free(self) -> int:
        """What a new pod may still request from the pool."""
        return int(self.capacity) - self.taken


@dataclass(frozen=True)
class GateState:
    """One gate on one node (for `/explain`): open or closed, and why."""

    resource: str
    rule: str
    open: bool
    held: int  # what the node's bound pods request
    capacity: str
    current: str | None
    why: str

    @property
    def free(self) -> int:
        return int(self.capacity) - self.held


@dataclass(frozen=True)
class NodePlan:
    node: str
    dimensions: Mapping[str, DimensionScore]
    composites: tuple[CompositeScore, ...]
    conditions: Mapping[str, ConditionState]
    labels: Mapping[str, str]  # every owned label the node should carry
    label_changes: Mapping[str, str | None]  # owned keys to set (str) or remove (None)
    taints: tuple[Taint, ...]  # every owned taint the node should carry, sorted
    current_taints: tuple[Taint, ...]  # the owned taints it carries now, sorted
    annotation: str | None
    annotation_changed: bool
    hot_pods: int
    # Owned annotations to set (str) or remove (None): observed-at and the managed record.
    annotation_changes: Mapping[str, str | None] = field(default_factory=dict)
    # Taint keys this scorer wrote under rules no longer in the policy: removed on write.
    retired_taint_keys: frozenset[str] = frozenset()
    # Gates and budget pools: resources to set (integer text) or remove (None) in the node's
    # status.capacity and status.allocatable, and each one's state.
    resource_changes: Mapping[str, str | None] = field(default_factory=dict)
    pools: tuple[PoolState, ...] = ()
    gates: tuple[GateState, ...] = ()
    # The budget floor published (None without enforcement or without a pod ledger), and the
    # node's pool pods per budget level, bursting or not.
    floor: Floor | None = None
    members: Mapping[float, int] = field(default_factory=dict)
    bursting: Mapping[float, int] = field(default_factory=dict)
    # What the node's bound pods request of every scalar resource (from the pod ledger).
    held: Mapping[str, int] = field(default_factory=dict)

    @property
    def taints_changed(self) -> bool:
        return self.taints != self.current_taints

    @property
    def changed(self) -> bool:
        return (
            bool(self.label_changes)
            or self.taints_changed
            or bool(self.annotation_changes)
            or bool(self.resource_changes)
        )


@dataclass(frozen=True)
class DimensionSummary:
    dimension: str
    label_key: str
    query: str
    unit: str | None  # of the raw value
    ok: bool  # this cycle's query succeeded
    stale: bool  # never succeeded, or the last success is older than the TTL
    last_success: float | None
    age_s: float | None
    nodes: int  # nodes with a label value for this dimension after this cycle
    samples: int
    unknown: int
    unknown_examples: tuple[str, ...]
    duration_s: float
    error: str | None
    error_kind: str | None


@dataclass(frozen=True)
class CyclePlan:
    policy_version: str
    planned_at: float
    nodes: tuple[NodePlan, ...]
    dimensions: tuple[DimensionSummary, ...]
    # Budget pools were planned from a complete pod ledger (False: pools left as they are).
    pods_known: bool = False

    def node(self, name: str) -> NodePlan | None:
        return self.by_name.get(name)

    @functools.cached_property
    def by_name(self) -> Mapping[str, NodePlan]:
        return {plan.node: plan for plan in self.nodes}

    @property
    def changes(self) -> tuple[NodePlan, ...]:
        return tuple(p for p in self.nodes if p.changed)

    @property
    def stale_dimensions(self) -> tuple[str, ...]:
        return tuple(d.dimension for d in self.dimensions if d.stale)


def _bucket(label: str | None) -> int | None:
    if label is None:
        return None
    try:
        return int(label)
    except ValueError:
        return None  # a hand-edited label: treat as no previous value


def _observed_times(node: NodeState, key: str) -> dict[str, str]:
    text = node.annotations.get(key)
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items()}


def _bounds(dim: Dimension) -> tuple[float, float] | None:
    norm = dim.normalization
    if norm.method == "fixed" and norm.min is not None and norm.max is not None:
        return (norm.min, norm.max)
    return None


@dataclass(frozen=True)
class _DimLayout:
    dim: Dimension
    name: str
    key: str
    step: int
    hysteresis: float
    ttl: float
    raw: bool  # publish: raw


@dataclass(frozen=True)
class _RuleLayout:
    rule: TaintRule
    key: str


@dataclass(frozen=True)
class _Layout:
    """Everything a policy fixes for a cycle, derived once instead of once per node."""

    dims: tuple[_DimLayout, ...]
    composites: tuple[tuple[str | None, str, Mapping[str, float]], ...]
    rules: tuple[_RuleLayout, ...]
    owned_labels: tuple[str, ...]
    owned_taints: frozenset[str]
    annotation_key: str
    record_key: str
    step: int
    hysteresis: float
    penalty_per_pod: float
    # Composites of classes routed to the bin-packing profile: no hot-node penalty there, since
    # piling onto the node that just took a pod is what bin-packing is for.
    packing: frozenset[str]
    reserving: tuple[tuple[PodClass, str], ...]
    policy: Policy
    owned_resources: frozenset[str]
    # Gates other than the budget's: (gate, what opens it: ("avoid", rule) | ("reserved",
    # class key) | ("overcommit", level)).
    gates: tuple[tuple[Gate, tuple[str, str | float]], ...]
    overcommit_label: str
    budget_names: BudgetNames
    budget_gates: tuple[tuple[float, Gate], ...]

    @classmethod
    def of(cls, policy: Policy) -> _Layout:
        owned = owned_resource_keys(policy)
        gates: dict[str, tuple[Gate, tuple[str, str | float]]] = {}
        for c in policy.spec.pod_classes:
            for name in c.avoid:
                gate = avoid_gate(policy, policy.taint_rule(name))
                gates[gate.resource] = (gate, ("avoid", name))
            if c.reserve_nodes == "require":
                gate = unreserved_gate(policy, c)
                gates[gate.resource] = (gate, ("reserved", reserved_key(policy, c)))
        if not enforced(policy):
            for lv in levels(policy):
                gate = overcommit_gate(policy, lv)
                gates[gate.resource] = (gate, ("overcommit", lv))
        return cls(
            policy=policy,
            owned_resources=owned,
            budget_names=BudgetNames.of(policy),
            budget_gates=tuple((lv, budget_gate(policy, lv)) for lv in gated_levels(policy)),
            gates=tuple(gates[k] for k in sorted(gates)),
            dims=tuple(
                _DimLayout(
                    dim=d,
                    name=d.name,
                    key=dimension_key(policy, d),
                    step=policy.step_of(d),
                    hysteresis=policy.hysteresis_of(d),
                    ttl=policy.ttl_of(d),
                    raw=d.publish == "raw",
                )
                for d in policy.spec.dimensions
            ),
            composites=tuple(
                (c.name if c else None, key, composite_weights(policy, c))
                for c, key in composites(policy)
            ),
            rules=tuple(_RuleLayout(r, condition_key(policy, r)) for r in policy.spec.taints),
            owned_labels=tuple(sorted(owned_label_keys(policy))),
            owned_taints=owned_taint_keys(policy),
            annotation_key=observed_at_key(policy),
            record_key=managed_key(policy),
            step=policy.spec.scoring.step,
            hysteresis=policy.spec.scoring.hysteresis,
            penalty_per_pod=policy.spec.scoring.hot_penalty_per_pod,
            packing=frozenset(
                c.name
                for c in policy.spec.pod_classes
                if c.scheduler_profile is not None
                and c.scheduler_profile == policy.spec.scheduler_profiles.binpack
            ),
            reserving=tuple((c, reserved_key(policy, c)) for c in reserving_classes(policy)),
            overcommit_label=overcommit_key(policy),
        )


def _remember(
    layout: _Layout,
    names: set[str],
    readings: Mapping[str, DimensionReading],
    memory: ScorerMemory,
    now: float,
) -> dict[str, dict[str, Observation]]:
    """Last observation per (dimension, node), without expired ones or vanished nodes."""
    out: dict[str, dict[str, Observation]] = {}
    for d in layout.dims:
        merged = {n: o for n, o in (memory.observations.get(d.name) or {}).items() if n in names}
        reading = readings.get(d.name)
        if reading is not None:
            for node, value in reading.values.items():
                if node in names:
                    merged[node] = Observation(value, reading.observed_at)
        out[d.name] = {n: o for n, o in merged.items() if now - o.observed_at <= d.ttl}
    return out


def plan_cycle(
    policy: Policy,
    nodes: Sequence[NodeState],
    readings: Mapping[str, DimensionReading],
    memory: ScorerMemory,
    now: float,
    *,
    failures: Mapping[str, DimensionFailure] | None = None,
    hot: Mapping[str, int] | None = None,
    pod_usages: Mapping[str, Sequence[PodUsage]] | None = None,
    known: Iterable[str] | None = None,
) -> tuple[CyclePlan, ScorerMemory]:
    """Plan one cycle. `readings` holds the dimensions queried successfully this cycle; a
    dimension absent from it counts as not observed (its data ages). Pass no readings to
    recompute composites from memory alone (e.g. for new hot-node counts): taint debounce
    counters only advance on fresh observations.

    `pod_usages` holds the pods bound to each node (a node absent from it has none), from a
    complete pod ledger; None when there is none, and then no gate or pool is set.

    `known` names every node of the cluster when `nodes` is only some of them (a refresh after
    pod events replans just the nodes whose pods changed): the memory of the others is kept,
    and their scores still count in every normalisation."""
    failures = failures or {}
    hot = hot or {}
    layout = _Layout.of(policy)
    names = {n.name for n in nodes} if known is None else set(known)
    observations = _remember(layout, names, readings, memory, now)
    scores = {
        d.name: normalise(
            {n: o.value for n, o in observations[d.name].items()},
            higher_is_better=d.dim.direction is Direction.HIGHER_IS_BETTER,
            bounds=_bounds(d.dim),
        )
        for d in layout.dims
    }
    fresh = {name: reading.values for name, reading in readings.items()}
    planned = {n.name for n in nodes}
    # Nodes not replanned now keep their debounce state and floor.
    counters: dict[tuple[str, str], TaintCounter] = {
        k: v for k, v in memory.counters.items() if k[1] in names and k[1] not in planned
    }
    floors: dict[str, Floor] = {
        k: v for k, v in memory.floors.items() if k in names and k not in planned
    }
    node_plans = []
    for node in nodes:
        node_plans.append(
            _plan_node(
                layout,
                node,
                fresh,
                observations,
                scores,
                memory,
                counters,
                now,
                hot.get(node.name, 0),
                None if pod_usages is None else pod_usages.get(node.name, ()),
                floors,
            )
        )

    last_success = dict(memory.last_success)
    for name, done in readings.items():
        last_success[name] = max(done.observed_at, last_success.get(name, done.observed_at))
    summaries = []
    for d in layout.dims:
        reading = readings.get(d.name)
        failure = failures.get(d.name)
        success = last_success.get(d.name)
        age = None if success is None else max(0.0, now - success)
        summaries.append(
            DimensionSummary(
                dimension=d.name,
                label_key=d.key,
                query=d.dim.what,
                unit=d.dim.raw_unit,
                ok=reading is not None,
                stale=age is None or age > d.ttl,
                last_success=success,
                age_s=age,
                nodes=sum(1 for p in node_plans if d.key in p.labels),
                samples=reading.samples if reading else 0,
                unknown=reading.unknown if reading else 0,
                unknown_examples=reading.unknown_examples if reading else (),
                duration_s=reading.duration_s
                if reading
                else failure.duration_s
                if failure
                else 0.0,
                error=failure.message if failure else None,
                error_kind=failure.kind if failure else None,
            )
        )
    cycle = CyclePlan(
        policy_version=policy.version,
        planned_at=now,
        nodes=tuple(node_plans),
        dimensions=tuple(summaries),
        pods_known=pod_usages is not None,
    )
    new_memory = ScorerMemory(
        observations=MappingProxyType(observations),
        counters=MappingProxyType(counters),
        last_success=MappingProxyType(last_success),
        floors=MappingProxyType(
            floors
            if pod_usages is not None
            else {k: v for k, v in memory.floors.items() if k in names}
        ),
    )
    return cycle, new_memory


def _plan_node(
    layout: _Layout,
    node: NodeState,
    fresh: Mapping[str, Mapping[str, float]],
    observations: Mapping[str, Mapping[str, Observation]],
    scores: Mapping[str, Mapping[str, float]],
    memory: ScorerMemory,
    counters: dict[tuple[str, str], TaintCounter],
    now: float,
    hot_pods: int,
    pods: Sequence[PodUsage] | None,
    floors: dict[str, Floor],
) -> NodePlan:
    current = node.labels
    times = _observed_times(node, layout.annotation_key)
    desired: dict[str, str] = {}
    dims: dict[str, DimensionScore] = {}
    for d in layout.dims:
        entry = _score_dimension(d, node, fresh, observations, scores, times, now)
        dims[d.name] = entry
        if entry.label is not None:
            desired[d.key] = entry.label

    comps = []
    usable = {n: e.score for n, e in dims.items() if e.score is not None and e.label is not None}
    for class_name, key, weights in layout.composites:
        penalty = 0.0 if class_name in layout.packing else hot_pods * layout.penalty_per_pod
        value = composite(usable, weights)
        label = None
        penalised = None
        if value is not None:
            penalised = max(0.0, value - penalty)
            label = str(
                quantise(penalised, layout.step, _bucket(current.get(key)), layout.hysteresis)
            )
            desired[key] = label
        comps.append(
            CompositeScore(
                key=key,
                pod_class=class_name,
                score=penalised,
                unpenalised=value,
                penalty=penalty if value is not None else 0.0,
                label=label,
            )
        )

    conditions: dict[str, ConditionState] = {}
    desired_taints: list[Taint] = []
    for r in layout.rules:
        state, counter = _condition(r, node, dims, memory, layout.policy.spec.label_prefix)
        conditions[r.rule.name] = state
        counters[(r.rule.name, node.name)] = counter
        if state.active:
            desired[r.key] = CONDITION_VALUE
            desired_taints.append(Taint(r.key, CONDITION_VALUE, r.rule.effect))

    # Nodes offering a reserved class's resource, from the Node itself (no metric needed),
    # unless a taint the class avoids is on: the class cannot use the node then, so keeping
    # other pods off it would only waste it.
    for pod_class, key in layout.reserving:
        avoided = any(conditions[n].active for n in pod_class.avoid if n in conditions)
        if offers(pod_class, node.allocatable) and not avoided:
            desired[key] = CONDITION_VALUE

    changes: dict[str, str | None] = {}
    for key in layout.owned_labels:
        want = desired.get(key)
        if current.get(key) != want:
            changes[key] = want
    record = ManagedRecord.parse(node.annotations.get(layout.record_key))
    for key in sorted(record.labels.difference(layout.owned_labels)):
        if key in current:
            changes[key] = None
    retired_taints = record.taints - layout.owned_taints

    # Observation times for the labels the node will carry: a changed value takes this
    # observation's time, an unchanged one keeps the time it was set with.
    new_times: dict[str, str] = {}
    for d in layout.dims:
        entry = dims[d.name]
        if entry.label is None:
            continue
        if d.key not in changes and d.name in times:
            new_times[d.name] = times[d.name]
        elif entry.observed_at is not None:
            new_times[d.name] = rfc3339(entry.observed_at)
        elif d.name in times:
            new_times[d.name] = times[d.name]
    present = layout.annotation_key in node.annotations
    annotation_changed = (new_times != times or not present) if new_times else present
    annotation = (
        json.dumps(new_times, sort_keys=True, separators=(",", ":"))
        if new_times and annotation_changed
        else None
    )
    if new_times and not annotation_changed:
        annotation = node.annotations[layout.annotation_key]
    annotation_changes: dict[str, str | None] = {}
    if annotation_changed:
        annotation_changes[layout.annotation_key] = annotation
    resources = _plan_resources(
        layout, node, pods, record, conditions, desired, memory.floors.get(node.name), now
    )
    if resources.floor is not None:
        floors[node.name] = resources.floor
    # Compared as sets, serialised only when the node's key set changed (rarely).
    new_record = ManagedRecord(
        labels=frozenset(desired),
        taints=frozenset(t.key for t in desired_taints),
        resources=resources.published,
    )
    if new_record != record:
        annotation_changes[layout.record_key] = new_record.text()

    return NodePlan(
        node=node.name,
        dimensions=dims,
        composites=tuple(comps),
        conditions=conditions,
        labels=desired,
        label_changes=changes,
        taints=tuple(sorted(desired_taints)),
        current_taints=tuple(
            sorted(
                t for t in node.taints if t.key in layout.owned_taints or t.key in retired_taints
            )
        ),
        annotation=annotation,
        annotation_changed=annotation_changed,
        hot_pods=hot_pods,
        annotation_changes=annotation_changes,
        retired_taint_keys=retired_taints,
        resource_changes=resources.changes,
        pools=resources.pools,
        gates=resources.gates,
        floor=resources.floor,
        members=resources.usage.members if resources.usage else {},
        bursting=resources.usage.bursting if resources.usage else {},
        held=resources.held,
    )


def _same_quantity(current: str | None, want: str) -> bool:
    """The apiserver stores quantities in canonical form ("1000" comes back as "1k")."""
    if current is None:
        return False
    try:
        return parse_quantity(current) == parse_quantity(want)
    except QuantityError:
        return False


@dataclass(frozen=True)
class _Resources:
    pools: tuple[PoolState, ...]
    gates: tuple[GateState, ...]
    changes: dict[str, str | None]
    published: frozenset[str]  # resource names the managed record lists afterwards
    floor: Floor | None
    usage: NodeUsage | None
    held: Mapping[str, int] = field(default_factory=dict)


def _plan_resources(
    layout: _Layout,
    node: NodeState,
    pods: Sequence[PodUsage] | None,
    record: ManagedRecord,
    conditions: Mapping[str, ConditionState],
    labels: Mapping[str, str],
    previous: Floor | None,
    now: float,
) -> _Resources:
    """The node's gates and pools, the resource changes to write and the names the managed
    record lists afterwards. Without a ledger (`pods` None) nothing changes and the record
    keeps what it listed."""
    if pods is None:
        kept = record.resources & layout.owned_resources
        return _Resources((), (), {}, kept, None, None)
    policy = layout.policy
    usage = node_usage(layout.budget_names, pods)
    if not (layout.owned_resources or record.resources):
        return _Resources((), (), {}, frozenset(), None, None, usage.held)
    wanted: dict[str, int] = {}
    gates: list[GateState] = []
    allocatable = node.allocatable
    for gate, (kind, what) in layout.gates:
        held = usage.held.get(gate.resource, 0)
        if kind == "avoid":
            state = conditions.get(str(what))
            is_open = not (state is not None and state.active)
            why = f"taint rule {what} {'holds' if not is_open else 'does not hold'}"
        elif kind == "reserved":
            is_open = str(what) not in labels
            why = f"node {'is' if not is_open else 'is not'} {what}=true"
        else:
            value = labels.get(layout.overcommit_label)
            if value is None:
                is_open = policy.spec.unscored_nodes == "allow"
                why = f"no {layout.overcommit_label} label (unscoredNodes: {policy.spec.unscored_nodes})"
            else:
                is_open = int(value) <= float(what)
                why = f"{layout.overcommit_label}={value} {'<=' if is_open else '>'} {what:g}"
        gates.append(_gate_state(gate, is_open, held, allocatable, node, why))
    floor = None
    pools: tuple[PoolState, ...] = ()
    if enforced(policy):
        start = (
            previous if previous is not None else observed_floor(policy, node.allocatable, usage)
        )
        floor = next_floor(layout.budget_names, usage, start, now)
        for lv, gate in layout.budget_gates:
            held = usage.held.get(gate.resource, 0)
            is_open = lv >= floor.gates
            why = f"floor {floor.gates:g} % {'<=' if is_open else '>'} budget {lv:g} %"
            gates.append(_gate_state(gate, is_open, held, allocatable, node, why))
        pools = tuple(
            PoolState(
                resource=p.resource,
                kind=p.kind,
                unit=p.unit,
                floor=p.floor,
                capacity=str(p.capacity),
                current=allocatable.get(p.resource),
                room=p.room,
                outside_limits=p.outside_limits,
                outside_pods=p.outside_pods,
                taken=p.taken,
            )
            for p in node_pools(layout.budget_names, allocatable, usage, floor.room)
        )
    for g in gates:
        wanted[g.resource] = int(g.capacity)
    for p in pools:
        wanted[p.resource] = int(p.capacity)
    # Names published before but no longer owned: kept at what pods hold, removed at nothing.
    retired = {}
    for name in sorted(record.resources - set(wanted)):
        if name in allocatable or name in node.capacity:
            held = usage.held.get(name, 0)
            retired[name] = held
    changes: dict[str, str | None] = {}
    for name, want in wanted.items():
        text = str(want)
        if not (
            _same_quantity(allocatable.get(name), text)
            and _same_quantity(node.capacity.get(name), text)
        ):
            changes[name] = text
    for name, held in retired.items():
        if held == 0:
            changes[name] = None
        elif not _same_quantity(allocatable.get(name), str(held)):
            changes[name] = str(held)
    published = frozenset(wanted) | {n for n, held in retired.items() if held > 0}
    return _Resources(pools, tuple(gates), changes, published, floor, usage, usage.held)


def _gate_state(
    gate: Gate,
    is_open: bool,
    held: int,
    allocatable: Mapping[str, str],
    node: NodeState,
    why: str,
) -> GateState:
    return GateState(
        resource=gate.resource,
        rule=gate.rule,
        open=is_open,
        held=held,
        capacity=str(gate_capacity(is_open, held, allocatable)),
        current=node.allocatable.get(gate.resource),
        why=why,
    )


def _score_dimension(
    d: _DimLayout,
    node: NodeState,
    fresh: Mapping[str, Mapping[str, float]],
    observations: Mapping[str, Mapping[str, Observation]],
    scores: Mapping[str, Mapping[str, float]],
    times: Mapping[str, str],
    now: float,
) -> DimensionScore:
    current = node.labels.get(d.key)
    obs = observations[d.name].get(node.name)
    if obs is not None:
        score = scores[d.name].get(node.name)
        if d.raw:
            label = str(quantise_raw(obs.value, d.step, _bucket(current), d.hysteresis))
        else:
            label = str(
                quantise(
                    score if score is not None else 0.0, d.step, _bucket(current), d.hysteresis
                )
            )
        return DimensionScore(
            dimension=d.name,
            status=DataStatus.FRESH if node.name in fresh.get(d.name, ()) else DataStatus.RETAINED,
            raw=obs.value,
            score=score,
            label=label,
            observed_at=obs.observed_at,
            age_s=max(0.0, now - obs.observed_at),
        )
    if current is None:
        return DimensionScore(d.name, DataStatus.MISSING, None, None, None, None, None)
    set_at = parse_rfc3339(times[d.name]) if d.name in times else None
    if set_at is not None and now - set_at <= d.ttl:
        bucket = _bucket(current)
        return DimensionScore(
            dimension=d.name,
            status=DataStatus.CARRIED,
            raw=None,
            score=float(bucket) if bucket is not None and not d.raw else None,
            label=current,
            observed_at=set_at,
            age_s=max(0.0, now - set_at),
        )
    return DimensionScore(
        dimension=d.name,
        status=DataStatus.STALE,
        raw=None,
        score=None,
        label=None,
        observed_at=set_at,
        age_s=None if set_at is None else max(0.0, now - set_at),
    )


def _carries_condition(node: NodeState, key: str, rule_name: str, prefix: str) -> bool:
    """Whether the node carries a taint rule's condition (its taint, or its label `true`) under
    `key`, or under an earlier prefix whose managed record lists that key."""

    def on(k: str) -> bool:
        return any(t.key == k for t in node.taints) or node.labels.get(k) == CONDITION_VALUE

    if on(key):
        return True
    for old in recorded_prefixes(node):
        if old == prefix:
            continue
        record = ManagedRecord.parse(node.annotations.get(old + MANAGED_SUFFIX))
        if (old + rule_name) in record.labels | record.taints and on(old + rule_name):
            return True
    return False


def _condition(
    r: _RuleLayout,
    node: NodeState,
    dims: Mapping[str, DimensionScore],
    memory: ScorerMemory,
    prefix: str,
) -> tuple[ConditionState, TaintCounter]:
    rule = r.rule
    entry = dims[rule.condition.dimension]
    previous = memory.counters.get((rule.name, node.name))
    if previous is None:
        # Continue from what the node carries (a restart or a new leader must not drop taints),
        # also under an earlier labelPrefix whose record lists the rule's key (an upgrade or a
        # prefix change must not lift an `unhealthy` taint for the cycles it takes to set).
        carried = _carries_condition(node, r.key, rule.name, prefix)
        previous = TaintCounter(active=carried)
    observed = entry.raw if rule.condition.source == "raw" else entry.score
    holds: bool | None = None
    if entry.status in (DataStatus.STALE, DataStatus.MISSING):
        # No usable data: no taint from it (DESIGN decision 5).
        counter = TaintCounter(active=False)
    elif entry.status is DataStatus.FRESH and observed is not None:
        holds = rule.condition.holds(observed, active=previous.active)
        if holds == previous.active:
            counter = TaintCounter(active=previous.active)
        else:
            streak = previous.streak + 1
            needed = rule.clear_after_cycles if previous.active else rule.set_after_cycles
            counter = (
                TaintCounter(active=holds)
                if streak >= needed
                else TaintCounter(previous.active, streak)
            )
    else:
        counter = previous  # retained or carried data: hold the state, do not count a cycle
    state = ConditionState(
        rule=rule.name,
        key=r.key,
        effect=rule.effect,
        status=entry.status,
        observed=observed,
        holds=holds,
        active=counter.active,
        streak=counter.streak,
    )
    return state, counter
