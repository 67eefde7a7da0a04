"""DRA objects in memory by list + watch (`steer.adapters.listwatch`), reduced as they arrive,
and the `Inventory` (steer/core/dra/inventory.py) built from them when asked.

One `DraStore` per service: the scorer watches all four kinds (it counts devices per node), the
webhook DeviceClasses, ResourceClaims and ResourceClaimTemplates (it only classifies pods, so
it does not hold a 5,000-node cluster's ResourceSlices). Each object is kept reduced
(`DeviceClassInfo`, `ResourceSliceInfo`, `ResourceClaimInfo`, `ResourceClaimTemplateInfo`), never
as the API returned it. `snapshot()` rebuilds the inventory only when something changed since
the last one (a generation counter), reusing the previous one's device classes.

A cluster whose apiserver does not serve `resource.k8s.io/v1` (404 on the list: DRA switched
off, or a version before 1.34) breaks nothing: the kind reads as served-empty and synced, the
store says "DRA not served", and the list is retried every `not_served_retry_s`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from kubernetes import client

from steer.adapters.kubejson import KubeApiError
from steer.adapters.listwatch import ListWatcher
from steer.core.dra.catalog import ClaimDevices
from steer.core.dra.classes import DeviceClassInfo, classes_by_extended_name
from steer.core.dra.inventory import (
    Inventory,
    ResourceClaimInfo,
    ResourceClaimTemplateInfo,
    ResourceSliceInfo,
)
from steer.core.dra.selectors import DeviceSelectors

log = logging.getLogger(__name__)

Kind = Literal["deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"]
API: Final = "/apis/resource.k8s.io/v1"
ALL_KINDS: Final[tuple[Kind, ...]] = (
    "deviceclasses",
    "resourceslices",
    "resourceclaims",
    "resourceclaimtemplates",
)
# What the webhook needs to tell which classes a pod asks for: no ResourceSlices.
CATALOG_KINDS: Final[tuple[Kind, ...]] = (
    "deviceclasses",
    "resourceclaims",
    "resourceclaimtemplates",
)
HTTP_NOT_FOUND = 404

Record = DeviceClassInfo | ResourceSliceInfo | ResourceClaimInfo | ResourceClaimTemplateInfo


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def _reduce(kind: Kind, obj: Mapping[str, Any]) -> tuple[str, Record]:
    """(the object's key, what is kept of it)."""
    key = _key(obj)
    if kind == "deviceclasses":
        return key, DeviceClassInfo.from_object(obj)
    if kind == "resourceslices":
        return key, ResourceSliceInfo.from_object(obj)
    if kind == "resourceclaims":
        return key, ResourceClaimInfo.from_object(obj)
    return key, ResourceClaimTemplateInfo.from_object(obj)


@dataclass(frozen=True)
class DraKindStatus:
    kind: str
    synced: bool
    objects: int
    served: bool  # False: the apiserver answered 404 for the collection
    last_error: str | None


@dataclass(frozen=True)
class DraStoreStatus:
    synced: bool
    served: bool
    generation: int
    kinds: tuple[DraKindStatus, ...]

    @property
    def message(self) -> str:
        if not self.served:
            return "DRA not served: the apiserver has no resource.k8s.io/v1 (404)"
        return "synced" if self.synced else "listing"


class _KindState:
    __slots__ = ("last_error", "listed", "records", "served")

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.listed = False
        self.served = True
        self.last_error: str | None = None


class DraStore:
    """The reduced DRA objects of the kinds asked for, kept by one watcher per kind; thread-safe.
    `synced` once every kind has been listed (or answered 404), until a watch breaks."""

    def __init__(
        self,
        api_client: client.ApiClient | Callable[[], client.ApiClient],
        *,
        kinds: Iterable[Kind] = ALL_KINDS,
        watch_seconds: int = 300,
        not_served_retry_s: float = 300.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.kinds: tuple[Kind, ...] = tuple(dict.fromkeys(kinds))
        unknown = set(self.kinds) - set(ALL_KINDS)
        if unknown:
            raise ValueError(f"DraStore kinds: {sorted(unknown)} unknown; choose from {ALL_KINDS}")
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()
        self._state = {kind: _KindState() for kind in self.kinds}
        self._synced = threading.Event()
        self.generation = 0  # moves whenever an object is added, changed or removed
        self._selectors = DeviceSelectors()
        self._snapshot: tuple[int, Inventory] | None = None
        self._by_extended: tuple[int, Mapping[str, str]] | None = None
        self._watchers = [
            _DraWatcher(
                api_client,
                self,
                kind,
                timeout_s=watch_seconds,
                not_served_retry_s=not_served_retry_s,
                max_backoff_s=max_backoff_s,
            )
            for kind in self.kinds
        ]

    # -- the service's side ------------------------------------------------------------------

    def start(self) -> None:
        for watcher in self._watchers:
            watcher.start()

    def stop(self) -> None:
        for watcher in self._watchers:
            watcher.stop()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    @property
    def served(self) -> bool:
        """False when the apiserver answered 404 for a DRA collection (no resource.k8s.io/v1)."""
        with self._lock:
            return all(state.served for state in self._state.values())

    def status(self) -> DraStoreStatus:
        with self._lock:
            kinds = tuple(
                DraKindStatus(
                    kind=kind,
                    synced=state.listed,
                    objects=len(state.records),
                    served=state.served,
                    last_error=state.last_error,
                )
                for kind, state in self._state.items()
            )
            generation = self.generation
        return DraStoreStatus(
            synced=self.synced,
            served=all(k.served for k in kinds),
            generation=generation,
            kinds=kinds,
        )

    # -- the DeviceCatalog protocol, straight from the records (no inventory build) --------
    # The webhook asks these on the request path: a dict lookup under the lock, whatever
    # changed since. A kind this store does not watch answers None (not known).

    def template_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        record = self._record("resourceclaimtemplates", f"{namespace}/{name}")
        return record.classes if isinstance(record, ResourceClaimTemplateInfo) else None

    def claim_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        record = self._record("resourceclaims", f"{namespace}/{name}")
        return record.classes if isinstance(record, ResourceClaimInfo) else None

    def template_devices(self, namespace: str, name: str) -> ClaimDevices | None:
        record = self._record("resourceclaimtemplates", f"{namespace}/{name}")
        return record.devices if isinstance(record, ResourceClaimTemplateInfo) else None

    def class_for_extended_name(self, resource: str) -> str | None:
        with self._lock:
            state = self._state.get("deviceclasses")
            if state is None:
                return None
            held = self._by_extended
            if held is None or held[0] != self.generation:
                classes = {
                    r.name: r for r in state.records.values() if isinstance(r, DeviceClassInfo)
                }
                held = (self.generation, classes_by_extended_name(classes))
                self._by_extended = held
        return held[1].get(resource)

    def _record(self, kind: Kind, key: str) -> Record | None:
        with self._lock:
            state = self._state.get(kind)
            return None if state is None else state.records.get(key)

    def snapshot(self) -> Inventory:
        """The inventory as of now: the last one while nothing changed, else a fresh build."""
        held = self._snapshot
        if held is not None and held[0] == self.generation:
            return held[1]
        with self._build_lock:  # one build at a time; a second caller takes the first's result
            held = self._snapshot
            with self._lock:
                generation = self.generation
                if held is not None and held[0] == generation:
                    return held[1]
                records: dict[str, list[Record]] = {
                    kind: list(state.records.values()) for kind, state in self._state.items()
                }
            inventory = self._build(records, None if held is None else held[1])
            self._snapshot = (generation, inventory)
            return inventory

    def _build(self, records: Mapping[str, list[Record]], previous: Inventory | None) -> Inventory:
        if not any(records.values()):
            return Inventory.empty()
        slices = records.get("resourceslices")
        return Inventory.build(
            [r for r in records.get("deviceclasses", ()) if isinstance(r, DeviceClassInfo)],
            None if slices is None else [r for r in slices if isinstance(r, ResourceSliceInfo)],
            [r for r in records.get("resourceclaims", ()) if isinstance(r, ResourceClaimInfo)],
            [
                r
                for r in records.get("resourceclaimtemplates", ())
                if isinstance(r, ResourceClaimTemplateInfo)
            ],
            selectors=self._selectors,
            previous=previous,
        )

    # -- the watchers' side --------------------------------------------------------------------

    def _replace(self, kind: Kind, records: dict[str, Record]) -> None:
        with self._lock:
            state = self._state[kind]
            state.records = records
            state.listed = True
            state.served = True
            state.last_error = None
            self.generation += 1
            self._update_synced()

    def _put(self, kind: Kind, key: str, record: Record) -> None:
        with self._lock:
            self._state[kind].records[key] = record
            self.generation += 1

    def _remove(self, kind: Kind, key: str) -> None:
        with self._lock:
            if self._state[kind].records.pop(key, None) is not None:
                self.generation += 1

    def _not_served(self, kind: Kind, message: str) -> None:
        with self._lock:
            state = self._state[kind]
            if state.records:
                self.generation += 1
            state.records = {}
            state.listed = True  # synced-empty: there is nothing to list
            state.served = False
            state.last_error = message
            self._update_synced()

    def _failed(self, kind: Kind, message: str) -> None:
        with self._lock:
            self._state[kind].last_error = message

    def _desync(self, kind: Kind) -> None:
        with self._lock:
            state = self._state[kind]
            if state.served:  # a 404 kind stays synced-empty while it is retried
                state.listed = False
            self._update_synced()

    def _update_synced(self) -> None:
        if all(state.listed for state in self._state.values()):
            self._synced.set()
        else:
            self._synced.clear()


class DraNotServed(Exception):
    """The apiserver answered 404 for a `resource.k8s.io/v1` collection."""


class _DraWatcher(ListWatcher):
    """List + watch of one DRA collection into a `DraStore`."""

    def __init__(
        self,
        api_client: client.ApiClient | Callable[[], client.ApiClient],
        store: DraStore,
        kind: Kind,
        *,
        not_served_retry_s: float,
        **kwargs: Any,
    ) -> None:
        super().__init__(api_client, **kwargs)
        self.path = f"{API}/{kind}"
        self.thread_name = f"dra-{kind}"
        self.store = store
        self.kind: Kind = kind
        self.not_served_retry_s = not_served_retry_s
        self._halt = threading.Event()  # set by stop(): ends a not-served pause at once
        self._reported: str | None = None

    def on_list(self, items: Iterable[dict[str, Any]]) -> None:
        records = dict(_reduce(self.kind, item) for item in items)
        self.store._replace(self.kind, records)
        self._reported = None
        log.info("%s list: %d objects", self.kind, len(records))

    def relist(self) -> None:
        try:
            super().relist()
        except KubeApiError as exc:
            if exc.status != HTTP_NOT_FOUND:
                raise
            message = f"{self.path}: 404, resource.k8s.io/v1 is not served"
            self.store._not_served(self.kind, message)
            if self._reported != message:
                log.info(
                    "DRA not served (%s); listing again every %.0f s",
                    message,
                    self.not_served_retry_s,
                )
                self._reported = message
            # The list loop backs off after this failure too; waiting here makes the retry slow.
            self._halt.wait(self.not_served_retry_s)
            raise DraNotServed(message) from exc

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.store._remove(self.kind, _key(obj))
        elif kind in ("ADDED", "MODIFIED"):
            self.store._put(self.kind, *_reduce(self.kind, obj))

    def on_restart(self) -> None:
        self.store._desync(self.kind)

    def on_failure(self, message: str) -> None:
        self.store._failed(self.kind, message)
        if message != self._reported and "not served" not in message:
            log.warning("%s watch: %s; listing again", self.kind, message)
            self._reported = message

    def before_start(self) -> None:
        self._halt.clear()

    def stop(self) -> None:
        self._halt.set()
        super().stop()
