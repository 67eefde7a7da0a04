"""GPUs through Dynamic Resource Allocation (`resource.k8s.io/v1`) on a kubelet-less control
plane: the DeviceClass, the ResourceSlices a GPU driver would publish, the claim templates pods
name, and the allocations the scheduler makes, read back for assertions.

    dra = DraKit(KubeJson(plane.api_client()))
    dra.ensure_device_class()
    dra.publish_gpus("gpu-1")                       # 8 devices gpu-0..7 in one ResourceSlice
    dra.ensure_claim_template("team-a", "gpu-1", 1)
    pod["spec"].update(claim_pod_spec_fields("gpu-1"))
    ...
    dra.allocations()                               # claim → node, devices, pods

Checked on the v1.36.2 control plane of kits.control_plane (no feature-gate flag, the
controller manager's `--controllers='*,...'` as it is): the resource claim controller runs and
makes `<pod>-<claim>-<random>` claims from templates (`pod.status.resourceClaimStatuses`); for a
plain `nvidia.com/gpu` request on a node that does not advertise it, the scheduler makes the
claim itself (annotation `resource.kubernetes.io/extended-resource-claim: "true"`,
`pod.status.extendedResourceClaimStatus`). Either way the scheduler writes
`status.allocation.devices.results[{request, driver, pool, device}]`, a `nodeSelector` on
`metadata.name` and `reservedFor` (the pod), then binds. The DeviceClass selector below,
with its attribute test, is accepted and selects these devices.

No kubelet runs, so nothing prepares a device: a claim is allocated and reserved, never used.

The devices look like what NVIDIA's DRA driver publishes (github.com/NVIDIA/k8s-dra-driver-gpu,
`cmd/gpu-kubelet-plugin/deviceinfo.go`, `GpuInfo.GetDevice`): name `gpu-<index>`, attributes
`type` "gpu", `uuid`, `minor`, `index` (both in the v1beta1 era, commit bb72e60; the v1 version,
commit 03af824, names the device by its minor and drops `index`), `productName`, `brand`,
`architecture`, `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion` (versions as
semver strings), and capacity `memory`. The driver and the DeviceClass are `gpu.nvidia.com`,
as its Helm chart installs them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from steer.adapters.kubejson import KubeApiError, KubeJson

API = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
EXTENDED_NAME = "nvidia.com/gpu"  # the DeviceClass's extendedResourceName (KEP-5004)
SELECTOR = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
GPUS_PER_NODE = 8
PRODUCT = "NVIDIA H100 80GB HBM3"
GPU_MEMORY = "80Gi"

Json = Mapping[str, Any]


def gpu_uuid(node: str, index: int) -> str:
    """A GPU's UUID, stable per node and index, in NVML's `GPU-<uuid>` form; the same one
    kits.synthetic_exporter.dcgm_labels gives a device-plugin GPU of that node and index."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}/{index}')}"


# -- the objects ------------------------------------------------------------------------------


def device_class_body(
    name: str = DEVICE_CLASS, extended_name: str = EXTENDED_NAME
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [{"cel": {"expression": SELECTOR}}],
            "extendedResourceName": extended_name,
        },
    }


def gpu_device(node: str, index: int) -> dict[str, Any]:
    """One GPU as NVIDIA's driver lists it in a ResourceSlice (see the module docstring)."""
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid(node, index)},
            "index": {"int": index},
            "minor": {"int": index},
            "productName": {"string": PRODUCT},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "550.54.15"},
            "cudaDriverVersion": {"version": "12.4.0"},
        },
        "capacity": {"memory": {"value": GPU_MEMORY}},
    }


def resource_slice_body(node: str, gpus: int = GPUS_PER_NODE) -> dict[str, Any]:
    """The node's GPUs in one ResourceSlice of a pool named after the node, as a kubelet plugin
    publishes them."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu_device(node, i) for i in range(gpus)],
        },
    }


def claim_template_body(name: str, count: int, device_class: str = DEVICE_CLASS) -> dict[str, Any]:
    """A ResourceClaimTemplate for exactly `count` devices of the class (one request, `gpus`)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {
                                "deviceClassName": device_class,
                                "allocationMode": "ExactCount",
                                "count": count,
                            },
                        }
                    ]
                }
            }
        },
    }


CLAIM_NAME = "gpus"  # the pod's name for its claim (spec.resourceClaims[].name)


def claim_pod_spec(spec: Mapping[str, Any], template: str) -> dict[str, Any]:
    """A copy of a pod spec whose containers all use one claim made from `template`."""
    out = dict(spec)
    out["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": template}]
    containers = []
    for c in spec.get("containers") or ():
        resources = dict(c.get("resources") or {})
        resources["claims"] = [{"name": CLAIM_NAME}]
        containers.append({**c, "resources": resources})
    out["containers"] = containers
    return out


# -- what a device and an allocation are, read from API JSON ------------------------------------


@dataclass(frozen=True)
class GpuDevice:
    """A GPU of a ResourceSlice: its node, where it is in the driver's pools, and its identity."""

    node: str
    driver: str
    pool: str
    name: str
    index: int
    uuid: str


def _attribute(device: Json, key: str) -> Any:
    value = (device.get("attributes") or {}).get(key) or {}
    for kind in ("string", "int", "bool", "version"):
        if kind in value:
            return value[kind]
    return None


def slice_gpus(slices: Iterable[Json], driver: str = DRIVER) -> list[GpuDevice]:
    """The GPUs the driver's node-local ResourceSlices list (`type` "gpu", or no type), in node
    and index order. A device without `index` takes its place in the slice."""
    out = []
    for item in slices:
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if spec.get("driver") != driver or not node:
            continue
        pool = (spec.get("pool") or {}).get("name", "")
        for position, device in enumerate(spec.get("devices") or ()):
            if _attribute(device, "type") not in (None, "gpu"):
                continue
            index = _attribute(device, "index")
            name = str(device.get("name", ""))
            out.append(
                GpuDevice(
                    node=node,
                    driver=driver,
                    pool=pool,
                    name=name,
                    index=int(index) if isinstance(index, int) else position,
                    uuid=str(_attribute(device, "uuid") or gpu_uuid(node, position)),
                )
            )
    return sorted(out, key=lambda d: (d.node, d.index))


@dataclass(frozen=True)
class Allocation:
    """An allocated ResourceClaim: where its devices are and which pods reserve it."""

    namespace: str
    claim: str
    node: str  # "" when neither the slices nor the allocation's nodeSelector name it
    devices: tuple[tuple[str, str, str], ...]  # (driver, pool, device)
    pods: tuple[str, ...]  # `namespace/name` of the pods in reservedFor
    extended: bool  # made by the scheduler for a plain extended-resource request

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d for _, _, d in self.devices)


def _selector_node(allocation: Json) -> str:
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ():
        for field in term.get("matchFields") or ():
            if field.get("key") == "metadata.name" and len(field.get("values") or ()) == 1:
                return str(field["values"][0])
    return ""


def allocations(claims: Iterable[Json], slices: Iterable[Json] = ()) -> list[Allocation]:
    """Every allocated claim among `claims` (API JSON). The node is the one whose slice holds
    the devices' pool, else the one the allocation's nodeSelector names."""
    pool_node = {}
    for item in slices:
        spec = item.get("spec") or {}
        pool_node[(spec.get("driver"), (spec.get("pool") or {}).get("name"))] = (
            spec.get("nodeName") or ""
        )
    out = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        if not allocation:
            continue
        results = (allocation.get("devices") or {}).get("results") or ()
        devices = tuple(
            (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
            for r in results
        )
        nodes = {pool_node.get((d, p), "") for d, p, _ in devices} - {""}
        node = nodes.pop() if len(nodes) == 1 else _selector_node(allocation)
        namespace = str(meta.get("namespace", ""))
        pods = tuple(
            f"{namespace}/{r.get('name', '')}"
            for r in status.get("reservedFor") or ()
            if r.get("resource") == "pods"
        )
        annotations = meta.get("annotations") or {}
        out.append(
            Allocation(
                namespace=namespace,
                claim=str(meta.get("name", "")),
                node=node,
                devices=devices,
                pods=pods,
                extended=annotations.get(EXTENDED_CLAIM_ANNOTATION) == "true",
            )
        )
    return out


def pod_devices(found: Iterable[Allocation], driver: str = DRIVER) -> dict[str, tuple[str, int]]:
    """`namespace/pod` → (node, devices of `driver` its claims hold)."""
    out: dict[str, tuple[str, int]] = {}
    for a in found:
        count = sum(1 for d, _, _ in a.devices if d == driver)
        for pod in a.pods:
            node, held = out.get(pod, (a.node, 0))
            out[pod] = (node or a.node, held + count)
    return out


# -- on the API -----------------------------------------------------------------------------------


class DraKit:
    """The DRA objects of a test or a benchmark, written and read through `kube`."""

    def __init__(self, kube: KubeJson) -> None:
        self.kube = kube

    def _create(self, path: str, body: Mapping[str, Any]) -> None:
        try:
            self.kube.request("POST", path, body=body)
        except KubeApiError as exc:
            if not exc.conflict:
                raise
            name = body["metadata"]["name"]
            current = self.kube.request("GET", f"{path}/{name}")
            replaced = {**body, "metadata": {**body["metadata"], **_version(current)}}
            self.kube.request("PUT", f"{path}/{name}", body=replaced)

    def ensure_device_class(
        self, name: str = DEVICE_CLASS, extended_name: str = EXTENDED_NAME
    ) -> None:
        """The class (replaced if there), its devices requestable as `extended_name`."""
        self._create(f"{API}/deviceclasses", device_class_body(name, extended_name))

    def publish_gpus(self, node: str, gpus: int = GPUS_PER_NODE) -> None:
        """The node's ResourceSlice with `gpus` devices (replaced if there)."""
        self._create(f"{API}/resourceslices", resource_slice_body(node, gpus))

    def withdraw_gpus(self, node: str) -> None:
        with contextlib.suppress(KubeApiError):
            self.kube.request("DELETE", f"{API}/resourceslices/{node}-{DRIVER}")

    def delete_slices(self) -> None:
        """Every ResourceSlice of the driver."""
        for item in self.slices():
            with contextlib.suppress(KubeApiError):
                self.kube.request("DELETE", f"{API}/resourceslices/{item['metadata']['name']}")

    def ensure_claim_template(self, namespace: str, name: str, count: int) -> None:
        self._create(
            f"{API}/namespaces/{namespace}/resourceclaimtemplates",
            claim_template_body(name, count),
        )

    def delete_claims(self, namespace: str) -> None:
        """Every ResourceClaim of the namespace (those of deleted pods go with them anyway)."""
        with contextlib.suppress(KubeApiError):
            self.kube.request("DELETE", f"{API}/namespaces/{namespace}/resourceclaims")

    def slices(self) -> list[dict[str, Any]]:
        items = self.kube.list_all(f"{API}/resourceslices")
        return [s for s in items if (s.get("spec") or {}).get("driver") == DRIVER]

    def claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        path = (
            f"{API}/namespaces/{namespace}/resourceclaims" if namespace else f"{API}/resourceclaims"
        )
        return self.kube.list_all(path)

    def allocations(self, namespace: str | None = None) -> list[Allocation]:
        return allocations(self.claims(namespace), self.slices())


def _version(current: Json) -> dict[str, Any]:
    return {"resourceVersion": (current.get("metadata") or {}).get("resourceVersion")}
