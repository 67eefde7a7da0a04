"""`/explain/node/NAME`: everything in the node's row plus each dimension's rule, the
composites, the taint conditions, the observed-at annotation and the budget pools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from steer.core.scheduling import Taint

Json = Mapping[str, Any]  # a JSON object as answered, read back


@dataclass(frozen=True)
class DimensionValue:
    """One dimension on one node with its rule: query, normalisation, weight, TTL, label."""

    dimension: str
    query: str
    node_label: str | None
    direction: str
    normalization: Mapping[str, Any]  # the policy's normalization block, as written
    weight: float
    publish: str
    step: int
    hysteresis: float
    ttl_s: float
    label_key: str
    status: str
    raw: float | None
    unit: str | None
    score: float | None
    label: str | None
    observed_at: str | None
    age_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "dimension": self.dimension,
            "query": self.query,
            "nodeLabel": self.node_label,
            "direction": self.direction,
            "normalization": dict(self.normalization),
            "weight": self.weight,
            "publish": self.publish,
            "step": self.step,
            "hysteresis": self.hysteresis,
            "ttlSeconds": self.ttl_s,
            "labelKey": self.label_key,
            "status": self.status,
            "raw": self.raw,
            "unit": self.unit,
            "score": self.score,
            "label": self.label,
            "observedAt": self.observed_at,
            "ageSeconds": self.age_s,
        }

    @classmethod
    def from_json(cls, obj: Json) -> DimensionValue:
        return cls(
            dimension=obj["dimension"],
            query=obj["query"],
            node_label=obj.get("nodeLabel"),
            direction=obj["direction"],
            normalization=dict(obj.get("normalization") or {}),
            weight=obj["weight"],
            publish=obj["publish"],
            step=obj["step"],
            hysteresis=obj["hysteresis"],
            ttl_s=obj["ttlSeconds"],
            label_key=obj["labelKey"],
            status=obj["status"],
            raw=obj.get("raw"),
            unit=obj.get("unit"),
            score=obj.get("score"),
            label=obj.get("label"),
            observed_at=obj.get("observedAt"),
            age_s=obj.get("ageSeconds"),
        )


@dataclass(frozen=True)
class CompositeValue:
    """A composite label: the weighted score, the hot-node penalty taken off, the label."""

    key: str
    pod_class: str | None  # None: the class-less composite
    score: float | None
    unpenalised: float | None
    hot_penalty: float
    label: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "podClass": self.pod_class,
            "score": self.score,
            "unpenalised": self.unpenalised,
            "hotPenalty": self.hot_penalty,
            "label": self.label,
        }

    @classmethod
    def from_json(cls, obj: Json) -> CompositeValue:
        return cls(
            obj["key"],
            obj.get("podClass"),
            obj.get("score"),
            obj.get("unpenalised"),
            obj["hotPenalty"],
            obj.get("label"),
        )


@dataclass(frozen=True)
class ConditionValue:
    """A taint rule on the node: its condition, what was observed, and the debounce state."""

    rule: str
    key: str
    effect: str
    condition: str  # e.g. "gpu-util (raw) > 90"
    status: str
    observed: float | None
    holds: bool | None  # None without a fresh observation this cycle
    active: bool
    streak: int

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "key": self.key,
            "effect": self.effect,
            "condition": self.condition,
            "status": self.status,
            "observed": self.observed,
            "holds": self.holds,
            "active": self.active,
            "streak": self.streak,
        }

    @classmethod
    def from_json(cls, obj: Json) -> ConditionValue:
        return cls(
            obj["rule"],
            obj["key"],
            obj["effect"],
            obj["condition"],
            obj["status"],
            obj.get("observed"),
            obj.get("holds"),
            obj["active"],
            obj["streak"],
        )


@dataclass(frozen=True)
class PoolView:
    """A budget pool on the node: capacity = max(taken, room - outside limits), in `unit`."""

    resource: str
    unit: str  # millicores or MiB
    floor: float  # the budget whose room is published, in %
    published: str  # what the node carries once the plan is written
    read_at_planning: str | None  # what its status held when read
    capacity: str
    room: int
    outside_limits: int
    outside_pods: int
    taken: int  # requested by the pods in the pool
    free: int
    why: str
    # The lowest budget of a pool pod on the node (None: none) and by how much the node's
    # limits exceed its room: pods kube-steer does not steer that landed between two
    # publications (steer/core/budget.py). 0 while every budget holds.
    promise: float | None = None
    overrun: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "unit": self.unit,
            "floor": self.floor,
            "published": self.published,
            "readAtPlanning": self.read_at_planning,
            "capacity": self.capacity,
            "room": self.room,
            "outsideLimits": self.outside_limits,
            "outsidePods": self.outside_pods,
            "taken": self.taken,
            "free": self.free,
            "why": self.why,
            "promise": self.promise,
            "overrun": self.overrun,
        }

    @classmethod
    def from_json(cls, obj: Json) -> PoolView:
        return cls(
            obj["resource"],
            obj["unit"],
            obj["floor"],
            obj["published"],
            obj.get("readAtPlanning"),
            obj["capacity"],
            obj["room"],
            obj["outsideLimits"],
            obj["outsidePods"],
            obj["taken"],
            obj["free"],
            obj["why"],
            obj.get("promise"),
            obj.get("overrun", 0),
        )


@dataclass(frozen=True)
class GateView:
    """A gate on the node: open (capacity offered) or closed (only what bound pods hold)."""

    resource: str
    rule: str
    open: bool
    published: str
    read_at_planning: str | None
    held: int
    free: int
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "rule": self.rule,
            "open": self.open,
            "published": self.published,
            "readAtPlanning": self.read_at_planning,
            "held": self.held,
            "free": self.free,
            "why": self.why,
        }

    @classmethod
    def from_json(cls, obj: Json) -> GateView:
        return cls(
            obj["resource"],
            obj["rule"],
            obj["open"],
            obj["published"],
            obj.get("readAtPlanning"),
            obj["held"],
            obj["free"],
            obj["why"],
        )


@dataclass(frozen=True)
class CounterView:
    """A pod class's device counter on the node (steer/core/device_counter.py): capacity =
    max(held, devices of the class), published only where the node offers the class."""

    resource: str
    pod_class: str
    published: str | None  # what the node carries once the plan is written (None: nothing)
    devices: int  # DRA and device-plugin devices of the class, as the capacity counts them
    held: int  # requested by the node's bound pods
    free: int
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "podClass": self.pod_class,
            "published": self.published,
            "devices": self.devices,
            "held": self.held,
            "free": self.free,
            "why": self.why,
        }

    @classmethod
    def from_json(cls, obj: Json) -> CounterView:
        return cls(
            obj["resource"],
            obj["podClass"],
            obj.get("published"),
            obj["devices"],
            obj["held"],
            obj["free"],
            obj["why"],
        )


@dataclass(frozen=True)
class FloorView:
    """The budget floor published: budgets below `gates` % closed, room at 100 + `room` %."""

    gates: float
    room: float
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"gates": self.gates, "room": self.room, "why": self.why}

    @classmethod
    def from_json(cls, obj: Json) -> FloorView:
        return cls(obj["gates"], obj["room"], obj["why"])


@dataclass(frozen=True)
class BudgetPools:
    """The resources the scorer publishes on the node and what decided them."""

    enforcement: str
    pod_ledger_synced: bool
    pools: tuple[PoolView, ...]
    gates: tuple[GateView, ...]
    pending_resource_changes: Mapping[str, str | None]
    floor: FloorView | None = None  # None without enforcement or without a pod ledger
    # Pool pods per budget level ("25" → 3), and those bursting; only with a floor.
    members: Mapping[str, int] = field(default_factory=dict)
    bursting: Mapping[str, int] = field(default_factory=dict)
    counters: tuple[CounterView, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "enforcement": self.enforcement,
            "podLedgerSynced": self.pod_ledger_synced,
            "pools": [p.to_json() for p in self.pools],
            "gates": [g.to_json() for g in self.gates],
            "counters": [c.to_json() for c in self.counters],
            "pendingResourceChanges": dict(self.pending_resource_changes),
        }
        if self.floor is not None:
            out["floor"] = self.floor.to_json()
            out["members"] = dict(self.members)
            out["bursting"] = dict(self.bursting)
        return out

    @classmethod
    def from_json(cls, obj: Json) -> BudgetPools:
        floor = obj.get("floor")
        return cls(
            enforcement=obj["enforcement"],
            pod_ledger_synced=obj["podLedgerSynced"],
            pools=tuple(PoolView.from_json(p) for p in obj.get("pools") or ()),
            gates=tuple(GateView.from_json(g) for g in obj.get("gates") or ()),
            pending_resource_changes=dict(obj.get("pendingResourceChanges") or {}),
            floor=FloorView.from_json(floor) if floor is not None else None,
            members=dict(obj.get("members") or {}),
            bursting=dict(obj.get("bursting") or {}),
            counters=tuple(CounterView.from_json(c) for c in obj.get("counters") or ()),
        )


@dataclass(frozen=True)
class DeviceView:
    """One DRA device of the node (a ResourceSlice's), the DeviceClasses that select it, the
    claim holding it, and its per-device reading (`spec.devices.heat`, joined on its UUID)."""

    device: str  # driver/pool/name
    classes: tuple[str, ...]
    uuid: str | None
    product: str | None
    memory_bytes: int | None
    free: bool  # no claim holds it and no used-up shared counter blocks it
    claim: str | None  # namespace/name of the claim holding it
    pods: tuple[str, ...]  # the pods the claim is reserved for
    reading: float | None  # None: no per-device reading for it
    hot: bool | None  # its reading meets the heat rule's condition; None: not known

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "classes": list(self.classes),
            "uuid": self.uuid,
            "product": self.product,
            "memoryBytes": self.memory_bytes,
            "free": self.free,
            "claim": self.claim,
            "pods": list(self.pods),
            "reading": self.reading,
            "hot": self.hot,
        }

    @classmethod
    def from_json(cls, obj: Json) -> DeviceView:
        return cls(
            device=obj["device"],
            classes=tuple(obj.get("classes") or ()),
            uuid=obj.get("uuid"),
            product=obj.get("product"),
            memory_bytes=obj.get("memoryBytes"),
            free=obj["free"],
            claim=obj.get("claim"),
            pods=tuple(obj.get("pods") or ()),
            reading=obj.get("reading"),
            hot=obj.get("hot"),
        )


@dataclass(frozen=True)
class NodeDetail:
    """`/explain/node/NAME`: everything in the row plus each dimension's rule, the composites,
    the taint conditions, the observed-at annotation and the budget pools."""

    node: str
    policy_version: str
    planned_at: str | None
    dimensions: tuple[DimensionValue, ...]
    composites: tuple[CompositeValue, ...]
    hot_pods: int
    conditions: tuple[ConditionValue, ...]
    labels: Mapping[str, str]  # sorted by key
    taints: tuple[Taint, ...]
    pending_label_changes: Mapping[str, str | None]
    pending_taint_change: bool
    observed_at_annotation: str | None
    budget_pools: BudgetPools
    # Consolidation (steer/core/policy/energy.py): whether the node runs a movable pod (None
    # without a pod ledger), and why it is a drain candidate (None: it is not).
    active: bool | None = None
    drain_candidate: str | None = None
    devices: tuple[DeviceView, ...] = ()  # its DRA devices, in slice order

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "policyVersion": self.policy_version,
            "plannedAt": self.planned_at,
            "dimensions": [d.to_json() for d in self.dimensions],
            "composites": [c.to_json() for c in self.composites],
            "hotPods": self.hot_pods,
            "conditions": [c.to_json() for c in self.conditions],
            "labels": dict(self.labels),
            "taints": [t.to_k8s() for t in self.taints],
            "pendingLabelChanges": dict(self.pending_label_changes),
            "pendingTaintChange": self.pending_taint_change,
            "observedAtAnnotation": self.observed_at_annotation,
            "budgetPools": self.budget_pools.to_json(),
            "active": self.active,
            "drainCandidate": self.drain_candidate,
            "devices": [d.to_json() for d in self.devices],
        }

    @classmethod
    def from_json(cls, obj: Json) -> NodeDetail:
        return cls(
            node=obj["node"],
            policy_version=obj["policyVersion"],
            planned_at=obj.get("plannedAt"),
            dimensions=tuple(DimensionValue.from_json(d) for d in obj["dimensions"]),
            composites=tuple(CompositeValue.from_json(c) for c in obj["composites"]),
            hot_pods=obj["hotPods"],
            conditions=tuple(ConditionValue.from_json(c) for c in obj["conditions"]),
            labels=dict(obj.get("labels") or {}),
            taints=tuple(Taint.from_k8s(t) for t in obj.get("taints") or ()),
            pending_label_changes=dict(obj.get("pendingLabelChanges") or {}),
            pending_taint_change=obj["pendingTaintChange"],
            observed_at_annotation=obj.get("observedAtAnnotation"),
            budget_pools=BudgetPools.from_json(obj["budgetPools"]),
            active=obj.get("active"),
            drain_candidate=obj.get("drainCandidate"),
            devices=tuple(DeviceView.from_json(d) for d in obj.get("devices") or ()),
        )
