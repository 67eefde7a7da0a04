"""The scorer's budget pool series (scorer/metrics.py `set_pools`): what the dashboard's pool
panel reads. Summed per resource; a pool the policy dropped loses its series instead of
showing its last value forever."""

from __future__ import annotations

from scorer.metrics import ScorerMetrics

CPU, MEMORY = "kube-steer.github.io/pool-cpu", "kube-steer.github.io/pool-memory"


def pool_series(metrics: ScorerMetrics) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels["resource"]): s.value
        for family in metrics.registry.collect()
        if family.name in ("steer_scorer_pool_capacity", "steer_scorer_pool_free")
        for s in family.samples
    }


def test_pools_are_exported_per_resource_and_a_dropped_pool_disappears() -> None:
    metrics = ScorerMetrics()
    metrics.set_pools({CPU: 16_000, MEMORY: 65_536}, {CPU: 4_000, MEMORY: 1_024})
    assert pool_series(metrics) == {
        ("steer_scorer_pool_capacity", CPU): 16_000,
        ("steer_scorer_pool_capacity", MEMORY): 65_536,
        ("steer_scorer_pool_free", CPU): 4_000,
        ("steer_scorer_pool_free", MEMORY): 1_024,
    }
    metrics.set_pools({CPU: 8_000}, {CPU: 8_000})
    assert pool_series(metrics) == {
        ("steer_scorer_pool_capacity", CPU): 8_000,
        ("steer_scorer_pool_free", CPU): 8_000,
    }
    metrics.set_pools({}, {})
    assert pool_series(metrics) == {}


def test_the_overrun_is_exported_per_pool_and_zero_while_every_budget_holds() -> None:
    metrics = ScorerMetrics()
    metrics.set_pools({CPU: 16_000, MEMORY: 65_536}, {CPU: 0, MEMORY: 0}, {CPU: (1_500, 2)})
    series = {
        (s.name, s.labels["resource"]): s.value
        for family in metrics.registry.collect()
        if family.name.startswith("steer_scorer_pool_overrun")
        for s in family.samples
    }
    assert series == {
        ("steer_scorer_pool_overrun", CPU): 1_500,
        ("steer_scorer_pool_overrun", MEMORY): 0,
        ("steer_scorer_pool_overrun_nodes", CPU): 2,
        ("steer_scorer_pool_overrun_nodes", MEMORY): 0,
    }
    metrics.set_pools({}, {})
    assert not [
        s
        for f in metrics.registry.collect()
        if f.name.startswith("steer_scorer_pool")
        for s in f.samples
    ]
