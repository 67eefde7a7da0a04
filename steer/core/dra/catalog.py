"""What the webhook and `/explain` need to know of the cluster's DRA objects to tell which
device classes a pod asks for: the classes its claim templates and claims request, and the
DeviceClass an extended resource maps to. Filled by a watch (the services), read from memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol


class DeviceCatalog(Protocol):
    """Device classes by the objects a pod spec names. None: the object is not known (not
    created yet, or the watch has not seen it), which is not the same as "asks for none"."""

    def template_classes(self, namespace: str, name: str) -> frozenset[str] | None: ...

    def claim_classes(self, namespace: str, name: str) -> frozenset[str] | None: ...

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
