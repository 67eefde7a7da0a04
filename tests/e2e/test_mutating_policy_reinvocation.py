"""The MutatingAdmissionPolicy's second pass, on the real apiserver.

A policy that changes a pod makes the apiserver run the mutating policies again (and a
policy with `reinvocationPolicy: IfNeeded` is then evaluated again). `steer-mutation`'s one
matchCondition leaves out a pod that carries its steering already (this version's trace, every
container's pool requests), so a pod nothing else changes costs one evaluation of the patch;
a container a later webhook adds (a sidecar) has no pool request, so the policy, reinvoked,
steers the pod again and gives the sidecar its pool units
(steer/core/admission_policy/mutating.py `_steered`).

Counted with the apiserver's own metric of patch evaluations,
`apiserver_mutating_admission_policy_check_duration_seconds_count{policy="steer-mutation"}`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import requests

from kits.control_plane import ControlPlane
from kits.waiting import wait_until
from steer.core.admission_policy.mutating import POLICY_NAME, TRACE_VIA, mutating_admission_policy
from steer.core.budget import POOL_KINDS, pool_resource
from steer.core.mutation import read_trace
from steer.core.policy import Policy, parse_policy
from steer.core.steering import trace_annotation_key
from tests.conftest import EXAMPLE_POLICY
from tests.e2e.admission_support import patching_webhook

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLURAL = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}
TENANT_NAMESPACE = {"kube-steer.github.io/enabled": "true", "tenant": "dept-a"}
SIDECAR_LABEL = "e2e.kube-steer.github.io/sidecar"  # namespaces the sidecar webhook serves
SIDECAR_CONFIGURATION = "zz-e2e-sidecar"
SIDECAR = {
    "name": "sidecar",
    "image": "registry.example/proxy:1",
    "resources": {
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"cpu": "100m", "memory": "64Mi"},
    },
}
CHECKS = re.compile(
    r'^apiserver_mutating_admission_policy_check_duration_seconds_count\{[^}]*policy="'
    + re.escape(POLICY_NAME)
    + r'"[^}]*\} (\S+)$',
    re.M,
)


class Api:
    """JSON over HTTPS with the admin certificate."""

    def __init__(self, plane: ControlPlane) -> None:
        self.url = plane.url
        self.session = requests.Session()
        self.session.trust_env = False
        self.session.verify = str(plane.ca_file)
        self.session.cert = (str(plane.pki_dir / "admin.crt"), str(plane.pki_dir / "admin.key"))

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        resp = self.session.request(method, self.url + path, json=body, timeout=30)
        return resp.status_code, resp.json()

    def dry_run(self, namespace: str, pod: Mapping[str, Any]) -> dict[str, Any]:
        code, answer = self.call("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod)
        assert code == 201, answer
        return answer

    def patch_evaluations(self) -> float:
        """How many times the apiserver has evaluated steer-mutation's patch."""
        text = self.session.get(self.url + "/metrics", timeout=30).text
        return sum(float(v) for v in CHECKS.findall(text))


def _app_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "app"},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:1",
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "256Mi"},
                        "limits": {"cpu": "525m", "memory": "269Mi"},
                    },
                }
            ]
        },
    }


def _add_sidecar(pod: dict[str, Any]) -> list[dict[str, Any]]:
    names = [c["name"] for c in pod["spec"]["containers"]]
    if SIDECAR["name"] in names:
        return []
    return [{"op": "add", "path": "/spec/containers/-", "value": SIDECAR}]


@contextlib.contextmanager
def sidecar_webhook(plane: ControlPlane, workdir: Path) -> Iterator[None]:
    """A mutating webhook, called after the policies (the apiserver runs MutatingAdmissionPolicy
    before MutatingAdmissionWebhook), that adds SIDECAR to pods in namespaces labelled
    SIDECAR_LABEL=on."""
    with patching_webhook(plane, workdir, SIDECAR_CONFIGURATION, SIDECAR_LABEL, _add_sidecar):
        yield


@pytest.fixture
def policy() -> Policy:
    return parse_policy(EXAMPLE_POLICY.read_text())


@pytest.fixture
def installed(control_plane: ControlPlane, policy: Policy) -> Iterator[Api]:
    """The example policy's MutatingAdmissionPolicy and binding, removed at the end."""
    api = Api(control_plane)
    objects = mutating_admission_policy(policy).objects
    for obj in objects:
        code, answer = api.call("POST", f"{ADMISSION}/{PLURAL[obj['kind']]}", obj)
        assert code == 201, answer
    try:
        yield api
    finally:
        for obj in reversed(objects):
            api.call("DELETE", f"{ADMISSION}/{PLURAL[obj['kind']]}/{obj['metadata']['name']}")


def _steered(api: Api, namespace: str, policy: Policy) -> bool:
    trace = read_trace(api.dry_run(namespace, _app_pod()), trace_annotation_key(policy))
    return trace is not None and trace.get("via") == TRACE_VIA


def _pools(container: Mapping[str, Any], policy: Policy) -> dict[str, str]:
    requests_ = container.get("resources", {}).get("requests", {})
    return {
        kind: requests_[pool_resource(policy, kind)]
        for kind in POOL_KINDS
        if pool_resource(policy, kind) in requests_
    }


def test_a_steered_pod_is_evaluated_once_and_a_later_sidecar_gets_its_pools(
    control_plane: ControlPlane,
    make_namespace: Callable[..., str],
    installed: Api,
    policy: Policy,
    tmp_path: Path,
) -> None:
    api = installed
    alone = make_namespace(TENANT_NAMESPACE, prefix="mp-once")
    with_sidecar = make_namespace({**TENANT_NAMESPACE, SIDECAR_LABEL: "on"}, prefix="mp-sidecar")
    wait_until("steer-mutation in force", lambda: _steered(api, alone, policy), timeout=30)

    # Nothing after the policy changes the pod: the reinvocation stops at the matchCondition.
    before = api.patch_evaluations()
    pod = api.dry_run(alone, _app_pod())
    assert api.patch_evaluations() - before == 1
    (app,) = pod["spec"]["containers"]
    assert _pools(app, policy) == {"cpu": "525", "memory": "269"}
    assert read_trace(pod, trace_annotation_key(policy))["via"] == TRACE_VIA  # type: ignore[index]

    with sidecar_webhook(control_plane, tmp_path):
        wait_until(
            "the sidecar webhook in force",
            lambda: len(api.dry_run(with_sidecar, _app_pod())["spec"]["containers"]) == 2,
            timeout=30,
        )
        before = api.patch_evaluations()
        pod = api.dry_run(with_sidecar, _app_pod())
        # Evaluated again for the sidecar the webhook added after the first pass.
        assert api.patch_evaluations() - before == 2
    app, sidecar = pod["spec"]["containers"]
    assert sidecar["name"] == SIDECAR["name"]
    assert _pools(app, policy) == {"cpu": "525", "memory": "269"}
    assert _pools(sidecar, policy) == {"cpu": "100", "memory": "64"}
    assert read_trace(pod, trace_annotation_key(policy))["via"] == TRACE_VIA  # type: ignore[index]
