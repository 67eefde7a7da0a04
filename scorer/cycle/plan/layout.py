"""What a policy fixes for a cycle (label keys, steps, gates, composites), derived once per
cycle instead of once per node, and the cycle's inputs shared by every node's plan."""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from scorer.cycle.observe import DimensionReading
from scorer.cycle.plan.model import Observation, ScorerMemory
from scorer.cycle.plan.record import managed_key, observed_at_key
from steer.core.budget import (
    BudgetNames,
    budget_gate,
    enforced,
    gated_levels,
    levels,
    overcommit_gate,
)
from steer.core.device_counter import DeviceCounter, device_counters
from steer.core.encoding import normalise
from steer.core.gates import Gate, avoid_gate, unreserved_gate
from steer.core.policy import (
    DRAIN_REASON_ANNOTATION,
    Dimension,
    Direction,
    PodClass,
    Policy,
    TaintRule,
)
from steer.core.steering import (
    composite_weights,
    composites,
    condition_key,
    dimension_key,
    drain_keys,
    drain_taint_key,
    energy_composites,
    overcommit_key,
    owned_label_keys,
    owned_resource_keys,
    owned_taint_keys,
    reserved_key,
    reserving_classes,
)


def _bounds(dim: Dimension) -> tuple[float, float] | None:
    norm = dim.normalization
    if norm.method == "fixed" and norm.min is not None and norm.max is not None:
        return (norm.min, norm.max)
    return None


@dataclass(frozen=True)
class DimensionLayout:
    dim: Dimension
    name: str
    key: str
    step: int
    hysteresis: float
    ttl: float
    raw: bool  # publish: raw


@dataclass(frozen=True)
class RuleLayout:
    rule: TaintRule
    key: str


@dataclass(frozen=True)
class CycleLayout:
    """Everything a policy fixes for a cycle, derived once instead of once per node."""

    dims: tuple[DimensionLayout, ...]
    composites: tuple[tuple[str | None, str, Mapping[str, float]], ...]
    rules: tuple[RuleLayout, ...]
    owned_labels: tuple[str, ...]
    owned_taints: frozenset[str]
    # False in audit mode (Spec.mode_for): conditions are labelled, never tainted.
    taints_written: bool
    annotation_key: str
    record_key: str
    step: int
    hysteresis: float
    penalty_per_pod: float
    # Composites of classes routed to the bin-packing profile: no hot-node penalty there, since
    # piling onto the node that just took a pod is what bin-packing is for.
    packing: frozenset[str]
    reserving: tuple[tuple[PodClass, str], ...]
    policy: Policy
    owned_resources: frozenset[str]
    # Gates other than the budget's: (gate, what opens it: ("avoid", rule) | ("reserved",
    # class key) | ("overcommit", level)).
    gates: tuple[tuple[Gate, tuple[str, str | float]], ...]
    overcommit_label: str
    budget_names: BudgetNames
    budget_gates: tuple[tuple[float, Gate], ...]
    # Where pools and gates were named before (spec.formerResourcePrefixes): what pods hold
    # under them stays published until released.
    former_prefixes: tuple[str, ...] = ()
    # Composites that consolidate (steer/core/policy/energy.py): "the node runs pods" weighs
    # this much beside their dimensions, and no hot-node penalty applies to them.
    consolidating: frozenset[str | None] = frozenset()
    consolidation_weight: float = 0.0
    # The energy wattsPerCore dimension, which scales each active node's consolidation term.
    watts_per_core: str | None = None
    # The energy idleWatts dimension, scored per allocatable core (CycleContext.of).
    idle_watts: str | None = None
    # (drain-candidate label, its reason annotation) when the policy marks drain candidates;
    # the annotation key alone otherwise, so a mark left by an earlier policy is removed.
    drain: tuple[str, str] | None = None
    drain_annotation: str = ""
    # The drain candidates' PreferNoSchedule taint, when descheduling consolidation keys on it.
    drain_taint: str | None = None
    # The pod classes' device counters (steer/core/device_counter.py).
    counters: tuple[DeviceCounter, ...] = ()

    @classmethod
    def of(cls, policy: Policy) -> CycleLayout:
        owned = owned_resource_keys(policy)
        gates: dict[str, tuple[Gate, tuple[str, str | float]]] = {}
        for c in policy.spec.pod_classes:
            for name in c.avoid:
                gate = avoid_gate(policy, policy.taint_rule(name))
                gates[gate.resource] = (gate, ("avoid", name))
            if c.reserve_nodes == "require":
                gate = unreserved_gate(policy, c)
                gates[gate.resource] = (gate, ("reserved", reserved_key(policy, c)))
        if not enforced(policy):
            for lv in levels(policy):
                gate = overcommit_gate(policy, lv)
                gates[gate.resource] = (gate, ("overcommit", lv))
        return cls(
            policy=policy,
            owned_resources=owned,
            budget_names=BudgetNames.of(policy),
            budget_gates=tuple((lv, budget_gate(policy, lv)) for lv in gated_levels(policy)),
            former_prefixes=policy.spec.former_resource_prefixes,
            gates=tuple(gates[k] for k in sorted(gates)),
            dims=tuple(
                DimensionLayout(
                    dim=d,
                    name=d.name,
                    key=dimension_key(policy, d),
                    step=policy.step_of(d),
                    hysteresis=policy.hysteresis_of(d),
                    ttl=policy.ttl_of(d),
                    raw=d.publish == "raw",
                )
                for d in policy.spec.dimensions
            ),
            composites=tuple(
                (c.name if c else None, key, composite_weights(policy, c))
                for c, key in composites(policy)
            ),
            rules=tuple(RuleLayout(r, condition_key(policy, r)) for r in policy.spec.taints),
            owned_labels=tuple(sorted(owned_label_keys(policy))),
            owned_taints=owned_taint_keys(policy),
            taints_written=policy.spec.taints_written,
            annotation_key=observed_at_key(policy),
            record_key=managed_key(policy),
            step=policy.spec.scoring.step,
            hysteresis=policy.spec.scoring.hysteresis,
            penalty_per_pod=policy.spec.scoring.hot_penalty_per_pod,
            packing=frozenset(
                c.name
                for c in policy.spec.pod_classes
                if c.scheduler_profile is not None
                and c.scheduler_profile == policy.spec.scheduler_profiles.binpack
            ),
            reserving=tuple((c, reserved_key(policy, c)) for c in reserving_classes(policy)),
            overcommit_label=overcommit_key(policy),
            consolidating=energy_composites(policy),
            consolidation_weight=policy.spec.energy.consolidation.weight,
            watts_per_core=policy.spec.energy.watts_per_core,
            idle_watts=policy.spec.energy.idle_watts,
            drain=drain_keys(policy),
            drain_annotation=policy.label_key(DRAIN_REASON_ANNOTATION),
            drain_taint=drain_taint_key(policy),
            counters=device_counters(policy),
        )


def remember(
    layout: CycleLayout,
    names: Set[str],
    readings: Mapping[str, DimensionReading],
    memory: ScorerMemory,
    now: float,
    modelled: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, dict[str, Observation]]:
    """Last observation per (dimension, node), without expired ones or vanished nodes. A node
    with none left takes its value from the power model (`modelled`: dimension → node →
    value, observed now): a measurement, fresh or remembered, always comes first."""
    out: dict[str, dict[str, Observation]] = {}
    for d in layout.dims:
        merged = {n: o for n, o in (memory.observations.get(d.name) or {}).items() if n in names}
        reading = readings.get(d.name)
        if reading is not None:
            for node, value in reading.values.items():
                if node in names:
                    merged[node] = Observation(value, reading.observed_at)
        kept = {n: o for n, o in merged.items() if now - o.observed_at <= d.ttl}
        for node, value in ((modelled or {}).get(d.name) or {}).items():
            if node in names and node not in kept:
                kept[node] = Observation(value, now)
        out[d.name] = kept
    return out


def scored_values(
    name: str,
    observations: Mapping[str, Observation],
    idle_watts: str | None,
    cores: Mapping[str, float],
) -> dict[str, float]:
    """The values a dimension's scores are normalised from: its raw values, except the energy
    idleWatts dimension's, which are per allocatable core. Waking a node buys its cores: a
    64-core GPU server idling at 800 W costs less per core than a 16-core node at 220 W, and
    compared whole, such servers stretch the range until an efficient 16-core node (120 W) and
    a power-hungry one (220 W) score within a bucket of each other (measured on the placement
    bench's mixed-energy scenario). The raw value, what /explain shows and drain candidates
    weigh, stays the node's watts; a node whose cores are unknown gets no score."""
    if name != idle_watts:
        return {n: o.value for n, o in observations.items()}
    return {n: o.value / cores[n] for n, o in observations.items() if cores.get(n, 0.0) > 0}


@dataclass(frozen=True)
class CycleContext:
    """This cycle's inputs every node's plan reads: the layout, the dimensions read this cycle
    (`fresh`: dimension → node → value), the remembered observations and their normalised
    scores (dimension → node), the previous memory and the planning time."""

    layout: CycleLayout
    fresh: Mapping[str, Mapping[str, float]]
    observations: Mapping[str, Mapping[str, Observation]]
    scores: Mapping[str, Mapping[str, float]]
    memory: ScorerMemory
    now: float
    # The best score of the energy wattsPerCore dimension on any node (the cheapest cores in
    # the cluster), None when no node has one: what consolidation weighs each node against.
    cheapest_cores: float | None = None

    @classmethod
    def of(
        cls,
        layout: CycleLayout,
        names: Set[str],
        readings: Mapping[str, DimensionReading],
        memory: ScorerMemory,
        now: float,
        modelled: Mapping[str, Mapping[str, float]] | None = None,
        cores: Mapping[str, float] | None = None,
    ) -> CycleContext:
        """`names`: every node of the cluster (their scores count in every normalisation);
        `modelled`: the power model's values for nodes without a measurement; `cores`: each
        node's allocatable cores, per which the energy idleWatts dimension is scored."""
        observations = remember(layout, names, readings, memory, now, modelled)
        scores = {
            d.name: normalise(
                scored_values(d.name, observations[d.name], layout.idle_watts, cores or {}),
                higher_is_better=d.dim.direction is Direction.HIGHER_IS_BETTER,
                bounds=_bounds(d.dim),
            )
            for d in layout.dims
        }
        fresh = {name: reading.values for name, reading in readings.items()}
        per_core = scores.get(layout.watts_per_core or "", {})
        cheapest = max(per_core.values()) if per_core else None
        return cls(layout, fresh, observations, scores, memory, now, cheapest)
