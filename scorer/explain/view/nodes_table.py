"""`/explain/nodes` (and `steer scorer once --output json`): every dimension's query status and
every node's row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from steer.core.datacheck import DataProblem
from steer.core.scheduling import Taint

Json = Mapping[str, Any]  # a JSON object as answered, read back


def _taint_from_text(text: str) -> Taint:
    """`key=value:Effect` or `key:Effect` (`str(Taint)`) back to the taint."""
    head, _, effect = text.rpartition(":")
    key, _, value = head.partition("=")
    return Taint(key, value, effect)


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
    expected_nodes: int | None = None  # what the dimension's coverage expects (None: any)
    problems: tuple[DataProblem, ...] = ()  # what its data lacks, each with the fix
    forms: tuple[tuple[str, int], ...] = ()  # the exporter forms read, with their nodes

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
            "expectedNodes": self.expected_nodes,
            "problems": [p.to_json() for p in self.problems],
            "forms": [{"form": f, "nodes": n} for f, n in self.forms],
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
            expected_nodes=obj.get("expectedNodes"),
            problems=tuple(DataProblem.from_json(p) for p in obj.get("problems") or ()),
            forms=tuple((f["form"], f["nodes"]) for f in obj.get("forms") or ()),
        )


@dataclass(frozen=True)
class DimensionCell:
    """One dimension on one node in the table: the raw value (unit in `DimensionStatus`), its
    0..100 score, how fresh its data is and its age."""

    dimension: str
    raw: float | None
    score: float | None
    status: str  # fresh, retained, carried, stale, missing (scorer.cycle.plan.DataStatus)
    age_s: float | None


@dataclass(frozen=True)
class PoolCell:
    """A budget pool on one node in the table, in its unit (millicores, MiB): the room its
    budget leaves, what the pool's pods take of it and what a new pod may still request."""

    resource: str
    unit: str
    room: int
    taken: int
    free: int

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "room": self.room, "taken": self.taken, "free": self.free}


@dataclass(frozen=True)
class DeviceCount:
    """DRA devices of one DeviceClass, on one node (`NodeRow.devices`) or in the cluster
    (`NodesTable.devices`): how many, held by claims, free, and free but hot (their
    per-device reading meets the heat rule; 0 without one). In the cluster, also the nodes
    whose devices of the class are all free and the share of free devices stranded on nodes
    where some are held (0..1)."""

    device_class: str
    total: int
    allocated: int
    free: int
    hot_free: int = 0
    whole_free_nodes: int | None = None  # cluster only
    fragmentation: float | None = None  # cluster only

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "deviceClass": self.device_class,
            "total": self.total,
            "allocated": self.allocated,
            "free": self.free,
            "hotFree": self.hot_free,
        }
        if self.whole_free_nodes is not None:
            out["wholeFreeNodes"] = self.whole_free_nodes
            out["fragmentation"] = self.fragmentation
        return out

    @classmethod
    def from_json(cls, obj: Json) -> DeviceCount:
        return cls(
            device_class=obj["deviceClass"],
            total=obj["total"],
            allocated=obj["allocated"],
            free=obj["free"],
            hot_free=obj.get("hotFree", 0),
            whole_free_nodes=obj.get("wholeFreeNodes"),
            fragmentation=obj.get("fragmentation"),
        )


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
    pool_usage: tuple[PoolCell, ...] = ()  # one per pool in `pools`
    devices: tuple[DeviceCount, ...] = ()  # its DRA devices by DeviceClass

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
            **(
                {"poolUsage": {p.resource: p.to_json() for p in self.pool_usage}}
                if self.pool_usage
                else {}
            ),
            **({"devices": [d.to_json() for d in self.devices]} if self.devices else {}),
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
            pool_usage=tuple(
                PoolCell(r, p["unit"], p["room"], p["taken"], p["free"])
                for r, p in (obj.get("poolUsage") or {}).items()
            ),
            devices=tuple(DeviceCount.from_json(d) for d in obj.get("devices") or ()),
        )


@dataclass(frozen=True)
class NodesTable:
    """`/explain/nodes`: every dimension's query status and every node's row."""

    policy_version: str
    planned_at: str | None
    dimensions: tuple[DimensionStatus, ...]
    nodes: tuple[NodeRow, ...]
    devices: tuple[DeviceCount, ...] = ()  # DRA devices in the cluster, by DeviceClass
    device_problems: tuple[str, ...] = ()  # what the DRA inventory or the device reading lacks

    def to_json(self) -> dict[str, Any]:
        return {
            "policyVersion": self.policy_version,
            "plannedAt": self.planned_at,
            "dimensions": [d.to_json() for d in self.dimensions],
            "nodes": [n.to_json() for n in self.nodes],
            "devices": [d.to_json() for d in self.devices],
            "deviceProblems": list(self.device_problems),
        }

    @classmethod
    def from_json(cls, obj: Json) -> NodesTable:
        return cls(
            policy_version=obj["policyVersion"],
            planned_at=obj.get("plannedAt"),
            dimensions=tuple(DimensionStatus.from_json(d) for d in obj["dimensions"]),
            nodes=tuple(NodeRow.from_json(n) for n in obj["nodes"]),
            devices=tuple(DeviceCount.from_json(d) for d in obj.get("devices") or ()),
            device_problems=tuple(obj.get("deviceProblems") or ()),
        )
