"""DRA inputs for the classification, webhook and explain tests: a device catalogue that is a
plain map, and pods and claim templates shaped after published examples."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from steer.adapters.dra import CATALOG_KINDS, DraKindStatus, DraStoreStatus
from steer.core.dra.catalog import (
    ClaimDevices,
    DeviceCatalog,
    requested_device_classes,
    requested_device_counts,
)

GPU_CLASS = "gpu.nvidia.com"  # the NVIDIA DRA driver's DeviceClass

# After NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/gpu-test-count.yaml (one pod, one
# container asking two GPUs by a claim template), written in resource.k8s.io/v1, where a
# request's class moved under `exactly`.
DOUBLE_GPU_TEMPLATE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"namespace": "gpu-test1", "name": "double-gpu"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": 2}}]
            }
        }
    },
}
CLAIM_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"namespace": "gpu-test1", "name": "gpu-pod", "labels": {"app": "pod"}},
    "spec": {
        "containers": [
            {
                "name": "ctr0",
                "image": "ubuntu:22.04",
                "command": ["bash", "-c"],
                "args": ["nvidia-smi; trap 'exit 0' TERM; sleep 9999 & wait"],
                "resources": {"claims": [{"name": "twogpus"}]},
            }
        ],
        "resourceClaims": [{"name": "twogpus", "resourceClaimTemplateName": "double-gpu"}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}
# After the Kubernetes docs' prioritized list ("Allocate devices to workloads with DRA",
# `firstAvailable`): the first alternative the scheduler can satisfy is allocated.
FIRST_AVAILABLE_TEMPLATE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"namespace": "gpu-test1", "name": "large-or-small"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "req-0",
                        "firstAvailable": [
                            {"name": "large", "deviceClassName": GPU_CLASS},
                            {"name": "small", "deviceClassName": "mig.nvidia.com"},
                        ],
                    }
                ]
            }
        }
    },
}
# After NVIDIA/k8s-dra-driver-gpu demo/specs/extended-resources/gpu-full.yaml: a plain
# nvidia.com/gpu limit, served from DRA devices because the chart's gpu.nvidia.com DeviceClass
# sets `extendedResourceName: nvidia.com/gpu`; the pod names no claim.
EXTENDED_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"namespace": "extended-resource-gpu-full", "name": "gpu-full-pod"},
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "cuda-container",
                "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    },
}


def pod(source: Mapping[str, Any] = CLAIM_POD, **spec: Any) -> dict[str, Any]:
    """A deep copy of `source`, with `spec` fields replaced."""
    out: dict[str, Any] = copy.deepcopy(dict(source))
    out["spec"].update(copy.deepcopy(spec))
    return out


class FakeCatalog:
    """A `DeviceCatalog` over fixed objects: templates and claims by (namespace, name), and
    the extended names DeviceClasses map."""

    def __init__(
        self,
        templates: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
        claims: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
        extended: Mapping[str, str] | None = None,
    ) -> None:
        self.templates = dict(templates or {})
        self.claims = dict(claims or {})
        self.extended = dict(extended or {})
        self.lookups: list[tuple[str, str, str]] = []

    @classmethod
    def of(
        cls, *objects: Mapping[str, Any], extended: Mapping[str, str] | None = None
    ) -> FakeCatalog:
        templates, claims = {}, {}
        for obj in objects:
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if obj["kind"] == "ResourceClaimTemplate":
                templates[key] = obj["spec"]["spec"]
            else:
                claims[key] = obj["spec"]
        return cls(templates, claims, extended)

    def template_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        self.lookups.append(("template", namespace, name))
        spec = self.templates.get((namespace, name))
        return None if spec is None else requested_device_classes(spec)

    def claim_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        self.lookups.append(("claim", namespace, name))
        spec = self.claims.get((namespace, name))
        return None if spec is None else requested_device_classes(spec)

    def template_devices(self, namespace: str, name: str) -> ClaimDevices | None:
        spec = self.templates.get((namespace, name))
        return None if spec is None else requested_device_counts(spec)

    def class_for_extended_name(self, resource: str) -> str | None:
        return self.extended.get(resource)


class FakeStore:
    """A stand-in for the DRA watches' store (`steer.adapters.dra`): synced or not, answering
    the catalogue's lookups from `catalog`, and how many it answered."""

    def __init__(self, catalog: DeviceCatalog, synced: bool = True) -> None:
        self.catalog = catalog
        self.synced = synced
        self.reads = 0
        self.generation = 1  # bumped by a test that changes `catalog`

    def template_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        self.reads += 1
        return self.catalog.template_classes(namespace, name)

    def claim_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        self.reads += 1
        return self.catalog.claim_classes(namespace, name)

    def template_devices(self, namespace: str, name: str) -> ClaimDevices | None:
        self.reads += 1
        return self.catalog.template_devices(namespace, name)

    def class_for_extended_name(self, resource: str) -> str | None:
        self.reads += 1
        return self.catalog.class_for_extended_name(resource)

    def status(self) -> DraStoreStatus:
        kinds = tuple(DraKindStatus(k, self.synced, 1, True, None) for k in CATALOG_KINDS)
        return DraStoreStatus(synced=self.synced, served=True, generation=1, kinds=kinds)


# The catalogue of a cluster running the NVIDIA DRA driver with both templates above.
NVIDIA = FakeCatalog.of(
    DOUBLE_GPU_TEMPLATE, FIRST_AVAILABLE_TEMPLATE, extended={"nvidia.com/gpu": GPU_CLASS}
)
