"""Samples → per-node values: node identity labels, IP:port instances, unknown nodes."""

from __future__ import annotations

import math

from scorer.cycle.observe import NodeIndex, read_dimension
from scorer.model import NodeState, parse_rfc3339, rfc3339
from steer.core.policy import PrometheusDimension
from steer.core.scheduling import Taint
from tests.apistub_fixtures import load_api_fixture
from tests.scorer_support import FakeSample, small_policy

POLICY = small_policy()
UTIL = POLICY.dimension("util")
POWER = POLICY.dimension("power")
# node-exporter names a node only by its scrape target: `instance` is the pod's IP:port.
NODE_CPU = PrometheusDimension.model_validate(
    {
        "name": "cpu-busy",
        "query": '100 * (1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[5m])))',
        "nodeLabel": "instance",
        "weight": 1,
    }
)
NODES = [
    NodeState("worker-1", addresses=("10.0.0.11", "worker-1")),
    NodeState("worker-2", addresses=("10.0.0.12", "fd00::12", "worker-2.example.internal")),
]


def test_node_state_from_a_captured_node() -> None:
    body = load_api_fixture("node-get.json")["body"]
    body["spec"]["taints"] = [
        {
            "key": "dedicated",
            "value": "ml",
            "effect": "NoExecute",
            "timeAdded": "2026-11-30T03:58:30Z",
        }
    ]
    node = NodeState.from_k8s(body)
    assert node.name == "worker-1"
    assert node.labels["topology.kubernetes.io/zone"] == "zone-a"
    assert node.resource_version == body["metadata"]["resourceVersion"]
    assert node.taints == (Taint("dedicated", "ml", "NoExecute"),)
    assert node.raw_taints[0]["timeAdded"] == "2026-11-30T03:58:30Z"  # written back as found
    assert node.addresses == tuple(a["address"] for a in body["status"]["addresses"])


def test_identity_resolves_names_addresses_and_ip_port() -> None:
    index = NodeIndex(NODES)
    assert index.resolve("worker-1") == "worker-1"
    assert index.resolve("10.0.0.11") == "worker-1"
    assert index.resolve("10.0.0.11:9102") == "worker-1"
    assert index.resolve("worker-2:9100") == "worker-2"
    assert index.resolve("[fd00::12]:9100") == "worker-2"
    assert index.resolve("fd00::12") == "worker-2"
    assert index.resolve("worker-2.example.internal") == "worker-2"
    assert index.resolve("10.0.0.99:9102") is None
    assert index.resolve("fd00::99") is None


def test_a_name_wins_over_another_nodes_address() -> None:
    index = NodeIndex([NodeState("a", addresses=("b",)), NodeState("b")])
    assert index.resolve("b") == "b"


def test_unknown_unlabelled_and_non_finite_samples_are_counted_not_scored() -> None:
    samples = [
        FakeSample({"instance": "10.0.0.11:9100"}, 31.0),
        FakeSample({"instance": "worker-2"}, 28.0),
        FakeSample({"instance": "10.9.9.9:9100"}, 1.0),
        FakeSample({"instance": "gone-node"}, 2.0),
        FakeSample({"job": "node-exporter"}, 3.0),
        FakeSample({"instance": "worker-2:9100"}, math.nan),
    ]
    reading = read_dimension(NODE_CPU, samples, observed_at=100.0, index=NodeIndex(NODES))
    assert reading.values == {"worker-1": 31.0, "worker-2": 28.0}
    assert reading.samples == 6
    assert reading.unknown == 2
    assert reading.unknown_examples == ("10.9.9.9:9100", "gone-node")
    assert reading.unlabelled == 1
    assert reading.non_finite == 1


def test_two_series_for_one_node_keep_the_larger_value() -> None:
    samples = [
        FakeSample({"instance": "worker-1"}, 5.0),
        FakeSample({"instance": "10.0.0.11:9100"}, 7.0),
    ]
    reading = read_dimension(NODE_CPU, samples, observed_at=0.0, index=NodeIndex(NODES))
    assert reading.values == {"worker-1": 7.0}
    assert reading.duplicates == 1


def test_each_dimension_reads_its_own_node_label() -> None:
    samples = [FakeSample({"hostname": "worker-1", "node_name": "worker-2"}, 40.0)]
    index = NodeIndex(NODES)
    assert read_dimension(UTIL, samples, observed_at=0.0, index=index).values == {"worker-1": 40.0}
    assert read_dimension(POWER, samples, observed_at=0.0, index=index).values == {"worker-2": 40.0}


def test_rfc3339_round_trip() -> None:
    assert parse_rfc3339(rfc3339(1_800_000_000.0)) == 1_800_000_000.0
    assert parse_rfc3339("2026-11-30T04:00:00.000000Z") == parse_rfc3339("2026-11-30T04:00:00Z")
    assert parse_rfc3339("yesterday") is None
