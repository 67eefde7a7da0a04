"""Fake Nodes shaped like a busy cluster's (8-10 KB each: images, labels, annotations),
created with their status."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from kits.control_plane import ready_node_status

from .api import Api
from .progress import WORKERS, in_parallel

GPU = "nvidia.com/gpu"
ZONES = ("zone-a", "zone-b", "zone-c")


GPU_EVERY = 4  # every 4th node has GPUs
GPUS_PER_NODE = 8


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Images a node of a busy cluster has pulled (kubelet reports up to 50): names and sizes.
_IMAGE_REPOS = (
    "registry.k8s.io/kube-proxy",
    "registry.k8s.io/pause",
    "docker.io/calico/node",
    "docker.io/calico/cni",
    "nvcr.io/nvidia/k8s-device-plugin",
    "nvcr.io/nvidia/k8s/dcgm-exporter",
    "quay.io/prometheus/node-exporter",
    "quay.io/sustainable_computing_io/kepler",
    "docker.io/fluent/fluent-bit",
    "registry.k8s.io/coredns/coredns",
    "registry.k8s.io/metrics-server/metrics-server",
    "docker.io/library/nginx",
    "docker.io/library/redis",
    "docker.io/library/postgres",
    "ghcr.io/example/orders-api",
    "ghcr.io/example/orders-worker",
    "ghcr.io/example/payments",
    "ghcr.io/example/catalog",
    "ghcr.io/example/search-indexer",
    "ghcr.io/example/frontend",
    "nvcr.io/nvidia/pytorch",
    "nvcr.io/nvidia/tritonserver",
    "docker.io/bitnami/kafka",
    "docker.io/grafana/promtail",
    "docker.io/istio/proxyv2",
    "docker.io/jaegertracing/jaeger-agent",
    "quay.io/jetstack/cert-manager-controller",
    "registry.k8s.io/ingress-nginx/controller",
    "docker.io/library/busybox",
    "docker.io/library/python",
    "docker.io/library/golang",
    "ghcr.io/example/ml-trainer",
    "ghcr.io/example/feature-store",
    "ghcr.io/example/recommender",
    "ghcr.io/example/notifications",
)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


IMAGES = tuple(
    {
        "names": [
            f"{repo}@sha256:{digest(repo)}",
            f"{repo}:v{1 + i % 4}.{i % 10}.{(i * 7) % 13}",
        ],
        "sizeBytes": 5_000_000 + (int(digest(repo)[:8], 16) % 900_000_000),
    }
    for i, repo in enumerate(_IMAGE_REPOS)
)


@dataclass(frozen=True)
class FakeNode:
    index: int
    name: str
    zone: str
    gpus: int = 0
    cpu: int = 64
    memory_gib: int = 256
    pods: int = 110

    @property
    def ip(self) -> str:
        return f"10.{(self.index >> 16) & 255}.{(self.index >> 8) & 255}.{self.index & 255}"

    def body(self) -> dict[str, Any]:
        """A Node with its status (kept on create: there is no kubelet to report it)."""
        capacity = {
            "cpu": str(self.cpu),
            "memory": f"{self.memory_gib}Gi",
            "pods": str(self.pods),
            "ephemeral-storage": "507944172Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
        }
        labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "p4d.24xlarge" if self.gpus else "m6i.16xlarge",
            "topology.kubernetes.io/region": "region-1",
            "topology.kubernetes.io/zone": self.zone,
            "failure-domain.beta.kubernetes.io/region": "region-1",
            "failure-domain.beta.kubernetes.io/zone": self.zone,
            "node-pool": "gpu" if self.gpus else "general",
        }
        if self.gpus:
            capacity[GPU] = str(self.gpus)
            labels |= {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": str(self.gpus),
                "nvidia.com/gpu.memory": "81920",
                "nvidia.com/cuda.driver.major": "550",
            }
        now = rfc3339(time.time())
        conditions = [
            {
                "type": kind,
                "status": "False",
                "reason": f"KubeletHas{reason}",
                "message": f"kubelet has {message}",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for kind, reason, message in (
                ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
                ("DiskPressure", "NoDiskPressure", "no disk pressure"),
                ("PIDPressure", "SufficientPID", "sufficient PID available"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status (fake node)",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )
        machine = digest(self.name)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    "alpha.kubernetes.io/provided-node-ip": self.ip,
                    "csi.volume.kubernetes.io/nodeid": json.dumps(
                        {"ebs.csi.aws.com": f"i-{machine[:17]}"}
                    ),
                },
            },
            "spec": {
                "podCIDR": f"10.{128 + (self.index >> 8) % 64}.{self.index & 255}.0/24",
                "podCIDRs": [f"10.{128 + (self.index >> 8) % 64}.{self.index & 255}.0/24"],
                "providerID": f"aws:///{self.zone}/i-{machine[:17]}",
            },
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": conditions,
                "addresses": [
                    {"type": "InternalIP", "address": self.ip},
                    {"type": "Hostname", "address": self.name},
                    {"type": "InternalDNS", "address": f"{self.name}.region-1.compute.internal"},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": machine[:32],
                    "systemUUID": f"ec2{machine[3:11]}-{machine[11:15]}-{machine[15:19]}-"
                    f"{machine[19:23]}-{machine[23:35]}",
                    "bootID": digest(self.name + "boot")[:32],
                    "kernelVersion": "6.1.0-28-cloud-amd64",
                    "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kubeletVersion": "v1.36.2",
                    "kubeProxyVersion": "",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
                "images": [dict(image) for image in IMAGES],
            },
        }


def fake_nodes(count: int) -> list[FakeNode]:
    return [
        FakeNode(
            index=i,
            name=f"node-{i:05d}",
            zone=ZONES[i % len(ZONES)],
            gpus=GPUS_PER_NODE if i % GPU_EVERY == 0 else 0,
        )
        for i in range(count)
    ]


@dataclass(frozen=True)
class BareNode:
    """A Ready Node with capacity, zone and hostname only: for the scheduler bench,
    where what the scheduler reads of a Node matters, not its size."""

    name: str
    zone: str
    gpus: int = 0
    cpu: str = "64"
    memory: str = "256Gi"
    pods: int = 110

    def body(self) -> dict[str, Any]:
        """A Node with its status: a Node's status may be set on create (there is no kubelet
        to report it), which halves the requests of `ControlPlane.add_node`."""
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        if self.gpus:
            capacity[GPU] = str(self.gpus)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "topology.kubernetes.io/zone": self.zone,
                },
            },
            "status": ready_node_status(self.name, capacity),
        }


def bare_nodes(count: int, gpus_per_node: int, gpu_every: int = GPU_EVERY) -> list[BareNode]:
    return [
        BareNode(
            name=f"node-{i:05d}",
            zone=ZONES[i % len(ZONES)],
            gpus=gpus_per_node if i % gpu_every == 0 else 0,
        )
        for i in range(count)
    ]


def create_nodes(api: Api, nodes: Sequence[FakeNode | BareNode], workers: int = WORKERS) -> None:
    """One POST a Node, status included (there is no kubelet to report it); the first alone,
    to check that the apiserver kept the status."""
    made = api.json("POST", "/api/v1/nodes", nodes[0].body())
    if not (made.get("status") or {}).get("conditions"):
        raise RuntimeError("the apiserver dropped the status of a created Node")
    in_parallel(
        lambda n: api.send("POST", "/api/v1/nodes", orjson.dumps(n.body())), nodes[1:], workers
    )
