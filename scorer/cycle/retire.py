"""Taking back what the scorer wrote: for `steer scorer cleanup`, and after a labelPrefix change.

Pure. A node says what the scorer wrote to it in the `<prefix>managed` annotation (label keys,
taint keys, extended resources). That record is the only evidence used here, plus the keys
the current policy itself owns, so nothing the scorer did not write is ever removed:

- `steer scorer cleanup` removes, under every prefix that has a record on the node and under
  the policy's own prefix, the recorded and owned labels, taints and resources, the
  `<prefix>observed-at` annotation, and last the record itself (in the same request as the
  labels and taints, after the resources: if a write fails, the record still lists them).
- A scorer whose policy changed `labelPrefix` finds the record under the old prefix and
  retires everything it lists, in the same cycle that writes the new labels.

A record under another prefix is recognised only when it reads exactly as the scorer writes
one (a JSON object of `labels`, `taints` and `resources` lists, every entry under that
prefix), so an unrelated annotation ending in `managed` is left alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scorer.cycle.plan import (
    MANAGED_SUFFIX,
    OBSERVED_AT_SUFFIX,
    CyclePlan,
    ManagedRecord,
    NodePlan,
    managed_key,
    observed_at_key,
    recorded_prefixes,
)
from scorer.model import NodeState
from steer.core.policy import DRAIN_REASON_ANNOTATION, Policy
from steer.core.steering import owned_label_keys, owned_resource_keys, owned_taint_keys


@dataclass(frozen=True)
class Removal:
    """What to take off one node; every entry is present on the node as read."""

    node: str
    prefixes: tuple[str, ...]
    labels: tuple[str, ...] = ()
    taints: tuple[str, ...] = ()  # taint keys (every effect of a key goes)
    annotations: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()  # in status.capacity or status.allocatable
    # Resources bound pods still request: published at exactly that (a kubelet restart would
    # refuse the pods if they went), and left in the record for a later cleanup.
    kept: Mapping[str, int] = dataclasses.field(default_factory=dict)
    record_key: str | None = None  # where the record of `kept` goes

    @property
    def empty(self) -> bool:
        return not (self.labels or self.taints or self.annotations or self.resources or self.kept)


def removal(
    node: NodeState,
    prefixes: Iterable[str],
    *,
    owned: Policy | None = None,
    keep: frozenset[str] = frozenset(),
    held: Mapping[str, int] | None = None,
) -> Removal:
    """Everything the records under `prefixes` list, their observed-at and record annotations,
    and (`owned`) every key that policy owns; never a key in `keep`. A resource that the node's
    bound pods request (`held`) is set to what they hold instead of removed; without `held`
    (not known) every resource stays as it is."""
    prefixes = tuple(sorted(set(prefixes)))
    labels: set[str] = set()
    taints: set[str] = set()
    resources: set[str] = set()
    annotations: set[str] = set()
    for prefix in prefixes:
        record = ManagedRecord.parse(node.annotations.get(prefix + MANAGED_SUFFIX))
        labels |= record.labels
        taints |= record.taints
        resources |= record.resources
        # The drain-candidate reason is an annotation of a fixed key, not in the record.
        annotations |= {
            prefix + MANAGED_SUFFIX,
            prefix + OBSERVED_AT_SUFFIX,
            prefix + DRAIN_REASON_ANNOTATION,
        }
    if owned is not None:
        labels |= owned_label_keys(owned)
        taints |= owned_taint_keys(owned)
        resources |= owned_resource_keys(owned)
        annotations |= {
            managed_key(owned),
            observed_at_key(owned),
            owned.label_key(DRAIN_REASON_ANNOTATION),
        }
    present_taints = {t.key for t in node.taints}
    present = sorted(r for r in resources - keep if r in node.capacity or r in node.allocatable)
    if held is None:
        gone, kept = [], {}
    else:
        gone = [r for r in present if held.get(r, 0) == 0]
        kept = {r: held[r] for r in present if held.get(r, 0) > 0}
    record_key: str | None = None
    if kept:
        record_key = managed_key(owned) if owned is not None else prefixes[0] + MANAGED_SUFFIX
    return Removal(
        node=node.name,
        prefixes=prefixes,
        labels=tuple(sorted(k for k in labels - keep if k in node.labels)),
        taints=tuple(sorted(k for k in taints - keep if k in present_taints)),
        annotations=tuple(
            sorted(k for k in annotations - keep if k in node.annotations and k != record_key)
        ),
        resources=tuple(gone),
        kept=kept,
        record_key=record_key,
    )


def cleanup_removal(policy: Policy, node: NodeState, held: Mapping[str, int]) -> Removal:
    """`steer scorer cleanup`: everything under every recorded prefix and the policy's own;
    resources the node's bound pods still request (`held`) stay at what they hold."""
    prefixes = {*recorded_prefixes(node), policy.spec.label_prefix}
    return removal(node, prefixes, owned=policy, held=held)


def apply_removal(plan: NodePlan, node: NodeState, gone: Removal) -> NodePlan:
    """`plan` with `gone` added to its changes (labels and annotations set to null, taints
    retired, resources removed from the status), for `NodeWriter.write_node`."""
    if gone.empty:
        return plan
    taint_keys = frozenset(gone.taints)
    current = {*plan.current_taints, *(t for t in node.taints if t.key in taint_keys)}
    changed_plan = dataclasses.replace(
        plan,
        label_changes={**plan.label_changes, **dict.fromkeys(gone.labels)},
        annotation_changes={**plan.annotation_changes, **dict.fromkeys(gone.annotations)},
        retired_taint_keys=plan.retired_taint_keys | taint_keys,
        current_taints=tuple(sorted(current)),
        resource_changes={
            **plan.resource_changes,
            **dict.fromkeys(gone.resources),
            **{name: str(amount) for name, amount in gone.kept.items()},
        },
    )
    if gone.kept and gone.record_key is not None:
        record = ManagedRecord(resources=frozenset(gone.kept)).text()
        changed = dict(changed_plan.annotation_changes)
        changed[gone.record_key] = record
        changed_plan = dataclasses.replace(changed_plan, annotation_changes=changed)
    return changed_plan


def removal_plan(node: NodeState, gone: Removal) -> NodePlan:
    """A plan that only removes (`steer scorer cleanup`)."""
    empty = NodePlan(
        node=node.name,
        dimensions={},
        composites=(),
        conditions={},
        labels={},
        label_changes={},
        taints=(),
        current_taints=(),
        annotation=None,
        annotation_changed=False,
        hot_pods=0,
    )
    return apply_removal(empty, node, gone)


def retire_old_prefixes(
    policy: Policy, cycle: CyclePlan, nodes: Iterable[NodeState]
) -> tuple[CyclePlan, Mapping[str, Removal]]:
    """After a labelPrefix change: each node's plan also removes what records under any other
    prefix list (never a key the current plan writes). Returns the plan and the removals."""
    current = policy.spec.label_prefix
    by_name = {n.name: n for n in nodes}
    removals: dict[str, Removal] = {}
    plans = []
    for plan in cycle.nodes:
        node = by_name.get(plan.node)
        old = [p for p in recorded_prefixes(node) if p != current] if node is not None else []
        if node is None or not old:
            plans.append(plan)
            continue
        keep = frozenset(plan.labels) | {t.key for t in plan.taints}
        keep |= {managed_key(policy), observed_at_key(policy)} | set(plan.resource_changes)
        keep |= {p.resource for p in plan.pools} | {g.resource for g in plan.gates}
        gone = removal(node, old, keep=keep, held=plan.held if cycle.pods_known else None)
        removals[node.name] = gone
        plans.append(apply_removal(plan, node, gone))
    if not removals:
        return cycle, removals
    return dataclasses.replace(cycle, nodes=tuple(plans)), removals
