"""One node's plan: its dimension labels, composites, taint conditions, reserved-class labels,
gates and pools, and the annotations that record them, against what the node carries now."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from scorer.cycle.plan.conditions import plan_condition
from scorer.cycle.plan.dimensions import bucket, observed_times, score_dimension
from scorer.cycle.plan.layout import CycleContext
from scorer.cycle.plan.model import CompositeScore, ConditionState, DimensionScore, NodePlan
from scorer.cycle.plan.record import ManagedRecord
from scorer.cycle.plan.resources import plan_resources
from scorer.model import NodeState, rfc3339
from steer.core.budget import PodUsage
from steer.core.encoding import composite, quantise
from steer.core.scheduling import Taint
from steer.core.steering import CONDITION_VALUE, offers

# The composite's term for "the node already runs pods" (consolidation); no dimension name can
# be it, since dimension names are DNS labels.
ACTIVE_TERM = "(active)"


def consolidation_credit(active: bool, core_score: float | None, cheapest: float | None) -> float:
    """The consolidation term of a node (0..100): 0 when it runs no pods; when it does, 100 less
    how far its wattsPerCore score falls below the cheapest cores' in the cluster. Filling an
    active node saves waking another, but never at a higher cost per core than cores elsewhere:
    a hungry node's pods do not pull more work onto it (measured on the placement bench: with
    the full credit, idle efficient nodes tied with active hungry ones whenever the energy
    dimensions were unmeasured or compressed). A node whose cores' cost is unmeasured while
    others' is gets the neutral 50; where no node's is measured, all active nodes are equal."""
    if not active:
        return 0.0
    if cheapest is None:
        return 100.0
    if core_score is None:
        return 50.0
    return max(0.0, 100.0 - (cheapest - core_score))


def plan_node(
    cycle: CycleContext,
    node: NodeState,
    hot_pods: int,
    pods: Sequence[PodUsage] | None,
    drain_reason: str | None = None,
) -> NodePlan:
    """What one node should carry: `hot_pods` pods bound to it in the hot-node window, `pods`
    its bound pods from a complete pod ledger (None: there is none, gates and pools stay),
    `drain_reason` why it is a drain candidate (None: it is not)."""
    layout, memory = cycle.layout, cycle.memory
    current = node.labels
    times = observed_times(node, layout.annotation_key)
    desired: dict[str, str] = {}
    dims: dict[str, DimensionScore] = {}
    for d in layout.dims:
        entry = score_dimension(d, node, cycle, times)
        dims[d.name] = entry
        if entry.label is not None:
            desired[d.key] = entry.label

    comps = []
    usable = {n: e.score for n, e in dims.items() if e.score is not None and e.label is not None}
    active = None if pods is None else any(p.movable for p in pods)
    for class_name, key, weights in layout.composites:
        consolidating = class_name in layout.consolidating
        penalty = (
            0.0
            if class_name in layout.packing or consolidating
            else hot_pods * layout.penalty_per_pod
        )
        value = composite(usable, weights)
        if consolidating and active is not None and value is not None:
            # "Runs pods" beside the dimensions: only where the node has a composite at all.
            credit = consolidation_credit(
                active, usable.get(layout.watts_per_core or ""), cycle.cheapest_cores
            )
            value = composite(
                {**usable, ACTIVE_TERM: credit},
                {**weights, ACTIVE_TERM: layout.consolidation_weight},
            )
        label = None
        penalised = None
        if value is not None:
            penalised = max(0.0, value - penalty)
            label = str(
                quantise(penalised, layout.step, bucket(current.get(key)), layout.hysteresis)
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
        state = plan_condition(r, node, dims, memory, layout.policy.spec.label_prefix)
        conditions[r.rule.name] = state
        if state.active:
            desired[r.key] = CONDITION_VALUE
            if layout.taints_written:
                desired_taints.append(Taint(r.key, CONDITION_VALUE, r.rule.effect))

    # Nodes offering a reserved class's resource or devices, from the Node and its
    # ResourceSlices (no metric needed),
    # unless a taint the class avoids is on: the class cannot use the node then, so keeping
    # other pods off it would only waste it.
    for pod_class, key in layout.reserving:
        avoided = any(conditions[n].active for n in pod_class.avoid if n in conditions)
        if offers(pod_class, node.amounts, node.devices) and not avoided:
            desired[key] = CONDITION_VALUE

    if layout.drain is not None and drain_reason is not None:
        desired[layout.drain[0]] = CONDITION_VALUE
        if layout.drain_taint is not None and layout.taints_written:
            desired_taints.append(Taint(layout.drain_taint, CONDITION_VALUE, "PreferNoSchedule"))
    else:
        drain_reason = None

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
        orjson.dumps(new_times, option=orjson.OPT_SORT_KEYS).decode()
        if new_times and annotation_changed
        else None
    )
    if new_times and not annotation_changed:
        annotation = node.annotations[layout.annotation_key]
    annotation_changes: dict[str, str | None] = {}
    if annotation_changed:
        annotation_changes[layout.annotation_key] = annotation
    resources = plan_resources(
        layout, node, pods, record, conditions, desired, memory.floors.get(node.name), cycle.now
    )
    # Compared as sets, serialised only when the node's key set changed (rarely).
    new_record = ManagedRecord(
        labels=frozenset(desired),
        taints=frozenset(t.key for t in desired_taints),
        resources=resources.published,
    )
    if new_record != record:
        annotation_changes[layout.record_key] = new_record.text()
    if node.annotations.get(layout.drain_annotation) != drain_reason:
        annotation_changes[layout.drain_annotation] = drain_reason

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
        counters=resources.counters,
        floor=resources.floor,
        members=resources.usage.members if resources.usage else {},
        bursting=resources.usage.bursting if resources.usage else {},
        held=resources.held,
        active=active,
        drain_reason=drain_reason,
    )
