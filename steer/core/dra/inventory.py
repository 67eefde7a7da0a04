"""The cluster's DRA devices, node by node: which DeviceClasses select each, which are allocated
to which claim, and how many of each class a node still has free.

Built, pure and immutable, from DeviceClasses (`DeviceClassInfo`), ResourceSlices, ResourceClaims
and ResourceClaimTemplates as the API returns them (`Inventory.from_objects`), or from their
reduced forms (`ResourceSliceInfo`, `ResourceClaimInfo`, `ResourceClaimTemplateInfo`), which is
what a watch keeps: whole API objects are never held.

The rules are upstream's (kubernetes `staging/src/k8s.io/api/resource/v1/types.go`):

- a pool is (driver, `spec.pool.name`); only its slices of the highest `pool.generation` count,
  older ones are stale (`ResourcePool.Generation`); a pool with fewer slices at that generation
  than `pool.resourceSliceCount` is incomplete (reported, its devices still counted);
- a slice with `nodeName` is node-local: its devices are that node's; with `perDeviceNodeSelection`
  a device's own `nodeName` places it; devices for `allNodes` or a `nodeSelector` are on no one
  node and are only counted (`Inventory.unattributed_devices`) and reported;
- a device is (driver, pool, name); an attribute or capacity name without a domain belongs to
  the driver's (`<driver>/<name>`, as the DRA CEL environment reads it);
- a claim's `status.allocation.devices.results[]` name the devices it holds; a result with
  `adminAccess: true` does not consume the device (`DeviceRequestAllocationResult.AdminAccess`);
- partitionable devices (`consumesCounters` against a pool's `sharedCounters`, which 1.36 keeps
  in slices of their own): a device is not free while the counters it would consume are used
  up by allocated devices. Counter sets are per pool (`CounterSet` names are unique in a pool).

Not modelled: `compatibilityGroups` of counter consumption, consumable capacity (a device with
`allowMultipleAllocations` counts as allocated once any claim holds a share of it), device
taints, and binding conditions.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Collection, ItemsView, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from steer.core.dra.catalog import (
    NO_DEVICES,
    ClaimDevices,
    requested_device_classes,
    requested_device_counts,
)
from steer.core.dra.classes import DeviceClassInfo, classes_by_extended_name
from steer.core.dra.selectors import AttributeValue, DeviceSelectors, Semver
from steer.core.quantity import QuantityError, parse_quantity

# Problem lines of one kind beyond this many are summed up in one line.
_PROBLEMS_PER_KIND = 10

# -- devices -----------------------------------------------------------------------------------


class DeviceKey(NamedTuple):
    driver: str
    pool: str
    name: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"


class FrozenMap(Mapping[str, Any]):
    """An immutable mapping kept as a tuple of pairs: a device's dozen attributes cost a tuple,
    not a dict, and the pairs identical GPUs share are one object (`_pair`)."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, Any]] = ()) -> None:
        self._items = tuple(sorted(items, key=lambda kv: kv[0]))

    def __getitem__(self, key: str) -> Any:
        for name, value in self._items:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def items(self) -> ItemsView[str, Any]:
        return _Pairs(self)

    def __repr__(self) -> str:
        return f"FrozenMap({dict(self._items)!r})"


class _Pairs(ItemsView[str, Any]):
    """A FrozenMap's items straight from its pairs (the default view looks each key up)."""

    _mapping: FrozenMap

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self._mapping._items)


EMPTY_MAP = FrozenMap()


@functools.lru_cache(maxsize=1 << 16)
def _pair(name: str, kind: str, value: Any) -> tuple[str, Any]:
    # `kind` in the key: True == 1, and a bool attribute must not come back as an int.
    return (name, value)


class CounterUse(NamedTuple):
    """What a partitionable device consumes of one counter set of its pool."""

    counter_set: str
    counters: FrozenMap  # counter name -> amount (Fraction)


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. `attributes` and `capacity` are keyed by qualified name
    (`gpu.nvidia.com/productName`); `uuid`, `product` (productName) and `memory` (capacity
    `memory`, bytes) are read from any domain, driver's first."""

    driver: str
    pool: str
    name: str
    node: str | None
    attributes: Mapping[str, AttributeValue] = EMPTY_MAP
    capacity: Mapping[str, Fraction] = EMPTY_MAP
    uuid: str | None = None
    product: str | None = None
    memory: int | None = None
    allow_multiple_allocations: bool = False
    consumes: tuple[CounterUse, ...] = ()
    # (driver, pool, name), made once: every lookup of a build goes through it
    key: DeviceKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", DeviceKey(self.driver, self.pool, self.name))


def _qualify(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _attribute(raw: Any) -> tuple[str, AttributeValue] | None:
    """(kind, value) of a `DeviceAttribute`, in upstream's order (`getAttributeValue`)."""
    if not isinstance(raw, Mapping):
        return None
    if isinstance(raw.get("int"), int) and not isinstance(raw.get("int"), bool):
        return "int", int(raw["int"])
    if isinstance(raw.get("bool"), bool):
        return "bool", bool(raw["bool"])
    if isinstance(raw.get("string"), str):
        return "string", str(raw["string"])
    if isinstance(raw.get("version"), str):
        try:
            return "version", Semver.parse(raw["version"])
        except ValueError:  # the apiserver validates versions: not seen in practice
            return None
    return None  # list-typed attributes (alpha in 1.36) are not read


def _named(entries: Mapping[str, Any], name: str, driver: str) -> Any:
    """The entry `name` of any domain, the driver's first."""
    own = entries.get(f"{driver}/{name}")
    if own is not None:
        return own
    suffix = "/" + name
    return next((v for k, v in entries.items() if k.endswith(suffix)), None)


def _quantities(raw: Any) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for name, entry in (raw or {}).items() if isinstance(raw, Mapping) else ():
        value = entry.get("value") if isinstance(entry, Mapping) else None
        if isinstance(value, str | int):
            try:
                out[str(name)] = parse_quantity(value)
            except QuantityError:
                continue
    return out


def device_from_object(
    raw: Mapping[str, Any], *, driver: str, pool: str, node: str | None
) -> Device:
    """A `Device` from one entry of a ResourceSlice's `spec.devices` (JSON)."""
    attributes: list[tuple[str, Any]] = []
    for name, value in (raw.get("attributes") or {}).items():
        parsed = _attribute(value)
        if parsed is not None:
            attributes.append(_pair(_qualify(str(name), driver), *parsed))
    capacity = [
        _pair(_qualify(name, driver), "quantity", value)
        for name, value in _quantities(raw.get("capacity")).items()
    ]
    consumes = tuple(
        CounterUse(
            str(use.get("counterSet", "")),
            FrozenMap(_quantities(use.get("counters")).items()),
        )
        for use in raw.get("consumesCounters") or ()
        if isinstance(use, Mapping)
    )
    attrs = FrozenMap(attributes)
    caps = FrozenMap(capacity)
    uuid = _named(attrs, "uuid", driver)
    product = _named(attrs, "productName", driver)
    memory = _named(caps, "memory", driver)
    return Device(
        driver=driver,
        pool=pool,
        name=str(raw.get("name", "")),
        node=node,
        attributes=attrs,
        capacity=caps,
        uuid=uuid if isinstance(uuid, str) else None,
        product=product if isinstance(product, str) else None,
        memory=int(memory) if isinstance(memory, Fraction) else None,
        allow_multiple_allocations=raw.get("allowMultipleAllocations") is True,
        consumes=consumes,
    )


# -- what is kept of each API object -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceSliceInfo:
    """What kube-steer keeps of a ResourceSlice. `scope` is where its devices are: "node"
    (`nodeName`), "allNodes", "nodeSelector" or "perDevice" (`perDeviceNodeSelection`, each
    device's own `nodeName` placing it)."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node: str | None
    scope: str
    devices: tuple[Device, ...] = ()
    counter_sets: FrozenMap = EMPTY_MAP  # counter set name -> FrozenMap(counter -> amount)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ResourceSliceInfo:
        spec = obj.get("spec") or {}
        driver = str(spec.get("driver", ""))
        pool = spec.get("pool") or {}
        pool_name = str(pool.get("name", ""))
        node = spec.get("nodeName") or None
        if node:
            scope = "node"
        elif spec.get("perDeviceNodeSelection"):
            scope = "perDevice"
        elif spec.get("allNodes"):
            scope = "allNodes"
        else:
            scope = "nodeSelector"
        devices = tuple(
            device_from_object(raw, driver=driver, pool=pool_name, node=_placed(node, scope, raw))
            for raw in spec.get("devices") or ()
            if isinstance(raw, Mapping)
        )
        counter_sets = FrozenMap(
            (str(s.get("name", "")), FrozenMap(_quantities(s.get("counters")).items()))
            for s in spec.get("sharedCounters") or ()
            if isinstance(s, Mapping)
        )
        return cls(
            name=str((obj.get("metadata") or {}).get("name", "")),
            driver=driver,
            pool=pool_name,
            generation=_int(pool.get("generation")),
            slice_count=max(1, _int(pool.get("resourceSliceCount"), 1)),
            node=str(node) if node else None,
            scope=scope,
            devices=devices,
            counter_sets=counter_sets,
        )


def _placed(node: Any, scope: str, device: Mapping[str, Any]) -> str | None:
    """The node a device is on: its slice's, or with per-device selection its own `nodeName`."""
    if node:
        return str(node)
    if scope == "perDevice" and device.get("nodeName"):
        return str(device["nodeName"])
    return None


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


class ReservedPod(NamedTuple):
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """The claim an allocated device belongs to, and the pods it is reserved for
    (`status.reservedFor` entries of resource `pods`, in the claim's namespace)."""

    namespace: str
    name: str
    pods: tuple[ReservedPod, ...] = ()

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ResourceClaimInfo:
    """What kube-steer keeps of a ResourceClaim: the classes it requests, the devices allocated
    to it (admin-access results left out: they do not consume a device) and its pods."""

    namespace: str
    name: str
    classes: frozenset[str] = frozenset()
    devices: tuple[DeviceKey, ...] = ()
    pods: tuple[ReservedPod, ...] = ()

    @property
    def ref(self) -> ClaimRef:
        return ClaimRef(self.namespace, self.name, self.pods)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ResourceClaimInfo:
        metadata = obj.get("metadata") or {}
        status = obj.get("status") or {}
        allocation = status.get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or ()
        devices = tuple(
            DeviceKey(str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
            for r in results
            if isinstance(r, Mapping) and r.get("adminAccess") is not True
        )
        pods = tuple(
            ReservedPod(str(c.get("name", "")), str(c.get("uid", "")))
            for c in status.get("reservedFor") or ()
            if isinstance(c, Mapping) and c.get("resource") == "pods" and not c.get("apiGroup")
        )
        return cls(
            namespace=str(metadata.get("namespace", "")),
            name=str(metadata.get("name", "")),
            classes=_interned(requested_device_classes(obj.get("spec"))),
            devices=devices,
            pods=pods,
        )


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplateInfo:
    """What kube-steer keeps of a ResourceClaimTemplate: the classes its claims request, and
    how many devices of each they take (`ClaimDevices`)."""

    namespace: str
    name: str
    classes: frozenset[str] = frozenset()
    devices: ClaimDevices = NO_DEVICES

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ResourceClaimTemplateInfo:
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        return cls(
            namespace=str(metadata.get("namespace", "")),
            name=str(metadata.get("name", "")),
            classes=_interned(requested_device_classes(spec.get("spec"))),
            devices=requested_device_counts(spec.get("spec")),
        )


@functools.lru_cache(maxsize=4096)
def _interned(classes: frozenset[str]) -> frozenset[str]:
    # 100,000 claims ask for a handful of class sets: one object each.
    return classes


# -- counts ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceCounts:
    total: int = 0
    allocated: int = 0
    free: int = 0  # neither allocated nor blocked by used-up shared counters


@dataclass(frozen=True, slots=True)
class ClassSummary:
    """One DeviceClass across the cluster. `whole_free_nodes`: nodes with devices of the class,
    all free. `fragmentation`: the share (0..1) of the class's free devices that sit on nodes
    where some device of the class is allocated; 0 when none is free."""

    total: int = 0
    allocated: int = 0
    free: int = 0
    whole_free_nodes: int = 0
    fragmentation: float = 0.0


_NO_COUNTS = DeviceCounts()

# -- one node ----------------------------------------------------------------------------------


class NodeDevices:
    """The devices of one node, with their classes and allocations."""

    __slots__ = ("_allocated", "_blocked", "_by_extended", "_classes", "_counts", "devices", "node")

    def __init__(
        self,
        node: str,
        devices: tuple[Device, ...],
        classes: dict[DeviceKey, frozenset[str]],
        allocated: dict[DeviceKey, ClaimRef],
        blocked: frozenset[DeviceKey],
        by_extended: Mapping[str, str],
    ) -> None:
        self.node = node
        self.devices = devices
        self._classes = classes
        self._allocated = allocated
        self._blocked = blocked
        self._by_extended = by_extended
        totals: Counter[str] = Counter()
        used: Counter[str] = Counter()
        free: Counter[str] = Counter()
        for device in devices:
            key = device.key
            for name in classes.get(key, ()):
                totals[name] += 1
                if key in allocated:
                    used[name] += 1
                elif key not in blocked:
                    free[name] += 1
        self._counts = {name: DeviceCounts(n, used[name], free[name]) for name, n in totals.items()}

    def classes_of(self, device: Device) -> frozenset[str]:
        return self._classes.get(device.key, frozenset())

    def allocated_to(self, device: Device) -> ClaimRef | None:
        return self._allocated.get(device.key)

    def is_free(self, device: Device) -> bool:
        """Neither allocated nor held back by shared counters other devices used up."""
        key = device.key
        return key not in self._allocated and key not in self._blocked

    def counts(self, device_class: str) -> DeviceCounts:
        return self._counts.get(device_class, _NO_COUNTS)

    def device_classes(self) -> frozenset[str]:
        """The classes that select at least one device here."""
        return frozenset(self._counts)

    def count_any(
        self, classes: Collection[str], extended_names: Collection[str] = ()
    ) -> tuple[int, int]:
        """(devices any of `classes`, or of the classes that map `extended_names`, selects,
        each once; how many of those claims may share: `allowMultipleAllocations`)."""
        wanted = set(classes)
        wanted.update(self._by_extended[n] for n in extended_names if n in self._by_extended)
        devices = shared = 0
        for device in self.devices:
            if not self._classes.get(device.key, frozenset()).isdisjoint(wanted):
                devices += 1
                shared += device.allow_multiple_allocations
        return devices, shared

    def offered(self) -> Mapping[str, int]:
        """Devices by every extended-resource name a pod may request them by (each class's
        `extended_names`; a name two classes claim goes to the one `classes_by_extended_name`
        picks)."""
        return {
            ext: self._counts[name].total
            for ext, name in self._by_extended.items()
            if name in self._counts
        }

    def free_offered(self) -> Mapping[str, int]:
        """`offered()` with free devices only (same keys)."""
        return {
            ext: self._counts[name].free
            for ext, name in self._by_extended.items()
            if name in self._counts
        }

    def __repr__(self) -> str:
        return f"NodeDevices({self.node!r}, {len(self.devices)} devices)"


# -- the inventory -----------------------------------------------------------------------------


class _Problems:
    """Problem lines by kind, at most `_PROBLEMS_PER_KIND` of each, then a count."""

    def __init__(self) -> None:
        self._lines: dict[str, list[str]] = defaultdict(list)
        self._more: Counter[str] = Counter()

    def add(self, kind: str, line: str) -> None:
        if len(self._lines[kind]) < _PROBLEMS_PER_KIND:
            self._lines[kind].append(line)
        else:
            self._more[kind] += 1

    def lines(self) -> tuple[str, ...]:
        out: list[str] = []
        for kind, lines in self._lines.items():
            out.extend(lines)
            if self._more[kind]:
                out.append(f"... and {self._more[kind]} more: {kind}")
        return tuple(out)


@dataclass(frozen=True, eq=False)
class Inventory:
    """Every node's DRA devices, and what the webhook's `DeviceCatalog` asks of claims and
    templates. Immutable; the watch builds a new one when something changed."""

    classes: Mapping[str, DeviceClassInfo] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    unattributed_devices: int = 0  # devices for allNodes / a nodeSelector: on no one node
    _nodes: Mapping[str, NodeDevices] = field(default_factory=dict, repr=False)
    _summaries: Mapping[str, ClassSummary] = field(default_factory=dict, repr=False)
    _claims: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict, repr=False)
    _templates: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict, repr=False)
    _template_devices: Mapping[tuple[str, str], ClaimDevices] = field(
        default_factory=dict, repr=False
    )
    _by_extended: Mapping[str, str] = field(default_factory=dict, repr=False)
    # (class, selector index, reason) per device a selector could not be evaluated on
    _selector_errors: Mapping[DeviceKey, tuple[tuple[str, int, str], ...]] = field(
        default_factory=dict, repr=False
    )

    @classmethod
    def empty(cls) -> Inventory:
        """A cluster without DRA: no classes, no devices, no claims."""
        return _EMPTY

    # -- reads ---------------------------------------------------------------------------------

    def node(self, name: str) -> NodeDevices | None:
        return self._nodes.get(name)

    def nodes(self) -> tuple[NodeDevices, ...]:
        """Nodes with at least one device, in name order."""
        return tuple(self._nodes[name] for name in sorted(self._nodes))

    def device_classes(self) -> tuple[str, ...]:
        """The DeviceClasses that select a device on some node, in name order."""
        return tuple(sorted({c for n in self._nodes.values() for c in n.device_classes()}))

    def summary(self, device_class: str) -> ClassSummary:
        return self._summaries.get(device_class, ClassSummary())

    # -- DeviceCatalog -------------------------------------------------------------------------

    def template_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        return self._templates.get((namespace, name))

    def claim_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        return self._claims.get((namespace, name))

    def template_devices(self, namespace: str, name: str) -> ClaimDevices | None:
        return self._template_devices.get((namespace, name))

    def class_for_extended_name(self, resource: str) -> str | None:
        return self._by_extended.get(resource)

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def from_objects(
        cls,
        classes: Iterable[DeviceClassInfo | Mapping[str, Any]],
        slices: Iterable[Mapping[str, Any]] | None,
        claims: Iterable[Mapping[str, Any]] = (),
        templates: Iterable[Mapping[str, Any]] = (),
        *,
        selectors: DeviceSelectors | None = None,
    ) -> Inventory:
        """From API objects (JSON). `slices=None`: ResourceSlices are not watched (the webhook
        needs classes, claims and templates only), so allocations are not checked against them."""
        infos = (
            c if isinstance(c, DeviceClassInfo) else DeviceClassInfo.from_object(c) for c in classes
        )
        return cls.build(
            infos,
            None if slices is None else (ResourceSliceInfo.from_object(s) for s in slices),
            (ResourceClaimInfo.from_object(c) for c in claims),
            (ResourceClaimTemplateInfo.from_object(t) for t in templates),
            selectors=selectors,
        )

    @classmethod
    def build(
        cls,
        classes: Iterable[DeviceClassInfo],
        slices: Iterable[ResourceSliceInfo] | None,
        claims: Iterable[ResourceClaimInfo] = (),
        templates: Iterable[ResourceClaimTemplateInfo] = (),
        *,
        selectors: DeviceSelectors | None = None,
        previous: Inventory | None = None,
    ) -> Inventory:
        """From the reduced objects. `selectors` carries compiled expressions and memoised
        results from one build to the next (a watch passes the same one each time); with the
        same classes, a device that is the very object `previous` had keeps the classes it had
        there, so a rebuild for a changed claim evaluates nothing."""
        class_map = {c.name: c for c in classes}
        claim_list = sorted(claims, key=lambda c: (c.namespace, c.name))
        template_list = list(templates)
        template_map = {(t.namespace, t.name): t.classes for t in template_list}
        template_devices = {(t.namespace, t.name): t.devices for t in template_list}
        claim_map = {(c.namespace, c.name): c.classes for c in claim_list}
        by_extended = classes_by_extended_name(class_map)
        if slices is None:
            return cls(
                classes=class_map,
                _claims=claim_map,
                _templates=template_map,
                _template_devices=template_devices,
                _by_extended=by_extended,
            )
        return _Builder(class_map, selectors or DeviceSelectors(), previous).build(
            list(slices), claim_list, claim_map, template_map, by_extended, template_devices
        )


_EMPTY = Inventory()


class _Builder:
    def __init__(
        self,
        classes: dict[str, DeviceClassInfo],
        selectors: DeviceSelectors,
        previous: Inventory | None,
    ) -> None:
        self.classes = classes
        self.selectors = selectors
        self.problems = _Problems()
        self._class_sets: dict[frozenset[str], frozenset[str]] = {}
        self._unevaluable: Counter[tuple[str, int, str]] = Counter()
        self.errors: dict[DeviceKey, tuple[tuple[str, int, str], ...]] = {}
        self._known: dict[DeviceKey, tuple[Device, frozenset[str]]] = {}
        self._known_errors: Mapping[DeviceKey, tuple[tuple[str, int, str], ...]] = {}
        if previous is not None and dict(previous.classes) == classes:
            self._known = {
                d.key: (d, node.classes_of(d)) for node in previous.nodes() for d in node.devices
            }
            self._known_errors = previous._selector_errors

    def build(
        self,
        slices: list[ResourceSliceInfo],
        claims: list[ResourceClaimInfo],
        claim_map: dict[tuple[str, str], frozenset[str]],
        template_map: dict[tuple[str, str], frozenset[str]],
        by_extended: dict[str, str],
        template_devices: dict[tuple[str, str], ClaimDevices],
    ) -> Inventory:
        current = self._current(slices)
        devices: dict[DeviceKey, Device] = {}
        elsewhere: set[DeviceKey] = set()  # listed, but on no one node
        counter_sets: dict[tuple[str, str], dict[str, FrozenMap]] = defaultdict(dict)
        for piece in current:
            for set_name, counters in piece.counter_sets.items():
                counter_sets[(piece.driver, piece.pool)][set_name] = counters
            for device in piece.devices:
                if device.node is None:
                    elsewhere.add(device.key)
                else:
                    devices[device.key] = device
            unplaced = sum(1 for d in piece.devices if d.node is None)
            if unplaced:
                self.problems.add(
                    "ResourceSlices not node-local",
                    f"ResourceSlice {piece.name} ({piece.driver}, pool {piece.pool}): "
                    f"{unplaced} devices for {piece.scope}, counted on no node",
                )

        allocated = self._allocations(claims, devices, elsewhere)
        blocked = self._blocked(devices, allocated, counter_sets)
        classes_of = {key: self._classes_of(device) for key, device in devices.items()}
        for (name, index, reason), count in sorted(self._unevaluable.items()):
            self.problems.add(
                "unevaluable selectors",
                f"DeviceClass {name}: selector {index} {reason} ({count} devices; "
                "the class selects none of them)",
            )

        by_node: dict[str, list[Device]] = defaultdict(list)
        for device in devices.values():
            assert device.node is not None
            by_node[device.node].append(device)
        nodes = {
            node: NodeDevices(
                node,
                tuple(sorted(node_devices, key=lambda d: d.key)),
                {d.key: classes_of[d.key] for d in node_devices},
                {d.key: allocated[d.key] for d in node_devices if d.key in allocated},
                frozenset(d.key for d in node_devices if d.key in blocked),
                by_extended,
            )
            for node, node_devices in by_node.items()
        }
        return Inventory(
            classes=self.classes,
            problems=self.problems.lines(),
            unattributed_devices=len(elsewhere),
            _nodes=nodes,
            _summaries=_summaries(self.classes, nodes.values()),
            _claims=claim_map,
            _templates=template_map,
            _template_devices=template_devices,
            _by_extended=by_extended,
            _selector_errors=self.errors,
        )

    def _current(self, slices: list[ResourceSliceInfo]) -> list[ResourceSliceInfo]:
        """The slices of each pool's highest generation (older ones are stale)."""
        newest: dict[tuple[str, str], int] = {}
        for piece in slices:
            key = (piece.driver, piece.pool)
            newest[key] = max(newest.get(key, piece.generation), piece.generation)
        current = [s for s in slices if s.generation == newest[(s.driver, s.pool)]]
        seen = Counter((s.driver, s.pool) for s in current)
        expected = {(s.driver, s.pool): s.slice_count for s in current}
        for (driver, pool), count in sorted(seen.items()):
            if count < expected[(driver, pool)]:
                self.problems.add(
                    "incomplete pools",
                    f"pool {pool} of {driver}: {count} of {expected[(driver, pool)]} "
                    f"ResourceSlices seen at generation {newest[(driver, pool)]}",
                )
        return current

    def _allocations(
        self,
        claims: list[ResourceClaimInfo],
        devices: Mapping[DeviceKey, Device],
        elsewhere: set[DeviceKey],
    ) -> dict[DeviceKey, ClaimRef]:
        allocated: dict[DeviceKey, ClaimRef] = {}
        for claim in claims:
            ref: ClaimRef | None = None
            for key in claim.devices:
                if key in devices:
                    ref = ref or claim.ref
                    allocated.setdefault(key, ref)  # a shared device: the first claim by name
                elif key not in elsewhere:
                    self.problems.add(
                        "allocations to unlisted devices",
                        f"ResourceClaim {claim.namespace}/{claim.name}: allocated device {key} "
                        "is in no current ResourceSlice",
                    )
        return allocated

    def _blocked(
        self,
        devices: Mapping[DeviceKey, Device],
        allocated: Mapping[DeviceKey, ClaimRef],
        counter_sets: Mapping[tuple[str, str], dict[str, FrozenMap]],
    ) -> frozenset[DeviceKey]:
        """Unallocated partitionable devices whose counters allocated devices have used up."""
        used: dict[tuple[str, str, str, str], Fraction] = defaultdict(Fraction)
        for key in allocated:
            for use in devices[key].consumes:
                for counter, amount in use.counters.items():
                    used[(key.driver, key.pool, use.counter_set, counter)] += amount
        blocked: set[DeviceKey] = set()
        for key, device in devices.items():
            if key in allocated or not device.consumes:
                continue
            sets = counter_sets.get((key.driver, key.pool), {})
            for use in device.consumes:
                available = sets.get(use.counter_set)
                if available is None:
                    self.problems.add(
                        "unknown counter sets",
                        f"device {key}: consumes counter set {use.counter_set!r}, which no "
                        "current ResourceSlice of its pool shares; not counted free",
                    )
                    blocked.add(key)
                    break
                if any(
                    used[(key.driver, key.pool, use.counter_set, counter)] + amount
                    > available.get(counter, Fraction(0))
                    for counter, amount in use.counters.items()
                ):
                    blocked.add(key)
                    break
        return frozenset(blocked)

    def _classes_of(self, device: Device) -> frozenset[str]:
        key = device.key
        known = self._known.get(key)
        if known is not None and known[0] is device:
            errors = self._known_errors.get(key, ())
        else:
            errors = ()
            chosen = set()
            for name, info in self.classes.items():
                selected = True
                for index, expression in enumerate(info.selectors):
                    result = self.selectors.evaluate(
                        expression,
                        driver=device.driver,
                        attributes=device.attributes,
                        capacity=device.capacity,
                        allow_multiple_allocations=device.allow_multiple_allocations,
                    )
                    if result.error is not None:
                        errors += ((name, index, result.error),)
                    if not result.selected:  # all selectors must hold, as upstream
                        selected = False
                        break
                if selected:
                    chosen.add(name)
            found = frozenset(chosen)
            known = (device, self._class_sets.setdefault(found, found))
        if errors:
            self.errors[key] = errors
            self._unevaluable.update(errors)
        return known[1]


def _summaries(
    classes: Mapping[str, DeviceClassInfo], nodes: Iterable[NodeDevices]
) -> dict[str, ClassSummary]:
    total: Counter[str] = Counter()
    allocated: Counter[str] = Counter()
    free: Counter[str] = Counter()
    whole: Counter[str] = Counter()
    scattered: Counter[str] = Counter()  # free devices on nodes where some are allocated
    for node in nodes:
        for name in node.device_classes():
            counts = node.counts(name)
            total[name] += counts.total
            allocated[name] += counts.allocated
            free[name] += counts.free
            if counts.free == counts.total:
                whole[name] += 1
            if counts.allocated:
                scattered[name] += counts.free
    return {
        name: ClassSummary(
            total=total[name],
            allocated=allocated[name],
            free=free[name],
            whole_free_nodes=whole[name],
            fragmentation=scattered[name] / free[name] if free[name] else 0.0,
        )
        for name in classes
    }
