"""Data sources: the policy fields, the Kubernetes source (pod ledger, EndpointSlices) and the
HTTP JSON source against captured Consul and Nacos answers served over real HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from scorer.cycle.decide import check_readings
from scorer.cycle.observe import NodeIndex
from scorer.cycle.service import Scorer
from scorer.cycle.sources import Readings, SourceContext, SourceRequest
from scorer.cycle.sources.http_json import HttpJsonSource, field_at, node_values
from scorer.cycle.sources.kubernetes import KubernetesApiSource, endpoint_readiness
from scorer.cycle.writer import NodeApi
from scorer.model import NodeState
from scorer.watch.ledger import PodLedger
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.core.budget import Amount, limit_overcommit_pct
from steer.core.policy import PolicyError, parse_policy
from steer.core.quantity import parse_amounts
from tests.apistub_fixtures import client_for
from tests.json_server import json_server

GIB = 1024**3

POLICY = """\
apiVersion: kube-steer.github.io/v1alpha1
kind: SteeringPolicy
spec:
  dimensions:
    - name: overcommit-pct
      source: kubernetes
      kubernetes: {kind: limitOvercommit}
      publish: raw
      weight: 0
      step: 1
    - name: registry-health
      source: http
      http:
        url: URL
        nodeField: Node
        valueField: Status
        statusValues: {passing: 100, warning: 50, critical: 0}
      normalization: {method: fixed, min: 0, max: 100}
"""

# GET /v1/health/state/any from a Consul agent (captured shape; trimmed to the fields used
# and a few neighbours).
CONSUL_STATE_ANY = [
    {
        "Node": "node-1",
        "CheckID": "serfHealth",
        "Name": "Serf Health Status",
        "Status": "passing",
        "Notes": "",
        "Output": "Agent alive and reachable",
        "ServiceID": "",
        "ServiceName": "",
        "ServiceTags": [],
        "Type": "",
        "Namespace": "default",
        "CreateIndex": 10,
        "ModifyIndex": 10,
    },
    {
        "Node": "node-1",
        "CheckID": "service:web-1",
        "Name": "Service 'web' check",
        "Status": "warning",
        "Output": "HTTP GET http://10.0.0.11:8080/health: 429 Too Many Requests",
        "ServiceID": "web-1",
        "ServiceName": "web",
        "ServiceTags": ["v1"],
        "Type": "http",
        "CreateIndex": 12,
        "ModifyIndex": 40,
    },
    {
        "Node": "node-2",
        "CheckID": "serfHealth",
        "Name": "Serf Health Status",
        "Status": "critical",
        "Output": "Agent not live or unreachable",
        "ServiceID": "",
        "ServiceName": "",
        "ServiceTags": [],
        "Type": "",
        "CreateIndex": 11,
        "ModifyIndex": 55,
    },
    {
        "Node": "consul-server-0",
        "CheckID": "serfHealth",
        "Name": "Serf Health Status",
        "Status": "passing",
        "ServiceTags": [],
        "CreateIndex": 5,
        "ModifyIndex": 5,
    },
]

# GET /nacos/v1/ns/instance/list?serviceName=web (captured shape).
NACOS_INSTANCE_LIST = {
    "name": "DEFAULT_GROUP@@web",
    "groupName": "DEFAULT_GROUP",
    "clusters": "",
    "cacheMillis": 10000,
    "hosts": [
        {
            "instanceId": "10.0.0.1#8080#DEFAULT#DEFAULT_GROUP@@web",
            "ip": "10.0.0.1",
            "port": 8080,
            "weight": 1.0,
            "healthy": True,
            "enabled": True,
            "ephemeral": True,
            "clusterName": "DEFAULT",
            "serviceName": "DEFAULT_GROUP@@web",
            "metadata": {},
        },
        {
            "instanceId": "10.0.0.3#8080#DEFAULT#DEFAULT_GROUP@@web",
            "ip": "10.0.0.3",
            "port": 8080,
            "weight": 1.0,
            "healthy": False,
            "enabled": True,
            "ephemeral": True,
            "clusterName": "DEFAULT",
            "serviceName": "DEFAULT_GROUP@@web",
            "metadata": {},
        },
    ],
    "lastRefTime": 1764559200000,
    "checksum": "",
    "allIPs": False,
    "reachProtectionThreshold": False,
    "valid": True,
}


@pytest.fixture
def registry() -> Iterator[tuple[str, dict[str, tuple[int, bytes]]]]:
    """A local HTTP server answering from a route table the test fills."""
    routes: dict[str, tuple[int, bytes]] = {}

    def answer(path: str, headers: Any) -> tuple[int, bytes]:
        routes["seen-authorization"] = (0, str(headers.get("Authorization")).encode())
        return routes.get(path, (404, b"{}"))

    with json_server(answer) as url:
        yield url, routes


def node(name: str, *, cpu: str = "4", memory: str = "8Gi", ip: str = "") -> NodeState:
    raw = synthetic_node(name, cpu=cpu, memory=memory)
    if ip:
        raw["status"]["addresses"] = [{"type": "InternalIP", "address": ip}]
    return NodeState.from_k8s(raw)


def pod(uid: str, node_name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "team-a"},
        "spec": {"nodeName": node_name, "containers": [{"resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


# -- policy -------------------------------------------------------------------------------


def issues(text: str) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text)
    return [str(i) for i in info.value.issues]


def test_policy_accepts_each_source_and_describes_it() -> None:
    policy = parse_policy(POLICY.replace("URL", "http://consul:8500/v1/health/state/any"))
    over, health = policy.spec.dimensions
    assert over.source == "kubernetes" and over.what == "kubernetes: limitOvercommit"
    assert health.what == "http: GET http://consul:8500/v1/health/state/any"


def test_policy_source_settings_are_checked() -> None:
    text = POLICY.replace("URL", "consul:8500").replace(
        "kubernetes: {kind: limitOvercommit}", "query: up"
    )
    found = issues(text)
    assert "spec.dimensions[0].kubernetes: required for source: kubernetes" in found
    assert "spec.dimensions[0].query: not used by source: kubernetes" in found
    assert "spec.dimensions[1].http.url: must be an http(s) URL, got 'consul:8500'" in found
    found = issues(
        POLICY.replace("URL", "http://x")
        .replace("{kind: limitOvercommit}", "{kind: endpointReadiness, namespace: Shop}")
        .replace("      source: http\n", "")
    )
    assert any(i.startswith("spec.dimensions[0].kubernetes.namespace: required") for i in found)
    assert any(i.startswith("spec.dimensions[0].kubernetes.service: required") for i in found)
    assert "spec.dimensions[1].query: required field is missing" in found
    assert "spec.dimensions[1].http: not used by source: prometheus" in found


# -- kubernetes: limitOvercommit ----------------------------------------------------------


def test_limit_overcommit_is_the_larger_of_cpu_and_memory() -> None:
    alloc = {"cpu": "4", "memory": "8Gi"}
    assert limit_overcommit_pct(parse_amounts(alloc), Amount()) == -100.0
    assert (
        limit_overcommit_pct(
            parse_amounts(alloc), Amount(cpu_m=Fraction(5000), memory=Fraction(GIB))
        )
        == 25.0
    )
    assert (
        limit_overcommit_pct(
            parse_amounts(alloc), Amount(cpu_m=Fraction(1000), memory=Fraction(12 * GIB))
        )
        == 50.0
    )
    assert limit_overcommit_pct(parse_amounts({"cpu": "4"}), Amount(cpu_m=Fraction(2000))) == -50.0
    assert limit_overcommit_pct(parse_amounts({"cpu": "0", "memory": "x"}), Amount()) is None


def test_kubernetes_source_reads_the_ledger_exactly() -> None:
    ledger = PodLedger()
    source = KubernetesApiSource(SourceContext(ledger=ledger))
    policy = parse_policy(POLICY.replace("URL", "http://x"))
    dims = policy.spec.dimensions[:1]
    nodes = [node("node-1"), node("node-2"), node("node-3", cpu="0", memory="0")]
    index = NodeIndex(nodes)
    unsynced = source.read(SourceRequest(policy, dims, nodes, index, 100.0))
    assert unsynced.failures["overcommit-pct"].kind == "unavailable"
    ledger.replace(
        [
            pod("a", "node-1", {"cpu": "3", "memory": "1Gi"}),
            pod("b", "node-1", {"cpu": "1500m"}),
            pod("c", "node-9", {"cpu": "1"}),
        ]
    )
    answer = source.read(SourceRequest(policy, dims, nodes, index, 100.0))
    reading = answer.readings["overcommit-pct"]
    # node-1: 4.5 of 4 cores; node-2: no pods; node-3: nothing allocatable, no value.
    assert dict(reading.values) == {"node-1": 12.5, "node-2": -100.0}
    assert reading.non_finite == 1 and reading.observed_at == 100.0
    assert reading.query == "kubernetes: limitOvercommit"


# -- kubernetes: endpointReadiness --------------------------------------------------------

# An EndpointSlice as the apiserver returns it (discovery.k8s.io/v1), trimmed.
SLICE = {
    "apiVersion": "discovery.k8s.io/v1",
    "kind": "EndpointSlice",
    "metadata": {
        "name": "registry-abc12",
        "namespace": "shop",
        "labels": {"kubernetes.io/service-name": "registry"},
    },
    "addressType": "IPv4",
    "endpoints": [
        {
            "addresses": ["10.244.1.5"],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "nodeName": "node-1",
            "targetRef": {"kind": "Pod", "name": "registry-0", "namespace": "shop"},
        },
        {
            "addresses": ["10.244.1.6"],
            "conditions": {"ready": False, "serving": False, "terminating": False},
            "nodeName": "node-1",
        },
        {"addresses": ["10.244.2.7"], "conditions": {}, "nodeName": "node-2"},
        {"addresses": ["10.244.9.9"], "conditions": {"ready": True}},
    ],
    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
}


def test_endpoint_readiness_per_node() -> None:
    moved = {**SLICE, "endpoints": [SLICE["endpoints"][0]]}  # type: ignore[index]
    assert endpoint_readiness([SLICE, moved]) == {"node-1": 50.0, "node-2": 100.0}


class FakeKube:
    def __init__(self, slices: list[dict[str, Any]] | None) -> None:
        self.slices = slices
        self.asked: list[tuple[str, Any]] = []

    def list_all(self, path: str, *, query: Any = None, page_size: int = 500) -> Any:
        self.asked.append((path, query))
        if self.slices is None:
            raise KubeApiError(403, "Forbidden", "endpointslices is forbidden")
        return self.slices


def test_endpoint_readiness_source_lists_the_services_slices() -> None:
    text = POLICY.replace("URL", "http://x").replace(
        "{kind: limitOvercommit}", "{kind: endpointReadiness, namespace: shop, service: registry}"
    )
    policy = parse_policy(text)
    dims = policy.spec.dimensions[:1]
    nodes = [node("node-1"), node("node-2")]
    kube = FakeKube([SLICE])
    source = KubernetesApiSource(SourceContext(kube=lambda: kube))  # type: ignore[arg-type,return-value]
    reading = source.read(SourceRequest(policy, dims, nodes, NodeIndex(nodes), 5.0)).readings[
        "overcommit-pct"
    ]
    assert dict(reading.values) == {"node-1": 50.0, "node-2": 100.0}
    assert kube.asked == [
        (
            "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices",
            {"labelSelector": "kubernetes.io/service-name=registry"},
        )
    ]
    kube.slices = None
    failed = source.read(SourceRequest(policy, dims, nodes, NodeIndex(nodes), 5.0)).failures
    assert failed["overcommit-pct"].kind == "auth"


# -- http json ----------------------------------------------------------------------------


def http_dim(url: str, **fields: Any) -> Any:
    http = {"url": url, **fields}
    text = (
        "apiVersion: kube-steer.github.io/v1alpha1\nkind: SteeringPolicy\nspec:\n  dimensions:\n"
        f"    - {{name: health, source: http, http: {json.dumps(http)}}}\n"
    )
    return parse_policy(text)


def test_field_paths() -> None:
    doc = {"a": {"b": [{"c": 1}]}}
    assert field_at(doc, "a.b.0.c") == 1
    assert field_at(doc, "") is doc
    assert field_at(doc, "a.x") is field_at(doc, "a.b.5")


def test_consul_checks_combine_to_the_worst_per_node(registry: Any) -> None:
    url, routes = registry
    routes["/v1/health/state/any"] = (200, json.dumps(CONSUL_STATE_ANY).encode())
    policy = http_dim(
        f"{url}/v1/health/state/any",
        nodeField="Node",
        valueField="Status",
        statusValues={"passing": 100, "warning": 50, "critical": 0},
    )
    nodes = [node("node-1"), node("node-2")]
    source = HttpJsonSource(SourceContext())
    try:
        answer = source.read(
            SourceRequest(policy, policy.spec.dimensions, nodes, NodeIndex(nodes), 7.0)
        )
    finally:
        source.close()
    reading = answer.readings["health"]
    assert dict(reading.values) == {"node-1": 50.0, "node-2": 0.0}
    assert reading.unknown == 1 and reading.unknown_examples == ("consul-server-0",)
    assert answer.requests == 1 and reading.observed_at == 7.0


def test_nacos_hosts_by_address(registry: Any) -> None:
    url, routes = registry
    routes["/nacos/v1/ns/instance/list?serviceName=web"] = (
        200,
        json.dumps(NACOS_INSTANCE_LIST).encode(),
    )
    policy = http_dim(
        f"{url}/nacos/v1/ns/instance/list?serviceName=web",
        items="hosts",
        nodeField="ip",
        valueField="healthy",
        statusValues={"true": 100, "false": 0},
    )
    nodes = [node("node-1", ip="10.0.0.1"), node("node-3", ip="10.0.0.3")]
    source = HttpJsonSource(SourceContext())
    try:
        reading = source.read(
            SourceRequest(policy, policy.spec.dimensions, nodes, NodeIndex(nodes), None)
        )
    finally:
        source.close()
    assert dict(reading.readings["health"].values) == {"node-1": 100.0, "node-3": 0.0}


def test_numeric_values_and_mapping_errors() -> None:
    policy = http_dim(
        "http://x", items="data", nodeField="host", valueField="load", aggregate="mean"
    )
    settings = policy.spec.dimensions[0].http
    doc = {
        "data": [{"host": "a", "load": 1}, {"host": "a", "load": "3"}, {"host": "b"}, {"load": 2}]
    }
    assert node_values(doc, settings) == ({"a": 2.0}, 2)
    with pytest.raises(Exception, match="expected a list of entries at 'data'"):
        node_values({"data": {}}, settings)


def test_http_failures_are_typed(registry: Any) -> None:
    url, routes = registry
    routes["/bad"] = (200, b"<html>")
    routes["/denied"] = (403, b"{}")
    routes["/down"] = (503, b"{}")
    nodes = [node("node-1")]
    source = HttpJsonSource(SourceContext())
    kinds = {}
    try:
        for path in ("/bad", "/denied", "/down", "/missing"):
            policy = http_dim(url + path, nodeField="Node", valueField="v")
            answer = source.read(
                SourceRequest(policy, policy.spec.dimensions, nodes, NodeIndex(nodes), None)
            )
            kinds[path] = answer.failures["health"].kind
    finally:
        source.close()
    assert kinds == {
        "/bad": "response",
        "/denied": "auth",
        "/down": "unavailable",
        "/missing": "response",
    }


# -- a whole cycle ------------------------------------------------------------------------


def test_a_cycle_scores_nodes_from_kubernetes_and_http(
    apistub: ApiStub, tmp_path: Path, registry: Any
) -> None:
    url, routes = registry
    routes["/v1/health/state/any"] = (200, json.dumps(CONSUL_STATE_ANY).encode())
    policy = parse_policy(POLICY.replace("URL", f"{url}/v1/health/state/any"))
    for name in ("node-1", "node-2"):
        apistub.add_node(synthetic_node(name))
    ledger = PodLedger()
    ledger.replace([pod("a", "node-1", {"cpu": "6", "memory": "2Gi"})])
    kube = client_for(apistub, tmp_path / "kubeconfig")
    scorer = Scorer(lambda: policy, NodeApi(KubeJson(kube)), ledger=ledger)
    try:
        result = scorer.run_cycle()
    finally:
        scorer.close()
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in apistub.objects("nodes")}
    assert labels["node-1"]["kube-steer.github.io/overcommit-pct"] == "50"
    assert (
        labels["node-2"]["kube-steer.github.io/overcommit-pct"] == "0"
    )  # -100, floored like every raw label
    assert labels["node-1"]["kube-steer.github.io/score-registry-health"] == "50"
    assert labels["node-2"]["kube-steer.github.io/score-registry-health"] == "0"
    assert result.queries == 2 and scorer.query_count == 1  # one HTTP GET; the ledger is local


def test_without_a_pod_watch_the_pods_are_listed_once_per_read() -> None:
    policy = parse_policy(POLICY.replace("URL", "http://x"))
    nodes = [node("node-1"), node("node-2")]
    kube = FakeKube([pod("a", "node-1", {"cpu": "2", "memory": "12Gi"})])
    source = KubernetesApiSource(SourceContext(kube=lambda: kube))  # type: ignore[arg-type,return-value]
    reading = source.read(
        SourceRequest(policy, policy.spec.dimensions[:1], nodes, NodeIndex(nodes), 1.0)
    )
    assert dict(reading.readings["overcommit-pct"].values) == {"node-1": 50.0, "node-2": -100.0}
    assert kube.asked == [("/api/v1/pods", None)]


def _read_all_with_http_source(apistub: ApiStub, tmp_path: Path, source: Any) -> tuple[Any, Any]:
    """One `read_all` of the test policy on one node, the http dimension read by `source`, and
    its readings checked as a cycle checks them (`check_readings`)."""
    policy = parse_policy(POLICY.replace("URL", "http://127.0.0.1:9/x"))
    apistub.add_node(synthetic_node("node-1"))
    ledger = PodLedger()
    ledger.replace([])
    scorer = Scorer(
        lambda: policy,
        NodeApi(KubeJson(client_for(apistub, tmp_path / "kc"))),
        ledger=ledger,
        sources={"http": source},
    )
    try:
        nodes = tuple(scorer.node_api.list_nodes())
        readings, failures, _ = scorer.read_all(policy, nodes)
    finally:
        scorer.close()
    checks = check_readings(policy, nodes, readings, failures)
    return (
        {c.dimension: c.reading for c in checks if c.reading is not None},
        {c.dimension: c.failure for c in checks if c.failure is not None},
    )


def test_a_broken_source_fails_only_its_dimensions(apistub: ApiStub, tmp_path: Path) -> None:
    class Broken:
        def read(self, *args: Any) -> Any:
            raise RuntimeError("boom")

        def close(self) -> None:
            pass

    readings, failures = _read_all_with_http_source(apistub, tmp_path, Broken())
    assert failures["registry-health"].kind == "response"
    assert readings["overcommit-pct"].values == {"node-1": -100.0}


def test_a_source_that_answers_nothing_for_a_dimension_fails_that_dimension(
    apistub: ApiStub, tmp_path: Path
) -> None:
    """Neither a reading nor a failure (a source's bug) is that dimension's failure, named in
    the answer, and the cycle goes on with the others."""

    class Silent:
        def read(self, *args: Any) -> Readings:
            return Readings()

        def close(self) -> None:
            pass

    readings, failures = _read_all_with_http_source(apistub, tmp_path, Silent())
    assert "registry-health" not in readings
    assert failures["registry-health"].kind == "response"
    assert failures["registry-health"].message == "its source gave no answer"
    assert readings["overcommit-pct"].values == {"node-1": -100.0}


def test_a_bearer_token_is_sent_from_its_file(registry: Any, tmp_path: Path) -> None:
    url, routes = registry
    routes["/v1/health/state/any"] = (200, json.dumps(CONSUL_STATE_ANY).encode())
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    policy = http_dim(
        f"{url}/v1/health/state/any",
        nodeField="Node",
        valueField="Status",
        statusValues={"passing": 1},
        bearerTokenFile=str(token),
    )
    nodes = [node("node-1")]
    source = HttpJsonSource(SourceContext())
    try:
        answer = source.read(
            SourceRequest(policy, policy.spec.dimensions, nodes, NodeIndex(nodes), None)
        )
        assert routes["seen-authorization"] == (0, b"Bearer s3cret")
        assert answer.readings["health"].values == {"node-1": 1.0}
        token.unlink()
        failed = source.read(
            SourceRequest(policy, policy.spec.dimensions, nodes, NodeIndex(nodes), None)
        )
        assert failed.failures["health"].kind == "auth"
    finally:
        source.close()


def test_without_a_ledger_a_cycle_lists_the_pods(apistub: ApiStub, tmp_path: Path) -> None:
    """`steer scorer once` has no pod watch: limitOvercommit lists the pods itself."""
    policy = parse_policy(POLICY.replace("URL", "http://127.0.0.1:9/x"))
    apistub.add_node(synthetic_node("node-1"))
    apistub.add_namespace("team-a")
    apistub.create("pods", pod("a", "node-1", {"cpu": "5", "memory": "1Gi"}), namespace="team-a")
    scorer = Scorer(lambda: policy, NodeApi(KubeJson(client_for(apistub, tmp_path / "kc"))))
    try:
        result = scorer.run_cycle(dry_run=True)
    finally:
        scorer.close()
    status = {d.dimension: d.ok for d in result.plan.dimensions}
    assert status == {"overcommit-pct": True, "registry-health": False}
    assert result.plan.node("node-1").label_changes["kube-steer.github.io/overcommit-pct"] == "25"  # type: ignore[union-attr]


def test_sources_and_their_requests_are_in_flight_at_once(apistub: ApiStub, tmp_path: Path) -> None:
    """Two HTTP dimensions and the Kubernetes source meet at one barrier: read one after
    another, the first would wait out the barrier's timeout and fail."""
    meet = threading.Barrier(3, timeout=5)

    def answer(path: str, headers: Any) -> tuple[int, bytes]:
        try:
            meet.wait()
        except threading.BrokenBarrierError:
            return 503, b"{}"
        return 200, json.dumps(CONSUL_STATE_ANY).encode()

    kube = KubeJson(client_for(apistub, tmp_path / "kc"))
    kubernetes = KubernetesApiSource(SourceContext(kube=lambda: kube))

    class MeetingKubernetes:
        def read(self, *args: Any) -> Any:
            meet.wait()
            return kubernetes.read(*args)

        def close(self) -> None:
            kubernetes.close()

    apistub.add_node(synthetic_node("node-1"))
    with json_server(answer) as url:
        second = POLICY.split("    - name: registry-health")[1].replace("URL", f"{url}/b")
        text = POLICY.replace("URL", f"{url}/a") + "    - name: registry-health-b" + second
        policy = parse_policy(text)
        scorer = Scorer(lambda: policy, NodeApi(kube), sources={"kubernetes": MeetingKubernetes()})
        try:
            readings, failures, _ = scorer.read_all(policy, tuple(scorer.node_api.list_nodes()))
        finally:
            scorer.close()
    assert failures == {}
    assert readings["registry-health"].values == {"node-1": 50.0}  # its worst check
    assert readings["registry-health-b"].values == {"node-1": 50.0}
    assert set(readings) == {"overcommit-pct", "registry-health", "registry-health-b"}
