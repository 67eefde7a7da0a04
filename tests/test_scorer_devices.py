"""DRA devices in the scorer's answers: each node's devices by class and one by one, held or
free, with their per-device reading joined on the UUID (`spec.devices.heat`), in /explain's
views, the CLI text and the JSON; and the per-device reading itself against a real
Prometheus scraping dcgm-exporter-shaped series."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.synthetic_exporter import SyntheticCluster, dcgm_labels
from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.cycle.service import Scorer
from scorer.cycle.sources.prometheus import read_device_heat
from scorer.cycle.writer import NodeApi
from scorer.explain.nodes import detail_view, nodes_view
from scorer.explain.pod import explain_pod
from scorer.explain.render import node_text, nodes_text
from scorer.explain.view import NodeDetail, NodesTable, Served
from scorer.model import DeviceReadings, NodeState, with_devices
from scorer.watch.ledger import PodLedger
from steer.adapters.kubejson import KubeJson
from steer.core.dra.inventory import Inventory
from steer.core.policy import Policy, PolicyError, parse_policy
from tests.conftest import EXAMPLE_POLICY, load_fixture
from tests.scorer_support import SMALL_POLICY

GPU = "gpu.nvidia.com"
SLICE = load_fixture("dra/nvidia-resourceslice-gpu-node.json")  # gpu-node-1: gpu-0..3
CLASSES = load_fixture("dra/deviceclasses.json")["items"]
CLAIM = load_fixture("dra/resourceclaim-allocated.json")  # ml/… holds gpu-1 for trainer-0
UUIDS = [d["attributes"]["uuid"]["string"] for d in SLICE["spec"]["devices"]]


def _policy(heat: dict[str, str] | None) -> Policy:
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    if heat is not None:
        doc["spec"]["devices"] = {"heat": heat}
    return parse_policy(yaml.safe_dump(doc))


POLICY = _policy({"query": "DCGM_FI_DEV_GPU_UTIL", "taint": "gpu-hot"})
INVENTORY = Inventory.from_objects(CLASSES, [SLICE], [CLAIM])
NODES = [
    NodeState(name="gpu-node-1", allocatable={"cpu": "64"}, devices={"nvidia.com/gpu": 4}),
    NodeState(name="cpu-1", allocatable={"cpu": "16"}),
]
# gpu-0 idle, gpu-1 held (busy with its pod), gpu-2 free but 97 % busy from outside.
READINGS = DeviceReadings({UUIDS[0]: 0.0, UUIDS[1]: 85.0, UUIDS[2]: 97.0}, 1000.0)


def test_a_node_lists_its_devices_held_free_and_hot() -> None:
    plan, _ = plan_cycle(POLICY, NODES, {}, ScorerMemory(), now=1000.0)
    detail = detail_view(POLICY, plan, "gpu-node-1", INVENTORY, READINGS)
    assert detail is not None
    by_name = {d.device.rsplit("/", 1)[-1]: d for d in detail.devices}
    assert list(by_name) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert all(GPU in d.classes for d in detail.devices)
    held = by_name["gpu-1"]
    assert not held.free and held.claim is not None and held.pods == ("trainer-0",)
    assert by_name["gpu-2"].free and by_name["gpu-2"].hot is True
    assert by_name["gpu-0"].hot is False and by_name["gpu-0"].reading == 0.0
    assert by_name["gpu-3"].hot is None  # no reading for its UUID: not known, not "cool"
    assert NodeDetail.from_json(detail.to_json()) == detail
    text = node_text(detail, Served(leader=True))
    assert "held by" in text and "trainer-0" in text and UUIDS[2] in text
    assert detail_view(POLICY, plan, "cpu-1", INVENTORY, READINGS).devices == ()  # type: ignore[union-attr]


def test_the_cluster_counts_devices_by_class() -> None:
    plan, _ = plan_cycle(POLICY, NODES, {}, ScorerMemory(), now=1000.0)
    table = nodes_view(plan, POLICY, INVENTORY, READINGS)
    (gpus,) = [c for c in table.devices if c.device_class == GPU]
    assert (gpus.total, gpus.allocated, gpus.free, gpus.hot_free) == (4, 1, 3, 1)
    # Every free GPU sits beside a held one: no whole node, all of them stranded.
    assert gpus.whole_free_nodes == 0 and gpus.fragmentation == 1.0
    (row,) = [r for r in table.nodes if r.node == "gpu-node-1"]
    (count,) = [c for c in row.devices if c.device_class == GPU]
    assert (count.total, count.allocated, count.free, count.hot_free) == (4, 1, 3, 1)
    assert NodesTable.from_json(table.to_json()) == table
    assert "devices gpu.nvidia.com: 3 free of 4 (1 held, 1 free but hot)" in nodes_text(
        table, Served(leader=True)
    )
    # Without an inventory (no DRA watch) the table is as it always was.
    assert nodes_view(plan).devices == ()


def test_heat_names_a_raw_taint_rule() -> None:
    with pytest.raises(PolicyError, match=r"spec.devices.heat.taint: no taint rule named 'nope'"):
        _policy({"query": "DCGM_FI_DEV_GPU_UTIL", "taint": "nope"})


@pytest.fixture(scope="module")
def scraped() -> Iterator[tuple[SyntheticCluster, PrometheusServer]]:
    cluster = SyntheticCluster(nodes=2, gpus_per_node=2)
    cluster.set_gpu_util("node-1", 95)
    cluster.set_gpu_util("node-2", 10)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", lambda r: len(r.samples) == 4)
        yield cluster, prom


def heat_of(prom: PrometheusServer, query: str) -> DeviceReadings:
    """`spec.devices.heat` with this query, against the gpu-hot rule (util > 90 %)."""
    policy = parse_policy(
        SMALL_POLICY + f"  devices:\n    heat: {{query: {query}, taint: gpu-hot}}\n"
    )
    with prom.client() as client:
        return read_device_heat(client, policy)


def test_one_query_reads_every_device_by_its_uuid(
    scraped: tuple[SyntheticCluster, PrometheusServer],
) -> None:
    readings = heat_of(scraped[1], "DCGM_FI_DEV_GPU_UTIL")
    assert readings.error is None and readings.problems == ()
    want = {
        dcgm_labels(n, i)["UUID"]: u
        for n, u in (("node-1", 95.0), ("node-2", 10.0))
        for i in (0, 1)
    }
    assert readings.values == pytest.approx(want)


def test_a_ratio_where_the_rule_reads_percent_is_held_back(
    scraped: tuple[SyntheticCluster, PrometheusServer],
) -> None:
    """dcgm-exporter 4.9 reports utilisation as a ratio: a 0.95 must not read as a cool 0.95 %."""
    readings = heat_of(scraped[1], "DCGM_FI_DEV_GPU_UTIL / 100")
    assert readings.values == {} and readings.problems


def test_a_claim_pod_is_told_which_nodes_have_no_free_device_of_its_class() -> None:
    """A pod whose claim template asks for a gpu.nvidia.com device: a node without such
    devices, and one whose devices are all held, are excluded with the reason; a node with a
    free one is not. A plain nvidia.com/gpu request is judged against the devices the
    DeviceClass maps, not against an allocatable the DRA node does not list."""
    full = {
        **SLICE,
        "metadata": {**SLICE["metadata"], "name": "full-slice"},
        "spec": {
            **SLICE["spec"],
            "nodeName": "gpu-full",
            "pool": {**SLICE["spec"]["pool"], "name": "gpu-full"},
        },
    }
    held = [
        {
            **CLAIM,
            "metadata": {**CLAIM["metadata"], "name": f"held-{d['name']}"},
            "status": {
                **CLAIM["status"],
                "allocation": {
                    **CLAIM["status"]["allocation"],
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": GPU,
                                "pool": "gpu-full",
                                "device": d["name"],
                            }
                        ]
                    },
                },
            },
        }
        for d in SLICE["spec"]["devices"]
    ]
    template = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "ml"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": GPU,
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        }
                    ]
                }
            }
        },
    }
    # As a cluster that maps nvidia.com/gpu to the class (extendedResourceName, KEP-5004).
    classes = [
        {**c, "spec": {**c["spec"], "extendedResourceName": "nvidia.com/gpu"}}
        if c["metadata"]["name"] == GPU
        else c
        for c in CLASSES
    ]
    inventory = Inventory.from_objects(classes, [SLICE, full], [CLAIM, *held], [template])
    nodes = with_devices(
        [
            NodeState(
                name="gpu-node-1", allocatable={"cpu": "64", "memory": "256Gi", "pods": "110"}
            ),
            NodeState(name="gpu-full", allocatable={"cpu": "64", "memory": "256Gi", "pods": "110"}),
            NodeState(name="cpu-1", allocatable={"cpu": "16", "memory": "64Gi", "pods": "110"}),
        ],
        inventory,
    )
    # A complete pod ledger (no pods): the gates and pools are published.
    usages = {n.name: () for n in nodes}
    plan, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), now=1000.0, pod_usages=usages)
    container = {
        "name": "main",
        "image": "app",
        "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
    }
    claim_pod = {
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "containers": [
                {**container, "resources": {**container["resources"], "claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    labels = {"kube-steer.github.io/enabled": "true"}  # opted in, no tenant: no budget
    got = explain_pod(POLICY, plan, nodes, claim_pod, labels, "ml", devices=inventory)
    assert got.pod_class == "gpu"
    verdicts = {v.node: v for v in got.verdicts}
    assert verdicts["gpu-node-1"].allowed, verdicts["gpu-node-1"].exclusions
    (full_reason,) = [x.reason for x in verdicts["gpu-full"].exclusions if x.rule == "dra"]
    assert "every gpu.nvidia.com device of the node is held by a claim" in full_reason
    (cpu_reason,) = [x.reason for x in verdicts["cpu-1"].exclusions if x.rule == "dra"]
    assert "claim template one-gpu -> gpu.nvidia.com" in cpu_reason and "no device" in cpu_reason

    plain = {
        "metadata": {"name": "plain", "namespace": "ml"},
        "spec": {
            "containers": [
                {
                    **container,
                    "resources": {
                        "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                        "limits": {"cpu": "1", "nvidia.com/gpu": "1"},
                    },
                }
            ]
        },
    }
    got = explain_pod(POLICY, plan, nodes, plain, labels, "ml", devices=inventory)
    verdicts = {v.node: v for v in got.verdicts}
    assert not any(x.rule == "resources" for x in verdicts["gpu-node-1"].exclusions), verdicts[
        "gpu-node-1"
    ].exclusions
    assert verdicts["gpu-node-1"].allowed
    assert any("0 free of its 4 devices" in x.reason for x in verdicts["gpu-full"].exclusions)
    # A pod bound to gpu-full (its claim among those holding the devices) is not excluded from
    # its own node by its own allocation; the audit judges bound pods this way.
    bound = {**plain, "spec": {**plain["spec"], "nodeName": "gpu-full"}}
    got = explain_pod(POLICY, plan, nodes, bound, labels, "ml", devices=inventory)
    (own,) = [v for v in got.verdicts if v.node == "gpu-full"]
    assert not any(x.rule == "dra" for x in own.exclusions), own.exclusions


class FixedDevices:
    """The DRA watches' store as the scorer reads it: one snapshot."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory

    def snapshot(self) -> Inventory:
        return self.inventory


def test_a_refresh_after_our_own_write_keeps_a_dra_node_reserved(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    """The answer to the scorer's write (and the node watch) knows nothing of ResourceSlices:
    a refresh after bindings must plan a DRA GPU node with the devices its cycle gave it, or it
    withdraws `reserved-for-gpu` and CPU pods follow onto the GPU node (found by the DRA e2e)."""
    apistub.add_node(synthetic_node("gpu-node-1", cpu="64", memory="256Gi"))  # GPUs by DRA only
    apistub.add_node(synthetic_node("cpu-1", cpu="16", memory="64Gi"))
    policy = _policy(None)
    ledger = PodLedger()
    ledger.replace([])
    scorer = Scorer(
        lambda: policy,
        NodeApi(KubeJson(kube_client)),
        prometheus_url="http://127.0.0.1:9",  # nothing listens: reserved nodes need no data
        ledger=ledger,
        devices=FixedDevices(INVENTORY),
    )
    key = "kube-steer.github.io/reserved-for-gpu"
    try:
        scorer.run_cycle()
        assert apistub.get("nodes", "gpu-node-1")["metadata"]["labels"].get(key) == "true"
        assert key not in apistub.get("nodes", "cpu-1")["metadata"]["labels"]
        pod = {
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "nodeName": "gpu-node-1",
                "containers": [
                    {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
                ],
            },
        }
        ledger.apply("ADDED", apistub.create("pods", pod))
        assert scorer.refresh_hot() is not None
        assert apistub.get("nodes", "gpu-node-1")["metadata"]["labels"].get(key) == "true"
    finally:
        scorer.close()
