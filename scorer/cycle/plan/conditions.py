"""Taint rules on one node: whether the condition holds, debounced over cycles.

A rule's taint is set after `setAfterCycles` fresh observations that hold and lifted after
`clearAfterCycles` that do not; data past its TTL lifts it at once (no taint from no data).
"""

from __future__ import annotations

from collections.abc import Mapping

from scorer.cycle.plan.layout import RuleLayout
from scorer.cycle.plan.model import (
    ConditionState,
    DataStatus,
    DimensionScore,
    ScorerMemory,
    TaintCounter,
)
from scorer.cycle.plan.record import MANAGED_SUFFIX, ManagedRecord, recorded_prefixes
from scorer.model import NodeState
from steer.core.steering import CONDITION_VALUE


def carries_condition(node: NodeState, key: str, rule_name: str, prefix: str) -> bool:
    """Whether the node carries a taint rule's condition (its taint, or its label `true`) under
    `key`, or under an earlier prefix whose managed record lists that key."""

    def on(k: str) -> bool:
        return any(t.key == k for t in node.taints) or node.labels.get(k) == CONDITION_VALUE

    if on(key):
        return True
    for old in recorded_prefixes(node):
        if old == prefix:
            continue
        record = ManagedRecord.parse(node.annotations.get(old + MANAGED_SUFFIX))
        if (old + rule_name) in record.labels | record.taints and on(old + rule_name):
            return True
    return False


def plan_condition(
    r: RuleLayout,
    node: NodeState,
    dims: Mapping[str, DimensionScore],
    memory: ScorerMemory,
    prefix: str,
) -> ConditionState:
    """The rule's state on the node after this cycle; its `active` and `streak` are the
    debounce counter the memory keeps for the next cycle."""
    rule = r.rule
    entry = dims[rule.condition.dimension]
    previous = memory.counters.get((rule.name, node.name))
    if previous is None:
        # Continue from what the node carries (a restart or a new leader must not drop taints),
        # also under an earlier labelPrefix whose record lists the rule's key (an upgrade or a
        # prefix change must not lift an `unhealthy` taint for the cycles it takes to set).
        carried = carries_condition(node, r.key, rule.name, prefix)
        previous = TaintCounter(active=carried)
    observed = entry.raw if rule.condition.source == "raw" else entry.score
    holds: bool | None = None
    if entry.status in (DataStatus.STALE, DataStatus.MISSING):
        # No usable data: no taint from it (the TTL rule, scorer/cycle/plan/__init__.py).
        counter = TaintCounter(active=False)
    elif entry.status is DataStatus.FRESH and observed is not None:
        holds = rule.condition.holds(observed, active=previous.active)
        if holds == previous.active:
            counter = TaintCounter(active=previous.active)
        else:
            streak = previous.streak + 1
            needed = rule.clear_after_cycles if previous.active else rule.set_after_cycles
            counter = (
                TaintCounter(active=holds)
                if streak >= needed
                else TaintCounter(previous.active, streak)
            )
    else:
        counter = previous  # retained or carried data: hold the state, do not count a cycle
    return ConditionState(
        rule=rule.name,
        key=r.key,
        effect=rule.effect,
        status=entry.status,
        observed=observed,
        holds=holds,
        active=counter.active,
        streak=counter.streak,
    )
