"""What a pod asks of DRA devices, read from its spec: the claims it names and the extended
resources a DeviceClass serves.

Upstream (k8s.io/api core/v1 `PodResourceClaim`): each `spec.resourceClaims[]` entry names
exactly one of `resourceClaimTemplateName` (a claim is made per pod from the template) or
`resourceClaimName` (a claim shared by pods), in the pod's namespace. The scheduler allocates
every claim the pod lists, whether or not a container refers to it by
`resources.claims[].name`, so the pod-level list alone says which devices the pod needs. An
extended resource (`resources.requests/limits`) is served from DRA devices when a DeviceClass
maps it (`extendedResourceName`), and `deviceclass.resource.kubernetes.io/<class>` always names
that class (KEP-5004).

Which classes a template or claim requests is in the object, not in the pod: the caller hands
a `DeviceCatalog` (steer/core/dra/catalog.py). An object it does not know yet is an
unresolved ask (`device_classes` None), never "asks for nothing".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from steer.core.dra.catalog import ClaimDevices, DeviceCatalog
from steer.core.dra.classes import IMPLICIT_EXTENDED_PREFIX
from steer.core.pod_shape import UninterpretablePod, pod_objects

AskForm = Literal["template", "claim", "extended"]
_NOUN: Mapping[str, str] = {"template": "claim template", "claim": "claim"}
_SOURCE_KEYS: tuple[tuple[str, Literal["template", "claim"]], ...] = (
    ("resourceClaimTemplateName", "template"),
    ("resourceClaimName", "claim"),
)


@dataclass(frozen=True)
class DeviceAsk:
    """One way a pod asks for devices: a claim template or claim it names (`name`: the template
    or claim), or an extended resource it requests (`name`: the resource). `device_classes`:
    the DeviceClasses behind it; None when that is not known (the object is not in the
    catalogue yet, or there is no catalogue)."""

    form: AskForm
    name: str
    device_classes: frozenset[str] | None
    # A template's: how many devices of each class its claim takes (None: not known).
    devices: ClaimDevices | None = None

    @property
    def known(self) -> bool:
        return self.device_classes is not None

    def text(self) -> str:
        """`claim template gpu-1 -> gpu.nvidia.com`, `nvidia.com/gpu mapped by DeviceClass
        gpu.nvidia.com`, `claim template gpu-1 not known yet`."""
        if self.form == "extended":
            if self.device_classes is None:
                return f"{self.name}: whether a DeviceClass maps it is not known yet"
            (device_class,) = self.device_classes or ("?",)
            return f"{self.name} mapped by DeviceClass {device_class}"
        noun = _NOUN[self.form]
        if self.device_classes is None:
            return f"{noun} {self.name} not known yet"
        return f"{noun} {self.name} -> {', '.join(sorted(self.device_classes)) or 'no class'}"


@dataclass(frozen=True)
class ClaimSource:
    """One `spec.resourceClaims[]` entry: the pod's name for it, and the template or claim."""

    entry: str
    form: Literal["template", "claim"]
    name: str


def claim_sources(spec: Mapping[str, Any]) -> tuple[ClaimSource, ...]:
    """The templates and claims `spec.resourceClaims` names. Raises UninterpretablePod for a
    malformed entry (the apiserver would refuse it; mutation runs before its validation)."""
    out = []
    for i, entry in enumerate(pod_objects(spec, "resourceClaims", "spec.resourceClaims")):
        for key, form in _SOURCE_KEYS:
            value = entry.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise UninterpretablePod(
                    f"spec.resourceClaims[{i}].{key}",
                    f"expected a string, got {type(value).__name__}",
                )
            out.append(ClaimSource(str(entry.get("name") or ""), form, value))
    return tuple(out)


def claim_asks(
    spec: Mapping[str, Any], namespace: str | None, devices: DeviceCatalog | None
) -> tuple[DeviceAsk, ...]:
    """What each template and claim the pod names requests, from the catalogue (None for what it
    does not know; everything, without a catalogue or a namespace to look in), and for a
    template how many devices its claim takes."""
    out = []
    for source in claim_sources(spec):
        classes: frozenset[str] | None = None
        counts: ClaimDevices | None = None
        if devices is not None and namespace:
            if source.form == "template":
                classes = devices.template_classes(namespace, source.name)
                counts = devices.template_devices(namespace, source.name)
            else:
                classes = devices.claim_classes(namespace, source.name)
        out.append(DeviceAsk(source.form, source.name, classes, counts))
    return tuple(out)


def may_be_device_backed(resource: str) -> bool:
    """Whether a DeviceClass may serve `resource`: an extended resource name (a domain, not
    under kubernetes.io, not `requests.`-prefixed), as `extendedResourceName` must be."""
    if resource.startswith(IMPLICIT_EXTENDED_PREFIX):
        return True
    return (
        "/" in resource
        and "kubernetes.io/" not in resource
        and not resource.startswith("requests.")
    )


def extended_asks(resources: Iterable[str], devices: DeviceCatalog | None) -> tuple[DeviceAsk, ...]:
    """The requested resources a DeviceClass serves: `deviceclass.resource.kubernetes.io/<c>`
    by its name, any other extended name by the catalogue. With a catalogue, a name no class
    maps is no ask (a device plugin's, or no device at all); without one, every extended name
    is unresolved. Callers leave out the names they know are no device (the project's own)."""
    out = []
    for resource in sorted(resources):
        if resource.startswith(IMPLICIT_EXTENDED_PREFIX):
            device_class = resource.removeprefix(IMPLICIT_EXTENDED_PREFIX)
            out.append(DeviceAsk("extended", resource, frozenset({device_class})))
        elif not may_be_device_backed(resource):
            continue
        elif devices is None:
            out.append(DeviceAsk("extended", resource, None))
        else:
            mapped = devices.class_for_extended_name(resource)
            if mapped is not None:
                out.append(DeviceAsk("extended", resource, frozenset({mapped})))
    return tuple(out)
