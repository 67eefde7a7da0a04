"""Device counters: DRA devices of a pod class that the stock scheduler counts on every bind,
so a burst of GPU jobs fills partly used GPU nodes before it opens whole ones.

The v1.36 scheduler scores a claim's devices nowhere. NodeResourcesFit's MostAllocated (the
`steer-binpack` profile) counts a device-plugin `nvidia.com/gpu`, and an extended resource a
DeviceClass maps (upstream `calculateDRAExtendedResourceAllocatableRequest`: the devices of its
class on the node, allocated or not), but a pod that asks by a ResourceClaimTemplate or a
ResourceClaim requests no resource at all, and the scorer's labels are a cycle old inside a
burst. So claim pods follow cpu and memory, and open a whole GPU node where a partly used one
had room.

A counter is an extended resource per pod class with `deviceClasses`,
`<resourcePrefix>devices-<class>`, kept as the budget pool is (steer/core/budget.py):

- the scorer publishes it on every node that offers the class: capacity = max(held, devices),
  devices = the node's DRA devices the class may get (those of its DeviceClasses and of the
  DeviceClasses that map its `requestsAny`, each device once) plus the device plugin's
  allocatable of its `requestsAny`; held = what the node's bound pods request of it. Never
  below what is held, so a kubelet restart re-admits every pod (DESIGN decision 11);
- the webhook makes a pod of the class request (first container, request == limit) as many
  units as devices it is certain to get (`pod_device_units`), and NOTHING when that is not
  known exactly;
- `steer-binpack` weights the counter in MostAllocated, which counts the units of the pods the
  scheduler has just assumed, so every pod of a burst sees the ones before it.

Why it never keeps a pod off a node DRA would place it on: every pod requests at most the devices
it gets there, all of them devices the capacity counts, so what the node's pods hold is at most
its allocated devices, and the units left are at least its free devices. Nothing counts a device
twice: a claim shared by pods (`resourceClaimName`), an `All` or `firstAvailable` request,
`adminAccess` and consumable capacity (a device several claims share) are never counted, and a
device several DeviceClasses select is counted once in the capacity. A forged request of a
counter only takes units (never devices) from the pod that forged it, and the webhook replaces
it by what the policy asks, as it does for gates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from steer.core.dra.claims import DeviceAsk
from steer.core.policy import PodClass, Policy
from steer.core.quantity import QuantityError
from steer.core.scheduling import pod_amount

COUNTER_PREFIX = "devices-"


@dataclass(frozen=True)
class DeviceCounter:
    """One pod class's counter: the resource, its class, the DeviceClasses whose devices a pod
    of the class may ask by a claim, and the extended resources it may ask them by."""

    resource: str
    pod_class: str
    device_classes: frozenset[str]
    requests_any: frozenset[str]

    @property
    def rule(self) -> str:
        """How traces and explanations name it: `devices:<class>`."""
        return f"devices:{self.pod_class}"


def device_counter(policy: Policy, pod_class: PodClass | None) -> DeviceCounter | None:
    """The counter of a class with `deviceClasses`; None for any other (a device-plugin class
    packs by its `requestsAny`, which MostAllocated counts)."""
    if pod_class is None or not pod_class.device_classes:
        return None
    return DeviceCounter(
        resource=f"{policy.spec.resource_prefix}{COUNTER_PREFIX}{pod_class.name}",
        pod_class=pod_class.name,
        device_classes=frozenset(pod_class.device_classes),
        requests_any=frozenset(pod_class.requests_any),
    )


def device_counters(policy: Policy) -> tuple[DeviceCounter, ...]:
    """Every counter of the policy, in class order."""
    found = (device_counter(policy, c) for c in policy.spec.pod_classes)
    return tuple(c for c in found if c is not None)


def pod_device_units(
    counter: DeviceCounter, spec: Mapping[str, Any], asks: Iterable[DeviceAsk]
) -> int | None:
    """The units of `counter` a pod of its class requests: the devices it is certain to get,
    of the class's DeviceClasses or by the class's extended resources. None (request nothing)
    when that is not known exactly: a claim template not known yet or not of an exact count
    (`ClaimDevices`), a ResourceClaim of the class (pods may share it: its devices would be
    counted once per pod), an extended resource whether a DeviceClass of the class maps is not
    known, or a quantity that is not a whole number. `asks` are the pod's
    (`PodClassification.asks`)."""
    units = 0
    names = set(counter.requests_any)
    for ask in asks:
        if ask.form == "extended":
            if ask.name in counter.requests_any:
                continue  # counted by quantity below, whichever device serves it
            if ask.device_classes is None:
                return None
            if not ask.device_classes.isdisjoint(counter.device_classes):
                names.add(ask.name)
        elif ask.device_classes is None:
            return None
        elif ask.device_classes.isdisjoint(counter.device_classes):
            continue
        elif ask.form == "claim" or ask.devices is None:
            return None
        else:
            count = ask.devices.of(counter.device_classes)
            if count is None:
                return None
            units += count
    for name in sorted(names):
        try:
            amount = pod_amount(spec, "requests", name)
        except QuantityError:
            return None
        if amount.denominator != 1:
            return None
        units += int(amount)
    return units


@dataclass(frozen=True, slots=True)
class NodeDeviceCount:
    """The devices of a counter's class on one node: DRA devices the class may get (each once),
    and how many of those several claims may share (`allowMultipleAllocations`), which one unit
    per pod cannot bound; the plugin's are counted from allocatable by the caller."""

    devices: int = 0
    shared: int = 0


def plugin_devices(counter: DeviceCounter, amounts: Mapping[str, Fraction]) -> int:
    """The device plugin's devices of the class on a node: its allocatable of `requestsAny`
    (`amounts`: parsed)."""
    return int(
        sum(
            (max(Fraction(0), amounts.get(n, Fraction(0))) for n in counter.requests_any),
            Fraction(0),
        )
    )


@dataclass(frozen=True)
class CounterCapacity:
    """A counter on one node and what decided it (`/explain`):
    capacity = max(held, dra + plugin + shared * pods)."""

    resource: str
    pod_class: str
    dra: int  # DRA devices the class may get, each once
    plugin: int  # the device plugin's allocatable of `requestsAny`
    shared: int  # DRA devices claims may share: each counts `pods` units
    pods: int  # the node's allocatable pods
    held: int  # what the node's bound pods request of the counter

    @property
    def devices(self) -> int:
        return self.dra + self.plugin + self.shared * self.pods

    @property
    def capacity(self) -> int:
        return max(self.held, self.devices)

    @property
    def free(self) -> int:
        return self.capacity - self.held

    @property
    def offered(self) -> bool:
        """The node offers the class: the counter is published (else only what is held)."""
        return self.dra + self.plugin + self.shared > 0


def counter_capacity(
    counter: DeviceCounter,
    dra: NodeDeviceCount,
    amounts: Mapping[str, Fraction],
    held: int,
    pods: int,
) -> CounterCapacity:
    """The counter's capacity on a node. A device claims may share can take one unit from each
    pod on the node (a claim's devices are distinct), so it counts `pods` units."""
    return CounterCapacity(
        resource=counter.resource,
        pod_class=counter.pod_class,
        dra=dra.devices - dra.shared,
        plugin=plugin_devices(counter, amounts),
        shared=dra.shared,
        pods=pods,
        held=held,
    )
