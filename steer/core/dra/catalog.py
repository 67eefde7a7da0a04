"""What the webhook and `/explain` need to know of the cluster's DRA objects to tell which
device classes a pod asks for: the classes its claim templates and claims request, how many
devices of each a template's claim takes, and the DeviceClass an extended resource maps to.
Filled by a watch (the services), read from memory.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class DeviceCatalog(Protocol):
    """Device classes by the objects a pod spec names. None: the object is not known (not
    created yet, or the watch has not seen it), which is not the same as "asks for none"."""

    def template_classes(self, namespace: str, name: str) -> frozenset[str] | None: ...

    def claim_classes(self, namespace: str, name: str) -> frozenset[str] | None: ...

    def template_devices(self, namespace: str, name: str) -> ClaimDevices | None:
        """How many devices of each class a claim made from the template takes."""
        ...

    def class_for_extended_name(self, resource: str) -> str | None: ...


def _requests(devices: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for request in devices.get("requests") or ():
        if not isinstance(request, Mapping):
            continue
        exactly = request.get("exactly")
        if isinstance(exactly, Mapping):
            yield exactly
        for sub in request.get("firstAvailable") or ():
            if isinstance(sub, Mapping):
                yield sub


def requested_device_classes(claim_spec: Mapping[str, Any] | None) -> frozenset[str]:
    """The DeviceClasses a ResourceClaim spec (`spec`, or a template's `spec.spec`) requests:
    `devices.requests[].exactly.deviceClassName` and every `firstAvailable[]` alternative."""
    if not isinstance(claim_spec, Mapping):
        return frozenset()
    devices = claim_spec.get("devices")
    if not isinstance(devices, Mapping):
        return frozenset()
    return frozenset(
        str(r["deviceClassName"]) for r in _requests(devices) if r.get("deviceClassName")
    )


@dataclass(frozen=True, slots=True)
class ClaimDevices:
    """How many devices of each DeviceClass a claim's requests are allocated, where that is
    known before allocation: `(class, count)` pairs in class order, count None where it is
    not (upstream `DeviceRequest`, resource.k8s.io/v1):

    - `exactly` with `allocationMode: ExactCount` (the default) takes `count` devices (default 1);
    - `allocationMode: All` takes every matching device of a node: how many depends on the node;
    - `adminAccess: true` takes devices without consuming them (other claims keep them);
    - `firstAvailable` takes one of its alternatives, each with its own class and count;
    - `capacity.requests` (consumable capacity) takes a share of a device other claims may share.
    """

    counts: tuple[tuple[str, int | None], ...] = ()

    def of(self, classes: Collection[str]) -> int | None:
        """The devices of any of `classes` the claim takes; None when a request for one of them
        has no exact count."""
        total = 0
        for name, count in self.counts:
            if name in classes:
                if count is None:
                    return None
                total += count
        return total


NO_DEVICES = ClaimDevices()


def _exact_count(request: Mapping[str, Any]) -> int | None:
    if request.get("adminAccess") is True or request.get("capacity"):
        return None
    if request.get("allocationMode", "ExactCount") != "ExactCount":
        return None
    count = request.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return None
    return count


def requested_device_counts(claim_spec: Mapping[str, Any] | None) -> ClaimDevices:
    """`ClaimDevices` of a ResourceClaim spec (`spec`, or a template's `spec.spec`)."""
    if not isinstance(claim_spec, Mapping):
        return NO_DEVICES
    devices = claim_spec.get("devices")
    if not isinstance(devices, Mapping):
        return NO_DEVICES
    counts: dict[str, int | None] = {}

    def add(name: str, count: int | None) -> None:
        held = counts.get(name, 0)
        counts[name] = None if held is None or count is None else held + count

    for request in devices.get("requests") or ():
        if not isinstance(request, Mapping):
            continue
        exactly = request.get("exactly")
        if isinstance(exactly, Mapping) and exactly.get("deviceClassName"):
            add(str(exactly["deviceClassName"]), _exact_count(exactly))
        for sub in request.get("firstAvailable") or ():
            if isinstance(sub, Mapping) and sub.get("deviceClassName"):
                add(str(sub["deviceClassName"]), None)
    return _interned_counts(tuple(sorted(counts.items())))


@functools.lru_cache(maxsize=4096)
def _interned_counts(counts: tuple[tuple[str, int | None], ...]) -> ClaimDevices:
    # Thousands of templates ask for a handful of shapes: one object each.
    return ClaimDevices(counts) if counts else NO_DEVICES
