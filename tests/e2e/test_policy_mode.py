"""Admission mode `policy` (components/admission-policy, the chart's admission.mode=policy) on
the real apiserver: no webhook process and no webhook configuration, only what `steer policy
admission-policy --mutating` prints (the MutatingAdmissionPolicy steer-mutation, the
ValidatingAdmissionPolicies, their bindings), and the scorer publishing the budget pools.

Pods of an opted-in tenant namespace are steered by the apiserver alone (pool and gate
requests, the trace annotation `"via": "admission-policy"`); a namespace that did not opt in is
left alone; a pod whose limits exceed what the tenant's budget leaves on the node stays Pending
(the scheduler's Insufficient pool); a pod that forges the budget's currency where no budget
applies is refused by the budget's ValidatingAdmissionPolicy.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kits.control_plane import ControlPlane
from kits.service_processes import printed_admission_policies, running_scorer
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.core.policy import parse_policy
from steer.core.steering import trace_annotation_key
from tests.e2e.waiting import NOT_YET
from tests.scorer_support import SMALL_POLICY

NODE = "policy-mode-e2e"
OPT_IN = "e2e.kube-steer.github.io/opt-in"
PREFIX = "kube-steer.github.io/"
POOL_CPU = f"{PREFIX}pool-cpu"
GATE0 = f"{PREFIX}budget-0pct"
NO_PROMETHEUS = "http://127.0.0.1:9"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
# SMALL_POLICY's tenants (dept-b at 0 %) and one more at 5 %, so dept-b is gated; pools
# enforced by the scheduler; only namespaces labelled OPT_IN=yes are steered.
POLICY_TEXT = (
    SMALL_POLICY
    + f"""\
    - name: dept-a
      namespaceSelector: {{matchLabels: {{tenant: dept-a}}}}
      overcommitPercent: 5
  overcommit: {{enforcement: scheduler}}
  optIn:
    namespaceSelector: {{matchLabels: {{{OPT_IN}: "yes"}}}}
"""
)
TRACE = trace_annotation_key(parse_policy(POLICY_TEXT))


def collection(kind: str) -> str:
    """MutatingAdmissionPolicy -> .../mutatingadmissionpolicies (and the bindings)."""
    lower = kind.lower()
    plural = lower[:-1] + "ies" if lower.endswith("policy") else lower + "s"
    return f"{ADMISSION}/{plural}"


@contextlib.contextmanager
def compiled_policies(admin: KubeJson, policy_file: Path) -> Iterator[list[str]]:
    """Every object `steer policy admission-policy --mutating -f policy_file` prints, created;
    deleted at exit. Yields their kinds."""
    docs = printed_admission_policies(policy_file)
    made: list[str] = []
    try:
        for doc in docs:
            admin.request("POST", collection(doc["kind"]), body=doc)
            made.append(f"{collection(doc['kind'])}/{doc['metadata']['name']}")
        yield [d["kind"] for d in docs]
    finally:
        for path in reversed(made):
            with contextlib.suppress(KubeApiError):
                admin.request("DELETE", path)


def pod_body(name: str, cpu: str, cpu_limit: str) -> dict[str, Any]:
    """A pod pinned to NODE by a required term (the scheduler still decides whether it fits)."""
    term = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": cpu, "memory": "1Gi"},
                        "limits": {"cpu": cpu_limit, "memory": "1Gi"},
                    },
                }
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            },
            "terminationGracePeriodSeconds": 0,
        },
    }


def pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def create(admin: KubeJson, namespace: str, body: Mapping[str, Any], **query: str) -> Any:
    return admin.request("POST", pods(namespace), body=body, query=query or None)


def trace_of(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    text = (pod["metadata"].get("annotations") or {}).get(TRACE)
    return json.loads(text) if text else None


def no_webhook_configurations(admin: KubeJson) -> bool:
    return not any(
        admin.request("GET", f"{ADMISSION}/{kind}")["items"]
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    )


def test_the_apiserver_alone_steers_and_holds_the_budget(
    control_plane: ControlPlane,
    make_node: Callable[..., dict[str, Any]],
    make_namespace: Callable[..., str],
    admin: KubeJson,
    scorer_user: Path,
    tmp_path: Path,
) -> None:
    if not no_webhook_configurations(admin):
        pytest.fail("a webhook configuration is registered: this test needs none")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY_TEXT)
    make_node(NODE, cpu="8", memory="32Gi")
    opted_in = make_namespace({"tenant": "dept-b", OPT_IN: "yes"}, prefix="dept-b")
    not_opted_in = make_namespace({"tenant": "dept-b"}, prefix="dept-b-out")
    foreign = make_namespace(prefix="foreign")

    with (
        compiled_policies(admin, policy_file) as kinds,
        running_scorer(
            control_plane,
            policy_file,
            NO_PROMETHEUS,
            tmp_path,
            name="scorer-policy-mode",
            extra_args=["--kubeconfig", str(scorer_user), "--no-leader-election"],
        ) as scorer,
    ):
        assert {"MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"} <= set(kinds)
        scorer.wait_ready()
        # 8 cores at dept-b's 0 %: 8000 m of limits on the node.
        wait_until(
            "the pool on the node",
            lambda: (
                admin.request("GET", f"/api/v1/nodes/{NODE}")["status"]["allocatable"].get(POOL_CPU)
                == "8k"
            ),
            timeout=30,
            ignoring=NOT_YET,
        )
        # The apiserver loads each admission policy from its own watch: until the mutating one
        # is loaded, the validating one (loaded first in one CI run) refuses the probe with 403.
        wait_until(
            "the mutating policy in force",
            lambda: trace_of(create(admin, opted_in, pod_body("probe", "1", "1"), dryRun="All")),
            timeout=30,
            interval=0.2,
            ignoring=NOT_YET,
        )

        # Steered by the apiserver: the pool (limits, in millicores) and the gate, requested
        # and limited alike, and the trace saying which path did it.
        fits = create(admin, opted_in, pod_body("fits", "2", "2"))
        resources = fits["spec"]["containers"][0]["resources"]
        for part in ("requests", "limits"):
            assert resources[part][POOL_CPU] == "2k", resources
            assert resources[part][GATE0] == "1", resources
        trace = trace_of(fits)
        assert trace is not None and trace["via"] == "admission-policy", trace
        wait_until(
            "fits bound",
            lambda: admin.request("GET", f"{pods(opted_in)}/fits")["spec"].get("nodeName"),
            timeout=30,
            interval=0.1,
            ignoring=NOT_YET,
        )

        # Not opted in: created as written.
        untouched = create(admin, not_opted_in, pod_body("untouched", "1", "1"))
        assert trace_of(untouched) is None
        assert POOL_CPU not in untouched["spec"]["containers"][0]["resources"]["requests"]

        # Over the budget: 7 cores of limits where 6 are left. Its requests fit; the pool
        # does not, so the scheduler leaves it Pending.
        create(admin, opted_in, pod_body("over", "1", "7"))

        def unschedulable() -> str | None:
            pod = admin.request("GET", f"{pods(opted_in)}/over")
            assert not pod["spec"].get("nodeName"), "the over-budget pod was bound"
            for cond in pod.get("status", {}).get("conditions") or ():
                if cond["type"] == "PodScheduled" and cond["status"] == "False":
                    return str(cond.get("message", ""))
            return None

        message = wait_until("over stays Pending", unschedulable, timeout=30, interval=0.2)
        assert message is not None and f"Insufficient {POOL_CPU}" in message, message

        # The currency forged where no budget applies (a namespace of no tenant, not opted in:
        # the mutating policy leaves it alone): refused by the budget's
        # ValidatingAdmissionPolicy, so no pod takes room from a tenant's pool.
        forged = pod_body("forged", "1", "1")
        for part in ("requests", "limits"):
            forged["spec"]["containers"][0]["resources"][part][POOL_CPU] = "1k"
        with pytest.raises(KubeApiError) as refused:
            create(admin, foreign, forged)
        assert refused.value.status in (403, 422), refused.value
        assert "rule budget-currency" in str(refused.value), refused.value
        assert no_webhook_configurations(admin)
