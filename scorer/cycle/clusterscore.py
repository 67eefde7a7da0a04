"""Cluster-level scores for Open Cluster Management's Placement, from one cycle's plan.

Pure: no clock, no network. `cluster_scores` turns the planned nodes, the pods bound to them
(from the pod ledger) and the policy's `spec.clusterScores` into integer scores -100..100; the
publisher (scorer/cycle/placementscore.py) writes them into an AddOnPlacementScore on the hub, and a
Placement prioritizer of type AddOn (`scoreCoordinate.addOn: {resourceName, scoreName}`) ranks
clusters by them. Placement gives 0 to a cluster without the object, without the score, or
whose `validUntil` has passed, so 0 is also what "unknown" reads as.

Raw values (every node counted is schedulable; "active" means the scorer taints it now):

- `freeResource`: whole units of `resource` (default nvidia.com/gpu) that no bound pod
  requests, floor(allocatable - sum of requests) per node, summed over the nodes (`sum`) or
  the most on one node (`max`: the largest job that still fits whole). On a node whose
  ResourceSlices hold devices a DeviceClass maps to `resource` (DRA), the devices no claim's
  allocation holds instead. Nodes under an active
  taint rule that a pod class requesting the resource avoids are left out: its pods will not
  go there.
- `tenantHeadroom`: the room for limits a tenant with budget b still has, per node
  max(0, floor((100 + b) % of allocatable) - sum of the bound pods' limits) (the free part
  of the tenant's budget pool, steer/core/budget.py), summed, in cores (cpu) or GiB (memory).
  Nodes under an active NoSchedule/NoExecute taint rule the tenant may not tolerate are left
  out. Foreign taints are not judged: the scorer cannot know what a tenant's pods tolerate.
- `powerPerCore`: sum of the dimension's raw values (node watts) over the nodes that have one,
  divided by the cores the pods bound to those nodes request: idle nodes count their power and
  no work. Undefined (not published) while those pods request no cpu.

Each raw value r maps linearly from the score's `worst` (-100) to its `best` (100):
value = clamp(floor(-100 + 200 * (r - worst) / (best - worst) + 0.5), -100, 100), the range
and orientation of OCM's built-in prioritizers. A score whose inputs are unknown (no complete
pod ledger, no power data) is left out of the object rather than published as a guess.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from scorer.cycle.plan import CyclePlan, NodePlan
from scorer.model import NodeState, rfc3339
from steer.core.budget import MIB, POOL_KINDS, PodUsage, level_text
from steer.core.dra.classes import implicit_extended_name
from steer.core.policy import (
    ClusterScore,
    FreeResourceScore,
    Policy,
    PowerPerCoreScore,
    TenantHeadroomScore,
)

SCORE_MIN = -100
SCORE_MAX = 100
HARD_EFFECTS = ("NoSchedule", "NoExecute")
GIB = 1024 * 1024 * 1024


@dataclass(frozen=True)
class ClusterScoreValue:
    """One score of this cycle: the raw value, its unit, and the published integer (None: the
    inputs are unknown, the score is left out)."""

    name: str
    kind: str
    unit: str
    raw: float | None
    value: int | None
    nodes: int  # nodes counted
    why: str


def scale(raw: float, worst: float, best: float) -> int:
    """`worst` -> -100, `best` -> 100, linear in between, clamped; halves round up."""
    x = SCORE_MIN + (SCORE_MAX - SCORE_MIN) * (raw - worst) / (best - worst)
    return max(SCORE_MIN, min(SCORE_MAX, math.floor(x + 0.5)))


def requested_resources(policy: Policy) -> tuple[str, ...]:
    """The pod requests the scores need summed per node (for `PodLedger.requested`)."""
    names: list[str] = []
    for score in policy.spec.cluster_scores.scores:
        wanted = (
            score.target
            if score.kind == "freeResource"
            else "cpu"
            if score.kind == "powerPerCore"
            else None
        )
        if wanted is not None and wanted not in names:
            names.append(wanted)
    return tuple(names)


def cluster_scores(
    policy: Policy,
    plan: CyclePlan,
    nodes: Sequence[NodeState],
    requests: Mapping[str, Mapping[str, Fraction]] | None,
    usages: Mapping[str, Sequence[PodUsage]] | None,
) -> tuple[ClusterScoreValue, ...]:
    """Every score of `spec.clusterScores`, in policy order. `requests` holds each node's
    summed pod requests of `requested_resources(policy)` and `usages` each node's pods as the
    budget pools see them; None when the pod ledger is not complete (a node absent from a
    mapping runs no pod)."""
    plans = {p.node: p for p in plan.nodes}
    out = []
    for score in policy.spec.cluster_scores.scores:
        if score.kind == "freeResource":
            out.append(_free_resource(policy, score, nodes, plans, requests))
        elif score.kind == "tenantHeadroom":
            out.append(_tenant_headroom(policy, score, nodes, plans, usages))
        else:
            out.append(_power_per_core(score, nodes, plans, requests))
    return tuple(out)


def published(values: Sequence[ClusterScoreValue]) -> tuple[tuple[str, int], ...]:
    """The (name, value) pairs to write: the scores whose inputs are known."""
    return tuple((v.name, v.value) for v in values if v.value is not None)


def _value(
    score: ClusterScore, unit: str, raw: float | None, nodes: int, why: str
) -> ClusterScoreValue:
    worst, best = score.bounds
    value = None if raw is None else scale(raw, worst, best)
    return ClusterScoreValue(score.name, score.kind, unit, raw, value, nodes, why)


def _active(plan: NodePlan | None, rules: Sequence[str] | None = None) -> set[str]:
    """Names of the taint rules active on the node (all, or those in `rules`)."""
    if plan is None:
        return set()
    return {
        name
        for name, state in plan.conditions.items()
        if state.active and (rules is None or name in rules)
    }


def _free_resource(
    policy: Policy,
    score: FreeResourceScore,
    nodes: Sequence[NodeState],
    plans: Mapping[str, NodePlan],
    requests: Mapping[str, Mapping[str, Fraction]] | None,
) -> ClusterScoreValue:
    resource = score.target
    unit = f"whole {resource}"
    if requests is None:
        return _value(score, unit, None, 0, "bound pods not known yet")
    avoided = sorted(
        {
            rule
            for c in policy.spec.pod_classes
            if resource in c.requests_any
            or resource in map(implicit_extended_name, c.device_classes)
            for rule in c.avoid
        }
    )
    free: list[int] = []
    skipped = 0
    for node in nodes:
        dra = node.devices.get(resource, 0) > 0
        allocatable = (
            Fraction(node.devices[resource]) if dra else node.amounts.get(resource, Fraction(0))
        )
        if allocatable <= 0:
            continue
        if node.unschedulable or _active(plans.get(node.name), avoided):
            skipped += 1
            continue
        if dra:  # devices in ResourceSlices: free is what no claim's allocation holds
            free.append(node.free_devices.get(resource, 0))
            continue
        used = (requests.get(node.name) or {}).get(resource, Fraction(0))
        free.append(max(0, math.floor(allocatable - used)))
    raw = (max(free) if free else 0) if score.aggregate == "max" else sum(free)
    how = "most on one node" if score.aggregate == "max" else "in total"
    why = f"{raw} free {resource} {how} on {len(free)} nodes"
    if skipped:
        why += f" ({skipped} unschedulable or under {', '.join(avoided) or 'no'} taints left out)"
    return _value(score, unit, float(raw), len(free), why)


def _tenant_headroom(
    policy: Policy,
    score: TenantHeadroomScore,
    nodes: Sequence[NodeState],
    plans: Mapping[str, NodePlan],
    usages: Mapping[str, Sequence[PodUsage]] | None,
) -> ClusterScoreValue:
    kind = score.target  # cpu | memory
    unit = "cores" if kind == "cpu" else "GiB"
    if usages is None:
        return _value(score, unit, None, 0, "bound pods not known yet")
    tenant = policy.tenant(score.tenant)
    budget = Fraction(level_text(tenant.overcommit_percent or 0.0))
    allowed = set(tenant.allowed_tolerations)
    total = 0  # millicores or MiB
    counted = 0
    for node in nodes:
        plan = plans.get(node.name)
        hard = {
            name
            for name in _active(plan)
            if plan is not None and plan.conditions[name].effect in HARD_EFFECTS
        }
        if node.unschedulable or hard - allowed:
            continue
        base = node.amounts.get(kind, Fraction(0))
        base = base * 1000 if kind == "cpu" else base / MIB
        room = math.floor(base * (100 + budget) / 100)
        index = POOL_KINDS.index(kind)
        used = sum(u.limits[index] for u in usages.get(node.name, ()))
        total += max(0, room - used)
        counted += 1
    raw = total / 1000 if kind == "cpu" else total * MIB / GIB
    why = (
        f"{raw:g} {unit} of limits within the {tenant.name} budget "
        f"({level_text(float(budget))} %) on {counted} nodes"
    )
    return _value(score, unit, raw, counted, why)


def _power_per_core(
    score: PowerPerCoreScore,
    nodes: Sequence[NodeState],
    plans: Mapping[str, NodePlan],
    requests: Mapping[str, Mapping[str, Fraction]] | None,
) -> ClusterScoreValue:
    unit = "watts per requested core"
    if requests is None:
        return _value(score, unit, None, 0, "bound pods not known yet")
    dimension = score.dimension
    watts = 0.0
    cores = Fraction(0)
    counted = 0
    for node in nodes:
        plan = plans.get(node.name)
        entry = plan.dimensions.get(dimension) if plan is not None else None
        if entry is None or entry.raw is None:
            continue
        watts += entry.raw
        cores += (requests.get(node.name) or {}).get("cpu", Fraction(0))
        counted += 1
    if counted == 0:
        return _value(score, unit, None, 0, f"no node has {dimension} data")
    if cores <= 0:
        return _value(
            score, unit, None, counted, f"{watts:g} W on {counted} nodes, no cpu requested"
        )
    raw = watts / float(cores)
    why = f"{watts:g} W / {float(cores):g} requested cores on {counted} nodes"
    return _value(score, unit, raw, counted, why)


# -- when to write ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedScores:
    """What the publisher last wrote: where, the scores, and `validUntil` (unix seconds)."""

    namespace: str
    name: str
    scores: tuple[tuple[str, int], ...]
    valid_until: float


def valid_until(now: float, valid_for_s: float) -> float:
    """`validUntil` for a write at `now`: whole seconds (the API's time format), never later
    than now + validFor."""
    return float(math.floor(now + valid_for_s))


def write_reason(
    last: PublishedScores | None,
    namespace: str,
    name: str,
    scores: tuple[tuple[str, int], ...],
    now: float,
    valid_for_s: float,
) -> str | None:
    """Why the object must be written now, or None. Values are written when they change;
    unchanged ones once less than half of `validForSeconds` is left, so a live scorer never
    lets them expire (the policy keeps validFor above the cycle interval) and a dead one does.
    With no score known there is nothing to write."""
    if not scores:
        # Nothing known (e.g. the pod watch not synced yet after a restart): what was
        # published stays until its validUntil, rather than being wiped by an empty list.
        return None
    if last is None:
        return "first write"
    if (last.namespace, last.name) != (namespace, name):
        return "new target"
    if last.scores != scores:
        return "scores changed"
    if now >= last.valid_until - valid_for_s / 2:
        return "refresh before validUntil"
    return None


def status_patch(scores: tuple[tuple[str, int], ...], until: float) -> dict[str, object]:
    """The merge patch of the object's status: the scores list is replaced whole (a score
    left out is gone), and every other status field (conditions) is left as it is."""
    return {
        "status": {
            "scores": [{"name": name, "value": value} for name, value in scores],
            "validUntil": rfc3339(until),
        }
    }


def cluster_detail(
    values: Sequence[ClusterScoreValue], last: PublishedScores | None
) -> dict[str, object]:
    """`/explain/cluster`: each score's raw value and why, and what was last written."""
    return {
        "scores": [
            {
                "name": v.name,
                "kind": v.kind,
                "raw": v.raw,
                "unit": v.unit,
                "value": v.value,
                "nodes": v.nodes,
                "why": v.why,
            }
            for v in values
        ],
        "published": None
        if last is None
        else {
            "namespace": last.namespace,
            "name": last.name,
            "scores": [{"name": n, "value": v} for n, v in last.scores],
            "validUntil": rfc3339(last.valid_until),
        },
    }
