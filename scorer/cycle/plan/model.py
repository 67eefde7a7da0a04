"""What a cycle's plan says, and what the planner remembers between cycles.

Frozen data only: `scorer.cycle.plan.cycle.plan_cycle` builds them, the writer, `/explain` and the
cluster score read them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from steer.core.budget import Floor
from steer.core.datacheck import DataProblem
from steer.core.datacheck.problems import unreadable
from steer.core.device_counter import CounterCapacity
from steer.core.scheduling import Taint


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
    # Drain candidates of the last full cycle: node → why (scorer/cycle/plan/drain.py).
    drain: Mapping[str, str] = field(default_factory=dict)
    # Each node's allocatable cores as last planned: a replan of some nodes still scores the
    # energy idleWatts dimension per core over all of them.
    cores: Mapping[str, float] = field(default_factory=dict)


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
    # The lowest budget of a pool pod there (None: no pool pod), and by how much the node's
    # limits exceed its room (steer/core/budget.py PoolCapacity.overrun), in `unit`.
    promise: float | None = None
    overrun: int = 0

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
    # The device counters and what decided each (published only where `offered`).
    counters: tuple[CounterCapacity, ...] = ()
    # The budget floor published (None without enforcement or without a pod ledger), and the
    # node's pool pods per budget level, bursting or not.
    floor: Floor | None = None
    members: Mapping[float, int] = field(default_factory=dict)
    bursting: Mapping[float, int] = field(default_factory=dict)
    # What the node's bound pods request of every scalar resource (from the pod ledger).
    held: Mapping[str, int] = field(default_factory=dict)
    # Consolidation: whether the node runs a movable pod (None without a pod ledger), and why
    # it is a drain candidate (None: it is not).
    active: bool | None = None
    drain_reason: str | None = None

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
    # Nodes the dimension's coverage expects (None: any), and what its data lacks this cycle
    # (steer/core/datacheck): shown by /readyz, /explain and the policy's status.
    expected: int | None = None
    problems: tuple[DataProblem, ...] = ()
    # The exporter forms this cycle's answer was read from, with their nodes (observe.py).
    forms: tuple[tuple[str, int], ...] = ()


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

    @property
    def data_forms(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Each dimension with the exporter forms its reading found (the DataReady condition
        names them); dimensions whose query names no form are left out."""
        return tuple(
            (d.dimension, tuple(form for form, _nodes in d.forms))
            for d in self.dimensions
            if d.forms
        )

    @property
    def data_problems(self) -> tuple[DataProblem, ...]:
        """Every dimension's data problems; a failed read counts as one (`unreadable`)."""
        out: list[DataProblem] = []
        for d in self.dimensions:
            if d.problems:
                out.extend(d.problems)
            elif not d.ok and d.error is not None:
                out.append(unreadable(d.dimension, d.error_kind or "response", d.error))
        return tuple(out)
