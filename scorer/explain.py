"""Why a node carries its labels, and where a pod may go: the answers behind `/explain`.

Pure: a `CyclePlan`, the nodes as read and a pod spec in, JSON-ready dicts out. The pod
explanation evaluates exactly the terms the webhook injects (`steer.core.steering`), against
the labels and taints each node carries once the plan is applied, so the answer matches what
the stock scheduler will do with the mutated pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from scorer.model import NodeState, rfc3339
from scorer.plan import CyclePlan, DimensionSummary, GateState, NodePlan, PoolState
from steer.core.admission import ValidationPlan, validate_pod
from steer.core.encoding import PreferenceTerm, preference_weight
from steer.core.policy import (
    RESERVED_PREFIX,
    SCORE_PREFIX,
    Dimension,
    Policy,
    Tenant,
    composite_suffix,
)
from steer.core.quantity import QuantityError, parse_quantity
from steer.core.scheduling import (
    UNSCHEDULABLE_TAINT,
    Taint,
    blocking_taints,
    node_selector_matches,
    pod_spec_of,
    preferred_terms,
    required_terms,
    selector_problems,
    term_matches,
    terms_match,
    tolerated,
    toleration_problems,
)
from steer.core.steering import (
    NodeConstraints,
    class_preferences,
    classify_pod,
    condition_key,
    dimension_key,
    excluded_namespaces,
    opted_in,
    overcommit_key,
    owned_label_keys,
    owned_taint_keys,
    pod_constraints,
    pod_gates,
    steered_constraints,
    tenant_for,
)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _time(ts: float | None) -> str | None:
    return None if ts is None else rfc3339(ts)


# --------------------------------------------------------------------------------- nodes


def effective_labels(
    node: NodeState, plan: NodePlan | None, owned: frozenset[str]
) -> dict[str, str]:
    """The node's labels once `plan` is applied (its own view when this replica does not write)."""
    if plan is None:
        return dict(node.labels)
    labels = {k: v for k, v in node.labels.items() if k not in owned}
    labels.update(plan.labels)
    return labels


def effective_taints(
    node: NodeState, plan: NodePlan | None, owned: frozenset[str]
) -> tuple[Taint, ...]:
    if plan is None:
        return node.taints
    replaced = owned | plan.retired_taint_keys
    return tuple(t for t in node.taints if t.key not in replaced) + plan.taints


def node_row(plan: NodePlan) -> dict[str, Any]:
    """One line of `/explain/nodes`: raw values, scores, composites, labels, taints, ages."""
    return {
        "node": plan.node,
        "raw": {n: _round(d.raw) for n, d in plan.dimensions.items()},
        "score": {n: _round(d.score, 1) for n, d in plan.dimensions.items()},
        "status": {n: str(d.status) for n, d in plan.dimensions.items()},
        "ageSeconds": {n: _round(d.age_s, 1) for n, d in plan.dimensions.items()},
        "composite": {c.key: _round(c.score, 1) for c in plan.composites},
        "hotPods": plan.hot_pods,
        "labels": dict(sorted(plan.labels.items())),
        "taints": [str(t) for t in plan.taints],
        "pendingLabelChanges": dict(plan.label_changes),
        "pendingTaintChange": plan.taints_changed,
        **({"pools": {p.resource: p.capacity for p in plan.pools}} if plan.pools else {}),
        **({"gates": {g.resource: g.capacity for g in plan.gates}} if plan.gates else {}),
    }


def nodes_table(cycle: CyclePlan) -> dict[str, Any]:
    return {
        "policyVersion": cycle.policy_version,
        "plannedAt": _time(cycle.planned_at),
        "dimensions": [dimension_summary(d) for d in cycle.dimensions],
        "nodes": [node_row(p) for p in cycle.nodes],
    }


def dimension_summary(summary: DimensionSummary) -> dict[str, Any]:
    return {
        "dimension": summary.dimension,
        "labelKey": summary.label_key,
        "query": summary.query,
        "unit": summary.unit,
        "ok": summary.ok,
        "stale": summary.stale,
        "lastSuccess": _time(summary.last_success),
        "ageSeconds": _round(summary.age_s, 1),
        "nodes": summary.nodes,
        "samples": summary.samples,
        "unknownNodes": summary.unknown,
        "unknownExamples": list(summary.unknown_examples),
        "queryDurationSeconds": _round(summary.duration_s, 4),
        "error": summary.error,
        "errorKind": summary.error_kind,
    }


def node_detail(policy: Policy, cycle: CyclePlan, name: str) -> dict[str, Any] | None:
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
            {
                "dimension": dim.name,
                "query": dim.what,
                "nodeLabel": dim.node_label,
                "direction": str(dim.direction),
                "normalization": dim.normalization.model_dump(by_alias=True, exclude_none=True),
                "weight": dim.weight,
                "publish": dim.publish,
                "step": policy.step_of(dim),
                "hysteresis": policy.hysteresis_of(dim),
                "ttlSeconds": policy.ttl_of(dim),
                "labelKey": dimension_key(policy, dim),
                "status": str(entry.status),
                "raw": entry.raw,
                "unit": dim.raw_unit,
                "score": _round(entry.score, 3),
                "label": entry.label,
                "observedAt": _time(entry.observed_at),
                "ageSeconds": _round(entry.age_s, 1),
            }
        )
    conditions = [
        {
            "rule": c.rule,
            "key": c.key,
            "effect": c.effect,
            "condition": _condition_text(policy, c.rule),
            "status": str(c.status),
            "observed": _round(c.observed),
            "holds": c.holds,
            "active": c.active,
            "streak": c.streak,
        }
        for c in plan.conditions.values()
    ]
    return {
        "node": plan.node,
        "policyVersion": cycle.policy_version,
        "plannedAt": _time(cycle.planned_at),
        "dimensions": dims,
        "composites": [
            {
                "key": c.key,
                "podClass": c.pod_class,
                "score": _round(c.score, 3),
                "unpenalised": _round(c.unpenalised, 3),
                "hotPenalty": c.penalty,
                "label": c.label,
            }
            for c in plan.composites
        ],
        "hotPods": plan.hot_pods,
        "conditions": conditions,
        "labels": dict(sorted(plan.labels.items())),
        "taints": [t.to_k8s() for t in plan.taints],
        "pendingLabelChanges": dict(plan.label_changes),
        "pendingTaintChange": plan.taints_changed,
        "observedAtAnnotation": plan.annotation,
        "budgetPools": budget_pools(policy, cycle, plan),
    }


def budget_pools(policy: Policy, cycle: CyclePlan, plan: NodePlan) -> dict[str, Any]:
    """The resources the scorer publishes on this node (steer/core/gates.py, budget.py): what
    it carries, what it should carry, and the pods and rules that decided it."""
    out: dict[str, Any] = {
        "enforcement": policy.spec.overcommit.enforcement,
        "podLedgerSynced": cycle.pods_known,
        "pools": [pool_detail(p) for p in plan.pools],
        "gates": [gate_detail(g) for g in plan.gates],
        "pendingResourceChanges": dict(plan.resource_changes),
    }
    if plan.floor is not None:
        out["floor"] = {
            "gates": plan.floor.gates,
            "room": plan.floor.room,
            "why": _floor_text(plan),
        }
        out["members"] = {f"{lv:g}": n for lv, n in sorted(plan.members.items())}
        out["bursting"] = {f"{lv:g}": n for lv, n in sorted(plan.bursting.items())}
    return out


def _floor_text(plan: NodePlan) -> str:
    floor = plan.floor
    assert floor is not None
    bursting = ", ".join(f"{n} at {lv:g} %" for lv, n in sorted(plan.bursting.items()))
    members = ", ".join(f"{n} of budget {lv:g} %" for lv, n in sorted(plan.members.items()))
    text = f"budgets below {floor.gates:g} % closed; room published at {100 + floor.room:g} %"
    if floor.room < floor.gates:
        text += f" until the rise to {100 + floor.gates:g} % settles"
    return f"{text} (pool pods: {members or 'none'}; bursting: {bursting or 'none'})"


def pool_detail(pool: PoolState) -> dict[str, Any]:
    return {
        "resource": pool.resource,
        "unit": pool.unit,
        "floor": pool.floor,
        # What the node carries once the plan is written (as `labels` above), and as read.
        "published": pool.capacity,
        "readAtPlanning": pool.current,
        "capacity": pool.capacity,
        "room": pool.room,
        "outsideLimits": pool.outside_limits,
        "outsidePods": pool.outside_pods,
        "taken": pool.taken,  # requested by the pods in the pool
        "free": pool.free,
        "why": (
            f"{pool.capacity} = max({pool.taken} held by its pods, {pool.room} "
            f"({100 + pool.floor:g}% of allocatable, {pool.unit}) - {pool.outside_limits} "
            f"(limits of {pool.outside_pods} pod(s) outside the pool))"
        ),
    }


def gate_detail(gate: GateState) -> dict[str, Any]:
    return {
        "resource": gate.resource,
        "rule": gate.rule,
        "open": gate.open,
        "published": gate.capacity,
        "readAtPlanning": gate.current,
        "held": gate.held,
        "free": gate.free,
        "why": f"{'open' if gate.open else 'closed'}: {gate.why}",
    }


def _condition_text(policy: Policy, rule_name: str) -> str:
    cond = policy.taint_rule(rule_name).condition
    return f"{cond.dimension} ({cond.source}) {cond.operator} {cond.value:g}"


def plan_table(
    cycle: CyclePlan,
    policy: Policy,
    nodes: Sequence[NodeState] = (),
    *,
    changes_only: bool = False,
) -> str:
    """Fixed-width text for `steer scorer once`: the raw readings with their units, a legend of
    the label contract, then the labels and taints planned per node and what changes (`old→new`
    against `nodes` as read; a node getting its first labels shows only how many)."""
    before = {n.name: n.labels for n in nodes}
    plans = [p for p in cycle.nodes if p.changed or not changes_only]
    prefix = policy.spec.label_prefix
    readings = [("NODE", *(_reading_header(d) for d in policy.spec.dimensions))]
    for plan in plans:
        cells = [plan.node]
        for dim in policy.spec.dimensions:
            entry = plan.dimensions.get(dim.name)
            cells.append("-" if entry is None or entry.raw is None else f"{_round(entry.raw):g}")
        readings.append(tuple(cells))
    rows = [("NODE", "LABELS", "TAINTS", "GATES AND POOL", "CHANGES")]
    resource_prefix = policy.spec.resource_prefix
    for plan in plans:
        labels = ",".join(f"{_short(k, prefix)}={v}" for k, v in sorted(plan.labels.items()))
        resources = ",".join(
            [
                f"{_short(g.resource, resource_prefix)}:{'open' if g.open else 'closed'}"
                for g in plan.gates
            ]
            + [f"{_short(p.resource, resource_prefix)}={p.capacity}" for p in plan.pools]
        )
        taints = ",".join(f"{_short(t.key, prefix)}:{t.effect}" for t in plan.taints)
        changes = []
        had = before.get(plan.node, {})
        first = all(v is not None and k not in had for k, v in plan.label_changes.items())
        if plan.label_changes and first and not any(k in had for k in plan.labels):
            changes.append(f"+{len(plan.label_changes)} labels (first write)")
        else:
            for key, value in plan.label_changes.items():
                short, old = _short(key, prefix), had.get(key)
                if value is None:
                    changes.append(f"-{short}")
                else:
                    changes.append(f"{short}={value}" if old is None else f"{short}={old}→{value}")
        if plan.taints_changed:
            changes.append("taints")
        if plan.annotation_changed and not plan.label_changes:
            changes.append("observed-at")
        if plan.resource_changes:
            changes.append(f"status: {len(plan.resource_changes)} resources")
        rows.append(
            (
                plan.node,
                labels or "-",
                taints or "-",
                resources or "-",
                " ".join(changes) or "(none)",
            )
        )
    stale = cycle.stale_dimensions
    failed = [d for d in cycle.dimensions if not d.ok]
    footer = [
        f"policy {cycle.policy_version}: {len(cycle.nodes)} nodes, {len(cycle.changes)} to write"
        + (f"; stale dimensions: {', '.join(stale)}" if stale else "")
    ]
    footer += [f"query failed for {d.dimension}: {d.error}" for d in failed if d.error]
    lines = [
        "raw readings (unit in brackets; `steer explain node NAME` shows each query and time):",
        *_columns(readings),
        "",
        *_label_legend(policy),
        *_columns(rows),
        *footer,
    ]
    return "\n".join(line.rstrip() for line in lines)


def _reading_header(dim: Dimension) -> str:
    unit = dim.raw_unit
    return f"{dim.name} [{unit}]" if unit else dim.name


def _short(key: str, prefix: str) -> str:
    return key.removeprefix(prefix)


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]


def _label_legend(policy: Policy) -> list[str]:
    """What the labels mean, in the words of the label contract."""
    spec = policy.spec
    raw = [d.name for d in spec.dimensions if d.publish == "raw"]
    lines = [
        f"labels under {spec.label_prefix} (shown without it):",
        f"  {SCORE_PREFIX}<dimension>, {composite_suffix(spec.scoring, None)}, "
        f"{composite_suffix(spec.scoring, '<class>')}: 0..100, higher is better for placement",
    ]
    if raw:
        lines.append(
            f"  {', '.join(raw)}: the raw value, its unit ending the name (rounded up, never below 0)"
        )
    if spec.taints:
        lines.append(
            f"  {', '.join(r.name for r in spec.taints)}: true while the rule's condition holds "
            "(the node carries the taint of that name)"
        )
    reserving = [c.name for c in spec.pod_classes if c.reserve_nodes != "none"]
    if reserving:
        lines.append(
            f"  {', '.join(RESERVED_PREFIX + c for c in reserving)}: kept for pods of that class"
        )
    lines.append(
        f"gates and pool in the node's status under {spec.resource_prefix} (hard rules: a pod "
        "the rule applies to requests one unit; closed = only what bound pods hold)"
    )
    return lines


# ----------------------------------------------------------------------------------- pods


@dataclass(frozen=True)
class Exclusion:
    rule: str
    reason: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    exclusions: tuple[Exclusion, ...]
    steering_weight: int
    user_weight: int
    rank: int | None = None
    soft_taints: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.exclusions


@dataclass(frozen=True)
class PodExplanation:
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

    def to_dict(self) -> dict[str, Any]:
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
                {
                    "node": v.node,
                    "exclusions": [
                        {"rule": e.rule, "reason": e.reason, "data": dict(e.data)}
                        for e in v.exclusions
                    ],
                }
                for v in self.excluded
            ],
        }


def _expression_text(expr: Mapping[str, Any]) -> str:
    values = list(expr.get("values") or ())
    text = f"{expr['key']} {expr['operator']}"
    return f"{text} {','.join(str(v) for v in values)}" if values else text


def _key_data(
    policy: Policy, plan: NodePlan | None, key: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The data behind one label key on one node: the label, and the observation behind it."""
    data: dict[str, Any] = {"key": key, "label": labels.get(key)}
    if plan is None:
        return data
    for dim in policy.spec.dimensions:
        if dimension_key(policy, dim) == key and dim.name in plan.dimensions:
            entry = plan.dimensions[dim.name]
            data.update(
                dimension=dim.name,
                raw=entry.raw,
                status=str(entry.status),
                observedAt=_time(entry.observed_at),
            )
    for rule in policy.spec.taints:
        if condition_key(policy, rule) == key and rule.name in plan.conditions:
            cond = plan.conditions[rule.name]
            data.update(
                condition=_condition_text(policy, rule.name),
                observed=cond.observed,
                status=str(cond.status),
            )
    return data


def _gate_label(policy: Policy, rule: str) -> str | None:
    """The label whose data closes a gate: the taint rule's condition, or `overcommit-pct`."""
    kind, _, name = rule.partition(":")
    if kind == "avoid":
        return condition_key(policy, policy.taint_rule(name))
    if kind == "overcommit":
        return overcommit_key(policy)
    return None


def _resource_exclusions(
    policy: Policy, plan: NodePlan, requests: Mapping[str, Fraction], labels: Mapping[str, str]
) -> list[Exclusion]:
    """What NodeResourcesFit refuses of the gates and pools this plan publishes: a request above
    what is free there (capacity - what the node's bound pods hold)."""
    out = []
    for gate in plan.gates:
        need = requests.get(gate.resource, Fraction(0))
        if need > 0 and need > gate.free:
            data: dict[str, Any] = {"gate": gate_detail(gate)}
            key = _gate_label(policy, gate.rule)
            if key is not None:
                data["label"] = _key_data(policy, plan, key, labels)
            out.append(
                Exclusion(
                    rule=gate.rule,
                    reason=f"{gate.resource} is {'open' if gate.open else 'closed'} "
                    f"({gate.why}): {max(gate.free, 0)} free",
                    data=data,
                )
            )
    for pool in plan.pools:
        need = requests.get(pool.resource, Fraction(0))
        if need > 0 and need > pool.free:
            out.append(
                Exclusion(
                    rule="budget:pool",
                    reason=(
                        f"{pool.resource}: the pod needs {_quantity_text(need)} {pool.unit}, "
                        f"{max(pool.free, 0)} free ({pool.capacity} published - {pool.taken} "
                        "held by pods in the pool)"
                    ),
                    data={"needs": int(need), "pool": pool_detail(pool)},
                )
            )
    return out


def explain_pod(
    policy: Policy,
    cycle: CyclePlan | None,
    nodes: Sequence[NodeState],
    pod: Mapping[str, Any],
    namespace_labels: Mapping[str, str],
    namespace: str | None = None,
) -> PodExplanation:
    """Which nodes the scheduler's filters leave for the pod once the webhook has steered it,
    their rank, and why the others are excluded.

    The pod is evaluated as mutated: its required terms with the policy's rules merged in and
    its tolerations with the injected ones appended, by the functions the webhook applies
    (`steered_constraints`), under Kubernetes' rules (`steer.core.scheduling`). A node is
    excluded by NodeAffinity (nodeSelector and required terms; the reasons name the policy rule
    or the pod's own field that fails), NoSchedule/NoExecute taints and cordons the pod does not
    tolerate, and the overcommit pools. Rank is by the weight the NodeAffinity plugin would add
    up: the injected preference terms plus the pod's own preferred terms (ties share a rank).
    A pod of a namespace that is not opted in is evaluated as it is: the webhook leaves it alone.
    Raises UninterpretablePod for a malformed field.
    """
    spec = pod_spec_of(pod)
    pod_class = classify_pod(policy, spec)
    tenant = tenant_for(policy, namespace_labels)
    steers = opted_in(policy, namespace, namespace_labels)
    if steers:
        preferences = class_preferences(policy, pod_class)
        steered = steered_constraints(policy, tenant, pod_class, spec)
    else:
        preferences, steered = (), pod_constraints(spec)
    gate_rules = (
        {g.resource: g.rule for g in pod_gates(policy, tenant, pod_class)} if steers else {}
    )
    gates = tuple(sorted(n for n in steered.requests if n in gate_rules))
    user_terms = required_terms(spec)
    problems = (
        toleration_problems(steered.tolerations)
        + selector_problems(user_terms, "spec.affinity.nodeAffinity.required.nodeSelectorTerms")
        + _denials(policy, spec, steered, tenant, namespace)
    )
    owned_labels = owned_label_keys(policy)
    owned_taints = owned_taint_keys(policy)
    user_prefs = preferred_terms(spec)
    verdicts = []
    for node in nodes:
        plan = cycle.node(node.name) if cycle is not None else None
        labels = effective_labels(node, plan, owned_labels)
        taints = effective_taints(node, plan, owned_taints)
        exclusions: list[Exclusion] = []
        if problems:
            exclusions.append(
                Exclusion(
                    rule="admission", reason="the pod is not admitted: " + "; ".join(problems)
                )
            )
        exclusions += _affinity_exclusions(
            policy,
            plan,
            node.name,
            labels,
            steered.node_selector,
            user_terms,
            steered.required_terms,
        )
        for taint in blocking_taints(steered.tolerations, taints, unschedulable=node.unschedulable):
            if taint == UNSCHEDULABLE_TAINT and node.unschedulable:
                exclusions.append(
                    Exclusion(
                        rule="node.spec.unschedulable",
                        reason=f"the node is cordoned and the pod does not tolerate {taint}",
                    )
                )
                continue
            data: dict[str, Any] = {"taint": taint.to_k8s()}
            if taint.key in owned_taints:
                data.update(_key_data(policy, plan, taint.key, labels))
            exclusions.append(
                Exclusion(rule=f"taint {taint}", reason="the pod does not tolerate it", data=data)
            )
        soft = [str(t) for t in taints if not t.blocks and not tolerated(steered.tolerations, t)]
        exclusions += _fit_exclusions(node, plan, steered.requests, gate_rules)
        if plan is not None:
            exclusions += _resource_exclusions(policy, plan, steered.requests, labels)
        user_weight = sum(
            int(p.get("weight", 0))
            for p in user_prefs
            if term_matches(p.get("preference") or {}, labels, node.name)
        )
        verdicts.append(
            NodeVerdict(
                node=node.name,
                exclusions=tuple(exclusions),
                steering_weight=preference_weight(labels, preferences),
                user_weight=user_weight,
                soft_taints=tuple(soft),
            )
        )

    allowed = sorted(
        (v for v in verdicts if v.allowed),
        key=lambda v: (-(v.steering_weight + v.user_weight), v.node),
    )
    ranked: list[NodeVerdict] = []
    for i, verdict in enumerate(allowed):
        total = verdict.steering_weight + verdict.user_weight
        if ranked and ranked[-1].steering_weight + ranked[-1].user_weight == total:
            rank = ranked[-1].rank
        else:
            rank = i + 1
        ranked.append(
            NodeVerdict(
                verdict.node,
                (),
                verdict.steering_weight,
                verdict.user_weight,
                rank,
                verdict.soft_taints,
            )
        )
    excluded = sorted((v for v in verdicts if not v.allowed), key=lambda v: v.node)
    return PodExplanation(
        policy_version=policy.version,
        pod_class=pod_class.name if pod_class else None,
        tenant=tenant.name if tenant else None,
        preferences=preferences,
        gates=gates,
        verdicts=tuple(ranked + excluded),
        injected_tolerations=steered.injected_tolerations,
        problems=problems,
        steered=steers,
    )


def _denials(
    policy: Policy,
    spec: Mapping[str, Any],
    steered: NodeConstraints,
    tenant: Tenant | None,
    namespace: str | None,
) -> tuple[str, ...]:
    """What the webhook's validation denies in the pod as mutated (validation runs after every
    mutation): its tolerations and schedulerName are the steered ones."""
    if namespace is not None and namespace in excluded_namespaces(policy):
        return ()
    admitted = {**spec, "tolerations": list(steered.tolerations)}
    if steered.scheduler_name:
        admitted["schedulerName"] = steered.scheduler_name
    denials = validate_pod(
        ValidationPlan.from_policy(policy), {"spec": admitted}, tenant, namespace or "?"
    )
    return tuple(f"the webhook denies it: {d.message}" for d in denials)


def _fit_exclusions(
    node: NodeState,
    plan: NodePlan | None,
    requests: Mapping[str, Fraction],
    gate_rules: Mapping[str, str],
) -> list[Exclusion]:
    """NodeResourcesFit against the node's allocatable, before other pods take their share
    (the scorer does not track cpu and memory in use). A gate or pool this cycle publishes is
    judged by `_resource_exclusions` instead, with what the node's pods hold. A node whose
    allocatable was not read (empty) is not judged."""
    if not node.allocatable:
        return []
    planned = {p.resource for p in plan.pools} | {g.resource for g in plan.gates} if plan else set()
    out = []
    for name, need in requests.items():
        if need <= 0 or name in planned:
            continue
        try:
            offered = parse_quantity(node.allocatable.get(name, "0"))
        except QuantityError:
            offered = Fraction(0)
        if need > offered and name in gate_rules:
            out.append(
                Exclusion(
                    rule=gate_rules[name],
                    reason=f"the gate {name} is {node.allocatable.get(name, 'not published')} on "
                    "the node (the scorer publishes it once it has seen the node's pods)",
                    data={"resource": name, "allocatable": node.allocatable.get(name)},
                )
            )
        elif need > offered:
            out.append(
                Exclusion(
                    rule="resources",
                    reason=f"{name}: the pod requests {_quantity_text(need)}, the node's "
                    f"allocatable is {node.allocatable.get(name, '0')}",
                    data={"resource": name, "allocatable": node.allocatable.get(name)},
                )
            )
    return out


def _quantity_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


def _affinity_exclusions(
    policy: Policy,
    plan: NodePlan | None,
    node: str,
    labels: Mapping[str, str],
    node_selector: Mapping[str, Any],
    user_terms: Sequence[Mapping[str, Any]] | None,
    steered_terms: Sequence[Mapping[str, Any]] | None,
) -> list[Exclusion]:
    """NodeAffinity's verdict on the mutated pod, with the policy rules and the pod's own
    fields that fail as reasons (the merged terms fail exactly when one of those does)."""
    out = []
    if not node_selector_matches(node_selector, labels):
        mismatched = {k: v for k, v in node_selector.items() if labels.get(k) != str(v)}
        out.append(
            Exclusion(
                rule="pod.spec.nodeSelector",
                reason="node labels do not match the pod's nodeSelector",
                data={"wanted": mismatched, "node": {k: labels.get(k) for k in mismatched}},
            )
        )
    if terms_match(steered_terms, labels, node):
        return out
    if not terms_match(user_terms, labels, node):
        out.append(
            Exclusion(
                rule="pod.spec.affinity.nodeAffinity.required",
                reason="no nodeSelectorTerm of the pod matches the node",
                data={"terms": list(user_terms or ())},
            )
        )
    return out
