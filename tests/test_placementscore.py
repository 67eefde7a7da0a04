"""The AddOnPlacementScore publisher (scorer/cycle/placementscore.py) against a hub stand-in that
answers like the apiserver for a CRD with a status subresource, and its hook in the cycle."""

from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from kits.apistub import ApiStub
from kits.apistub.status import ApiError
from kits.apistub.synthetic import synthetic_node
from scorer.app import create_app
from scorer.cycle.clusterscore import ClusterScoreValue
from scorer.cycle.placementscore import PlacementScorePublisher, PublishError
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi
from scorer.watch.ledger import PodLedger
from steer.adapters.kube import KubeConfigError
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.core.policy import Policy, parse_policy
from tests.apistub_fixtures import client_for
from tests.scorer_support import SMALL_POLICY

BASE = "/apis/cluster.open-cluster-management.io/v1alpha1/namespaces"
POLICY = parse_policy(
    SMALL_POLICY
    + """\
  clusterScores:
    enabled: true
    clusterName: cluster-a
    validForSeconds: 120
    scores:
      - {name: free-gpus, kind: freeResource, best: 8}
"""
)
NOW = 1_800_000_000.0


class FakeHub:
    """AddOnPlacementScores by (namespace, name); a create drops `status`, as the apiserver
    does for a resource with a status subresource. `fail` maps a method to an HTTP status."""

    def __init__(self, namespaces: tuple[str, ...] = ("cluster-a",)) -> None:
        self.namespaces = set(namespaces)
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail: dict[str, int] = {}

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path))
        if method in self.fail:
            raise KubeApiError(self.fail[method], "Forbidden", "no", method=method, path=path)
        parts = path.removeprefix(BASE + "/").split("/")
        namespace = parts[0]
        if namespace not in self.namespaces:
            raise KubeApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        if method == "POST":
            key = (namespace, body["metadata"]["name"])
            if key in self.objects:
                raise KubeApiError(409, "AlreadyExists", "exists")
            obj = copy.deepcopy(body)
            obj.pop("status", None)
            self.objects[key] = obj
            return obj
        key = (namespace, parts[2])
        if method == "PATCH" and parts[3:] == ["status"]:
            if key not in self.objects:
                raise KubeApiError(404, "NotFound", "not found")
            self.objects[key]["status"] = {
                **self.objects[key].get("status", {}),
                **body["status"],
            }
            return self.objects[key]
        raise AssertionError(f"unexpected {method} {path}")


def value(name: str, v: int | None) -> ClusterScoreValue:
    return ClusterScoreValue(name, "freeResource", "whole nvidia.com/gpu", 1.0, v, 1, "")


def publisher(hub: FakeHub) -> PlacementScorePublisher:
    return PlacementScorePublisher(lambda: hub)  # type: ignore[arg-type, return-value]


def test_creates_then_patches_status() -> None:
    hub = FakeHub()
    pub = publisher(hub)
    result = pub.publish(POLICY, (value("free-gpus", 40), value("x", None)), NOW)
    assert result.written and result.created and result.reason == "first write"
    obj = hub.objects[("cluster-a", "kube-steer")]
    assert obj["kind"] == "AddOnPlacementScore"
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kube-steer"}
    assert obj["status"] == {
        "scores": [{"name": "free-gpus", "value": 40}],
        "validUntil": "2027-01-15T08:02:00Z",
    }
    assert [m for m, _ in hub.calls] == ["PATCH", "POST", "PATCH"]


def test_writes_only_on_change_or_near_expiry() -> None:
    hub = FakeHub()
    pub = publisher(hub)
    pub.publish(POLICY, (value("free-gpus", 40),), NOW)
    hub.calls.clear()
    assert not pub.publish(POLICY, (value("free-gpus", 40),), NOW + 30).written
    assert hub.calls == []
    changed = pub.publish(POLICY, (value("free-gpus", 20),), NOW + 31)
    assert changed.reason == "scores changed" and not changed.created
    assert hub.calls == [("PATCH", f"{BASE}/cluster-a/addonplacementscores/kube-steer/status")]
    refreshed = pub.publish(POLICY, (value("free-gpus", 20),), NOW + 31 + 60)
    assert refreshed.reason == "refresh before validUntil"
    assert hub.objects[("cluster-a", "kube-steer")]["status"]["validUntil"] == (
        "2027-01-15T08:03:31Z"
    )


def test_an_existing_object_keeps_foreign_status_fields() -> None:
    hub = FakeHub()
    hub.objects[("cluster-a", "kube-steer")] = {
        "metadata": {"name": "kube-steer"},
        "status": {"conditions": [{"type": "Ready"}], "scores": [{"name": "old", "value": 1}]},
    }
    result = publisher(hub).publish(POLICY, (value("free-gpus", 3),), NOW)
    assert not result.created
    status = hub.objects[("cluster-a", "kube-steer")]["status"]
    assert status["conditions"] == [{"type": "Ready"}]
    assert status["scores"] == [{"name": "free-gpus", "value": 3}]


def test_a_missing_namespace_or_refusal_names_the_fix() -> None:
    with pytest.raises(PublishError, match=r"CRD installed .* namespace 'cluster-a'"):
        publisher(FakeHub(namespaces=())).publish(POLICY, (value("free-gpus", 3),), NOW)
    hub = FakeHub()
    hub.fail["PATCH"] = 403
    pub = publisher(hub)
    with pytest.raises(PublishError, match=r"manifests/ocm/hub-rbac\.yaml"):
        pub.publish(POLICY, (value("free-gpus", 3),), NOW)
    # nothing counts as written: the next call tries again
    del hub.fail["PATCH"]
    assert pub.publish(POLICY, (value("free-gpus", 3),), NOW + 1).reason == "first write"


def test_a_hub_kubeconfig_is_used_when_set() -> None:
    local, remote = FakeHub(), FakeHub()
    seen: list[str] = []

    def connect(path: str) -> KubeJson:
        seen.append(path)
        return remote  # type: ignore[return-value]

    pub = PlacementScorePublisher(lambda: local, connect=connect)  # type: ignore[arg-type, return-value]
    policy = parse_policy(
        SMALL_POLICY
        + """\
  clusterScores:
    enabled: true
    hubKubeconfig: /etc/hub/kubeconfig
    clusterName: cluster-a
    scores: [{name: free-gpus, kind: freeResource, best: 8}]
"""
    )
    pub.publish(policy, (value("free-gpus", 3),), NOW)
    pub.publish(policy, (value("free-gpus", 4),), NOW + 1)
    assert seen == ["/etc/hub/kubeconfig"]
    assert remote.objects and not local.objects

    def broken(path: str) -> KubeJson:
        raise KubeConfigError(f"no file {path}")

    with pytest.raises(PublishError, match=r"spec\.clusterScores\.hubKubeconfig: no file"):
        PlacementScorePublisher(lambda: local, connect=broken).publish(  # type: ignore[arg-type, return-value]
            policy, (value("free-gpus", 3),), NOW
        )


# -- in the cycle ----------------------------------------------------------------------------


def gpu_pod(uid: str, node: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "jobs"},
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def make_scorer(
    stub: ApiStub, tmp_path: Path, policy: Policy, hub: FakeHub, ledger: PodLedger, **kwargs: Any
) -> Scorer:
    for name in ("gpu-1", "gpu-2"):
        with contextlib.suppress(ApiError):  # a second scorer on the same stand-in
            stub.add_node(synthetic_node(name, gpus=8))
    kube = client_for(stub, tmp_path / f"kubeconfig-{time.monotonic_ns()}")
    return Scorer(
        lambda: policy,
        NodeApi(KubeJson(kube)),
        prometheus_url="http://127.0.0.1:9",
        ledger=ledger,
        placement_scores=publisher(hub),
        **kwargs,
    )


def metric_lines(scorer: Scorer, prefix: str) -> list[str]:
    text = generate_latest(scorer.metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_the_cycle_publishes_from_the_ledger(apistub: ApiStub, tmp_path: Path) -> None:
    hub = FakeHub()
    ledger = PodLedger()
    ledger.replace([gpu_pod("a", "gpu-1", 3)])
    scorer = make_scorer(apistub, tmp_path, POLICY, hub, ledger)
    try:
        scorer.run_cycle()
        obj = hub.objects[("cluster-a", "kube-steer")]
        assert obj["status"]["scores"] == [{"name": "free-gpus", "value": 100}]  # 5 + 8 >= 8
        assert [v.raw for v in scorer.cluster_scores] == [13.0]
        ledger.apply("ADDED", gpu_pod("b", "gpu-2", 8))
        ledger.apply("ADDED", gpu_pod("c", "gpu-1", 3))
        assert scorer.refresh_hot() is not None
        assert obj["status"]["scores"] == [{"name": "free-gpus", "value": -50}]  # 2 of 8
        assert 'steer_scorer_cluster_score{name="free-gpus"} -50.0' in metric_lines(
            scorer, "steer_scorer_cluster_score{"
        )
        assert 'steer_scorer_cluster_score_writes_total{result="ok"} 2.0' in metric_lines(
            scorer, "steer_scorer_cluster_score_writes_total"
        )
    finally:
        scorer.close()


def test_dry_runs_compute_but_never_write(apistub: ApiStub, tmp_path: Path) -> None:
    hub = FakeHub()
    ledger = PodLedger()
    ledger.replace([])
    scorer = make_scorer(apistub, tmp_path, POLICY, hub, ledger, dry_run=True)
    try:
        scorer.run_cycle()
        assert hub.calls == []
        assert [v.value for v in scorer.cluster_scores] == [100]
    finally:
        scorer.close()


def test_hub_errors_are_counted_not_fatal(apistub: ApiStub, tmp_path: Path) -> None:
    hub = FakeHub(namespaces=())
    ledger = PodLedger()
    ledger.replace([])
    scorer = make_scorer(apistub, tmp_path, POLICY, hub, ledger)
    try:
        scorer.run_cycle()
        scorer.run_cycle()
        assert 'steer_scorer_cluster_score_writes_total{result="error"} 2.0' in metric_lines(
            scorer, "steer_scorer_cluster_score_writes_total"
        )
        assert scorer.last is not None
    finally:
        scorer.close()


def test_a_replica_that_stops_leading_forgets_what_it_wrote(
    apistub: ApiStub, tmp_path: Path
) -> None:
    hub = FakeHub()
    ledger = PodLedger()
    ledger.replace([])
    scorer = make_scorer(apistub, tmp_path, POLICY, hub, ledger)
    try:
        scorer.run_cycle()
        assert scorer.placement_scores is not None and scorer.placement_scores.last is not None
        scorer.run_cycle(dry_run=True)  # as a replica that does not write
        assert scorer.placement_scores.last is None
        hub.calls.clear()
        scorer.run_cycle()  # leading again: written at once, not only at half-life
        assert [m for m, _ in hub.calls] == ["PATCH"]
    finally:
        scorer.close()


def test_explain_cluster(apistub: ApiStub, tmp_path: Path) -> None:
    hub = FakeHub()
    ledger = PodLedger()
    ledger.replace([gpu_pod("a", "gpu-1", 3)])
    scorer = make_scorer(apistub, tmp_path, POLICY, hub, ledger)
    app = create_app(scorer).test_client()
    try:
        assert app.get("/explain/cluster").status_code == 503
        scorer.run_cycle()
        body = app.get("/explain/cluster").get_json()
        assert body["scores"] == [
            {
                "name": "free-gpus",
                "kind": "freeResource",
                "raw": 13.0,
                "unit": "whole nvidia.com/gpu",
                "value": 100,
                "nodes": 2,
                "why": "13 free nvidia.com/gpu in total on 2 nodes",
            }
        ]
        assert body["published"]["namespace"] == "cluster-a"
        assert body["published"]["scores"] == [{"name": "free-gpus", "value": 100}]
    finally:
        scorer.close()
    off = make_scorer(apistub, tmp_path, parse_policy(SMALL_POLICY), hub, ledger)
    try:
        assert create_app(off).test_client().get("/explain/cluster").status_code == 404
    finally:
        off.close()
