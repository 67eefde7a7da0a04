"""What `/explain` says, as typed values: built once by the producers (scorer/explain/nodes.py,
pod.py), rendered by `to_json()` for the HTTP answer and `steer scorer once --output json`, and
read back by `from_json()` where the CLI renders its tables from the scorer's answer
(scorer/explain/render.py).

Pure data: no planning, no I/O. Numbers are as answered (rounded by the producer); times are
RFC 3339 text. `to_json()` returns keys in the order the answer has always had, so the JSON is
unchanged; `from_json(x.to_json()) == x` for every type here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from steer.core.encoding import PreferenceTerm
from steer.core.scheduling import Taint

Json = Mapping[str, Any]


def _taint_from_text(text: str) -> Taint:
    """`key=value:Effect` or `key:Effect` (`str(Taint)`) back to the taint."""
    head, _, effect = text.rpartition(":")
    key, _, value = head.partition("=")
    return Taint(key, value, effect)


def _preference_from_k8s(term: Json) -> PreferenceTerm:
    (expr,) = term["preference"]["matchExpressions"]
    operator: Literal["In", "DoesNotExist"] = (
        "DoesNotExist" if expr["operator"] == "DoesNotExist" else "In"
    )
    return PreferenceTerm(
        weight=int(term["weight"]),
        key=str(expr["key"]),
        values=tuple(str(v) for v in expr.get("values") or ()),
        operator=operator,
    )


# ------------------------------------------------------------------------- /explain/nodes


@dataclass(frozen=True)
class DimensionStatus:
    """One dimension's query this cycle, across the cluster."""

    dimension: str
    label_key: str
    query: str
    unit: str | None  # of the raw values
    ok: bool  # this cycle's query succeeded
    stale: bool  # never succeeded, or the last success is older than the TTL
    last_success: str | None
    age_s: float | None
    nodes: int  # nodes labelled for it after this cycle
    samples: int
    unknown_nodes: int
    unknown_examples: tuple[str, ...]
    query_duration_s: float | None
    error: str | None
    error_kind: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "dimension": self.dimension,
            "labelKey": self.label_key,
            "query": self.query,
            "unit": self.unit,
            "ok": self.ok,
            "stale": self.stale,
            "lastSuccess": self.last_success,
            "ageSeconds": self.age_s,
            "nodes": self.nodes,
            "samples": self.samples,
            "unknownNodes": self.unknown_nodes,
            "unknownExamples": list(self.unknown_examples),
            "queryDurationSeconds": self.query_duration_s,
            "error": self.error,
            "errorKind": self.error_kind,
        }

    @classmethod
    def from_json(cls, obj: Json) -> DimensionStatus:
        return cls(
            dimension=obj["dimension"],
            label_key=obj["labelKey"],
            query=obj["query"],
            unit=obj.get("unit"),
            ok=obj["ok"],
            stale=obj["stale"],
            last_success=obj.get("lastSuccess"),
            age_s=obj.get("ageSeconds"),
            nodes=obj["nodes"],
            samples=obj["samples"],
            unknown_nodes=obj["unknownNodes"],
            unknown_examples=tuple(obj.get("unknownExamples") or ()),
            query_duration_s=obj.get("queryDurationSeconds"),
            error=obj.get("error"),
            error_kind=obj.get("errorKind"),
        )


@dataclass(frozen=True)
class DimensionCell:
    """One dimension on one node in the table: the raw value (unit in `DimensionStatus`), its
    0..100 score, how fresh its data is and its age."""

    dimension: str
    raw: float | None
    score: float | None
    status: str  # fresh, retained, carried, stale, missing (scorer.plan.DataStatus)
    age_s: float | None


@dataclass(frozen=True)
class NodeRow:
    """One node of `/explain/nodes` (and of `steer scorer once --output json`)."""

    node: str
    cells: tuple[DimensionCell, ...]  # in the policy's dimension order
    composites: Mapping[str, float | None]  # composite label key → score after the penalty
    hot_pods: int
    labels: Mapping[str, str]  # every owned label once the plan is written, sorted by key
    taints: tuple[Taint, ...]
    pending_label_changes: Mapping[str, str | None]  # set (value) or remove (None)
    pending_taint_change: bool
    pools: Mapping[str, str] = field(default_factory=dict)  # resource → capacity published
    gates: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "raw": {c.dimension: c.raw for c in self.cells},
            "score": {c.dimension: c.score for c in self.cells},
            "status": {c.dimension: c.status for c in self.cells},
            "ageSeconds": {c.dimension: c.age_s for c in self.cells},
            "composite": dict(self.composites),
            "hotPods": self.hot_pods,
            "labels": dict(self.labels),
            "taints": [str(t) for t in self.taints],
            "pendingLabelChanges": dict(self.pending_label_changes),
            "pendingTaintChange": self.pending_taint_change,
            **({"pools": dict(self.pools)} if self.pools else {}),
            **({"gates": dict(self.gates)} if self.gates else {}),
        }

    @classmethod
    def from_json(cls, obj: Json) -> NodeRow:
        raw, score = obj.get("raw") or {}, obj.get("score") or {}
        status, age = obj.get("status") or {}, obj.get("ageSeconds") or {}
        return cls(
            node=obj["node"],
            cells=tuple(
                DimensionCell(n, raw[n], score.get(n), status.get(n, ""), age.get(n)) for n in raw
            ),
            composites=dict(obj.get("composite") or {}),
            hot_pods=obj["hotPods"],
            labels=dict(obj.get("labels") or {}),
            taints=tuple(_taint_from_text(t) for t in obj.get("taints") or ()),
            pending_label_changes=dict(obj.get("pendingLabelChanges") or {}),
            pending_taint_change=obj["pendingTaintChange"],
            pools=dict(obj.get("pools") or {}),
            gates=dict(obj.get("gates") or {}),
        )


@dataclass(frozen=True)
class NodesTable:
    """`/explain/nodes`: every dimension's query status and every node's row."""

    policy_version: str
    planned_at: str | None
    dimensions: tuple[DimensionStatus, ...]
    nodes: tuple[NodeRow, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "policyVersion": self.policy_version,
            "plannedAt": self.planned_at,
            "dimensions": [d.to_json() for d in self.dimensions],
            "nodes": [n.to_json() for n in self.nodes],
        }

    @classmethod
    def from_json(cls, obj: Json) -> NodesTable:
        return cls(
            policy_version=obj["policyVersion"],
            planned_at=obj.get("plannedAt"),
            dimensions=tuple(DimensionStatus.from_json(d) for d in obj["dimensions"]),
            nodes=tuple(NodeRow.from_json(n) for n in obj["nodes"]),
        )


# -------------------------------------------------------------------- /explain/node/NAME


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

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "enforcement": self.enforcement,
            "podLedgerSynced": self.pod_ledger_synced,
            "pools": [p.to_json() for p in self.pools],
            "gates": [g.to_json() for g in self.gates],
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
        )


# ---------------------------------------------------------------------------- /explain/pod


@dataclass(frozen=True)
class Exclusion:
    """Why one node is not a place for the pod: the rule (a policy rule, a pod field, a taint,
    a resource) and the data behind it (JSON-shaped evidence: a gate, a pool, a label)."""

    rule: str
    reason: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "reason": self.reason, "data": dict(self.data)}

    @classmethod
    def from_json(cls, obj: Json) -> Exclusion:
        return cls(obj["rule"], obj["reason"], dict(obj.get("data") or {}))


@dataclass(frozen=True)
class NodeVerdict:
    """One node for the pod: allowed (ranked by the NodeAffinity weight it adds up) or excluded."""

    node: str
    exclusions: tuple[Exclusion, ...]
    steering_weight: int  # of the injected preference terms
    user_weight: int  # of the pod's own preferred terms
    rank: int | None = None  # allowed nodes only; ties share a rank
    soft_taints: tuple[str, ...] = ()  # PreferNoSchedule taints the pod does not tolerate

    @property
    def allowed(self) -> bool:
        return not self.exclusions


@dataclass(frozen=True)
class PodExplanation:
    """`/explain/pod`: where the pod may go once the webhook has steered it."""

    policy_version: str
    pod_class: str | None
    tenant: str | None
    preferences: tuple[PreferenceTerm, ...]
    gates: tuple[str, ...]  # the gate resources the steered pod requests
    verdicts: tuple[NodeVerdict, ...]  # allowed nodes by rank, then excluded nodes by name
    injected_tolerations: tuple[Mapping[str, Any], ...] = ()
    # Why the apiserver or the webhook's validation refuses the pod (then it goes nowhere).
    problems: tuple[str, ...] = ()
    steered: bool = True  # False: the namespace is not opted in, the webhook leaves the pod

    @property
    def allowed(self) -> tuple[NodeVerdict, ...]:
        return tuple(v for v in self.verdicts if v.allowed)

    @property
    def excluded(self) -> tuple[NodeVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.allowed)

    def to_json(self) -> dict[str, Any]:
        return {
            "policyVersion": self.policy_version,
            "podClass": self.pod_class,
            "tenant": self.tenant,
            "steered": self.steered,
            "preferences": [t.to_k8s() for t in self.preferences],
            "gates": list(self.gates),
            "injectedTolerations": [dict(t) for t in self.injected_tolerations],
            "problems": list(self.problems),
            "allowed": [
                {
                    "node": v.node,
                    "rank": v.rank,
                    "steeringWeight": v.steering_weight,
                    "userWeight": v.user_weight,
                    "softTaints": list(v.soft_taints),
                }
                for v in self.allowed
            ],
            "excluded": [
                {"node": v.node, "exclusions": [e.to_json() for e in v.exclusions]}
                for v in self.excluded
            ],
        }

    to_dict = to_json  # the name it had before the view model

    @classmethod
    def from_json(cls, obj: Json) -> PodExplanation:
        """The answer read back; the JSON carries no weights for excluded nodes (0 here)."""
        allowed = tuple(
            NodeVerdict(
                node=a["node"],
                exclusions=(),
                steering_weight=a["steeringWeight"],
                user_weight=a["userWeight"],
                rank=a.get("rank"),
                soft_taints=tuple(a.get("softTaints") or ()),
            )
            for a in obj.get("allowed") or ()
        )
        excluded = tuple(
            NodeVerdict(
                node=e["node"],
                exclusions=tuple(Exclusion.from_json(x) for x in e.get("exclusions") or ()),
                steering_weight=0,
                user_weight=0,
            )
            for e in obj.get("excluded") or ()
        )
        return cls(
            policy_version=obj["policyVersion"],
            pod_class=obj.get("podClass"),
            tenant=obj.get("tenant"),
            preferences=tuple(_preference_from_k8s(t) for t in obj.get("preferences") or ()),
            gates=tuple(obj.get("gates") or ()),
            verdicts=allowed + excluded,
            injected_tolerations=tuple(dict(t) for t in obj.get("injectedTolerations") or ()),
            problems=tuple(obj.get("problems") or ()),
            steered=obj.get("steered", True),
        )


# ------------------------------------------------------------------ what the replica adds


@dataclass(frozen=True)
class Served:
    """What the answering replica adds to every `/explain` answer (scorer/app.py): whether it
    is the leader (it writes what it explains), and notes on what it could not read."""

    leader: bool | None = None
    notes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: Json) -> Served:
        return cls(leader=obj.get("leader"), notes=tuple(obj.get("notes") or ()))
