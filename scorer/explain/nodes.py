"""Why a node carries its labels: a `CyclePlan` into the node views of `/explain/nodes` and
`/explain/node/NAME` (scorer/explain/view/nodes_table.py, node_detail.py).

Pure: the plan and the policy in, frozen views out. Values are rounded here, once, for every
renderer.
"""

from __future__ import annotations

from typing import Any

from scorer.explain.view import (
    BudgetPools,
    CompositeValue,
    ConditionValue,
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
from scorer.model import rfc3339
from scorer.plan import CyclePlan, DimensionSummary, GateState, NodePlan, PoolState
from steer.core.policy import Policy
from steer.core.steering import dimension_key


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def time_text(ts: float | None) -> str | None:
    return None if ts is None else rfc3339(ts)


def row_view(plan: NodePlan) -> NodeRow:
    """One line of `/explain/nodes`: raw values, scores, composites, labels, taints, ages,
    and each budget pool's room, take and what is free."""
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
    )


def nodes_view(cycle: CyclePlan) -> NodesTable:
    return NodesTable(
        policy_version=cycle.policy_version,
        planned_at=time_text(cycle.planned_at),
        dimensions=tuple(dimension_status(d) for d in cycle.dimensions),
        nodes=tuple(row_view(p) for p in cycle.nodes),
    )


def nodes_table(cycle: CyclePlan) -> dict[str, Any]:
    """`/explain/nodes` as JSON."""
    return nodes_view(cycle).to_json()


def condition_text(policy: Policy, rule_name: str) -> str:
    cond = policy.taint_rule(rule_name).condition
    return f"{cond.dimension} ({cond.source}) {cond.operator} {cond.value:g}"


def detail_view(policy: Policy, cycle: CyclePlan, name: str) -> NodeDetail | None:
    """`/explain/node/NAME`: everything in the row plus each dimension's query, weight, TTL."""
    plan = cycle.node(name)
    if plan is None:
        return None
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
    )


def node_detail(policy: Policy, cycle: CyclePlan, name: str) -> dict[str, Any] | None:
    """`/explain/node/NAME` as JSON; None for a node not in the cycle."""
    view = detail_view(policy, cycle, name)
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
        ),
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
