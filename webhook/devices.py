"""The DRA objects the webhook classifies pods by, kept in memory by the DRA watches.

A pod of a class with `deviceClasses` may ask for its GPUs by a claim template, a claim or an
extended resource a DeviceClass maps (steer/core/dra/claims.py); which DeviceClasses those name
is in DeviceClasses, ResourceClaims and ResourceClaimTemplates, which the store of
`steer.adapters.dra` lists and watches in a thread (no ResourceSlices: the webhook places no
device). A request looks its claims up in the store's records (a dict lookup; no inventory
is built on the request path), never in the apiserver. Until the store has
synced there is no catalogue: every claim is then unresolved, and the pod is classified and
steered as `steer.core.steering.PodClassification` says for a claim not known yet (by what is
known, with no gate that could keep it off the nodes it may need, and a warning).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client

from steer.adapters.dra import CATALOG_KINDS, DraStore, DraStoreStatus
from steer.core.dra.catalog import ClaimDevices, DeviceCatalog

# What the webhook watches: enough to tell which DeviceClasses a pod's claims and extended
# resources name; no ResourceSlices.
WEBHOOK_KINDS = CATALOG_KINDS


class DeviceStore(Protocol):
    """The DRA watches' store (`steer.adapters.dra.DraStore`), as far as the webhook reads it."""

    @property
    def synced(self) -> bool: ...

    @property
    def generation(self) -> int:
        """Moves whenever an object is added, changed or removed."""
        ...

    def template_classes(self, namespace: str, name: str) -> frozenset[str] | None: ...

    def claim_classes(self, namespace: str, name: str) -> frozenset[str] | None: ...

    def template_devices(self, namespace: str, name: str) -> ClaimDevices | None: ...

    def class_for_extended_name(self, resource: str) -> str | None: ...

    def status(self) -> DraStoreStatus: ...


# The generation of a catalogue that has not synced (no request's verdict read one).
UNSYNCED = -1


@dataclass(frozen=True)
class DeviceCatalogStatus:
    watched: bool  # False: no DRA watch runs in this worker
    synced: bool
    store: DraStoreStatus | None = field(default=None, compare=False)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"watched": self.watched, "synced": self.synced}
        if self.store is not None:
            out["served"] = self.store.served
            out["message"] = self.store.message
            out["kinds"] = [
                {
                    "kind": k.kind,
                    "synced": k.synced,
                    "objects": k.objects,
                    "served": k.served,
                    "lastError": k.last_error,
                }
                for k in self.store.kinds
            ]
        return out


class DeviceSource(Protocol):
    """Where a request reads the DRA catalogue from."""

    def catalog(self) -> DeviceCatalog | None:
        """The catalogue as last seen; None before it is synced (no claim is known)."""
        ...

    def generation(self) -> int | None:
        """A number that moves whenever what `catalog()` answers does (a verdict that read the
        catalogue is reused only under the same number); None: it cannot say."""
        ...

    def status(self) -> DeviceCatalogStatus: ...


class NoDevices:
    """No DRA watch: every claim is unresolved (the tests' default, and a worker whose store
    could not be built)."""

    def catalog(self) -> DeviceCatalog | None:
        return None

    def generation(self) -> int | None:
        return 0

    def status(self) -> DeviceCatalogStatus:
        return DeviceCatalogStatus(watched=False, synced=False)


class WatchedDevices:
    """The catalogue of a started `DeviceStore`; None until it has synced. A cluster that does
    not serve resource.k8s.io/v1 reads as synced and empty: every claim is then unknown."""

    def __init__(self, store: DeviceStore) -> None:
        self.store = store

    def catalog(self) -> DeviceCatalog | None:
        return self.store if self.store.synced else None

    def generation(self) -> int | None:
        # Read before the catalogue: a verdict decided on newer objects is kept under an older
        # number, which no later request asks for.
        generation = self.store.generation
        return generation if self.store.synced else UNSYNCED

    def status(self) -> DeviceCatalogStatus:
        store = self.store.status()
        return DeviceCatalogStatus(watched=True, synced=store.synced, store=store)


def watch_devices(
    api_client_factory: Callable[[], client.ApiClient], *, watch_seconds: int = 300
) -> WatchedDevices:
    """A started `DraStore` of the webhook's kinds; its client is made in its threads, after
    the gunicorn worker's fork (as the namespace watch's is)."""
    store = DraStore(api_client_factory, kinds=WEBHOOK_KINDS, watch_seconds=watch_seconds)
    store.start()
    return WatchedDevices(store)
