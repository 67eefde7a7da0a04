"""The example policy's energy queries on a real Prometheus scraping the simulated cluster's
Kepler and kube-state-metrics series: dynamic watts per busy core where a node runs work, idle
watts everywhere, and the power model covering the node that has no work."""

from __future__ import annotations

from typing import Any

import pytest

from kits.prometheus_server import PrometheusServer
from kits.simulated_cluster import INSTANCE_TYPE_LABEL, NodePower, PowerModel, SimCluster
from kits.synthetic_exporter import SyntheticExporter
from scorer.model import NodeState
from scorer.observe import NodeIndex, read_dimension
from scorer.plan import DataStatus, ScorerMemory, plan_cycle
from scorer.presets import example_policy_text
from steer.core.policy import parse_policy

POLICY = parse_policy(example_policy_text())
POWER = PowerModel(
    types={
        "cpu-efficient": NodePower(idle_w=120, per_core_w=5),
        "cpu-legacy": NodePower(idle_w=220, per_core_w=11),
    }
)


def api_node(name: str, kind: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {INSTANCE_TYPE_LABEL: kind}},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def api_pod(name: str, node: str, cpu: str) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu, "memory": "2Gi"}, "limits": {"cpu": cpu}}
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": resources}]},
        "status": {"phase": "Running"},
    }


def test_kepler_watts_per_core_and_idle_watts_with_the_model_for_the_idle_node() -> None:
    nodes = [
        api_node("eff-1", "cpu-efficient"),
        api_node("leg-1", "cpu-legacy"),
        api_node("eff-2", "cpu-efficient"),  # idle: no series per core
    ]
    pods = [api_pod("a", "eff-1", "4"), api_pod("b", "leg-1", "3"), api_pod("c", "leg-1", "500m")]
    sim = SimCluster(POWER)
    sim.update(nodes, pods)
    core, idle = POLICY.dimension("core-power"), POLICY.dimension("idle-power")
    with SyntheticExporter(sim) as exporter, PrometheusServer([exporter.target]) as prom:
        per_core = prom.wait_for(
            core.what, lambda r: len(r.values_by("instance")) == 2, timeout_s=60
        )
        idle_w = prom.wait_for(idle.what, lambda r: len(r.values_by("instance")) == 3)
    # irate divides by the scrape timestamps while the exporter integrates its own clock, so
    # on a loaded machine a value can be off by some percent; one scrape serves every node, so
    # their ratio is exact.
    values = per_core.values_by("instance")
    assert values == {"eff-1": pytest.approx(5.0, rel=0.2), "leg-1": pytest.approx(11.0, rel=0.2)}
    assert values["leg-1"] / values["eff-1"] == pytest.approx(11 / 5, rel=0.01)
    idle = idle_w.values_by("instance")
    assert idle == {
        "eff-1": pytest.approx(120, rel=0.2),
        "leg-1": pytest.approx(220, rel=0.2),
        "eff-2": pytest.approx(120, rel=0.2),
    }
    assert idle["leg-1"] / idle["eff-1"] == pytest.approx(220 / 120, rel=0.01)

    states = [NodeState.from_k8s(n) for n in nodes]
    index = NodeIndex(states)
    readings = {
        name: read_dimension(
            POLICY.dimension(name), result.samples, observed_at=result.evaluated_at, index=index
        )
        for name, result in (("core-power", per_core), ("idle-power", idle_w))
    }
    plan, _ = plan_cycle(POLICY, states, readings, ScorerMemory(), per_core.evaluated_at)
    scored = {p.node: p.dimensions["core-power"] for p in plan.nodes}
    assert scored["eff-1"].status is DataStatus.FRESH
    # eff-2 runs nothing, so Kepler cannot say what its cores cost: the powerModel can, and
    # the idle efficient node ranks with the efficient one, not with the hungry one.
    assert scored["eff-2"].raw == 5.0
    labels = {p.node: p.labels["kube-steer.github.io/score-core-power"] for p in plan.nodes}
    assert labels == {"eff-1": "100", "eff-2": "100", "leg-1": "0"}
