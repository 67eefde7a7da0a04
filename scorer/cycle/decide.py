"""One cycle's decision, pure: from what the cycle read (the nodes, each dimension's reading or
failure, the pods bound to each node) and the planner's memory, the finished plan that the
service writes and publishes:

1. each reading vetted against its unit and the nodes its coverage expects (a reading that
   contradicts them is held back, `steer/core/datacheck`);
2. the labels, taints and pools each node should carry (`plan/`);
3. keys left under a former label prefix added to the writes (`retire`);
4. a refresh's nodes put in place in the last whole plan;
5. the cluster's own scores (`clusterscore`), when the policy has any.

No clock, no network, no metrics: the caller passes `now`, and records what `CycleDecision`
says (`checks`, `retired`) as it likes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from scorer.cycle.clusterscore import ClusterScoreValue, cluster_scores
from scorer.cycle.observe import DimensionFailure, DimensionReading, vet
from scorer.cycle.plan import CyclePlan, ScorerMemory, plan_cycle
from scorer.cycle.retire import Removal, retire_old_prefixes
from scorer.model import NodeState
from steer.core.budget import PodUsage
from steer.core.datacheck import expected_nodes
from steer.core.policy import Coverage, Policy


@dataclass(frozen=True)
class ClusterPods:
    """What the cluster scores count of the pods: each node's summed requests of
    `clusterscore.requested_resources(policy)` and each node's pods as the pools see them;
    None while the pod ledger is not complete."""

    requests: Mapping[str, Mapping[str, Fraction]] | None
    usages: Mapping[str, Sequence[PodUsage]] | None


@dataclass(frozen=True)
class CycleInputs:
    """`nodes` are the nodes planned: all of them in a cycle, or those whose pods changed in a
    refresh, which then also passes `known` (every node as last known) and `previous` (the
    last whole plan, whose nodes it replaces). `readings` and `failures` are as read, not
    vetted; a refresh reads nothing. `pod_usages` is None without a complete pod ledger (no
    gate or pool is then planned); `cluster_pods` is None when the policy has no cluster
    score."""

    policy: Policy
    nodes: tuple[NodeState, ...]
    now: float
    memory: ScorerMemory
    readings: Mapping[str, DimensionReading] = field(default_factory=dict)
    failures: Mapping[str, DimensionFailure] = field(default_factory=dict)
    hot: Mapping[str, int] = field(default_factory=dict)
    pod_usages: Mapping[str, Sequence[PodUsage]] | None = None
    known: Mapping[str, NodeState] | None = None
    previous: CyclePlan | None = None
    cluster_pods: ClusterPods | None = None


@dataclass(frozen=True)
class DimensionCheck:
    """One dimension as this cycle read it: its vetted reading, or why there is none.
    `held` says the reading came back and vetting held it back (unit or coverage)."""

    dimension: str
    reading: DimensionReading | None = None
    failure: DimensionFailure | None = None
    held: bool = False


@dataclass(frozen=True)
class CycleDecision:
    """`writes` is what this pass writes (its nodes, retired keys included); `plan` the whole
    cluster's plan after it (a refresh's nodes in place in the previous one), which `/explain`
    serves and the cluster scores read. `checks` has one entry per dimension read (none in a
    refresh); `cluster_scores` is None when the policy has none."""

    plan: CyclePlan
    writes: CyclePlan
    memory: ScorerMemory
    retired: Mapping[str, Removal]
    checks: tuple[DimensionCheck, ...] = ()
    cluster_scores: tuple[ClusterScoreValue, ...] | None = None


def decide_cycle(inputs: CycleInputs) -> CycleDecision:
    policy = inputs.policy
    refresh = inputs.known is not None
    checks = (
        () if refresh else check_readings(policy, inputs.nodes, inputs.readings, inputs.failures)
    )
    readings = {c.dimension: c.reading for c in checks if c.reading is not None}
    failures = {c.dimension: c.failure for c in checks if c.failure is not None}
    plan, memory = plan_cycle(
        policy,
        inputs.nodes,
        readings,
        inputs.memory,
        inputs.now,
        failures=failures,
        hot=inputs.hot,
        pod_usages=inputs.pod_usages,
        known=inputs.known,
    )
    writes, retired = retire_old_prefixes(policy, plan, inputs.nodes)
    whole = writes
    if inputs.previous is not None:
        replaced = writes.by_name
        whole = dataclasses.replace(
            inputs.previous,
            planned_at=writes.planned_at,
            pods_known=writes.pods_known,
            nodes=tuple(replaced.get(p.node, p) for p in inputs.previous.nodes),
        )
    scores = None
    if policy.spec.cluster_scores.enabled:  # over every node, a refresh's too
        nodes = inputs.nodes if inputs.known is None else tuple(inputs.known.values())
        pods = inputs.cluster_pods or ClusterPods(None, None)
        scores = cluster_scores(policy, whole, nodes, pods.requests, pods.usages)
    return CycleDecision(whole, writes, memory, retired, checks, scores)


def check_readings(
    policy: Policy,
    nodes: Sequence[NodeState],
    readings: Mapping[str, DimensionReading],
    failures: Mapping[str, DimensionFailure],
) -> tuple[DimensionCheck, ...]:
    """Every dimension of the policy, in its order: its reading vetted against its unit and
    the nodes its coverage expects, or its failure (a source that answered neither failed
    that dimension, not the cycle)."""
    expected: dict[Coverage, frozenset[str] | None] = {}  # dimensions share coverages
    out = []
    for dim in policy.spec.dimensions:
        raw = readings.get(dim.name)
        if raw is None:
            failure = failures.get(dim.name) or DimensionFailure(
                dim.name, dim.what, "response", "its source gave no answer", 0.0
            )
            out.append(DimensionCheck(dim.name, failure=failure))
            continue
        if dim.coverage not in expected:
            expected[dim.coverage] = expected_nodes(policy, dim, nodes)
        vetted = vet(dim, raw, expected[dim.coverage])
        if isinstance(vetted, DimensionFailure):
            out.append(DimensionCheck(dim.name, failure=vetted, held=True))
        else:
            out.append(DimensionCheck(dim.name, reading=vetted))
    return tuple(out)
