"""A policy whose dimensions come from the Kubernetes API and from a registry's HTTP JSON API
scores nodes end to end: `steer scorer run` against the real apiserver, as a user bound to the
manifest's ClusterRole, with no Prometheus at all."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kits.control_plane import ControlPlane
from kits.service_processes import running_scorer
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeJson, node_path
from tests.e2e.test_budget_pools import NO_PROMETHEUS
from tests.e2e.waiting import NOT_YET
from tests.json_server import json_server

N1, N2, N3 = "src-1", "src-2", "src-3"

POLICY = """\
apiVersion: kube-steer.github.io/v1alpha1
kind: SteeringPolicy
metadata: {name: sources}
spec:
  scoring: {intervalSeconds: 1}
  dimensions:
    - name: overcommit-pct
      source: kubernetes
      kubernetes: {kind: limitOvercommit}
      publish: raw
      weight: 0
      step: 1
      hysteresis: 0
    - name: registry-health
      source: http
      http:
        url: URL
        nodeField: Node
        valueField: Status
        statusValues: {passing: 100, warning: 50, critical: 0}
      normalization: {method: fixed, min: 0, max: 100}
    - name: endpoints-ready
      source: kubernetes
      kubernetes: {kind: endpointReadiness, namespace: NAMESPACE, service: registry}
      normalization: {method: fixed, min: 0, max: 100}
"""

# The shape of Consul's GET /v1/health/state/any, for the test's nodes.
CHECKS = [
    {"Node": N1, "CheckID": "serfHealth", "Status": "passing", "ServiceName": ""},
    {"Node": N2, "CheckID": "serfHealth", "Status": "passing", "ServiceName": ""},
    {"Node": N2, "CheckID": "service:web", "Status": "warning", "ServiceName": "web"},
    {"Node": N3, "CheckID": "serfHealth", "Status": "critical", "ServiceName": ""},
]


@pytest.fixture
def consul() -> Iterator[str]:
    body = json.dumps(CHECKS).encode()
    with json_server(lambda _path, _headers: (200, body)) as url:
        yield f"{url}/v1/health/state/any"


def pod(name: str, node: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": limits},
                }
            ],
        },
    }


def endpoint(ip: str, node: str, ready: bool) -> dict[str, Any]:
    return {"addresses": [ip], "conditions": {"ready": ready}, "nodeName": node}


def test_kubernetes_and_http_dimensions_label_nodes(
    control_plane: ControlPlane,
    make_node: Callable[..., dict[str, Any]],
    make_namespace: Callable[..., str],
    admin: KubeJson,
    scorer_user: Path,
    consul: str,
    tmp_path: Path,
) -> None:
    make_node(N1, cpu="8", memory="32Gi")
    make_node(N2, cpu="4", memory="8Gi")
    make_node(N3, cpu="4", memory="8Gi")
    ns = make_namespace(prefix="sources")
    # N1: 12 of 8 cores -> 50 %; N2: 10 of 8 GiB -> 25 % (cpu 1 of 4: -75 %); N3: no pods.
    admin.request(
        "POST", f"/api/v1/namespaces/{ns}/pods", body=pod("big", N1, {"cpu": "12", "memory": "1Gi"})
    )
    admin.request(
        "POST", f"/api/v1/namespaces/{ns}/pods", body=pod("mem", N2, {"cpu": "1", "memory": "10Gi"})
    )
    # A Service without a selector: its EndpointSlice is ours, not the controller's.
    admin.request(
        "POST",
        f"/api/v1/namespaces/{ns}/services",
        body={"metadata": {"name": "registry"}, "spec": {"ports": [{"port": 8500}]}},
    )
    admin.request(
        "POST",
        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
        body={
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "registry-1",
                "labels": {"kubernetes.io/service-name": "registry"},
            },
            "addressType": "IPv4",
            "endpoints": [
                endpoint("10.1.0.1", N1, True),
                endpoint("10.1.0.2", N2, True),
                endpoint("10.1.0.3", N2, False),
            ],
            "ports": [{"name": "", "port": 8500, "protocol": "TCP"}],
        },
    )
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY.replace("URL", consul).replace("NAMESPACE", ns))

    def labels(name: str) -> dict[str, str]:
        found = admin.request("GET", node_path(name))["metadata"].get("labels") or {}
        return {
            k.removeprefix("kube-steer.github.io/"): v
            for k, v in found.items()
            if k.startswith("kube-steer.github.io/")
        }

    want = {
        N1: {
            "overcommit-pct": "50",
            "score-registry-health": "100",
            "score-endpoints-ready": "100",
        },
        N2: {"overcommit-pct": "25", "score-registry-health": "50", "score-endpoints-ready": "50"},
        N3: {"overcommit-pct": "0", "score-registry-health": "0"},
    }
    with running_scorer(
        control_plane,
        policy_file,
        NO_PROMETHEUS,
        tmp_path,
        name="scorer-sources",
        extra_args=["--kubeconfig", str(scorer_user), "--no-leader-election"],
    ) as scorer:
        scorer.wait_ready()
        for name, expected in want.items():
            wait_until(
                f"labels of {name}",
                lambda n=name, e=expected: {k: v for k, v in labels(n).items() if k in e} == e,
                timeout=30,
                ignoring=NOT_YET,
            )
        assert "score-endpoints-ready" not in labels(N3)  # no endpoint there: no value
        explained = scorer.get(f"/explain/node/{N3}")
        text = json.dumps(explained)
        assert "kubernetes: limitOvercommit" in text
        assert "-100" in text  # the raw value of a node without pods
