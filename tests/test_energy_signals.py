"""The example policy's energy queries on a real Prometheus holding the simulated cluster's
Kepler >= 0.10 and kube-state-metrics series over the last hour: watts per busy core where a
node's load moved, idle watts everywhere, and the node that has no work ranked by what is
measured (or by a power model the operator fills)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kits.prometheus_server import PrometheusServer
from kits.simulated_cluster import INSTANCE_TYPE_LABEL, NodePower, PowerModel, SimCluster
from kits.synthetic_exporter import Family, label_text
from scorer.cycle.observe import NodeIndex, read_dimension
from scorer.cycle.plan import DataStatus, ScorerMemory, plan_cycle
from scorer.model import NodeState
from steer.core.policy import parse_policy
from steer.presets import example_policy_text

POLICY = parse_policy(example_policy_text())
RECORDING_RULES = (
    Path(__file__).resolve().parent.parent
    / "manifests/components/prometheus-operator/recording-rules.yaml"
)
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


def history(sim: SimCluster, nodes: list[dict[str, Any]], start: float, end: float) -> str:
    """OpenMetrics text of the simulated cluster's series every 30 s from `start` to `end`,
    its pods' CPU changing every 10 minutes (as `LOADS` says), for promtool to backfill."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    families: dict[str, Family] = {}
    t = start
    while t <= end:
        phase = int((t - start) // 600) % len(LOADS)
        pods = [api_pod(f"p-{node}", node, str(cores)) for node, cores in LOADS[phase].items()]
        sim.update(nodes, pods, now=t)
        for family in sim.families(t):
            families[family.name] = family
            for labels, value in family.samples:
                series.setdefault((family.name, label_text(labels)), []).append((t, value))
        t += 30
    out = []
    for name, family in families.items():
        exposed = name.removesuffix("_total") if family.kind == "counter" else name
        out += [f"# HELP {exposed} {family.help}", f"# TYPE {exposed} {family.kind}"]
        out += [
            f"{name}{{{labels}}} {value!r} {ts:.3f}"
            for (fam, labels), points in series.items()
            if fam == name
            for ts, value in points
        ]
    return "\n".join([*out, "# EOF"]) + "\n"


# Requested cores per node in each 10-minute phase of the last 50 minutes; eff-2 runs nothing.
LOADS = (
    {"eff-1": 2, "leg-1": 1},
    {"eff-1": 6, "leg-1": 3},
    {"eff-1": 10, "leg-1": 8},
    {"eff-1": 4, "leg-1": 5},
    {"eff-1": 8, "leg-1": 2},
)


def test_kepler_watts_per_busy_core_from_the_hours_slope_and_the_model_for_the_idle_node() -> None:
    """Kepler >= 0.10 reports each node's watts and CPU usage, not what a core adds: the
    example's core-power reads it as the slope of watts over usage in the last hour, per core.
    Over 50 minutes of changing load that is exactly each machine's watts per core; the node
    whose load never moved has no value. The example ships no powerModel figures, so that node
    is ranked by what is measured; a model the operator fills covers it."""
    nodes = [
        api_node("eff-1", "cpu-efficient"),
        api_node("leg-1", "cpu-legacy"),
        api_node("eff-2", "cpu-efficient"),
    ]
    sim = SimCluster(POWER)
    now = time.time()
    prom = PrometheusServer([])
    prom.backfill(history(sim, nodes, now - 3000, now))
    core, idle = POLICY.dimension("core-power"), POLICY.dimension("idle-power")
    with prom:
        per_core = prom.wait_for(core.what, lambda r: len(r.values_by("node_name")) == 2)
        idle_w = prom.wait_for(idle.what, lambda r: len(r.values_by("node_name")) == 3)
    assert per_core.values_by("node_name") == {
        "eff-1": pytest.approx(5.0),
        "leg-1": pytest.approx(11.0),
    }
    # Kepler's idle share: the whole draw of the empty node, the rest of the busy ones'.
    last = LOADS[(3000 // 600) % len(LOADS)]  # the phase of the newest sample
    assert idle_w.values_by("node_name") == {
        "eff-1": pytest.approx((120 + 5 * last["eff-1"]) * (1 - last["eff-1"] / 16)),
        "leg-1": pytest.approx((220 + 11 * last["leg-1"]) * (1 - last["leg-1"] / 16)),
        "eff-2": pytest.approx(120),
    }

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
    # eff-2 runs nothing, so Kepler cannot say what its cores cost, and the example invents
    # no figure for its instance type: no core-power label; its composite counts what is
    # measured (its idle watts, the lowest, and health).
    assert scored["eff-2"].raw is None
    assert "kube-steer.github.io/score-core-power" not in plan_of(plan, "eff-2").labels
    labels = {p.node: p.labels.get("kube-steer.github.io/score-core-power") for p in plan.nodes}
    assert labels == {"eff-1": "100", "eff-2": None, "leg-1": "0"}
    composite = {p.node: int(p.labels["kube-steer.github.io/score"]) for p in plan.nodes}
    assert composite["eff-2"] > composite["leg-1"]

    # The operator's figures (spec.energy.powerModel) cover it: the idle efficient node ranks
    # with the efficient one, not with the hungry one.
    doc = yaml.safe_load(example_policy_text())
    doc["spec"]["energy"]["powerModel"]["types"] = {
        "cpu-efficient": {"idleWatts": 120, "wattsPerCore": 5},
        "cpu-legacy": {"idleWatts": 220, "wattsPerCore": 11},
    }
    filled = parse_policy(yaml.safe_dump(doc))
    plan, _ = plan_cycle(filled, states, readings, ScorerMemory(), per_core.evaluated_at)
    assert plan_of(plan, "eff-2").dimensions["core-power"].raw == 5.0
    labels = {p.node: p.labels["kube-steer.github.io/score-core-power"] for p in plan.nodes}
    assert labels == {"eff-1": "100", "eff-2": "100", "leg-1": "0"}


def plan_of(plan: Any, node: str) -> Any:
    return next(p for p in plan.nodes if p.node == node)


def test_core_power_reads_the_recording_rule_where_prometheus_evaluates_it() -> None:
    """With the shipped recording rule loaded, the example's core-power query reads the
    recorded slope (same values as the expression it records), named by the same form."""
    nodes = [api_node("eff-1", "cpu-efficient"), api_node("leg-1", "cpu-legacy")]
    now = time.time()
    groups = yaml.safe_load(RECORDING_RULES.read_text())["spec"]["groups"]
    fast = [{**g, "interval": "1s"} for g in groups]  # evaluated at once, not a minute later
    prom = PrometheusServer([], rule_groups=fast)
    prom.backfill(history(SimCluster(POWER), nodes, now - 3000, now))
    (rule,) = [r for g in groups for r in g["rules"]]
    core = POLICY.dimension("core-power")
    with prom:
        recorded = prom.wait_for(rule["record"], lambda r: len(r.values_by("node_name")) == 2)
        per_core = prom.wait_for(core.what, lambda r: len(r.values_by("node_name")) == 2)
    expected = {"eff-1": pytest.approx(5.0), "leg-1": pytest.approx(11.0)}
    assert recorded.values_by("node_name") == expected
    assert per_core.values_by("node_name") == expected
    assert {s.labels.get("form") for s in per_core.samples} == {"kepler >= 0.10"}
