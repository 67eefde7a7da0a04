"""Observations + what the nodes carry now + memory → the labels and taints each node should carry.

Pure: no clock, no network. The caller passes `now`, the nodes as read, this cycle's readings
and the memory returned by the previous call; it gets back a `CyclePlan` (what to write and
why) and the memory for the next cycle.

Rules that shape the result:

- Per (dimension, node) the last observation is remembered. A node missing from this cycle's
  reading, or a failed query, keeps its label until the observation is older than the TTL;
  then the label is withdrawn, the composites are recomputed without it, and no taint is
  kept from it. A node that was never observed gets no label, never a zero. The readings of
  one cycle count as observed at one instant (the earliest of their evaluation times), so
  dimensions read together expire together: a source gone down withdraws a node's labels in
  one write, never first rewriting its composites from the dimensions that expire a moment
  later.
- Hysteresis compares with the value the node carries now (its label), so a restarted scorer
  or a new leader continues from the cluster's state, not from an empty memory.
- After a restart the memory is empty; a label whose `<prefix>observed-at` annotation is still
  within the TTL is carried unchanged until fresh data arrives or the TTL passes.
- Only keys from `owned_label_keys` / `owned_taint_keys` ever appear in a plan's changes,
  plus retired ones: keys this scorer wrote to the node (recorded in the `<prefix>managed`
  annotation) whose rule has since left the policy. Without the record a removed taint rule
  would leave its NoSchedule taint on nodes forever; with it, only keys we wrote are removed.
- Gates and budget pools (steer/core/gates.py, budget.py) are resources in the node's status,
  planned from the pods bound to each node: never below what those pods hold, so no kubelet
  restart refuses a running pod. Without a complete pod ledger (`pod_usages` None) none is
  set: a capacity computed from missing pods could be below what they hold. A resource the
  managed record lists but the policy no longer has is published at what pods still hold
  until none does, then removed; no other resource of the node is ever touched.

One job per module: `record` (the annotations the scorer keeps on a node), `model` (the plan
and the memory), `layout` (what the policy fixes for a cycle, and the cycle's inputs),
`dimensions`, `conditions` (taint rules, debounced), `resources` (gates and budget pools),
`node` (one node's plan) and `cycle` (`plan_cycle`, the entry point).
"""

from scorer.cycle.plan.cycle import plan_cycle
from scorer.cycle.plan.model import (
    CompositeScore,
    ConditionState,
    CyclePlan,
    DataStatus,
    DimensionScore,
    DimensionSummary,
    GateState,
    NodePlan,
    Observation,
    PoolState,
    ScorerMemory,
    TaintCounter,
)
from scorer.cycle.plan.record import (
    MANAGED_SUFFIX,
    OBSERVED_AT_SUFFIX,
    ManagedRecord,
    managed_key,
    observed_at_key,
    recorded_prefixes,
)

__all__ = [
    "MANAGED_SUFFIX",
    "OBSERVED_AT_SUFFIX",
    "CompositeScore",
    "ConditionState",
    "CyclePlan",
    "DataStatus",
    "DimensionScore",
    "DimensionSummary",
    "GateState",
    "ManagedRecord",
    "NodePlan",
    "Observation",
    "PoolState",
    "ScorerMemory",
    "TaintCounter",
    "managed_key",
    "observed_at_key",
    "plan_cycle",
    "recorded_prefixes",
]
