"""Typed data the scorer passes between its pure and I/O parts.

`NodeState` is a Node object reduced to what scoring, writing and explaining need; the writer
builds it from the API's JSON and the planner never sees a raw dict.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from steer.core.dra.inventory import Inventory, NodeDevices
from steer.core.quantity import parse_amounts
from steer.core.scheduling import Taint


@dataclass(frozen=True)
class NodeState:
    """A node as last read from the API. `taints` keeps the API's order (foreign taints are
    written back exactly as found); `addresses` feeds the instance→node mapping."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    raw_taints: tuple[Mapping[str, Any], ...] = ()
    addresses: tuple[str, ...] = ()
    resource_version: str = ""
    unschedulable: bool = False
    allocatable: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    # DRA devices on the node (its ResourceSlices, steer/core/dra/inventory.py), counted by
    # every extended-resource name their DeviceClasses map: all of them, and those no claim
    # holds. Empty on a node without DRA devices; set by the scorer each cycle.
    devices: Mapping[str, int] = field(default_factory=dict)
    free_devices: Mapping[str, int] = field(default_factory=dict)
    # The same devices with their classes, for the device counters (steer/core/device_counter.py).
    dra: NodeDevices | None = field(default=None, compare=False, repr=False)
    # `allocatable` read once, where the node enters (every rule that weighs what the node
    # offers reads these); the texts stay for the writes, which compare what is published.
    amounts: Mapping[str, Fraction] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "amounts", parse_amounts(self.allocatable))

    @classmethod
    def from_k8s(cls, obj: Mapping[str, Any]) -> NodeState:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return cls(
            name=str(meta.get("name", "")),
            labels=MappingProxyType(dict(meta.get("labels") or {})),
            annotations=MappingProxyType(dict(meta.get("annotations") or {})),
            taints=tuple(Taint.from_k8s(t) for t in spec.get("taints") or ()),
            raw_taints=tuple(dict(t) for t in spec.get("taints") or ()),
            addresses=tuple(
                str(a["address"]) for a in status.get("addresses") or () if a.get("address")
            ),
            resource_version=str(meta.get("resourceVersion", "")),
            unschedulable=bool(spec.get("unschedulable", False)),
            allocatable=MappingProxyType(
                {str(k): str(v) for k, v in (status.get("allocatable") or {}).items()}
            ),
            capacity=MappingProxyType(
                {str(k): str(v) for k, v in (status.get("capacity") or {}).items()}
            ),
        )


@functools.lru_cache(maxsize=256)
def rfc3339(ts: float) -> str:
    """Unix seconds as the RFC 3339 UTC form Kubernetes uses in annotations and Leases.
    Cached: a cycle formats every node's observation time of each dimension, and all nodes of
    a dimension share one (40,000 calls, 8 distinct values, at 5,000 nodes)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float | None:
    """Unix seconds from an RFC 3339 time, or None when the text is not one."""
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def binding_time(pod: Mapping[str, Any]) -> float | None:
    """When the scheduler bound the pod: its PodScheduled condition's transition time."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return parse_rfc3339(str(cond.get("lastTransitionTime") or ""))
    return None


@dataclass(frozen=True)
class DeviceReadings:
    """One cycle's per-device reading (`spec.devices.heat`): values by device UUID, and why
    there are none (`error`) or fewer than sent (`problems`: dropped or held by the unit check)."""

    values: Mapping[str, float] = field(default_factory=dict)
    observed_at: float | None = None
    error: str | None = None
    problems: tuple[str, ...] = ()


def with_devices(nodes: Sequence[NodeState], inventory: Inventory) -> tuple[NodeState, ...]:
    """The nodes with the DRA devices `inventory` holds on each (NodeState.devices,
    free_devices and dra); a node's state is copied only when they changed."""
    out = []
    for node in nodes:
        held = inventory.node(node.name)
        if held is not None:
            devices, free = held.offered(), held.free_offered()
            if devices != node.devices or free != node.free_devices or node.dra is not held:
                node = dataclasses.replace(node, devices=devices, free_devices=free, dra=held)
        elif node.devices or node.dra is not None:
            node = dataclasses.replace(node, devices={}, free_devices={}, dra=None)
        out.append(node)
    return tuple(out)
