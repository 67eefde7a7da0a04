"""DeviceClasses: which devices a class selects (CEL selectors) and which extended-resource
names a pod may request them by.

Upstream (k8s.io/api resource/v1 `DeviceClassSpec`): `selectors[].cel.expression` must all
hold for a device of the class; `extendedResourceName` (beta and on by default in 1.36,
KEP-5004) lets a plain extended-resource request be served from the class's devices, and every
class can also be requested as `deviceclass.resource.kubernetes.io/<class name>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Every DeviceClass can be requested as this prefix + its name (KEP-5004).
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"


def implicit_extended_name(device_class: str) -> str:
    return IMPLICIT_EXTENDED_PREFIX + device_class


@dataclass(frozen=True)
class DeviceClassInfo:
    """What kube-steer keeps of a DeviceClass."""

    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions over `device`
    extended_resource_name: str | None = None

    @property
    def extended_names(self) -> tuple[str, ...]:
        """The extended-resource names a container may request this class's devices by."""
        implicit = implicit_extended_name(self.name)
        if self.extended_resource_name and self.extended_resource_name != implicit:
            return (self.extended_resource_name, implicit)
        return (implicit,)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> DeviceClassInfo:
        """From a `resource.k8s.io/v1` DeviceClass as the API returns it (JSON)."""
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        selectors = tuple(
            str(s["cel"]["expression"])
            for s in spec.get("selectors") or ()
            if isinstance(s, Mapping)
            and isinstance(s.get("cel"), Mapping)
            and s["cel"].get("expression")
        )
        extended = spec.get("extendedResourceName")
        return cls(
            name=str(metadata.get("name", "")),
            selectors=selectors,
            extended_resource_name=str(extended) if extended else None,
        )


def classes_by_extended_name(
    classes: Mapping[str, DeviceClassInfo],
) -> dict[str, str]:
    """Extended-resource name -> the DeviceClass that serves it. Two classes naming the same
    extended resource: upstream picks the one created later; with no creation time at hand the
    name sorting first wins, so the answer is at least stable."""
    out: dict[str, str] = {}
    for name in sorted(classes):
        for extended in classes[name].extended_names:
            out.setdefault(extended, name)
    return out
