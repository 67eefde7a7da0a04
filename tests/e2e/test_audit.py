"""Audit mode end to end (Spec.mode_for): the real kube-apiserver calling the webhook for a
policy whose tenant dept-b audits while dept-a enforces, with every admission policy
`steer policy admission-policy` makes applied.

The same pod is created three times: in a namespace kube-steer leaves alone, in dept-a's
(enforced) and in dept-b's (audited). What the scheduler reads of the stored audited pod must
be exactly what it reads of the unsteered one; the enforced one must differ. Validation must
warn where enforcing would deny, and a security taint rule must still deny.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kits.control_plane import ControlPlane
from kits.service_processes import RunningWebhook
from kits.waiting import wait_until
from steer.core.budget import pool_resource
from steer.core.policy import parse_policy
from steer.core.steering import trace_annotation_key
from tests.e2e.admission_support import registered_webhook

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "examples" / "policy.yaml").read_text()
DEPT_B_LINE = "      allowedSchedulerNames: [steer-spread, steer-binpack]\n"
assert DEPT_B_LINE in EXAMPLE
POLICY_TEXT = EXAMPLE.replace(DEPT_B_LINE, DEPT_B_LINE + "      mode: audit\n")
POLICY_FILE = Path(tempfile.mkdtemp(prefix="steer-e2e-audit-")) / "policy.yaml"
POLICY_FILE.write_text(POLICY_TEXT)
POLICY = parse_policy(POLICY_TEXT)
assert POLICY.tenant("dept-b").mode == "audit" and POLICY.spec.mode == "enforce"
TRACE_KEY = trace_annotation_key(POLICY)
OPT_IN = {"kube-steer.github.io/enabled": "true"}


@pytest.fixture(scope="module")
def webhook(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningWebhook]:
    with registered_webhook(
        control_plane, POLICY_FILE, tmp_path_factory.mktemp("webhook"), every_policy=True
    ) as hook:
        yield hook


def make_pod(name: str, *, cpu_limit: str = "100m", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "audit"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"cpu": cpu_limit, "memory": "64Mi"},
                    },
                }
            ],
            **spec,
        },
    }


def create(api: client.ApiClient, namespace: str, pod: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """Create through the apiserver: (the stored pod as JSON, the warnings it sent back)."""
    response = client.CoreV1Api(api).create_namespaced_pod(namespace, pod, _preload_content=False)
    warnings = [
        w.split('"', 1)[1].rsplit('"', 1)[0] if '"' in w else w
        for w in response.headers.getlist("Warning")
    ]
    return json.loads(response.data), warnings


def refusal(api: client.ApiClient, namespace: str, pod: Mapping[str, Any]) -> tuple[int, str]:
    with pytest.raises(client.ApiException) as refused:
        create(api, namespace, pod)
    return int(refused.value.status), str(json.loads(refused.value.body)["message"])


def traced(api: client.ApiClient, namespace: str) -> bool:
    """A dry-run probe comes back with a trace (the webhook knows the namespace)."""
    probe = make_pod(f"probe-{uuid.uuid4().hex[:6]}")
    try:
        made = client.CoreV1Api(api).create_namespaced_pod(namespace, probe, dry_run="All")
    except client.ApiException:
        return False
    return TRACE_KEY in (made.metadata.annotations or {})


@pytest.fixture
def namespaces(
    webhook: RunningWebhook, api: client.ApiClient, make_namespace: Callable[..., str]
) -> dict[str, str]:
    plain = make_namespace({}, prefix="audit-plain")
    enforced = make_namespace({"tenant": "dept-a", **OPT_IN}, prefix="audit-a")
    audited = make_namespace({"tenant": "dept-b", **OPT_IN}, prefix="audit-b")
    for ns in (enforced, audited):
        wait_until(f"the webhook traces pods in {ns}", lambda ns=ns: traced(api, ns), timeout=15)
    # The apiserver loads the admission policies from a watch: the budget's is in force once a
    # forged pool request is refused where no budget applies.
    wait_until(
        "the budget admission policy is in force",
        lambda: forged_refused(api, plain),
        timeout=15,
    )
    return {"plain": plain, "enforced": enforced, "audited": audited}


def forged(name: str) -> dict[str, Any]:
    """A pod that requests the budget's pool itself, as only the webhook may."""
    pod = make_pod(name)
    pool = pool_resource(POLICY, "cpu")
    pod["spec"]["containers"][0]["resources"]["requests"][pool] = "100"
    pod["spec"]["containers"][0]["resources"]["limits"][pool] = "100"
    return pod


def forged_refused(api: client.ApiClient, namespace: str) -> bool:
    probe = forged(f"probe-{uuid.uuid4().hex[:6]}")
    try:
        client.CoreV1Api(api).create_namespaced_pod(namespace, probe, dry_run="All")
    except client.ApiException as exc:
        return "is not steered by kube-steer" in str(exc.body)
    return False


def scheduler_view(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What of a stored pod the scheduler reads."""
    spec = pod["spec"]
    keys = (
        "affinity",
        "tolerations",
        "nodeSelector",
        "schedulerName",
        "topologySpreadConstraints",
        "priority",
        "priorityClassName",
        "overhead",
        "resources",
    )
    return {
        **{k: spec.get(k) for k in keys},
        "containers": [c.get("resources") for c in spec["containers"]],
        "initContainers": [c.get("resources") for c in spec.get("initContainers") or ()],
    }


def test_an_audited_pod_is_stored_as_the_unsteered_one_and_says_what_it_would_get(
    api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    stored = {kind: create(api, ns, make_pod("same"))[0] for kind, ns in namespaces.items()}
    plain = scheduler_view(stored["plain"])
    assert scheduler_view(stored["audited"]) == plain
    assert scheduler_view(stored["enforced"]) != plain  # the control: enforce mode steers
    assert TRACE_KEY not in (stored["plain"]["metadata"].get("annotations") or {})
    trace = json.loads(stored["audited"]["metadata"]["annotations"][TRACE_KEY])
    assert trace["mode"] == "audit" and trace["policy"] == POLICY.version
    # What enforcing would have added: the pool requests, the routed profile, the preference.
    assert "budget:pool" in trace["wouldAdd"]
    assert "scheduler:steer-spread" in trace["wouldAdd"]
    assert any(rule.startswith("prefer:") for rule in trace["wouldAdd"])
    assert "mode" not in json.loads(stored["enforced"]["metadata"]["annotations"][TRACE_KEY])


def test_audit_admits_with_a_warning_what_enforce_denies(
    api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    # A cpu limit four times the request: over both tenants' budgets (5 % and 0 %).
    greedy = make_pod("greedy", cpu_limit="400m")
    status, message = refusal(api, namespaces["enforced"], greedy)
    assert status == 403 and "rule overcommit" in message, message
    stored, warnings = create(api, namespaces["audited"], greedy)
    assert stored["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "400m"
    assert any(w.startswith("kube-steer audit: would deny: rule overcommit: ") for w in warnings), (
        warnings
    )


def test_a_security_taint_rule_denies_an_audited_tenant_too(
    api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    tolerant = make_pod(
        "tolerant", tolerations=[{"key": "kube-steer.github.io/unhealthy", "operator": "Exists"}]
    )
    status, message = refusal(api, namespaces["audited"], tolerant)
    assert status == 403 and "reserved-toleration" in message, message


def test_an_audited_tenant_may_not_forge_the_budgets_currency(
    api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    """Its pods are outside every budget: a pool request of their own would take room from
    the enforced tenants, and the apiserver's policy refuses it."""
    status, message = refusal(api, namespaces["audited"], forged("forged"))
    assert status == 403 and "is not steered by kube-steer" in message, message
