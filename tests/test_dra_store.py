"""The DRA store (steer/adapters/dra.py), fast: what the watchers hand it becomes the snapshot,
rebuilt only after a change; an apiserver without resource.k8s.io/v1 (the API stand-in serves
none) leaves it synced-empty. Against the real apiserver: tests/e2e/test_dra_store.py."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from kubernetes import client

from steer.adapters.dra import CATALOG_KINDS, DraStore, Kind
from steer.core.dra.inventory import ClassSummary, Inventory
from tests.conftest import load_fixture

GPU = "gpu.nvidia.com"
SLICE = load_fixture("dra/nvidia-resourceslice-gpu-node.json")
CLASSES = load_fixture("dra/deviceclasses.json")["items"]
CLAIM = load_fixture("dra/resourceclaim-allocated.json")
TEMPLATE = load_fixture("dra/resourceclaimtemplate.json")


def feed(store: DraStore, kind: Kind, items: list[dict[str, Any]]) -> None:
    """As the kind's watcher does with a fresh list (no thread, no HTTP)."""
    watcher = next(w for w in store._watchers if w.kind == kind)
    watcher.on_list(iter(items))


def event(store: DraStore, kind: Kind, type_: str, obj: dict[str, Any]) -> None:
    watcher = next(w for w in store._watchers if w.kind == kind)
    watcher.on_event(type_, obj)


def unused_client() -> client.ApiClient:
    raise AssertionError("no HTTP in this test")


def test_watchers_feed_the_snapshot() -> None:
    store = DraStore(unused_client)
    assert not store.synced
    assert store.snapshot() is Inventory.empty()
    feed(store, "deviceclasses", CLASSES)
    feed(store, "resourceslices", [SLICE])
    feed(store, "resourceclaims", [])
    assert not store.synced  # templates not listed yet
    feed(store, "resourceclaimtemplates", [TEMPLATE])
    assert store.synced
    first = store.snapshot()
    assert first.summary(GPU) == ClassSummary(4, 0, 4, 1, 0.0)
    assert store.snapshot() is first  # nothing changed: no rebuild

    event(store, "resourceclaims", "ADDED", CLAIM)
    second = store.snapshot()
    assert second is not first
    assert second.summary(GPU).allocated == 1
    assert second.claim_classes("ml", "trainer-0-gpu-q7t4m") == frozenset({GPU})

    smaller = copy.deepcopy(SLICE)
    smaller["spec"]["devices"] = smaller["spec"]["devices"][:2]
    event(store, "resourceslices", "MODIFIED", smaller)
    assert store.snapshot().summary(GPU).total == 2

    generation = store.generation
    event(store, "resourceclaims", "DELETED", CLAIM)
    event(store, "resourceclaims", "DELETED", CLAIM)  # gone already: no change
    assert store.generation == generation + 1
    assert store.snapshot().summary(GPU).allocated == 0

    watcher = next(w for w in store._watchers if w.kind == "resourceslices")
    watcher.on_restart()  # a broken watch: not synced until the next list
    assert not store.synced
    assert store.status().served


def test_catalog_kinds_hold_no_slices() -> None:
    store = DraStore(unused_client, kinds=CATALOG_KINDS)
    assert "resourceslices" not in store.kinds
    feed(store, "deviceclasses", CLASSES)
    feed(store, "resourceclaims", [CLAIM])
    feed(store, "resourceclaimtemplates", [TEMPLATE])
    assert store.synced
    inventory = store.snapshot()
    assert inventory.template_classes("ml", "gpu-claim-template") == frozenset(
        {GPU, "mig.nvidia.com"}
    )
    assert inventory.nodes() == () and inventory.problems == ()


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match=r"DraStore kinds: \['pods'\] unknown"):
        DraStore(unused_client, kinds=["pods"])  # type: ignore[list-item]


def test_dra_not_served(kube_client: client.ApiClient) -> None:
    """The API stand-in serves no resource.k8s.io: every list is a 404."""
    store = DraStore(kube_client, not_served_retry_s=60)
    store.start()
    try:
        assert store.wait_synced(10)
        status = store.status()
        assert not status.served and not store.served
        assert status.message.startswith("DRA not served")
        assert all(k.synced and not k.served for k in status.kinds)
        assert store.snapshot() is Inventory.empty()
        threads = [w._thread for w in store._watchers]
    finally:
        started = time.monotonic()
        store.stop()  # ends the 60 s pause at once
    assert time.monotonic() - started < 3
    assert not any(t is not None and t.is_alive() for t in threads)


def test_the_store_answers_the_catalogue_without_building_an_inventory() -> None:
    """The webhook looks a pod's claims up on the request path: straight from the records,
    however often claims change, never through a rebuilt inventory."""
    store = DraStore(unused_client, kinds=CATALOG_KINDS)
    feed(store, "deviceclasses", CLASSES)
    feed(store, "resourceclaims", [])
    feed(store, "resourceclaimtemplates", [TEMPLATE])
    meta = TEMPLATE["metadata"]
    assert store.template_classes(meta["namespace"], meta["name"]) == {GPU, "mig.nvidia.com"}
    assert store.template_classes(meta["namespace"], "other") is None
    assert store.claim_classes("ml", "trainer-0-gpu-q7t4m") is None
    event(store, "resourceclaims", "ADDED", CLAIM)
    assert store.claim_classes("ml", "trainer-0-gpu-q7t4m") == frozenset({GPU})
    mapped = {
        c["spec"]["extendedResourceName"]: c["metadata"]["name"]
        for c in CLASSES
        if c["spec"].get("extendedResourceName")
    }
    for resource, device_class in mapped.items():
        assert store.class_for_extended_name(resource) == device_class
    assert store.class_for_extended_name(f"deviceclass.resource.kubernetes.io/{GPU}") == GPU
    assert store.class_for_extended_name("example.com/none") is None
    assert store._snapshot is None  # no inventory was built for any of it
