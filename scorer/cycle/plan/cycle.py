"""One scoring cycle: every node's plan, each dimension's summary, and the memory for the next.

Pure: no clock, no network (the rules are in scorer/cycle/plan/__init__.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from scorer.cycle.observe import DimensionFailure, DimensionReading
from scorer.cycle.plan.drain import (
    DrainNode,
    drain_candidates,
    pinned_resources,
    scale_down_disabled,
)
from scorer.cycle.plan.layout import CycleContext, CycleLayout
from scorer.cycle.plan.model import CyclePlan, DimensionSummary, ScorerMemory, TaintCounter
from scorer.cycle.plan.node import plan_node
from scorer.model import NodeState
from steer.core.budget import Floor, PodUsage
from steer.core.policy import Policy


def modelled_values(policy: Policy, nodes: Sequence[NodeState]) -> dict[str, dict[str, float]]:
    """The power model's value of each dimension it covers, per node whose spec it knows
    (`spec.energy.powerModel`); used where a node has no measurement."""
    energy = policy.spec.energy
    out: dict[str, dict[str, float]] = {}
    for d in policy.spec.dimensions:
        field = energy.modelled(d.name)
        if field is None or not energy.power_model.types:
            continue
        values = {}
        for n in nodes:
            spec = energy.power_model.of(n.labels)
            if spec is not None:
                values[n.name] = float(getattr(spec, field))
        out[d.name] = values
    return out


# What a drain candidate is weighed by besides its watts, per node, with the Node and pods it
# was read from: the same objects in the next cycle (nothing changed) give the same figures.
_DRAIN_BASIS: dict[str, tuple[NodeState, Sequence[PodUsage], tuple[str, ...], DrainNode]] = {}


def _drain_basis(node: NodeState, pods: Sequence[PodUsage], prefixes: tuple[str, ...]) -> DrainNode:
    held = _DRAIN_BASIS.get(node.name)
    if held is not None and held[0] is node and held[1] is pods and held[2] == prefixes:
        return held[3]
    basis = DrainNode(
        name=node.name,
        cpu_m=int(node.amounts.get("cpu", 0) * 1000),
        memory=int(node.amounts.get("memory", 0)),
        watts_per_core=None,
        idle_watts=None,
        pods=pods,
        schedulable=not node.unschedulable,
        scale_down_disabled=scale_down_disabled(node.annotations),
        pinned=pinned_resources(pods, prefixes),
    )
    if len(_DRAIN_BASIS) >= 100_000:
        _DRAIN_BASIS.clear()
    _DRAIN_BASIS[node.name] = (node, pods, prefixes, basis)
    return basis


def plan_drain(
    policy: Policy,
    nodes: Sequence[NodeState],
    context: CycleContext,
    pod_usages: Mapping[str, Sequence[PodUsage]],
) -> dict[str, str]:
    """This cycle's drain candidates (scorer/cycle/plan/drain.py), from the remembered raw values of
    the energy dimensions (measured, else from the power model)."""
    energy = policy.spec.energy
    per_core = context.observations.get(energy.watts_per_core or "", {})
    idle = context.observations.get(energy.idle_watts or "", {})
    prefixes = tuple(policy.spec.resource_prefixes)
    drain_nodes = []
    for n in nodes:
        core = per_core.get(n.name)
        idle_obs = idle.get(n.name)
        drain_nodes.append(
            dataclasses.replace(
                _drain_basis(n, pod_usages.get(n.name, ()), prefixes),
                watts_per_core=None if core is None else core.value,
                idle_watts=None if idle_obs is None else idle_obs.value,
            )
        )
    marking = energy.drain_candidates
    return drain_candidates(drain_nodes, marking.min_saved_watts, marking.max_candidates)


def one_instant(readings: Mapping[str, DimensionReading]) -> Mapping[str, DimensionReading]:
    """The cycle's readings, each observed at the earliest evaluation among them.

    Prometheus stamps each answer with its own evaluation time: queries sent side by side land
    milliseconds apart, one that waits for a connection or behind a slow proxy seconds apart.
    Left so, dimensions read in the same cycle age past the same TTL in different cycles when
    their source goes down: the first withdrawal rewrites every node's composites from the
    dimensions that expire a moment later, and the next withdraws those too (two writes a node,
    and a composite that moves on data that did not). One instant, the oldest, expires them
    together and never extends a TTL."""
    if len(readings) < 2:
        return readings
    instant = min(r.observed_at for r in readings.values())
    return {
        name: r if r.observed_at == instant else replace(r, observed_at=instant)
        for name, r in readings.items()
    }


def plan_cycle(
    policy: Policy,
    nodes: Sequence[NodeState],
    readings: Mapping[str, DimensionReading],
    memory: ScorerMemory,
    now: float,
    *,
    failures: Mapping[str, DimensionFailure] | None = None,
    hot: Mapping[str, int] | None = None,
    pod_usages: Mapping[str, Sequence[PodUsage]] | None = None,
    known: Iterable[str] | None = None,
) -> tuple[CyclePlan, ScorerMemory]:
    """Plan one cycle. `readings` holds the dimensions queried successfully this cycle; a
    dimension absent from it counts as not observed (its data ages). Pass no readings to
    recompute composites from memory alone (e.g. for new hot-node counts): taint debounce
    counters only advance on fresh observations.

    `pod_usages` holds the pods bound to each node (a node absent from it has none), from a
    complete pod ledger; None when there is none, and then no gate or pool is set.

    `known` names every node of the cluster when `nodes` is only some of them (a refresh after
    pod events replans just the nodes whose pods changed): the memory of the others is kept,
    and their scores still count in every normalisation."""
    failures = failures or {}
    hot = hot or {}
    readings = one_instant(readings)
    layout = CycleLayout.of(policy)
    names = {n.name for n in nodes} if known is None else set(known)
    planned = {n.name for n in nodes}
    cores = {k: v for k, v in memory.cores.items() if k in names and k not in planned}
    cores.update((n.name, int(n.amounts.get("cpu", 0) * 1000) / 1000) for n in nodes)
    context = CycleContext.of(
        layout, names, readings, memory, now, modelled_values(policy, nodes), cores
    )
    # Drain candidates weigh every node against the others: found in full cycles only (with a
    # complete pod ledger); a replan after pod events keeps the last full cycle's.
    if layout.drain is None:
        drain: dict[str, str] = {}
    elif known is None and pod_usages is not None:
        drain = plan_drain(policy, nodes, context, pod_usages)
    else:
        drain = {k: v for k, v in memory.drain.items() if k in names}
    # Nodes not replanned now keep their debounce state and floor.
    counters: dict[tuple[str, str], TaintCounter] = {
        k: v for k, v in memory.counters.items() if k[1] in names and k[1] not in planned
    }
    floors: dict[str, Floor] = {
        k: v for k, v in memory.floors.items() if k in names and k not in planned
    }
    node_plans = []
    for node in nodes:
        pods = None if pod_usages is None else pod_usages.get(node.name, ())
        plan = plan_node(context, node, hot.get(node.name, 0), pods, drain.get(node.name))
        node_plans.append(plan)
        for rule, state in plan.conditions.items():
            counters[(rule, node.name)] = TaintCounter(state.active, state.streak)
        if plan.floor is not None:
            floors[node.name] = plan.floor

    last_success = dict(memory.last_success)
    for name, done in readings.items():
        last_success[name] = max(done.observed_at, last_success.get(name, done.observed_at))
    summaries = []
    for d in layout.dims:
        reading = readings.get(d.name)
        failure = failures.get(d.name)
        success = last_success.get(d.name)
        age = None if success is None else max(0.0, now - success)
        summaries.append(
            DimensionSummary(
                dimension=d.name,
                label_key=d.key,
                query=d.dim.what,
                unit=d.dim.raw_unit,
                ok=reading is not None,
                stale=age is None or age > d.ttl,
                last_success=success,
                age_s=age,
                nodes=sum(1 for p in node_plans if d.key in p.labels),
                samples=reading.samples if reading else 0,
                unknown=reading.unknown if reading else 0,
                unknown_examples=reading.unknown_examples if reading else (),
                duration_s=reading.duration_s
                if reading
                else failure.duration_s
                if failure
                else 0.0,
                error=failure.message if failure else None,
                error_kind=failure.kind if failure else None,
                expected=reading.expected if reading else failure.expected if failure else None,
                problems=reading.problems if reading else failure.problems if failure else (),
                forms=reading.forms if reading else (),
            )
        )
    cycle = CyclePlan(
        policy_version=policy.version,
        planned_at=now,
        nodes=tuple(node_plans),
        dimensions=tuple(summaries),
        pods_known=pod_usages is not None,
    )
    new_memory = ScorerMemory(
        observations=MappingProxyType(context.observations),
        counters=MappingProxyType(counters),
        last_success=MappingProxyType(last_success),
        floors=MappingProxyType(
            floors
            if pod_usages is not None
            else {k: v for k, v in memory.floors.items() if k in names}
        ),
        drain=MappingProxyType(drain),
        cores=MappingProxyType(cores),
    )
    return cycle, new_memory
