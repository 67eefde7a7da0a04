"""The policy as a SteeringPolicy object on the real apiserver: the CRD from
manifests/crd/steeringpolicies.yaml, the example policy migrated from a ConfigMap, the real
scorer (as the scorer manifest's ClusterRole allows, no more) and webhook processes reading
it with `--policy-resource`.

A wrong field is refused by the apiserver itself with its path; a spec only the services can
judge (a reference to a taint rule that does not exist) is stored, reported `Accepted: False`
with the path in its status, and both services keep serving the last good version; a good
edit is hot-reloaded by the same processes.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kits.control_plane import ControlPlane, ControlPlaneError
from kits.service_processes import RunningScorer, RunningWebhook, running_scorer, running_webhook
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.adapters.policy_resource import object_path
from tests.e2e.waiting import NOT_YET, install_policy_crd

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "steer" / "presets" / "policy.yaml"
MERGE = "application/merge-patch+json"


@pytest.fixture
def steering_policy(
    control_plane: ControlPlane, admin: KubeJson, make_namespace: Callable[..., str]
) -> Iterator[str]:
    """The CRD installed, and the example policy as a SteeringPolicy made by `steer policy
    migrate --from-configmap ... --apply` from a ConfigMap; its name."""
    install_policy_crd(control_plane, admin)
    namespace = make_namespace(prefix="policy-cm")
    admin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={
            "metadata": {"name": "steer-policy"},
            "data": {"policy.yaml": EXAMPLE.read_text()},
        },
    )
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher",
            "policy",
            "migrate",
            "--from-configmap",
            f"{namespace}/steer-policy",
            "--name",
            name,
            "--apply",
            "--kubeconfig",
            str(control_plane.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"steeringpolicy.kube-steer.github.io/{name} applied" in done.stdout
    try:
        yield name
    finally:
        with contextlib.suppress(KubeApiError):
            admin.request("DELETE", object_path(name))


def webhook_policies(hook: RunningWebhook) -> list[dict[str, Any]]:
    """What each webhook worker says of its policy on the master's /status."""
    status_url = hook.metrics_url.removesuffix("/metrics") + "/status"
    with requests.Session() as session:
        session.trust_env = False
        workers = session.get(status_url, timeout=10).json()["workers"]
    return [w["policy"] for w in workers]


def served_by_webhook(hook: RunningWebhook) -> set[str]:
    return {p["version"] for p in webhook_policies(hook)}


def served_by_scorer(scorer: RunningScorer) -> str:
    return str(scorer.get("/readyz")["policy"]["version"])


def accepted(obj: dict[str, Any]) -> dict[str, Any]:
    (cond,) = [c for c in obj["status"]["conditions"] if c["type"] == "Accepted"]
    return cond


def test_a_steering_policy_is_validated_by_the_apiserver_judged_by_the_services_and_hot_reloaded(
    control_plane: ControlPlane,
    admin: KubeJson,
    steering_policy: str,
    scorer_user: Path,
    tmp_path: Path,
) -> None:
    name = steering_policy
    path = object_path(name)
    created = admin.request("GET", path)
    # The object holds the spec as written: no defaults filled in by the migration.
    assert "mode" not in created["spec"]
    assert created["spec"]["scoring"]["step"] == 10
    tenants = created["spec"]["tenants"]

    with (
        running_scorer(
            control_plane,
            None,
            "http://127.0.0.1:1",  # no Prometheus: this test is about the policy, not data
            tmp_path,
            policy_resource=name,
            kubeconfig=scorer_user,  # the manifest's ClusterRole: get/list/watch + status
            extra_args=["--no-leader-election"],
        ) as scorer,
        running_webhook(control_plane, None, tmp_path, policy_resource=name, workers=1) as hook,
    ):
        scorer.wait_ready()
        first = wait_until(
            "the scorer reports the policy accepted",
            lambda: admin.request("GET", path),
            timeout=30,
            until=lambda o: "status" in o and accepted(o)["status"] == "True",
        )
        version = first["status"]["scorer"]["version"]
        assert first["status"]["observedGeneration"] == first["metadata"]["generation"] == 1
        assert accepted(first)["reason"] == "Valid"
        assert first["status"]["scorer"]["mode"] == "enforce"
        assert version.startswith(f"{name}@")
        assert served_by_scorer(scorer) == version
        assert served_by_webhook(hook) == {version}
        table = control_plane.kubectl("get", "steeringpolicies", name)
        assert table.split("\n")[0].split()[:4] == ["NAME", "ACCEPTED", "MODE", "VERSION"]
        assert table.split("\n")[1].split()[:4] == [name, "True", "enforce", version]

        # 1. A wrong field never reaches the services: the apiserver refuses it by path.
        with pytest.raises(KubeApiError) as refused:
            admin.request(
                "PATCH", path, body={"spec": {"scoring": {"step": 7}}}, content_type=MERGE
            )
        assert refused.value.status == 422
        assert "spec.scoring.step" in str(refused.value)
        with pytest.raises(KubeApiError) as refused:
            admin.request(
                "PATCH",
                path,
                body={"spec": {"dimensions": [{"name": "x", "source": "http"}]}},
                content_type=MERGE,
            )
        assert "spec.dimensions[0].http" in str(refused.value)
        bad_field = EXAMPLE.read_text().replace("  labelPrefix:", "  labelPrefx:")
        bad_field = bad_field.replace("name: gpu-cluster", f"name: {name}", 1)
        with pytest.raises(ControlPlaneError, match=r'unknown field "spec\.labelPrefx"'):
            control_plane.kubectl("apply", "-f", "-", input=bad_field)
        assert admin.request("GET", path)["metadata"]["generation"] == 1

        # 2. A spec only the services can judge: stored, rejected in status with the path,
        #    and the last good version keeps serving in both services.
        admin.request(
            "PATCH",
            path,
            body={
                "spec": {
                    "tenants": [
                        {**tenants[0], "allowedTolerations": ["no-such-taint"]},
                        *tenants[1:],
                    ]
                }
            },
            content_type=MERGE,
        )
        rejected = wait_until(
            "the scorer reports generation 2 rejected",
            lambda: admin.request("GET", path),
            timeout=30,
            until=lambda o: o["status"]["observedGeneration"] == 2,
        )
        cond = accepted(rejected)
        assert (cond["status"], cond["reason"], cond["observedGeneration"]) == (
            "False",
            "Invalid",
            2,
        )
        assert "spec.tenants[0].allowedTolerations[0]" in cond["message"]
        assert rejected["status"]["problems"] == [
            {
                "path": "spec.tenants[0].allowedTolerations[0]",
                "message": "unknown taint rule 'no-such-taint'; known: ['gpu-hot', 'unhealthy']",
            }
        ]
        assert rejected["status"]["scorer"]["version"] == version
        assert rejected["status"]["scorer"]["generation"] == 1
        assert served_by_scorer(scorer) == version
        wait_until(
            "the webhook saw the bad edit",
            lambda: all(p["lastError"] for p in webhook_policies(hook)),
            timeout=20,
            ignoring=NOT_YET,
        )
        assert served_by_webhook(hook) == {version}

        # 3. A good edit is hot-reloaded by the same processes.
        admin.request(
            "PATCH",
            path,
            body={"spec": {"tenants": tenants, "mode": "audit"}},
            content_type=MERGE,
        )
        good = wait_until(
            "the scorer reports generation 3 accepted",
            lambda: admin.request("GET", path),
            timeout=30,
            until=lambda o: o["status"]["observedGeneration"] == 3,
        )
        new_version = good["status"]["scorer"]["version"]
        assert accepted(good)["status"] == "True"
        assert new_version != version
        assert good["status"]["scorer"]["mode"] == "audit"
        assert good["status"]["problems"] == []
        assert served_by_scorer(scorer) == new_version
        wait_until(
            "the webhook serves the new version",
            lambda: served_by_webhook(hook) == {new_version},
            timeout=20,
            ignoring=NOT_YET,
        )
        assert scorer.process.poll() is None and hook.process.poll() is None

    # 4. With no scorer running, a bad edit is stored; a scorer starting on it cannot run it,
    #    exits naming the field, and says so in the status (for a crash-looping replica).
    admin.request(
        "PATCH",
        path,
        body={"spec": {"scoring": {"compositeDimensions": ["nope"]}}},
        content_type=MERGE,
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher",
            "scorer",
            "run",
            "--policy-resource",
            name,
            "--kubeconfig",
            str(scorer_user),
            "--no-leader-election",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "spec.scoring.compositeDimensions" in done.stderr
    stuck = admin.request("GET", path)
    cond = accepted(stuck)
    assert (cond["status"], cond["observedGeneration"]) == ("False", 4)
    assert stuck["status"]["problems"][0]["path"].startswith("spec.scoring.compositeDimensions")
    assert stuck["status"]["scorer"]["version"] == new_version  # what ran last, kept
