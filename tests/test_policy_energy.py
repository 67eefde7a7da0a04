"""`spec.energy` validation: every problem named by its field path; the example policy's shape."""

from __future__ import annotations

import pytest

from steer.core.policy import PolicyError, parse_policy
from steer.core.steering import composite_weights, drain_keys, energy_composites
from steer.presets import example_policy_text
from tests.scorer_support import SMALL_POLICY


def issues(section: str, policy: str = SMALL_POLICY) -> dict[str, str]:
    with pytest.raises(PolicyError) as err:
        parse_policy(policy + section)
    return {i.path: i.message for i in err.value.issues}


def test_defaults_are_off() -> None:
    policy = parse_policy(SMALL_POLICY)
    energy = policy.spec.energy
    assert energy.watts_per_core is None and not energy.consolidates
    assert not energy.drain_candidates.enabled and drain_keys(policy) is None
    assert energy_composites(policy) == frozenset()


def test_references_directions_and_dependencies_are_checked() -> None:
    found = issues(
        """\
  energy:
    wattsPerCore: nope
    idleWatts: util
    powerModel:
      nodeLabel: "bad key!"
      types: {m5: {idleWatts: -1, wattsPerCore: 4}}
"""
    )
    # Field errors come first; the cross checks run once every field is well-typed.
    assert found == {"spec.energy.powerModel.types.m5.idleWatts": "must be at least 0, got -1"}
    found = issues(
        """\
  energy:
    wattsPerCore: nope
    powerModel: {nodeLabel: "bad key!"}
"""
    )
    assert set(found) == {"spec.energy.wattsPerCore", "spec.energy.powerModel.nodeLabel"}
    assert found["spec.energy.wattsPerCore"].startswith("unknown dimension 'nope'; known: [")
    assert found["spec.energy.powerModel.nodeLabel"].startswith("invalid label key: ")


def test_watts_need_lower_is_better_and_consolidation_needs_watts_per_core() -> None:
    higher = SMALL_POLICY.replace(
        "      direction: lowerIsBetter\n      weight: 1\n", "      weight: 1\n"
    )
    found = issues("  energy: {wattsPerCore: power}\n", higher)
    assert found == {
        "spec.energy.wattsPerCore": "dimension 'power' measures watts, so it needs direction: "
        "lowerIsBetter, got higherIsBetter"
    }
    found = issues(
        """\
  energy:
    consolidation: {weight: 2}
    drainCandidates: {enabled: true}
    powerModel: {types: {m5: {idleWatts: 100, wattsPerCore: 4}}}
"""
    )
    assert found == {
        "spec.energy.consolidation.weight": "consolidates the composites that count "
        "wattsPerCore, which is not set (weight 2)",
        "spec.energy.drainCandidates.enabled": "needs wattsPerCore: a node is drained onto "
        "nodes whose cores cost no more",
        "spec.energy.powerModel": "covers no dimension: set wattsPerCore or idleWatts as well",
    }


def test_the_example_policy_consolidates_its_default_composite_only() -> None:
    policy = parse_policy(example_policy_text())
    energy = policy.spec.energy
    assert energy.watts_per_core == "core-power" and energy.idle_watts == "idle-power"
    assert energy.consolidates and energy.drain_candidates.enabled
    # The default composite counts core-power; the GPU class (gpu-util, health) does not, so
    # it keeps the hot-node penalty where it matters: GPU load lags the jobs placed.
    assert energy_composites(policy) == frozenset({None})
    assert set(composite_weights(policy, None)) == {"core-power", "idle-power", "health"}
    # Absolute watts no longer rank nodes: they would spread work.
    assert policy.dimension("power").weight == 0
    assert drain_keys(policy) == (
        "kube-steer.github.io/drain-candidate",
        "kube-steer.github.io/drain-candidate-reason",
    )
    # No figures invented for instance types: the operator fills the model, or nodes with no
    # measurement are ranked by what is measured.
    assert energy.power_model.types == {}
