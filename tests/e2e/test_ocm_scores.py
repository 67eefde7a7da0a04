"""Cluster scores for Open Cluster Management end to end: `steer scorer run` writing an
AddOnPlacementScore into the real kube-apiserver v1.36.2, which acts as the hub too.

The AddOnPlacementScore CRD is the one in manifests/ocm/ (upstream's group, names, schema and
status subresource), installed for the module and deleted afterwards with every object. The
scorer runs as a user holding only the scorer's ClusterRole and the hub Role of
manifests/ocm/hub-rbac.yaml in the managed cluster's namespace, so the test also proves those
rules suffice. No Prometheus: the GPU and headroom scores come from Nodes and bound pods, and
the power score, without data, is left out of the object.
"""

from __future__ import annotations

import contextlib
import string
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from kits.control_plane import ROOT, ControlPlane
from kits.service_processes import running_scorer
from kits.waiting import wait_until
from scorer.cycle.placementscore import placement_score_path
from scorer.model import parse_rfc3339
from steer.adapters.kubejson import MERGE_PATCH, KubeApiError, KubeJson, pod_path
from tests.e2e.waiting import NOT_YET, metric
from tests.scorer_support import SMALL_POLICY

CRD_FILE = ROOT / "manifests" / "ocm" / "addonplacementscore-crd.yaml"
HUB_RBAC = ROOT / "manifests" / "ocm" / "hub-rbac.yaml"
SCORER_MANIFEST = ROOT / "manifests" / "scorer" / "scorer.yaml"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
CRD_NAME = "addonplacementscores.cluster.open-cluster-management.io"
N1, N2 = "ocm-e2e-1", "ocm-e2e-2"
NO_PROMETHEUS = "http://127.0.0.1:9"
VALID_FOR_S = 4


def policy_text(cluster: str) -> str:
    return SMALL_POLICY.replace("intervalSeconds: 30}", "intervalSeconds: 1}") + (
        f"""\
  clusterScores:
    enabled: true
    clusterName: {cluster}
    validForSeconds: {VALID_FOR_S}
    scores:
      - {{name: free-gpus, kind: freeResource, best: 16}}
      - {{name: gpu-block, kind: freeResource, aggregate: max, best: 8}}
      - {{name: dept-b-cpu, kind: tenantHeadroom, tenant: dept-b, best: 64}}
      - {{name: watts-per-core, kind: powerPerCore, dimension: power, worst: 40, best: 5}}
"""
    )


@pytest.fixture
def crd(admin: KubeJson) -> Iterator[dict[str, Any]]:
    """The manifest's CRD, served (Established) for the test, deleted with its objects after."""
    body = yaml.safe_load(CRD_FILE.read_text())
    admin.request("POST", CRD_PATH, body=body)

    def established() -> bool:
        status = admin.request("GET", f"{CRD_PATH}/{CRD_NAME}").get("status") or {}
        return any(
            c["type"] == "Established" and c["status"] == "True"
            for c in status.get("conditions") or ()
        )

    try:
        wait_until("the CRD is established", established, timeout=30, ignoring=NOT_YET)
        yield body
    finally:
        with contextlib.suppress(KubeApiError):
            admin.request("DELETE", f"{CRD_PATH}/{CRD_NAME}")
        wait_until(
            "the CRD is gone",
            lambda: _gone(admin, f"{CRD_PATH}/{CRD_NAME}"),
            timeout=30,
            ignoring=NOT_YET,
        )


def _gone(admin: KubeJson, path: str) -> bool:
    try:
        admin.request("GET", path)
    except KubeApiError as exc:
        return exc.status == 404
    return False


def grant_hub_role(admin: KubeJson, namespace: str, user: str) -> None:
    """manifests/ocm/hub-rbac.yaml for `namespace` and `user` (deleted with the namespace)."""
    text = string.Template(HUB_RBAC.read_text()).substitute(CLUSTER_NAME=namespace, HUB_USER=user)
    for doc in yaml.safe_load_all(text):
        if doc:
            plural = "roles" if doc["kind"] == "Role" else "rolebindings"
            admin.request("POST", f"{RBAC}/namespaces/{namespace}/{plural}", body=doc)


def user_of(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["name"])


def gpu_pod(name: str, node: str, gpus: int, cpu: str) -> dict[str, Any]:
    resources = {"requests": {"nvidia.com/gpu": str(gpus), "cpu": cpu}}
    resources["limits"] = dict(resources["requests"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": resources}
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def test_scores_are_written_updated_and_expire(
    control_plane: ControlPlane,
    make_node: Callable[..., dict[str, Any]],
    make_namespace: Callable[..., str],
    admin: KubeJson,
    crd: dict[str, Any],
    scorer_user: Path,
    tmp_path: Path,
) -> None:
    make_node(N1, cpu="32", memory="64Gi", gpus=8)
    make_node(N2, cpu="16", memory="64Gi", gpus=4)
    cluster = make_namespace(prefix="cluster")  # the managed cluster's namespace on the hub
    jobs = make_namespace(prefix="jobs")
    grant_hub_role(admin, cluster, user_of(scorer_user))
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(policy_text(cluster))
    obj_path = placement_score_path(cluster, "kube-steer")

    def status() -> dict[str, Any]:
        got: dict[str, Any] = admin.request("GET", obj_path).get("status") or {}
        return got

    def scores() -> dict[str, int]:
        return {s["name"]: s["value"] for s in status().get("scores") or ()}

    def valid_until() -> float:
        stamp = parse_rfc3339(status()["validUntil"])
        assert stamp is not None
        return stamp

    with running_scorer(
        control_plane,
        policy_file,
        NO_PROMETHEUS,
        tmp_path,
        name="scorer-ocm",
        extra_args=["--kubeconfig", str(scorer_user), "--no-leader-election"],
    ) as scorer:
        scorer.wait_ready()
        # 12 free GPUs of 16 -> 50; 8 on one node -> 100; dept-b (0 % budget) has 48 cores of
        # room for limits of 64 -> 50; no power data: watts-per-core is left out.
        expected = {"free-gpus": 50, "gpu-block": 100, "dept-b-cpu": 50}
        wait_until(
            "the object is created", lambda: scores() == expected, timeout=30, ignoring=NOT_YET
        )
        obj = admin.request("GET", obj_path)
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kube-steer"}
        first_until = valid_until()
        assert time.time() < first_until <= time.time() + VALID_FOR_S

        # A 6-GPU job bound to N1 leaves 2 + 4 free (-25), 4 at most on one node (0), and
        # takes 4 cores of dept-b's room (44 of 64 -> 37.5, rounded up to 38).
        admin.request("POST", f"/api/v1/namespaces/{jobs}/pods", body=gpu_pod("job", N1, 6, "4"))
        wait_until(
            "the job is bound",
            lambda: admin.request("GET", pod_path(jobs, "job"))["spec"].get("nodeName"),
            timeout=30,
            ignoring=NOT_YET,
        )
        updated = {"free-gpus": -25, "gpu-block": 0, "dept-b-cpu": 38}
        wait_until(
            "the scores follow the binding",
            lambda: scores() == updated,
            timeout=10,
            ignoring=NOT_YET,
        )

        # Unchanged scores are rewritten before they expire: validUntil moves forward.
        wait_until(
            "validUntil moves forward",
            lambda: valid_until() > first_until + 1,
            timeout=30,
            ignoring=NOT_YET,
        )
        # The counter moves just after the write that the object already shows.
        wait_until(
            "three writes counted",
            lambda: (
                metric(scorer, "steer_scorer_cluster_score_writes_total", {"result": "ok"}) >= 3
            ),
            timeout=10,
            ignoring=NOT_YET,
        )
        assert metric(scorer, "steer_scorer_cluster_score_writes_total", {"result": "error"}) == 0
        assert metric(scorer, "steer_scorer_cluster_score", {"name": "free-gpus"}) == -25
        detail = {s["name"]: s for s in scorer.get("/explain/cluster")["scores"]}
        assert detail["free-gpus"]["raw"] == 6
        assert detail["dept-b-cpu"]["raw"] == 44
        assert detail["watts-per-core"]["value"] is None
        assert detail["watts-per-core"]["why"] == "no node has power data"

    # The scorer is gone: nothing pushes validUntil forward, so Placement soon reads the
    # scores as expired (and counts 0 for this cluster).
    last_until = valid_until()
    stopped_at = time.time()
    assert last_until - stopped_at <= VALID_FOR_S
    wait_until(
        "validUntil passes",
        lambda: time.time() > last_until + 0.5,
        timeout=VALID_FOR_S + 2,
        ignoring=NOT_YET,
    )
    assert valid_until() == last_until
    assert datetime.fromtimestamp(valid_until(), UTC) < datetime.now(UTC)
    assert scores() == updated  # left as they were: expiry, not deletion

    # The CRD holds values to upstream's range, as a real hub would.
    with pytest.raises(KubeApiError) as refused:
        admin.request(
            "PATCH",
            obj_path + "/status",
            body={"status": {"scores": [{"name": "free-gpus", "value": 101}]}},
            content_type=MERGE_PATCH,
        )
    assert refused.value.status == 422, refused.value
