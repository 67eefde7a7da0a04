"""The DRA device inventory (steer/core/dra/inventory.py) and DeviceClass selectors
(steer/core/dra/selectors.py), pure: objects shaped as the API returns them
(tests/fixtures/dra/README.md) in, devices, classes, allocations and counts out."""

from __future__ import annotations

import copy
from fractions import Fraction
from importlib.metadata import version
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from steer.core.dra.catalog import DeviceCatalog
from steer.core.dra.classes import DeviceClassInfo
from steer.core.dra.inventory import (
    ClassSummary,
    DeviceCounts,
    DeviceKey,
    Inventory,
    ResourceClaimInfo,
    ResourceSliceInfo,
)
from steer.core.dra.selectors import DeviceSelectors, SelectorResult, Semver
from tests.conftest import load_fixture

GPU = "gpu.nvidia.com"
NVIDIA_SLICE = load_fixture("dra/nvidia-resourceslice-gpu-node.json")
NVIDIA_CLASSES = load_fixture("dra/deviceclasses.json")["items"]
PARTITIONS = load_fixture("dra/example-partitionable-resourceslices.json")["items"]
ALLOCATED = load_fixture("dra/resourceclaim-allocated.json")
ADMIN = load_fixture("dra/resourceclaim-admin-access.json")
TEMPLATE = load_fixture("dra/resourceclaimtemplate.json")


def gpu_slice(node: str, *, generation: int = 1, gpus: int = 4, pool: str | None = None) -> Any:
    """The NVIDIA fixture slice moved to `node` (own UUIDs), with `gpus` devices."""
    obj = copy.deepcopy(NVIDIA_SLICE)
    obj["metadata"]["name"] = f"{node}-{GPU}-x"
    spec = obj["spec"]
    spec["nodeName"] = node
    spec["pool"] = {"name": pool or node, "generation": generation, "resourceSliceCount": 1}
    template = spec["devices"][0]
    spec["devices"] = []
    for i in range(gpus):
        device = copy.deepcopy(template)
        device["name"] = f"gpu-{i}"
        device["attributes"]["uuid"] = {"string": f"GPU-{node}-{i}"}
        spec["devices"].append(device)
    return obj


def claim(
    namespace: str,
    name: str,
    *devices: tuple[str, str, str],
    pods: tuple[str, ...] = (),
    classes: tuple[str, ...] = (GPU,),
    admin: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {
            "devices": {
                "requests": [
                    {"name": f"r{i}", "exactly": {"deviceClassName": c}}
                    for i, c in enumerate(classes)
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r0", "driver": d, "pool": p, "device": n}
                        | ({"adminAccess": True} if admin else {})
                        for d, p, n in devices
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"} for pod in pods],
        },
    }


def device_class(name: str, *selectors: str, extended: str | None = None) -> DeviceClassInfo:
    return DeviceClassInfo(name=name, selectors=selectors, extended_resource_name=extended)


# -- selectors -----------------------------------------------------------------------------------

H100 = {
    f"{GPU}/type": "gpu",
    f"{GPU}/uuid": "GPU-1",
    f"{GPU}/productName": "NVIDIA H100 80GB HBM3",
    f"{GPU}/driverVersion": Semver.parse("570.124.6"),
    f"{GPU}/cudaComputeCapability": Semver.parse("9.0.0"),
    f"{GPU}/index": 3,
    f"{GPU}/mig": False,
    "resource.kubernetes.io/pcieRoot": "pci0000:10",
}
H100_CAPACITY = {f"{GPU}/memory": Fraction(81559 * 2**20)}


def select(expression: str, selectors: DeviceSelectors | None = None, **kw: Any) -> SelectorResult:
    s = selectors or DeviceSelectors()
    return s.evaluate(
        expression,
        driver=kw.get("driver", GPU),
        attributes=kw.get("attributes", H100),
        capacity=kw.get("capacity", H100_CAPACITY),
        allow_multiple_allocations=kw.get("allow_multiple_allocations", False),
    )


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        (
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            True,
        ),
        ("device.attributes['gpu.nvidia.com'].type == 'mig'", False),
        ("device.attributes['gpu.nvidia.com'].index == 3", True),
        ("device.attributes['gpu.nvidia.com'].mig == false", True),
        ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:10'", True),
        # an unknown domain is an empty map, as upstream's default-valued outer map
        ("'type' in device.attributes['other.example.com']", False),
        ("!has(device.attributes['other.example.com'].type)", True),
        ("device.allowMultipleAllocations == false", True),
        # quantity library
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))", True),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('40Gi'))", False),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('81559Mi')) == 0", True),
        ("device.capacity['gpu.nvidia.com'].memory == quantity('81559Mi')", True),
        ("quantity('1Gi') == quantity('1024Mi')", True),
        ("device.capacity['gpu.nvidia.com'].memory.asInteger() == 85520809984", True),
        ("device.capacity['gpu.nvidia.com'].memory.asApproximateFloat() > 8.5e10", True),
        ("quantity('500m').isInteger() == false && quantity('2').sign() == 1", True),
        ("quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi')", True),
        ("quantity('1Gi').sub(1) == quantity('1073741823')", True),
        ("isQuantity('40Gi') && !isQuantity('forty')", True),
        # semver library, and version attributes as semver values
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
            True,
        ),
        (
            "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isLessThan(semver('8.0.0'))",
            False,
        ),
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('570.124.6')) == 0",
            True,
        ),
        ("device.attributes['gpu.nvidia.com'].driverVersion == semver('570.124.6')", True),
        ("device.attributes['gpu.nvidia.com'].driverVersion.major() == 570", True),
        ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
        ("semver('1.0.0-alpha.2').isLessThan(semver('1.0.0-alpha.10'))", True),
        ("semver('v1.2', true) == semver('1.2.0')", True),
        ("isSemver('1.2.3') && !isSemver('1.2')", True),
        # an error one side of || or && decides is absorbed (CEL's commutative logic)
        ("device.attributes['gpu.nvidia.com'].nothere == 1 || true", True),
        ("device.attributes['gpu.nvidia.com'].nothere == 1 && false", False),
    ],
)
def test_selector_environment(expression: str, selected: bool) -> None:
    assert select(expression) == SelectorResult(selected)


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("device.driver ==", "syntax error at column"),
        (
            "device.attributes['gpu.nvidia.com'].nothere == 1",
            "no such member in mapping: 'nothere'",
        ),
        ("device.attributes['gpu.nvidia.com'].type", "gives StringType, not a bool"),
        ("quantity('forty') == quantity('40')", "'forty' is not a quantity"),
        ("semver('1.2') == semver('1.2.0')", "'1.2' is not a semantic version"),
        ("quantity('1').isGreaterThan(semver('1.0.0'))", "no such overload: isGreaterThan"),
        ("quantity('1.5').asInteger() == 1", "cannot convert quantity 3/2 to an int64"),
        # upstream's semver type has no ordering operators: compareTo and friends only
        ("semver('2.0.0') > semver('1.0.0')", "no matching overload"),
        # cel.bind is a macro cel-python does not know: reported, never a silent match
        ("cel.bind(a, device.attributes['gpu.nvidia.com'], a.type == 'gpu')", "bind"),
        ("nosuchfunction(1)", "undeclared reference to 'nosuchfunction'"),
    ],
)
def test_unevaluable_selectors_are_typed_results(expression: str, reason: str) -> None:
    result = select(expression)
    assert result.selected is False
    assert result.error is not None
    assert result.error.startswith("cannot evaluate: ")
    assert reason in result.error
    assert "activation" not in result.error  # celpy's dump of the whole input is cut


def test_memoised_by_what_the_expression_can_read() -> None:
    selectors = DeviceSelectors()
    expression = (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    for i in range(500):  # identical GPUs but for uuid and bus id
        attrs = {**H100, f"{GPU}/uuid": f"GPU-{i}", f"{GPU}/pcieBusID": f"0000:{i:04x}"}
        assert select(expression, selectors, attributes=attrs).selected
    assert selectors.evaluations == 1
    assert selectors.compilations == 1
    select(expression, selectors, attributes={**H100, f"{GPU}/type": "mig"})
    assert selectors.evaluations == 2  # a name it reads changed: evaluated again


def test_memo_keeps_every_attribute_when_the_expression_enumerates_them() -> None:
    selectors = DeviceSelectors()
    expression = "device.attributes['gpu.nvidia.com'].exists(k, k == 'uuid')"
    assert select(expression, selectors).selected
    assert select(expression, selectors, attributes={**H100, f"{GPU}/uuid": "GPU-2"}).selected
    assert selectors.evaluations == 2
    # a computed key reads what the text does not name
    computed = "device.attributes['gpu.nvidia.com'][device.driver] == 'x'"
    select(computed, selectors)
    select(computed, selectors, attributes={**H100, f"{GPU}/uuid": "GPU-3"})
    assert selectors.evaluations == 4


def test_compile_once_and_compile_error() -> None:
    selectors = DeviceSelectors()
    assert selectors.compile_error("device.driver == ") is not None
    assert selectors.compile_error("device.driver == 'x'") is None
    select("device.driver == 'x'", selectors)
    assert selectors.compilations == 2


def test_celpy_behaviour_relied_on() -> None:
    """What selectors.py relies on in cel-python (bounded to 0.5.x in pyproject.toml)."""
    assert version("cel-python").startswith("0.5.")
    env = celpy.Environment()

    def twice(x: Any) -> Any:
        if not isinstance(x, celtypes.IntType):
            raise TypeError("no such overload")
        return celtypes.IntType(2 * x)

    def run(text: str) -> Any:
        return env.program(env.compile(text), functions={"twice": twice}).evaluate({})

    assert run("(3).twice() == 6")  # a method call dispatches to the function, receiver first
    assert run("twice(3) == 6")
    with pytest.raises(CELEvalError):  # a Python exception becomes an error (raised at top)
        run("'x'.twice() == 6")
    assert run("'x'.twice() == 6 || true")  # ... which || absorbs
    assert isinstance(run("true"), celtypes.BoolType)
    assert not isinstance(celtypes.BoolType(True), bool)  # why results are checked as BoolType
    with pytest.raises(CELParseError):
        env.compile("1 +")


# -- the inventory ---------------------------------------------------------------------------------


def nvidia_inventory(*slices: Any, claims: tuple[Any, ...] = (), **kw: Any) -> Inventory:
    return Inventory.from_objects(NVIDIA_CLASSES, slices or (NVIDIA_SLICE,), claims, **kw)


def test_nvidia_node_devices() -> None:
    inventory = nvidia_inventory()
    assert inventory.problems == ()
    node = inventory.node("gpu-node-1")
    assert node is not None
    assert [d.name for d in node.devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    gpu0 = node.devices[0]
    assert gpu0.key == DeviceKey(GPU, "gpu-node-1", "gpu-0")
    assert gpu0.node == "gpu-node-1"
    assert gpu0.uuid == "GPU-4a1c3b2e-7f0d-5e6a-9b8c-1d2e3f4a5b60"
    assert gpu0.product == "NVIDIA H100 80GB HBM3"
    assert gpu0.memory == 81559 * 2**20
    # unqualified names belong to the driver's domain; qualified ones keep theirs
    assert gpu0.attributes[f"{GPU}/type"] == "gpu"
    assert gpu0.attributes["resource.kubernetes.io/pcieRoot"] == "pci0000:10"
    assert gpu0.attributes[f"{GPU}/driverVersion"] == Semver.parse("570.124.6")
    assert gpu0.capacity[f"{GPU}/memory"] == Fraction(81559 * 2**20)
    assert node.classes_of(gpu0) == frozenset({GPU})  # not mig.nvidia.com
    assert node.counts(GPU) == DeviceCounts(total=4, allocated=0, free=4)
    assert node.counts("mig.nvidia.com") == DeviceCounts()
    assert node.offered() == {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 4}
    assert inventory.node("cpu-node") is None


def test_offered_keys_are_every_extended_name() -> None:
    classes = [
        device_class("gpu", "device.driver == 'gpu.nvidia.com'", extended="nvidia.com/gpu"),
        device_class(
            "h100", "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"
        ),
    ]
    inventory = Inventory.from_objects(
        classes, [NVIDIA_SLICE], [claim("ml", "c", (GPU, "gpu-node-1", "gpu-0"))]
    )
    node = inventory.node("gpu-node-1")
    assert node is not None
    assert node.offered() == {
        "nvidia.com/gpu": 4,
        "deviceclass.resource.kubernetes.io/gpu": 4,
        "deviceclass.resource.kubernetes.io/h100": 4,
    }
    assert node.free_offered() == {
        "nvidia.com/gpu": 3,
        "deviceclass.resource.kubernetes.io/gpu": 3,
        "deviceclass.resource.kubernetes.io/h100": 3,
    }


def test_a_class_without_selectors_selects_every_device() -> None:
    inventory = Inventory.from_objects([device_class("anything")], [NVIDIA_SLICE])
    assert inventory.summary("anything").total == 4


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = gpu_slice("n1", generation=1, gpus=2)
    new = gpu_slice("n1", generation=2, gpus=3)
    inventory = nvidia_inventory(old, new)
    node = inventory.node("n1")
    assert node is not None
    assert len(node.devices) == 3
    assert inventory.problems == ()


def test_an_incomplete_pool_is_reported_and_counted() -> None:
    partial = gpu_slice("n1")
    partial["spec"]["pool"]["resourceSliceCount"] = 2
    inventory = nvidia_inventory(partial)
    assert inventory.summary(GPU).total == 4
    assert inventory.problems == (
        "pool n1 of gpu.nvidia.com: 1 of 2 ResourceSlices seen at generation 1",
    )


def test_slices_that_are_not_node_local() -> None:
    network = copy.deepcopy(NVIDIA_SLICE)
    del network["spec"]["nodeName"]
    network["metadata"]["name"] = "fabric"
    network["spec"]["pool"]["name"] = "fabric"
    network["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}
        ]
    }
    everywhere = copy.deepcopy(network)
    everywhere["metadata"]["name"] = "everywhere"
    everywhere["spec"]["pool"]["name"] = "everywhere"
    del everywhere["spec"]["nodeSelector"]
    everywhere["spec"]["allNodes"] = True
    per_device = copy.deepcopy(network)
    per_device["metadata"]["name"] = "per-device"
    per_device["spec"]["pool"]["name"] = "per-device"
    del per_device["spec"]["nodeSelector"]
    per_device["spec"]["perDeviceNodeSelection"] = True
    per_device["spec"]["devices"][0]["nodeName"] = "n7"
    per_device["spec"]["devices"][1]["allNodes"] = True
    per_device["spec"]["devices"] = per_device["spec"]["devices"][:2]
    inventory = nvidia_inventory(
        NVIDIA_SLICE,
        network,
        everywhere,
        per_device,
        claims=(claim("ml", "fabric-user", (GPU, "fabric", "gpu-0")),),
    )
    assert inventory.unattributed_devices == 4 + 4 + 1
    assert [n.node for n in inventory.nodes()] == ["gpu-node-1", "n7"]
    assert inventory.summary(GPU).total == 5
    assert inventory.problems == (
        "ResourceSlice fabric (gpu.nvidia.com, pool fabric): 4 devices for nodeSelector, counted on no node",
        "ResourceSlice everywhere (gpu.nvidia.com, pool everywhere): 4 devices for allNodes, counted on no node",
        "ResourceSlice per-device (gpu.nvidia.com, pool per-device): 1 devices for perDevice, counted on no node",
    )  # an allocation of a device on no node is not a problem


def test_allocations_reserved_pods_and_admin_access() -> None:
    inventory = nvidia_inventory(claims=(ALLOCATED, ADMIN))
    node = inventory.node("gpu-node-1")
    assert node is not None
    by_name = {d.name: d for d in node.devices}
    ref = node.allocated_to(by_name["gpu-1"])
    assert ref is not None
    assert str(ref) == "ml/trainer-0-gpu-q7t4m"
    assert [(p.name, p.uid) for p in ref.pods] == [
        ("trainer-0", "f5a6b7c8-d9e0-4f1a-8b2c-3d4e5f6a7b8c")
    ]
    # the admin-access claim holds all four, and consumes none
    assert node.allocated_to(by_name["gpu-0"]) is None
    assert node.is_free(by_name["gpu-0"]) and not node.is_free(by_name["gpu-1"])
    assert node.counts(GPU) == DeviceCounts(total=4, allocated=1, free=3)
    assert inventory.problems == ()


def test_an_allocation_to_a_device_no_slice_lists() -> None:
    ghost = claim("ml", "ghost", (GPU, "gpu-node-1", "gpu-9"))
    inventory = nvidia_inventory(claims=(ghost,))
    assert inventory.problems == (
        "ResourceClaim ml/ghost: allocated device gpu.nvidia.com/gpu-node-1/gpu-9 is in no "
        "current ResourceSlice",
    )


def test_summary_whole_free_nodes_and_fragmentation() -> None:
    slices = [gpu_slice(f"n{i}", gpus=4) for i in range(4)]
    claims = (
        claim("a", "one", (GPU, "n0", "gpu-0")),  # n0: 1 of 4 used -> 3 free, scattered
        claim("a", "two", (GPU, "n1", "gpu-0"), (GPU, "n1", "gpu-1")),  # n1: 2 free, scattered
        claim("a", "all", *((GPU, "n2", f"gpu-{i}") for i in range(4))),  # n2: full
    )  # n3: all free
    inventory = nvidia_inventory(*slices, claims=claims)
    assert inventory.summary(GPU) == ClassSummary(
        total=16, allocated=7, free=9, whole_free_nodes=1, fragmentation=5 / 9
    )
    assert inventory.summary("mig.nvidia.com") == ClassSummary()
    assert inventory.summary("no-such-class") == ClassSummary()
    idle = nvidia_inventory(gpu_slice("n0"))
    assert idle.summary(GPU).fragmentation == 0.0
    full = nvidia_inventory(
        gpu_slice("n0", gpus=1), claims=(claim("a", "x", (GPU, "n0", "gpu-0")),)
    )
    assert full.summary(GPU) == ClassSummary(total=1, allocated=1, free=0, fragmentation=0.0)


def test_partitionable_devices_and_shared_counters() -> None:
    classes = [device_class("gpu.example.com", "device.driver == 'gpu.example.com'")]
    node_name = "part-node-1"

    def counts(*claims: Any) -> DeviceCounts:
        node = Inventory.from_objects(classes, PARTITIONS, claims).node(node_name)
        assert node is not None
        return node.counts("gpu.example.com")

    key = ("gpu.example.com", node_name)
    assert counts() == DeviceCounts(total=3, allocated=0, free=3)
    # one half used: the other half is free, the full GPU is not (its counters are half gone)
    assert counts(claim("a", "half", (*key, "gpu-0-partition-0"))) == DeviceCounts(3, 1, 1)
    # the full GPU used: no partition is free
    assert counts(claim("a", "full", (*key, "gpu-0"))) == DeviceCounts(3, 1, 0)
    inventory = Inventory.from_objects(classes, PARTITIONS)
    node = inventory.node(node_name)
    assert node is not None
    assert node.devices[0].consumes[0].counter_set == "gpu-0-counter-set"
    assert node.devices[0].attributes["gpu.example.com/index"] == 0


def test_a_counter_set_no_slice_shares() -> None:
    classes = [device_class("gpu.example.com")]
    devices_only = [s for s in PARTITIONS if s["spec"].get("devices")]
    inventory = Inventory.from_objects(classes, devices_only)
    assert inventory.summary("gpu.example.com") == ClassSummary(total=3, whole_free_nodes=0)
    assert inventory.problems[0] == (
        "pool part-node-1 of gpu.example.com: 1 of 2 ResourceSlices seen at generation 1"
    )
    assert inventory.problems[1] == (
        "device gpu.example.com/part-node-1/gpu-0: consumes counter set 'gpu-0-counter-set', "
        "which no current ResourceSlice of its pool shares; not counted free"
    )
    assert len(inventory.problems) == 4


def test_unevaluable_selectors_are_problems_and_select_nothing() -> None:
    classes = [
        device_class("broken", "device.attributes['gpu.nvidia.com'].nothere == 'x'"),
        device_class("typo", "device.driver = 'gpu.nvidia.com'"),
    ]
    inventory = Inventory.from_objects(classes, [NVIDIA_SLICE, gpu_slice("n2")])
    assert inventory.summary("broken").total == 0
    assert inventory.problems == (
        "DeviceClass broken: selector 0 cannot evaluate: no such member in mapping: 'nothere' "
        "(8 devices; the class selects none of them)",
        "DeviceClass typo: selector 0 cannot evaluate: syntax error at column 15 "
        "(8 devices; the class selects none of them)",
    )


def test_problem_lines_are_bounded() -> None:
    ghosts = tuple(
        claim("ml", f"ghost-{i}", (GPU, "gpu-node-1", f"gpu-{100 + i}")) for i in range(25)
    )
    inventory = nvidia_inventory(claims=ghosts)
    assert len(inventory.problems) == 11
    assert inventory.problems[-1] == "... and 15 more: allocations to unlisted devices"


def test_identical_gpus_across_nodes_evaluate_once() -> None:
    selectors = DeviceSelectors()
    slices = [gpu_slice(f"n{i}", gpus=8) for i in range(50)]
    inventory = nvidia_inventory(*slices, selectors=selectors)
    assert inventory.summary(GPU).total == 400
    assert selectors.evaluations == 2  # one per class: the uuids are not read
    nvidia_inventory(*slices, selectors=selectors)  # a rebuild reuses the results
    assert selectors.evaluations == 2


def test_catalog_protocol() -> None:
    classes = [
        *NVIDIA_CLASSES,
        device_class("gpu-x", extended="nvidia.com/gpu"),
    ]
    inventory = Inventory.from_objects(classes, None, [ALLOCATED], [TEMPLATE])
    catalog: DeviceCatalog = inventory
    assert catalog.claim_classes("ml", "trainer-0-gpu-q7t4m") == frozenset({GPU})
    assert catalog.claim_classes("ml", "unknown") is None
    assert catalog.template_classes("ml", "gpu-claim-template") == frozenset(
        {GPU, "mig.nvidia.com"}
    )
    assert catalog.template_classes("other", "gpu-claim-template") is None
    assert catalog.class_for_extended_name("nvidia.com/gpu") == "gpu-x"
    assert catalog.class_for_extended_name("deviceclass.resource.kubernetes.io/mig.nvidia.com") == (
        "mig.nvidia.com"
    )
    assert catalog.class_for_extended_name("example.com/foo") is None
    # without slices (the webhook's view) allocations are not checked against devices
    assert inventory.problems == () and inventory.nodes() == ()
    assert set(inventory.classes) == {GPU, "mig.nvidia.com", "gpu-x"}


def test_empty_inventory() -> None:
    empty = Inventory.empty()
    assert empty.nodes() == () and empty.problems == () and dict(empty.classes) == {}
    assert empty.node("n") is None
    assert empty.summary(GPU) == ClassSummary()
    assert empty.claim_classes("a", "b") is None
    assert empty.class_for_extended_name("nvidia.com/gpu") is None


def test_what_is_kept_of_the_objects() -> None:
    info = ResourceSliceInfo.from_object(NVIDIA_SLICE)
    assert (info.driver, info.pool, info.generation, info.slice_count, info.node, info.scope) == (
        GPU,
        "gpu-node-1",
        1,
        1,
        "gpu-node-1",
        "node",
    )
    # identical attribute pairs of different devices are one object
    a, b = info.devices[0].attributes, info.devices[1].attributes
    pa = dict((k, id(kv)) for k, kv in ((kv[0], kv) for kv in a.items()))
    pb = dict((k, id(kv)) for k, kv in ((kv[0], kv) for kv in b.items()))
    assert pa[f"{GPU}/productName"] == pb[f"{GPU}/productName"]
    claim_info = ResourceClaimInfo.from_object(ADMIN)
    assert claim_info.devices == ()  # admin access results are not kept: they consume nothing
    assert claim_info.classes == frozenset({GPU})
    assert ResourceClaimInfo.from_object(ALLOCATED).classes is claim_info.classes  # interned


def test_a_bool_attribute_is_not_an_int() -> None:
    obj = gpu_slice("n1", gpus=2)
    obj["spec"]["devices"][0]["attributes"]["flag"] = {"bool": True}
    obj["spec"]["devices"][1]["attributes"]["flag"] = {"int": 1}
    devices = ResourceSliceInfo.from_object(obj).devices
    assert devices[0].attributes[f"{GPU}/flag"] is True
    assert devices[1].attributes[f"{GPU}/flag"] == 1
    assert devices[1].attributes[f"{GPU}/flag"] is not True


def test_a_rebuild_reuses_the_classes_of_unchanged_devices() -> None:
    classes = [
        *(DeviceClassInfo.from_object(c) for c in NVIDIA_CLASSES),
        device_class("broken", "device.attributes['gpu.nvidia.com'].nothere == 1"),
    ]
    slices = [ResourceSliceInfo.from_object(gpu_slice(f"n{i}")) for i in range(3)]
    first = Inventory.build(classes, slices, ())
    selectors = DeviceSelectors()  # fresh: any evaluation would show
    later = Inventory.build(
        classes,
        slices,
        [ResourceClaimInfo.from_object(claim("a", "c", (GPU, "n0", "gpu-0")))],
        selectors=selectors,
        previous=first,
    )
    assert selectors.evaluations == 0
    assert later.summary(GPU) == ClassSummary(12, 1, 11, 2, 3 / 11)
    assert later.problems == first.problems  # the unevaluable selector is still reported
    changed = [ResourceSliceInfo.from_object(gpu_slice("n0", generation=2)), *slices[1:]]
    Inventory.build(classes, changed, (), selectors=selectors, previous=later)
    assert selectors.evaluations == 3  # n0's devices are new objects: one run per selector
