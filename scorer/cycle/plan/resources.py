"""Gates and budget pools on one node: the extended resources the scorer publishes in the
node's status, planned from the pods bound to it (steer/core/gates.py, budget.py).

Never below what those pods hold, so no kubelet restart refuses a running pod; without a
complete pod ledger nothing is set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scorer.cycle.plan.layout import CycleLayout
from scorer.cycle.plan.model import ConditionState, GateState, PoolState
from scorer.cycle.plan.record import ManagedRecord
from scorer.model import NodeState
from steer.core.budget import (
    Floor,
    NodeUsage,
    PodUsage,
    enforced,
    next_floor,
    node_pools,
    node_usage,
    observed_floor,
)
from steer.core.device_counter import CounterCapacity, NodeDeviceCount, counter_capacity
from steer.core.gates import Gate, gate_capacity, open_capacity
from steer.core.quantity import QuantityError, parse_quantity


def _same_quantity(current: str | None, want: str) -> bool:
    """The apiserver stores quantities in canonical form ("1000" comes back as "1k")."""
    if current is None:
        return False
    try:
        return parse_quantity(current) == parse_quantity(want)
    except QuantityError:
        return False


@dataclass(frozen=True)
class PlannedResources:
    pools: tuple[PoolState, ...]
    gates: tuple[GateState, ...]
    changes: dict[str, str | None]
    published: frozenset[str]  # resource names the managed record lists afterwards
    floor: Floor | None
    usage: NodeUsage | None
    held: Mapping[str, int] = field(default_factory=dict)
    counters: tuple[CounterCapacity, ...] = ()


# The last plan of each node's resources with what it was planned from. A steady cycle plans
# every node again with nothing changed: the same Node (the watch replaces the object when it
# changes), the same pods (the ledger regroups them only after a change), the same gates'
# inputs and floor. Summing 20 pods and building a node's pools and gates cost about half of
# its plan (measured at 5,000 nodes, 100,000 pods); an unchanged node reuses the last answer.
_LAST: dict[str, tuple[tuple[Any, ...], PlannedResources]] = {}
_LAST_MAX = 100_000


def plan_resources(
    layout: CycleLayout,
    node: NodeState,
    pods: Sequence[PodUsage] | None,
    record: ManagedRecord,
    conditions: Mapping[str, ConditionState],
    labels: Mapping[str, str],
    previous: Floor | None,
    now: float,
) -> PlannedResources:
    """The node's gates and pools, the resource changes to write and the names the managed
    record lists afterwards. Without a ledger (`pods` None) nothing changes and the record
    keeps what it listed.

    The answer is that of the last call for the node when the inputs are the same objects
    (policy, Node, pods; the record is the Node's) and equal (what the gates read, the floor):
    `now` matters only while a floor's rise settles, and such an answer is not reused."""
    inputs = tuple(
        (conditions[str(what)].active if str(what) in conditions else None)
        if kind == "avoid"
        else (str(what) in labels if kind == "reserved" else labels.get(layout.overcommit_label))
        for _gate, (kind, what) in layout.gates
    )
    held = _LAST.get(node.name)
    if held is not None:
        key, answer = held
        if (
            key[0] is layout.policy
            and key[1] is node
            and key[2] is pods
            and key[3] == inputs
            and key[4] == previous
        ):
            return answer
    answer = _plan_resources(layout, node, pods, record, conditions, labels, previous, now)
    floor = answer.floor
    if floor is None or (floor == previous and floor.room >= floor.gates):
        if len(_LAST) >= _LAST_MAX:
            _LAST.clear()
        _LAST[node.name] = ((layout.policy, node, pods, inputs, previous), answer)
    else:
        _LAST.pop(node.name, None)
    return answer


def _plan_resources(
    layout: CycleLayout,
    node: NodeState,
    pods: Sequence[PodUsage] | None,
    record: ManagedRecord,
    conditions: Mapping[str, ConditionState],
    labels: Mapping[str, str],
    previous: Floor | None,
    now: float,
) -> PlannedResources:
    if pods is None:
        kept = record.resources & layout.owned_resources
        return PlannedResources((), (), {}, kept, None, None)
    policy = layout.policy
    usage = node_usage(layout.budget_names, pods)
    if not (layout.owned_resources or record.resources):
        return PlannedResources((), (), {}, frozenset(), None, None, usage.held)
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
        gates.append(_gate_state(gate, is_open, held, node, why))
    floor = None
    pools: tuple[PoolState, ...] = ()
    if enforced(policy):
        start = previous if previous is not None else observed_floor(policy, node.amounts, usage)
        floor = next_floor(layout.budget_names, usage, start, now)
        for lv, gate in layout.budget_gates:
            held = usage.held.get(gate.resource, 0)
            is_open = lv >= floor.gates
            why = f"floor {floor.gates:g} % {'<=' if is_open else '>'} budget {lv:g} %"
            gates.append(_gate_state(gate, is_open, held, node, why))
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
                promise=p.promise,
                overrun=p.overrun,
            )
            for p in node_pools(layout.budget_names, node.amounts, usage, floor.room)
        )
    for g in gates:
        wanted[g.resource] = int(g.capacity)
    for p in pools:
        wanted[p.resource] = int(p.capacity)
    counters = _counters(layout, node, usage.held)
    for c in counters:
        if c.offered:  # elsewhere only what pods hold stays, as for a retired name
            wanted[c.resource] = c.capacity
    # Names published before but no longer owned (the record lists them, or pods hold them
    # under a former prefix): kept at what pods hold, removed at nothing.
    former = {n for n in usage.held if n.startswith(layout.former_prefixes)}
    retired = {}
    for name in sorted((record.resources | former) - set(wanted)):
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
    return PlannedResources(
        pools, tuple(gates), changes, published, floor, usage, usage.held, counters
    )


def _counters(
    layout: CycleLayout, node: NodeState, held: Mapping[str, int]
) -> tuple[CounterCapacity, ...]:
    """Each device counter on the node: its DRA devices (the classes' and those the classes'
    `requestsAny` map, each once) and the device plugin's, never below what is held."""
    if not layout.counters:
        return ()
    pods = open_capacity(node.amounts)
    out = []
    for counter in layout.counters:
        dra = NodeDeviceCount()
        if node.dra is not None:
            dra = NodeDeviceCount(*node.dra.count_any(counter.device_classes, counter.requests_any))
        out.append(
            counter_capacity(counter, dra, node.amounts, held.get(counter.resource, 0), pods)
        )
    return tuple(out)


def _gate_state(
    gate: Gate,
    is_open: bool,
    held: int,
    node: NodeState,
    why: str,
) -> GateState:
    return GateState(
        resource=gate.resource,
        rule=gate.rule,
        open=is_open,
        held=held,
        capacity=str(gate_capacity(is_open, held, node.amounts)),
        current=node.allocatable.get(gate.resource),
        why=why,
    )
