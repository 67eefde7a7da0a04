"""The live simulated cluster: series derived from Node/Pod JSON, without Kubernetes binaries."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kits.simulated_cluster import INSTANCE_TYPE_LABEL, NodePower, PowerModel, SimCluster
from kits.synthetic_exporter import DRAM_SHARE, Family, SyntheticCollector

GIB = 1024**3


def node(
    name: str, *, cpu: str = "16", memory: str = "64Gi", gpus: int = 0, ready: bool = True
) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    node_name: str | None,
    *,
    cpu: str = "1",
    limit_cpu: str | None = None,
    memory: str = "1Gi",
    gpus: int = 0,
    created: str = "2026-01-01T00:00:00Z",
    phase: str = "Pending",
    namespace: str = "team-a",
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    limits = {"cpu": limit_cpu or cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def samples(families: list[Family], name: str) -> list[tuple[dict[str, str], float]]:
    return [s for f in families if f.name == name for s in f.samples]


def by(families: list[Family], name: str, key: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for labels, value in samples(families, name):
        out.setdefault(labels[key], []).append(value)
    return out


def test_gpu_pods_get_the_lowest_free_gpus_and_keep_them() -> None:
    sim = SimCluster(job_gpu_util=80, job_fb_mib=60000)
    nodes = [node("gpu-1", cpu="64", memory="512Gi", gpus=8)]
    first = pod("one", "gpu-1", gpus=1, created="2026-01-01T00:00:01Z")
    second = pod("two", "gpu-1", gpus=2, created="2026-01-01T00:00:02Z")
    sim.update(nodes, [second, first], now=0)
    assert sim.gpu_assignment() == {"gpu-1": {0: "team-a/one", 1: "team-a/two", 2: "team-a/two"}}
    # `one` leaves; a newer pod takes its GPU, `two` keeps its own.
    third = pod("three", "gpu-1", gpus=1, created="2026-01-01T00:00:03Z")
    sim.update(nodes, [second, third], now=1)
    assert sim.gpu_assignment() == {"gpu-1": {0: "team-a/three", 1: "team-a/two", 2: "team-a/two"}}
    fams = sim.families(now=1)
    util = {labels["gpu"]: v for labels, v in samples(fams, "DCGM_FI_DEV_GPU_UTIL")}
    used = {labels["gpu"]: v for labels, v in samples(fams, "DCGM_FI_DEV_FB_USED")}
    free = {labels["gpu"]: v for labels, v in samples(fams, "DCGM_FI_DEV_FB_FREE")}
    assert util == {"0": 80, "1": 80, "2": 80, "3": 0, "4": 0, "5": 0, "6": 0, "7": 0}
    assert used["0"] == 60000 and used["7"] == 0 and free["0"] == 81920 - 60000
    assert {labels["hostname"] for labels, _ in samples(fams, "DCGM_FI_DEV_GPU_UTIL")} == {"gpu-1"}


def test_dcgm_releases_before_the_rename_name_the_node_in_capital_hostname() -> None:
    sim = SimCluster(dcgm_host_label="Hostname")
    sim.update([node("gpu-1", gpus=1)], [], now=0)
    labels = [lb for lb, _ in samples(sim.families(now=0), "DCGM_FI_DEV_GPU_UTIL")]
    assert [(lb.get("Hostname"), lb.get("hostname")) for lb in labels] == [("gpu-1", None)]


def test_external_load_makes_idle_gpus_hot_and_adds_to_jobs() -> None:
    sim = SimCluster(external_gpu_util={"gpu-2": 95}, external_fb_mib=16384, job_gpu_util=85)
    nodes = [node("gpu-2", cpu="64", memory="512Gi", gpus=8), node("cpu-1")]
    sim.update(nodes, [pod("job", "gpu-2", gpus=1)], now=0)
    fams = sim.families(now=0)
    util = by(fams, "DCGM_FI_DEV_GPU_UTIL", "hostname")
    assert util == {"gpu-2": [100, 95, 95, 95, 95, 95, 95, 95]}  # no DCGM series on cpu-1
    assert by(fams, "DCGM_FI_DEV_FB_USED", "hostname")["gpu-2"][1] == 16384


def test_ksm_series_follow_pods_and_allocatable() -> None:
    sim = SimCluster()
    nodes = [node("cpu-1", cpu="16", memory="64Gi")]
    pods = [
        pod("bound", "cpu-1", cpu="2", limit_cpu="2100m"),
        pod("waiting", None, cpu="500m"),
        pod("done", "cpu-1", phase="Succeeded"),
    ]
    sim.update(nodes, pods, now=0)
    fams = sim.families(now=0)
    alloc = {
        (lb["node"], lb["resource"], lb["unit"]): v
        for lb, v in samples(fams, "kube_node_status_allocatable")
    }
    assert alloc[("cpu-1", "cpu", "core")] == 16
    assert alloc[("cpu-1", "memory", "byte")] == 64 * GIB
    limits = {
        (lb["pod"], lb["node"], lb["resource"]): v
        for lb, v in samples(fams, "kube_pod_container_resource_limits")
    }
    assert limits[("bound", "cpu-1", "cpu")] == pytest.approx(2.1)
    assert limits[("waiting", "", "cpu")] == 0.5  # KSM reports unbound pods with node=""
    assert not any(k[0] == "done" for k in limits)
    requests = samples(fams, "kube_pod_container_resource_requests")
    assert {lb["namespace"] for lb, _ in requests} == {"team-a"}
    assert all({"uid", "container", "unit"} <= set(lb) for lb, _ in requests)


def zone_sums(families: list[Family], name: str) -> dict[str, float]:
    """A Kepler >= 0.10 family summed over its zones, by node."""
    out: dict[str, float] = {}
    for labels, value in samples(families, name):
        out[labels["node_name"]] = out.get(labels["node_name"], 0.0) + value
    return out


def test_kepler_010_splits_the_modelled_watts_by_requested_cores() -> None:
    power = PowerModel(cpu_node_idle_w=100, gpu_node_idle_w=500, per_core_w=10, per_gpu_w=200)
    sim = SimCluster(power, external_gpu_util={"gpu-2": 50})
    nodes = [node("cpu-1"), node("cpu-2"), node("gpu-1", gpus=8), node("gpu-2", gpus=8)]
    pods = [
        pod("a", "cpu-1", cpu="4"),
        pod("big", "cpu-2", cpu="40"),  # requests more than the node's 16 cores
        pod("g", "gpu-1", cpu="8", gpus=2),
        pod("p", None, cpu="8"),  # unbound: no node's usage
    ]
    sim.update(nodes, pods, now=100)
    fams = sim.families(now=110)  # 10 s at those watts
    ratio = {lb["node_name"]: v for lb, v in samples(fams, "kepler_node_cpu_usage_ratio")}
    assert ratio == {"cpu-1": 0.25, "cpu-2": 1.0, "gpu-1": 0.5, "gpu-2": 0.0}
    # The node draws its GPUs' busy share too; the CPU meter (RAPL) reads the rest.
    assert sim.node_watts() == {
        "cpu-1": 140,
        "cpu-2": 500,
        "gpu-1": 500 + 80 + 400,
        "gpu-2": 500 + 800,
    }
    watts = {"cpu-1": 140, "cpu-2": 500, "gpu-1": 500 + 80, "gpu-2": 500}
    assert zone_sums(fams, "kepler_node_cpu_watts") == pytest.approx(watts)
    package = {
        lb["node_name"]: v
        for lb, v in samples(fams, "kepler_node_cpu_watts")
        if lb["zone"] == "package"
    }
    assert package == pytest.approx({n: w * (1 - DRAM_SHARE) for n, w in watts.items()})
    active = zone_sums(fams, "kepler_node_cpu_active_watts")
    idle = zone_sums(fams, "kepler_node_cpu_idle_watts")
    assert active == pytest.approx({n: w * ratio[n] for n, w in watts.items()})
    assert idle == pytest.approx({n: w * (1 - ratio[n]) for n, w in watts.items()})
    joules = zone_sums(fams, "kepler_node_cpu_joules_total")
    assert joules == pytest.approx({n: 10 * w for n, w in watts.items()})
    active_j = zone_sums(fams, "kepler_node_cpu_active_joules_total")
    assert active_j == pytest.approx({n: 10 * w * ratio[n] for n, w in watts.items()})
    assert not any(f.name.startswith("kepler_node_p") for f in fams)  # no Kepler 0.7 families

    # The pod leaves cpu-1: the counters keep what they had, and only idle energy grows.
    sim.update(nodes, pods[1:], now=120)
    fams = sim.families(now=130)
    assert zone_sums(fams, "kepler_node_cpu_active_joules_total")["cpu-1"] == pytest.approx(
        2 * 10 * 140 * 0.25
    )
    assert zone_sums(fams, "kepler_node_cpu_idle_joules_total")["cpu-1"] == pytest.approx(
        2 * 10 * 140 * 0.75 + 10 * 100
    )
    assert zone_sums(fams, "kepler_node_cpu_active_watts")["cpu-1"] == 0


def test_power_model_and_kepler_07_counters() -> None:
    power = PowerModel(cpu_node_idle_w=100, gpu_node_idle_w=500, per_core_w=10, per_gpu_w=200)
    sim = SimCluster(power, external_gpu_util={"gpu-2": 50}, kepler_styles=("0.7",))
    nodes = [node("cpu-1"), node("gpu-1", gpus=8), node("gpu-2", gpus=8)]
    pods = [pod("a", "cpu-1", cpu="3"), pod("g", "gpu-1", cpu="4", gpus=2), pod("p", None, cpu="8")]
    sim.update(nodes, pods, now=100)
    assert sim.node_watts() == {
        "cpu-1": 100 + 30,
        "gpu-1": 500 + 40 + 2 * 200,
        "gpu-2": 500 + 8 * 0.5 * 200,
    }
    sim.families(now=110)  # 10 s at those watts
    fams = sim.families(now=110)
    joules = {
        (lb["instance"], lb["mode"]): v
        for lb, v in samples(fams, "kepler_node_platform_joules_total")
    }
    assert joules[("cpu-1", "idle")] == pytest.approx(1000)
    assert joules[("cpu-1", "dynamic")] == pytest.approx(300)
    assert joules[("gpu-1", "idle")] + joules[("gpu-1", "dynamic")] == pytest.approx(9400)
    assert not any(f.name.startswith("kepler_node_cpu_") for f in fams)
    # The pod leaves: the counter keeps what it had and grows at the idle rate.
    sim.update(nodes, [], now=120)
    sim.update(nodes, [], now=130)
    fams = sim.families(now=130)
    total = sum(
        v
        for lb, v in samples(fams, "kepler_node_platform_joules_total")
        if lb["instance"] == "cpu-1"
    )
    assert total == pytest.approx(1300 + 1300 + 1000)


def test_instance_types_pick_their_watts_and_the_package_counter_is_cpu_dynamic_only() -> None:
    power = PowerModel(
        per_gpu_w=200,
        types={"frugal": NodePower(idle_w=100, per_core_w=5), "hungry": NodePower(200, 11)},
    )
    sim = SimCluster(power, kepler_styles=("0.7",))
    frugal, hungry, other = node("f"), node("h", gpus=8), node("o")
    frugal["metadata"]["labels"] = {INSTANCE_TYPE_LABEL: "frugal"}
    hungry["metadata"]["labels"] = {INSTANCE_TYPE_LABEL: "hungry"}
    pods = [pod("a", "f", cpu="2"), pod("b", "h", cpu="2", gpus=1), pod("c", "o", cpu="2")]
    sim.update([frugal, hungry, other], pods, now=0)
    # An unknown (or absent) type takes the defaults: 150 W idle, 6 W per core.
    assert sim.node_watts() == {"f": 100 + 10, "h": 200 + 22 + 200, "o": 150 + 12}
    sim.families(now=0)
    fams = sim.families(now=10)
    package = {
        (lb["instance"], lb["mode"]): v
        for lb, v in samples(fams, "kepler_node_package_joules_total")
    }
    # 10 s: dynamic CPU energy only (cores x watts per core), no GPU, no idle share.
    assert package[("f", "dynamic")] == pytest.approx(100)
    assert package[("h", "dynamic")] == pytest.approx(220)
    assert package[("o", "dynamic")] == pytest.approx(120)
    assert package[("h", "idle")] == 0
    platform = {
        (lb["instance"], lb["mode"]): v
        for lb, v in samples(fams, "kepler_node_platform_joules_total")
    }
    assert platform[("h", "idle")] == pytest.approx(2000)


def test_probe_success_uses_the_health_job_and_readiness() -> None:
    sim = SimCluster()
    sim.update([node("a"), node("b", ready=False)], [], now=0)
    probes = {
        lb["node"]: (lb["job"], lb["instance"], v)
        for lb, v in samples(sim.families(now=0), "probe_success")
    }
    assert probes == {"a": ("node-health", "a", 1.0), "b": ("node-health", "b", 0.0)}


def test_exposition_text_has_the_names_real_exporters_use() -> None:
    sim = SimCluster()
    sim.update([node("gpu-1", gpus=1)], [pod("x", "gpu-1", gpus=1)], now=0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SyntheticCollector(sim))
    text = generate_latest(registry).decode()
    for name in (
        "DCGM_FI_DEV_GPU_UTIL{",
        "DCGM_FI_DEV_FB_USED{",
        "DCGM_FI_DEV_FB_FREE{",
        "kepler_node_cpu_watts{",
        "kepler_node_cpu_active_watts{",
        "kepler_node_cpu_idle_watts{",
        'kepler_node_cpu_usage_ratio{node_name="gpu-1"}',
        "kube_node_status_allocatable{",
        "kube_pod_container_resource_limits{",
        "kube_pod_container_resource_requests{",
        'probe_success{instance="gpu-1",job="node-health",node="gpu-1"}',
        'resource="nvidia_com_gpu"',
    ):
        assert name in text
