"""The DRA store (steer/adapters/dra.py) on the real kube-apiserver v1.36.2, which serves
resource.k8s.io/v1: a DeviceClass and the NVIDIA ResourceSlice of tests/fixtures/dra (so the
fixtures' shapes are ones the apiserver accepts), a ResourceClaim whose status is written
through the status subresource as the scheduler would, and the store's snapshot following
each add, update and delete."""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kits.control_plane import ControlPlane
from kits.waiting import wait_until
from steer.adapters.dra import API, DraStore
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.core.dra.inventory import ClassSummary, DeviceCounts
from tests.conftest import load_fixture

MERGE = "application/merge-patch+json"
GPU_DRIVER = "gpu.nvidia.com"


def bare(obj: dict[str, Any], name: str, **metadata: Any) -> dict[str, Any]:
    """A fixture object as a client would create it: no uid, resourceVersion, owners."""
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k not in ("_note", "status")}
    out["metadata"] = {"name": name, **metadata}
    return out


@pytest.fixture
def store(control_plane: ControlPlane) -> Iterator[DraStore]:
    dra = DraStore(control_plane.api_client(), watch_seconds=30)
    dra.start()
    try:
        assert dra.wait_synced(20), dra.status()
        yield dra
    finally:
        dra.stop()


@pytest.fixture
def created(admin: KubeJson) -> Iterator[Callable[[str, dict[str, Any]], dict[str, Any]]]:
    """created(collection path, body) -> the object; deleted at teardown."""
    paths: list[str] = []

    def create(collection: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = admin.request("POST", collection, body=body)
        paths.append(f"{collection}/{obj['metadata']['name']}")
        return obj

    yield create
    for path in reversed(paths):
        with contextlib.suppress(KubeApiError):
            admin.request("DELETE", path)


def test_store_follows_classes_slices_and_claims(
    store: DraStore,
    admin: KubeJson,
    created: Callable[[str, dict[str, Any]], dict[str, Any]],
    make_namespace: Callable[..., str],
) -> None:
    assert store.served
    suffix = uuid.uuid4().hex[:6]
    node = f"dra-node-{suffix}"
    device_class = f"gpu-{suffix}.nvidia.com"
    nvidia_class = load_fixture("dra/deviceclasses.json")["items"][0]
    created(f"{API}/deviceclasses", bare(nvidia_class, device_class))

    nvidia_slice = load_fixture("dra/nvidia-resourceslice-gpu-node.json")
    slice_body = bare(nvidia_slice, f"{node}-{GPU_DRIVER}")
    slice_body["spec"]["nodeName"] = node
    slice_body["spec"]["pool"]["name"] = node
    created(f"{API}/resourceslices", slice_body)

    def counts() -> DeviceCounts | None:
        found = store.snapshot().node(node)
        return None if found is None else found.counts(device_class)

    wait_until(
        "the slice's GPUs are in the snapshot",
        counts,
        timeout=10,
        until=lambda c: c == DeviceCounts(4, 0, 4),
    )
    inventory = store.snapshot()
    gpus = inventory.node(node)
    assert gpus is not None
    assert gpus.devices[0].product == "NVIDIA H100 80GB HBM3"
    assert gpus.devices[0].memory == 81559 * 2**20
    assert (
        inventory.class_for_extended_name(f"deviceclass.resource.kubernetes.io/{device_class}")
        == device_class
    )

    # a claim and a pod that holds it (never scheduled: no scheduler by that name)
    namespace = make_namespace(prefix="dra")
    claims = f"{API}/namespaces/{namespace}/resourceclaims"
    claim_body = bare(load_fixture("dra/resourceclaim-allocated.json"), "trainer-gpu")
    claim_body["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = device_class
    created(claims, claim_body)
    pod = admin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        body={
            "metadata": {"name": "trainer-0"},
            "spec": {
                "schedulerName": "no-such-scheduler",
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "trainer-gpu"}],
                "containers": [
                    {
                        "name": "main",
                        "image": "example.invalid/train",
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
            },
        },
    )
    wait_until(
        "the claim's classes are in the catalogue",
        lambda: store.snapshot().claim_classes(namespace, "trainer-gpu"),
        timeout=10,
    )
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": GPU_DRIVER, "pool": node, "device": "gpu-1"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": pod["metadata"]["uid"]}],
    }
    admin.request(
        "PATCH", f"{claims}/trainer-gpu/status", body={"status": status}, content_type=MERGE
    )
    wait_until(
        "the allocation is in the snapshot",
        counts,
        timeout=10,
        until=lambda c: c == DeviceCounts(4, 1, 3),
    )
    gpus = store.snapshot().node(node)
    assert gpus is not None
    ref = gpus.allocated_to(gpus.devices[1])
    assert ref is not None and (ref.namespace, ref.name) == (namespace, "trainer-gpu")
    assert [p.name for p in ref.pods] == ["trainer-0"]

    # the driver republishes the pool with two GPUs at the next generation
    current = admin.request("GET", f"{API}/resourceslices/{node}-{GPU_DRIVER}")
    current["spec"]["devices"] = current["spec"]["devices"][:2]
    current["spec"]["pool"]["generation"] = 2
    admin.request("PUT", f"{API}/resourceslices/{node}-{GPU_DRIVER}", body=current)
    wait_until(
        "the smaller slice is in the snapshot",
        counts,
        timeout=10,
        until=lambda c: c == DeviceCounts(2, 1, 1),
    )

    admin.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/trainer-0", query={"gracePeriodSeconds": 0}
    )
    admin.request("DELETE", f"{claims}/trainer-gpu")
    wait_until(
        "the claim's deletion is in the snapshot",
        counts,
        timeout=15,
        until=lambda c: c == DeviceCounts(2, 0, 2),
    )

    admin.request("DELETE", f"{API}/resourceslices/{node}-{GPU_DRIVER}")
    wait_until(
        "the node's devices are gone", lambda: store.snapshot().node(node) is None, timeout=10
    )
    admin.request("DELETE", f"{API}/deviceclasses/{device_class}")
    wait_until(
        "the class is gone", lambda: device_class not in store.snapshot().classes, timeout=10
    )
    assert store.snapshot().summary(device_class) == ClassSummary()
    assert store.synced and store.status().served
