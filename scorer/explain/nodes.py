"""Why a node carries its labels: a `CyclePlan` into the node views of `/explain/nodes` and
`/explain/node/NAME` (scorer/explain/view/nodes_table.py, node_detail.py).

Pure: the plan and the policy in, frozen views out. Values are rounded here, once, for every
renderer.
"""

from __future__ import annotations

from typing import Any

from scorer.cycle.plan import CyclePlan, DimensionSummary, GateState, NodePlan, PoolState
from scorer.explain.view import (
    BudgetPools,
    CompositeValue,
    ConditionValue,
    CounterView,
    DeviceCount,
    DeviceView,
    DimensionCell,
    DimensionStatus,
    DimensionValue,
    FloorView,
    GateView,
    NodeDetail,
    NodeRow,
    NodesTable,
    PoolCell,
    PoolView,
)
from scorer.model import DeviceReadings, rfc3339
from steer.core.device_counter import CounterCapacity
from steer.core.dra.inventory import Device, Inventory, NodeDevices
from steer.core.policy import Policy
from steer.core.steering import dimension_key


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def time_text(ts: float | None) -> str | None:
    return None if ts is None else rfc3339(ts)


class DeviceHeatFacts:
    """The per-device reading (`spec.devices.heat`) as the views need it: value by UUID, and
    whether a value meets the heat rule's condition."""

    def __init__(self, policy: Policy, readings: DeviceReadings | None) -> None:
        heat = policy.spec.devices.heat
        self.values = dict(readings.values) if readings is not None else {}
        self._condition = None if heat is None else policy.taint_rule(heat.taint).condition

    def reading(self, device: Device) -> float | None:
        return None if device.uuid is None else self.values.get(device.uuid)

    def hot(self, device: Device) -> bool | None:
        value = self.reading(device)
        if value is None or self._condition is None:
            return None
        return self._condition.holds(value)


def device_counts(held: NodeDevices, heat: DeviceHeatFacts) -> tuple[DeviceCount, ...]:
    """A node's devices by DeviceClass: total, held, free, and free but hot."""
    out = []
    for device_class in sorted(held.device_classes()):
        counts = held.counts(device_class)
        hot_free = sum(
            1
            for d in held.devices
            if device_class in held.classes_of(d) and held.is_free(d) and heat.hot(d)
        )
        out.append(DeviceCount(device_class, counts.total, counts.allocated, counts.free, hot_free))
    return tuple(out)


def cluster_device_counts(
    inventory: Inventory, rows: tuple[NodeRow, ...]
) -> tuple[DeviceCount, ...]:
    """The cluster's devices by DeviceClass (Inventory.summary), with the hot free devices the
    rows counted."""
    hot: dict[str, int] = {}
    for row in rows:
        for count in row.devices:
            hot[count.device_class] = hot.get(count.device_class, 0) + count.hot_free
    out = []
    for device_class in inventory.device_classes():
        s = inventory.summary(device_class)
        out.append(
            DeviceCount(
                device_class,
                s.total,
                s.allocated,
                s.free,
                hot.get(device_class, 0),
                s.whole_free_nodes,
                rounded(s.fragmentation, 4),
            )
        )
    return tuple(out)


def device_views(held: NodeDevices, heat: DeviceHeatFacts) -> tuple[DeviceView, ...]:
    """Each DRA device of a node: its classes, the claim holding it and its reading."""
    views = []
    for device in held.devices:
        claim = held.allocated_to(device)
        views.append(
            DeviceView(
                device=str(device.key),
                classes=tuple(sorted(held.classes_of(device))),
                uuid=device.uuid,
                product=device.product,
                memory_bytes=device.memory,
                free=held.is_free(device),
                claim=None if claim is None else f"{claim.namespace}/{claim.name}",
                pods=() if claim is None else tuple(p.name for p in claim.pods),
                reading=rounded(heat.reading(device)),
                hot=heat.hot(device),
            )
        )
    return tuple(views)


def row_view(
    plan: NodePlan, devices: NodeDevices | None = None, heat: DeviceHeatFacts | None = None
) -> NodeRow:
    """One line of `/explain/nodes`: raw values, scores, composites, labels, taints, ages,
    each budget pool's room, take and what is free, and its DRA devices by class."""
    return NodeRow(
        node=plan.node,
        cells=tuple(
            DimensionCell(
                dimension=n,
                raw=rounded(d.raw),
                score=rounded(d.score, 1),
                status=str(d.status),
                age_s=rounded(d.age_s, 1),
            )
            for n, d in plan.dimensions.items()
        ),
        composites={c.key: rounded(c.score, 1) for c in plan.composites},
        hot_pods=plan.hot_pods,
        labels=dict(sorted(plan.labels.items())),
        taints=plan.taints,
        pending_label_changes=dict(plan.label_changes),
        pending_taint_change=plan.taints_changed,
        pools={p.resource: p.capacity for p in plan.pools},
        gates={g.resource: g.capacity for g in plan.gates},
        pool_usage=tuple(PoolCell(p.resource, p.unit, p.room, p.taken, p.free) for p in plan.pools),
        devices=() if devices is None or heat is None else device_counts(devices, heat),
    )


def node_row(plan: NodePlan) -> dict[str, Any]:
    """`row_view(plan)` as JSON (`steer scorer once --output json`)."""
    return row_view(plan).to_json()


def dimension_status(summary: DimensionSummary) -> DimensionStatus:
    return DimensionStatus(
        dimension=summary.dimension,
        label_key=summary.label_key,
        query=summary.query,
        unit=summary.unit,
        ok=summary.ok,
        stale=summary.stale,
        last_success=time_text(summary.last_success),
        age_s=rounded(summary.age_s, 1),
        nodes=summary.nodes,
        samples=summary.samples,
        unknown_nodes=summary.unknown,
        unknown_examples=summary.unknown_examples,
        query_duration_s=rounded(summary.duration_s, 4),
        error=summary.error,
        error_kind=summary.error_kind,
        expected_nodes=summary.expected,
        problems=summary.problems,
        forms=summary.forms,
    )


def nodes_view(
    cycle: CyclePlan,
    policy: Policy | None = None,
    inventory: Inventory | None = None,
    readings: DeviceReadings | None = None,
) -> NodesTable:
    """`/explain/nodes`; with the DRA inventory (and the policy, for the heat rule), each
    node's devices by class and the cluster's."""
    if policy is None or inventory is None:
        rows = tuple(row_view(p) for p in cycle.nodes)
        return NodesTable(
            policy_version=cycle.policy_version,
            planned_at=time_text(cycle.planned_at),
            dimensions=tuple(dimension_status(d) for d in cycle.dimensions),
            nodes=rows,
        )
    heat = DeviceHeatFacts(policy, readings)
    rows = tuple(row_view(p, inventory.node(p.node), heat) for p in cycle.nodes)
    problems = list(inventory.problems)
    if readings is not None:
        problems += [f"spec.devices.heat: {p}" for p in (readings.error, *readings.problems) if p]
    return NodesTable(
        policy_version=cycle.policy_version,
        planned_at=time_text(cycle.planned_at),
        dimensions=tuple(dimension_status(d) for d in cycle.dimensions),
        nodes=rows,
        devices=cluster_device_counts(inventory, rows),
        device_problems=tuple(problems),
    )


def nodes_table(
    cycle: CyclePlan,
    policy: Policy | None = None,
    inventory: Inventory | None = None,
    readings: DeviceReadings | None = None,
) -> dict[str, Any]:
    """`/explain/nodes` as JSON."""
    return nodes_view(cycle, policy, inventory, readings).to_json()


def condition_text(policy: Policy, rule_name: str) -> str:
    cond = policy.taint_rule(rule_name).condition
    return f"{cond.dimension} ({cond.source}) {cond.operator} {cond.value:g}"


def detail_view(
    policy: Policy,
    cycle: CyclePlan,
    name: str,
    inventory: Inventory | None = None,
    readings: DeviceReadings | None = None,
) -> NodeDetail | None:
    """`/explain/node/NAME`: everything in the row plus each dimension's query, weight, TTL,
    and each of its DRA devices."""
    plan = cycle.node(name)
    if plan is None:
        return None
    held = None if inventory is None else inventory.node(name)
    dims = []
    for dim in policy.spec.dimensions:
        entry = plan.dimensions.get(dim.name)
        if entry is None:
            continue
        dims.append(
            DimensionValue(
                dimension=dim.name,
                query=dim.what,
                node_label=dim.node_label,
                direction=str(dim.direction),
                normalization=dim.normalization.model_dump(by_alias=True, exclude_none=True),
                weight=dim.weight,
                publish=dim.publish,
                step=policy.step_of(dim),
                hysteresis=policy.hysteresis_of(dim),
                ttl_s=policy.ttl_of(dim),
                label_key=dimension_key(policy, dim),
                status=str(entry.status),
                raw=entry.raw,
                unit=dim.raw_unit,
                score=rounded(entry.score, 3),
                label=entry.label,
                observed_at=time_text(entry.observed_at),
                age_s=rounded(entry.age_s, 1),
            )
        )
    conditions = tuple(
        ConditionValue(
            rule=c.rule,
            key=c.key,
            effect=c.effect,
            condition=condition_text(policy, c.rule),
            status=str(c.status),
            observed=rounded(c.observed),
            holds=c.holds,
            active=c.active,
            streak=c.streak,
        )
        for c in plan.conditions.values()
    )
    return NodeDetail(
        node=plan.node,
        policy_version=cycle.policy_version,
        planned_at=time_text(cycle.planned_at),
        dimensions=tuple(dims),
        composites=tuple(
            CompositeValue(
                key=c.key,
                pod_class=c.pod_class,
                score=rounded(c.score, 3),
                unpenalised=rounded(c.unpenalised, 3),
                hot_penalty=c.penalty,
                label=c.label,
            )
            for c in plan.composites
        ),
        hot_pods=plan.hot_pods,
        conditions=conditions,
        labels=dict(sorted(plan.labels.items())),
        taints=plan.taints,
        pending_label_changes=dict(plan.label_changes),
        pending_taint_change=plan.taints_changed,
        observed_at_annotation=plan.annotation,
        budget_pools=budget_pools(policy, cycle, plan),
        active=plan.active,
        drain_candidate=plan.drain_reason,
        devices=() if held is None else device_views(held, DeviceHeatFacts(policy, readings)),
    )


def node_detail(
    policy: Policy,
    cycle: CyclePlan,
    name: str,
    inventory: Inventory | None = None,
    readings: DeviceReadings | None = None,
) -> dict[str, Any] | None:
    """`/explain/node/NAME` as JSON; None for a node not in the cycle."""
    view = detail_view(policy, cycle, name, inventory, readings)
    return None if view is None else view.to_json()


def budget_pools(policy: Policy, cycle: CyclePlan, plan: NodePlan) -> BudgetPools:
    """The resources the scorer publishes on this node (steer/core/gates.py, budget.py): what
    it carries, what it should carry, and the pods and rules that decided it."""
    floor = None
    if plan.floor is not None:
        floor = FloorView(gates=plan.floor.gates, room=plan.floor.room, why=_floor_text(plan))
    return BudgetPools(
        enforcement=policy.spec.overcommit.enforcement,
        pod_ledger_synced=cycle.pods_known,
        pools=tuple(pool_view(p) for p in plan.pools),
        gates=tuple(gate_view(g) for g in plan.gates),
        pending_resource_changes=dict(plan.resource_changes),
        floor=floor,
        members={f"{lv:g}": n for lv, n in sorted(plan.members.items())} if floor else {},
        bursting={f"{lv:g}": n for lv, n in sorted(plan.bursting.items())} if floor else {},
        counters=tuple(counter_view(c) for c in plan.counters),
    )


def counter_view(counter: CounterCapacity) -> CounterView:
    parts = [f"{counter.dra} DRA devices of the class"]
    if counter.plugin:
        parts.append(f"{counter.plugin} from the device plugin")
    if counter.shared:
        parts.append(f"{counter.shared} shareable x {counter.pods} pods")
    devices = " + ".join(parts)
    if counter.offered:
        why = f"{counter.capacity} = max({counter.held} held by its pods, {devices})"
    else:
        why = f"the node offers no device of class {counter.pod_class}: " + (
            f"kept at the {counter.held} its pods hold" if counter.held else "not published"
        )
    return CounterView(
        resource=counter.resource,
        pod_class=counter.pod_class,
        published=str(counter.capacity) if counter.offered or counter.held else None,
        devices=counter.devices,
        held=counter.held,
        free=counter.free,
        why=why,
    )


def _floor_text(plan: NodePlan) -> str:
    floor = plan.floor
    assert floor is not None
    bursting = ", ".join(f"{n} at {lv:g} %" for lv, n in sorted(plan.bursting.items()))
    members = ", ".join(f"{n} of budget {lv:g} %" for lv, n in sorted(plan.members.items()))
    text = f"budgets below {floor.gates:g} % closed; room published at {100 + floor.room:g} %"
    if floor.room < floor.gates:
        text += f" until the rise to {100 + floor.gates:g} % settles"
    return f"{text} (pool pods: {members or 'none'}; bursting: {bursting or 'none'})"


def pool_view(pool: PoolState) -> PoolView:
    return PoolView(
        resource=pool.resource,
        unit=pool.unit,
        floor=pool.floor,
        # What the node carries once the plan is written (as `labels`), and as read.
        published=pool.capacity,
        read_at_planning=pool.current,
        capacity=pool.capacity,
        room=pool.room,
        outside_limits=pool.outside_limits,
        outside_pods=pool.outside_pods,
        taken=pool.taken,
        free=pool.free,
        why=(
            f"{pool.capacity} = max({pool.taken} held by its pods, {pool.room} "
            f"({100 + pool.floor:g}% of allocatable, {pool.unit}) - {pool.outside_limits} "
            f"(limits of {pool.outside_pods} pod(s) outside the pool))"
            + (
                f"; over budget: the node's limits exceed the {pool.promise:g} % budget of a "
                f"pod here by {pool.overrun} {pool.unit} (pods outside the pool landed before "
                "it was republished)"
                if pool.overrun and pool.promise is not None
                else ""
            )
        ),
        promise=pool.promise,
        overrun=pool.overrun,
    )


def gate_view(gate: GateState) -> GateView:
    return GateView(
        resource=gate.resource,
        rule=gate.rule,
        open=gate.open,
        published=gate.capacity,
        read_at_planning=gate.current,
        held=gate.held,
        free=gate.free,
        why=f"{'open' if gate.open else 'closed'}: {gate.why}",
    )
