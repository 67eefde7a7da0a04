"""End-to-end fixtures: one real control plane (etcd, kube-apiserver, kube-scheduler with the
project's profiles, kube-controller-manager) for the whole session, from `KUBE_BIN_DIR` or
`../shared/kube` (see kits/control_plane.py). Run with `make e2e`.

Tests that schedule pods own the node set while they run: `make_node` deletes its nodes at
teardown, so one test's nodes never receive another test's pods. Namespaces from `make_namespace`
are unique per test; their pods are deleted with grace period 0 at teardown.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kits.control_plane import ControlPlane
from kits.hollow_nodes import HollowNode
from kits.waiting import wait_until
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeApiError, KubeJson
from tests.e2e.waiting import NOT_YET

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "manifests" / "scheduler" / "profiles.yaml"
SCORER_MANIFEST = ROOT / "manifests" / "scorer" / "scorer.yaml"
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane.start(
        tmp_path_factory.mktemp("control-plane"),
        controller_manager=True,
        scheduler_profiles=PROFILES,
    )
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.api_client()


@pytest.fixture(scope="session")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def admin(control_plane: ControlPlane) -> Iterator[KubeJson]:
    """Raw-JSON admin access of the test itself (not the scorer's client)."""
    api_client = make_api_client(str(control_plane.kubeconfig))
    yield KubeJson(api_client)
    api_client.close()


def may(verb: str, resource: str, group: str = "", name: str = "") -> Callable[[KubeJson], bool]:
    """A `ready` for `user_bound_to`: the user may `verb` the resource (a
    SelfSubjectAccessReview, which every user may make)."""

    def asked(as_user: KubeJson) -> bool:
        attributes = {"verb": verb, "resource": resource, "group": group, "name": name}
        review = as_user.request(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            body={"spec": {"resourceAttributes": attributes}},
        )
        return bool((review.get("status") or {}).get("allowed"))

    return asked


@contextlib.contextmanager
def user_bound_to(
    control_plane: ControlPlane,
    admin: KubeJson,
    role: Mapping[str, Any],
    user: str,
    ready: Callable[[KubeJson], object] | None = None,
) -> Iterator[Path]:
    """A kubeconfig for `user`, bound to a copy of the ClusterRole `role` (named as the user)
    and nothing else; the role and its binding go at exit. `ready(as_user)` says the binding
    is in force (truthy; default: the user lists pods, which a role without that needs to
    replace)."""
    role = {**role, "metadata": {**role["metadata"], "name": user}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    kubeconfig = control_plane.user_kubeconfig(user)
    as_user = KubeJson(make_api_client(str(kubeconfig)))
    admin.request("POST", f"{rbac}/clusterroles", body=role)
    admin.request("POST", f"{rbac}/clusterrolebindings", body=binding)
    try:
        wait_until(
            "the binding is in force",
            lambda: (ready or (lambda u: u.request("GET", "/api/v1/pods")))(as_user),
            timeout=30,
            ignoring=NOT_YET,
        )
        yield kubeconfig
    finally:
        for path in (f"{rbac}/clusterrolebindings/{user}", f"{rbac}/clusterroles/{user}"):
            with contextlib.suppress(KubeApiError):
                admin.request("DELETE", path)
        as_user.api_client.close()


@pytest.fixture
def scorer_user(control_plane: ControlPlane, admin: KubeJson) -> Iterator[Path]:
    """A kubeconfig for a user bound to the scorer manifest's ClusterRole (and nothing else;
    a test grants more itself, e.g. the OCM hub Role)."""
    docs = [d for d in yaml.safe_load_all(SCORER_MANIFEST.read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    with user_bound_to(
        control_plane, admin, role, f"scorer-user-{uuid.uuid4().hex[:6]}"
    ) as kubeconfig:
        yield kubeconfig


@pytest.fixture
def make_namespace(control_plane: ControlPlane) -> Iterator[Callable[..., str]]:
    """make_namespace(labels={...}, prefix="t") -> a fresh namespace name (with its default SA)."""
    made: list[str] = []

    def make(labels: Mapping[str, str] | None = None, prefix: str = "e2e") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        control_plane.ensure_namespace(name, labels)
        made.append(name)
        return name

    yield make
    core = client.CoreV1Api(control_plane.api_client())
    for name in made:
        control_plane.delete_pods(name)
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(name)


@pytest.fixture
def make_node(control_plane: ControlPlane) -> Iterator[Callable[..., dict[str, Any]]]:
    """make_node(name, cpu=, memory=, gpus=, zone=, labels=, taints=) -> the Node; deleted at
    teardown (with grace-0 deletion of any pod still bound to it)."""
    made: list[str] = []
    core_api = client.CoreV1Api(control_plane.api_client())

    def make(name: str, **kwargs: Any) -> dict[str, Any]:
        node = control_plane.add_node(name, **kwargs)
        made.append(name)
        # The controller manager's TTL controller annotates every new node a moment later;
        # wait for it, so a test's "before" snapshot does not miss a foreign annotation.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            annotations = core_api.read_node(name).metadata.annotations or {}
            if TTL_ANNOTATION in annotations:
                break
            time.sleep(0.05)
        return node

    yield make
    core = client.CoreV1Api(control_plane.api_client())
    for name in made:
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                )
        with contextlib.suppress(client.ApiException):
            core.delete_node(name)


# -- real kubelets ------------------------------------------------------------------------


def node_name(role: str) -> str:
    return f"hollow-{role}-{uuid.uuid4().hex[:5]}"


@pytest.fixture
def hollow(control_plane: ControlPlane) -> Iterator[Callable[..., HollowNode]]:
    """hollow(role, **HollowNode fields) -> a HollowNode, not started; at teardown its kubelet
    stops and its pods and Node object are deleted."""
    made: list[HollowNode] = []

    def make(role: str, **kwargs: Any) -> HollowNode:
        node = HollowNode(control_plane, node_name(role), **kwargs)
        made.append(node)
        return node

    yield make
    for node in made:
        node.delete()
