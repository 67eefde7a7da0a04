"""Synthetic nodes shaped like the ones captured from a real cluster, for the demo and tests."""

from __future__ import annotations

from kits.apistub.server import ApiStub
from kits.apistub.status import JsonObject

DEFAULT_ZONES = ("zone-a", "zone-b", "zone-c")


def synthetic_node(
    name: str,
    zone: str = "zone-a",
    region: str = "region-1",
    cpu: str = "4",
    memory: str = "8Gi",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
) -> JsonObject:
    """A Ready node without a kubelet, with the labels a kubelet would have registered."""
    resources = {"cpu": cpu, "ephemeral-storage": "50Gi", "memory": memory, "pods": "110"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "topology.kubernetes.io/region": region,
                "topology.kubernetes.io/zone": zone,
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "synthetic node (no kubelet)",
                }
            ],
            "addresses": [{"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeletVersion": "v1.36.2",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def seed_nodes(
    stub: ApiStub,
    count: int,
    zones: tuple[str, ...] = DEFAULT_ZONES,
    gpu_every: int = 0,
    prefix: str = "worker-",
) -> list[str]:
    """Add `prefix1..prefixN`, spread round-robin over `zones`; every `gpu_every`-th node has
    8 GPUs (none when 0). Returns the node names."""
    names = []
    for i in range(1, count + 1):
        gpus = 8 if gpu_every and i % gpu_every == 0 else 0
        node = synthetic_node(f"{prefix}{i}", zone=zones[(i - 1) % len(zones)], gpus=gpus)
        names.append(stub.add_node(node)["metadata"]["name"])
    return names
