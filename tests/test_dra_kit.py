"""The DRA test kit (kits/dra.py) and the simulated exporter on DRA GPUs: objects as the
v1.36 apiserver takes them, allocations read back, DCGM series per allocated device."""

from __future__ import annotations

from typing import Any

from kits.dra import (
    DEVICE_CLASS,
    DRIVER,
    EXTENDED_CLAIM_ANNOTATION,
    SELECTOR,
    allocations,
    claim_pod_spec,
    claim_template_body,
    device_class_body,
    gpu_uuid,
    pod_devices,
    resource_slice_body,
    slice_gpus,
)
from kits.simulated_cluster import SimCluster
from kits.synthetic_exporter import Family, dcgm_labels
from tests.test_simulated_cluster import node, pod


def claim(
    name: str,
    namespace: str,
    devices: list[tuple[str, str]],
    *,
    pods: tuple[str, ...] = (),
    extended: bool = False,
) -> dict[str, Any]:
    """An allocated ResourceClaim as the scheduler leaves it: (pool, device) per result."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if extended:
        meta["annotations"] = {EXTENDED_CLAIM_ANNOTATION: "true"}
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": DRIVER, "pool": pool, "device": device}
                    for pool, device in devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [devices[0][0]]}
                        ]
                    }
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods],
    }
    return {"metadata": meta, "spec": {}, "status": status}


def dra_node(name: str) -> dict[str, Any]:
    return node(name, cpu="64", memory="512Gi")  # no nvidia.com/gpu in allocatable


def test_objects_are_what_nvidias_driver_and_chart_publish() -> None:
    cls = device_class_body()
    assert cls["metadata"]["name"] == DEVICE_CLASS
    assert cls["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert cls["spec"]["selectors"] == [{"cel": {"expression": SELECTOR}}]
    spec = resource_slice_body("gpu-1")["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == (DRIVER, "gpu-1", "gpu-1")
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    first = spec["devices"][0]
    assert first["attributes"]["type"] == {"string": "gpu"}
    assert first["attributes"]["uuid"] == {"string": gpu_uuid("gpu-1", 0)}
    assert first["attributes"]["index"] == {"int": 0}
    assert first["capacity"]["memory"] == {"value": "80Gi"}
    # Stable per node and index, distinct across nodes, the same as a device-plugin GPU's.
    assert gpu_uuid("gpu-1", 3) == gpu_uuid("gpu-1", 3) != gpu_uuid("gpu-2", 3)
    assert gpu_uuid("gpu-1", 3) == dcgm_labels("gpu-1", 3)["UUID"]
    exactly = claim_template_body("one", 1)["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly == {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1}
    spec = claim_pod_spec({"containers": [{"name": "c", "resources": {"limits": {}}}]}, "one")
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "one"}]
    assert spec["containers"][0]["resources"] == {"limits": {}, "claims": [{"name": "gpus"}]}


def test_allocations_name_node_devices_and_pods() -> None:
    slices = [resource_slice_body("gpu-1"), resource_slice_body("gpu-2")]
    claims = [
        claim("a-gpus-x1", "team-a", [("gpu-1", "gpu-0")], pods=("a",)),
        claim("b-ext-x2", "team-a", [("gpu-2", "gpu-3")], pods=("b",), extended=True),
        {"metadata": {"name": "waiting", "namespace": "team-a"}, "status": {}},
    ]
    found = allocations(claims, slices)
    assert [(a.claim, a.node, a.device_names, a.pods, a.extended) for a in found] == [
        ("a-gpus-x1", "gpu-1", ("gpu-0",), ("team-a/a",), False),
        ("b-ext-x2", "gpu-2", ("gpu-3",), ("team-a/b",), True),
    ]
    # Without the slices, the allocation's node selector names the node.
    assert [a.node for a in allocations(claims)] == ["gpu-1", "gpu-2"]
    assert pod_devices(found) == {"team-a/a": ("gpu-1", 1), "team-a/b": ("gpu-2", 1)}
    assert [d.uuid for d in slice_gpus(slices)][:2] == [gpu_uuid("gpu-1", 0), gpu_uuid("gpu-1", 1)]


def gpu_series(families: list[Family], node_name: str) -> dict[str, dict[str, Any]]:
    """GPU index → its DCGM labels and values, of one node."""
    out: dict[str, dict[str, Any]] = {}
    for f in families:
        if not f.name.startswith("DCGM_"):
            continue
        for labels, value in f.samples:
            if labels.get("hostname") == node_name:
                entry = out.setdefault(labels["gpu"], {"labels": labels})
                entry[f.name] = value
    return out


def test_dra_devices_report_one_gpu_each_busy_when_a_claim_holds_them() -> None:
    sim = SimCluster(job_gpu_util=85, job_fb_mib=60000)
    nodes = [dra_node("gpu-1"), node("gpu-4", cpu="64", memory="512Gi", gpus=8)]
    slices = [resource_slice_body("gpu-1")]
    pods = [
        pod("tmpl", "gpu-1"),  # its GPU is in its claim, not in its requests
        pod("ext", "gpu-1", gpus=1),  # the extended-resource form: the scheduler's claim
        pod("plugin", "gpu-4", gpus=2),  # a device-plugin node beside them
    ]
    claims = [
        claim("tmpl-gpus-abcde", "team-a", [("gpu-1", "gpu-0")], pods=("tmpl",)),
        claim("ext-extended-resources-x", "team-a", [("gpu-1", "gpu-5")], pods=("ext",)),
    ]
    sim.update(nodes, pods, now=0, slices=slices, claims=claims)
    fams = sim.families(now=0)
    dra = gpu_series(fams, "gpu-1")
    assert sorted(dra, key=int) == [str(i) for i in range(8)]
    assert {i: g["labels"]["UUID"] for i, g in dra.items()} == {
        str(i): gpu_uuid("gpu-1", i) for i in range(8)
    }
    busy = {i: g["DCGM_FI_DEV_GPU_UTIL"] for i, g in dra.items() if g["DCGM_FI_DEV_GPU_UTIL"]}
    assert busy == {"0": 85, "5": 85}
    assert dra["0"]["DCGM_FI_DEV_FB_USED"] == 60000 and dra["1"]["DCGM_FI_DEV_FB_USED"] == 0
    assert (dra["0"]["labels"]["namespace"], dra["0"]["labels"]["pod"]) == ("team-a", "tmpl")
    assert dra["5"]["labels"]["pod"] == "ext"
    assert "pod" not in dra["1"]["labels"]
    # The device-plugin node is unchanged: the pod's two GPUs are the lowest indices.
    plugin = gpu_series(fams, "gpu-4")
    assert [i for i, g in plugin.items() if g["DCGM_FI_DEV_GPU_UTIL"]] == ["0", "1"]
    assert sim.gpu_assignment() == {
        "gpu-1": {0: "team-a/tmpl", 5: "team-a/ext"},
        "gpu-4": {0: "team-a/plugin", 1: "team-a/plugin"},
    }
    # Power: a DRA node is a GPU node (idle 800 W) and its allocated devices draw 300 W each.
    watts = sim.node_watts()
    assert watts["gpu-1"] == 800 + 6 * 2 + 300 * 2


def test_hot_dra_node_reports_external_load_on_every_device() -> None:
    sim = SimCluster(external_gpu_util={"gpu-5": 95}, external_fb_mib=16384)
    sim.update([dra_node("gpu-5")], [], now=0, slices=[resource_slice_body("gpu-5")])
    dra = gpu_series(sim.families(now=0), "gpu-5")
    assert {g["DCGM_FI_DEV_GPU_UTIL"] for g in dra.values()} == {95}
    assert {g["DCGM_FI_DEV_FB_USED"] for g in dra.values()} == {16384}
    assert len(dra) == 8
