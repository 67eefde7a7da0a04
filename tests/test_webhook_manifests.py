"""The webhook's Kubernetes manifests say what the design promises (fail-safe, least privilege)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from steer.core.admission import ValidationPlan
from steer.core.infrastructure import exempt_cel
from steer.core.policy import parse_policy
from tests.conftest import EXAMPLE_POLICY
from webhook.devices import WEBHOOK_KINDS

ROOT = Path(__file__).resolve().parent.parent
WEBHOOK = ROOT / "manifests" / "webhook" / "webhook.yaml"
ADMISSION = ROOT / "manifests" / "webhook" / "admission.yaml"
NETWORK_POLICY_DIR = ROOT / "manifests" / "components" / "network-policy"
NETWORK_POLICIES = NETWORK_POLICY_DIR / "network-policies.yaml"
EXCLUDED = {
    "key": "kubernetes.io/metadata.name",
    "operator": "NotIn",
    "values": ["kube-system", "kube-steer"],
}


def docs(path: Path) -> dict[str, dict[str, Any]]:
    return {
        f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(path.read_text()) if d
    }


def hooks() -> list[tuple[str, dict[str, Any]]]:
    return [(kind, hook) for kind, doc in docs(ADMISSION).items() for hook in doc["webhooks"]]


@pytest.mark.parametrize(
    ("kind", "hook"), hooks(), ids=lambda v: v if isinstance(v, str) else v["name"]
)
def test_every_webhook_is_safe_and_skips_system_and_own_namespace(
    kind: str, hook: dict[str, Any]
) -> None:
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert EXCLUDED in hook["namespaceSelector"]["matchExpressions"]
    service = hook["clientConfig"]["service"]
    assert (service["name"], service["namespace"], service["port"]) == (
        "steer-webhook",
        "kube-steer",
        443,
    )
    # `steer certs rotate` or cert-manager fills it in; apply must not own it.
    assert "caBundle" not in hook["clientConfig"]
    assert all(rule["resources"][0] == "pods" for rule in hook["rules"])


def test_mutation_is_opt_in_ignore_and_reinvocable() -> None:
    (hook,) = docs(ADMISSION)["MutatingWebhookConfiguration/steer-webhook"]["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["clientConfig"]["service"]["path"] == "/mutate"
    assert hook["rules"][0]["operations"] == ["CREATE"]
    policy = parse_policy(EXAMPLE_POLICY.read_text())
    opt_in = policy.spec.opt_in.namespace_selector.match_labels
    assert {"key": "kube-steer.github.io/enabled", "operator": "In", "values": ["true"]} in hook[
        "namespaceSelector"
    ]["matchExpressions"]
    assert opt_in == {"kube-steer.github.io/enabled": "true"}


def test_no_webhook_fails_closed() -> None:
    """A down webhook must never refuse pods: the security rules are a
    ValidatingAdmissionPolicy the apiserver evaluates (`steer policy admission-policy`)."""
    assert ValidationPlan.from_policy(parse_policy(EXAMPLE_POLICY.read_text())).has_security_rules
    found = docs(ADMISSION)
    assert set(found) == {
        "MutatingWebhookConfiguration/steer-webhook",
        "ValidatingWebhookConfiguration/steer-webhook",
    }
    assert {hook["failurePolicy"] for _, hook in hooks()} == {"Ignore"}
    (rest,) = found["ValidatingWebhookConfiguration/steer-webhook"]["webhooks"]
    assert rest["clientConfig"]["service"]["path"] == "/validate"
    assert rest["rules"][0]["operations"] == ["CREATE", "UPDATE"]


def test_deployment_is_replicated_budgeted_and_least_privileged() -> None:
    found = docs(WEBHOOK)
    deployment = found["Deployment/steer-webhook"]
    assert deployment["spec"]["replicas"] >= 2
    pdb = found["PodDisruptionBudget/steer-webhook"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    # Read only: the scorer writes the SteeringPolicy's status, the webhook never writes.
    assert found["ClusterRole/steer-webhook"]["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
        {
            "apiGroups": ["kube-steer.github.io"],
            "resources": ["steeringpolicies"],
            "verbs": ["get", "list", "watch"],
        },
        # The DRA catalogue (webhook/devices.py): no ResourceSlices.
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": list(WEBHOOK_KINDS),
            "verbs": ["list", "watch"],
        },
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:2] == ["webhook", "serve"]
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "https",
        "scheme": "HTTPS",
    }
    service = found["Service/steer-webhook"]
    assert {"name": "https", "port": 443, "targetPort": "https"} in service["spec"]["ports"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "steer-webhook"


def test_deployment_args_parse_with_the_cli() -> None:
    import argparse

    from webhook.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    (container,) = docs(WEBHOOK)["Deployment/steer-webhook"]["spec"]["template"]["spec"][
        "containers"
    ]
    args = parser.parse_args(container["args"])
    assert (args.workers, args.threads, args.listen) == (2, None, "0.0.0.0:8443")
    assert (args.read_timeout_seconds, args.max_connections) == (5.0, 256)
    assert (args.max_bytes_in_flight, args.decision_cache_bytes) == (32 << 20, 8 << 20)


def test_metrics_and_status_listen_on_the_pod_ip_only() -> None:
    """The plain-HTTP port carries the detail /readyz no longer gives: not on 0.0.0.0."""
    (container,) = docs(WEBHOOK)["Deployment/steer-webhook"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert "--metrics-listen=$(POD_IP):9102" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert not any("0.0.0.0:9102" in arg for arg in container["args"])


def network_policies() -> dict[str, dict[str, Any]]:
    return docs(NETWORK_POLICIES)


def test_the_network_policy_admits_no_pod_but_the_controllers_to_the_admission_port() -> None:
    """The apiserver (host network or external) and the kubelet are outside the pod network;
    every tenant pod is inside it. Of the pods, the controller's alone reaches the admission
    port (its leader's TLS handshakes before an old CA leaves caBundle), Prometheus alone the
    metrics port."""
    policies = network_policies()
    policy = policies["NetworkPolicy/steer-webhook"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    by_port = {rule["ports"][0]["port"]: rule for rule in policy["spec"]["ingress"]}
    assert set(by_port) == {8443, 9102}
    assert all(rule.get("from") for rule in by_port.values())  # no rule open to any source
    apiserver, controller = by_port[8443]["from"]
    assert apiserver == {"ipBlock": {"cidr": "0.0.0.0/0", "except": [pod_cidr_setting()]}}
    controller_pods = {
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "steer-controller"}}
    }
    assert controller == controller_pods  # this namespace's pods only: no namespaceSelector
    assert not [
        rule for rule in policies["NetworkPolicy/steer-scorer"]["spec"]["egress"] if "to" in rule
    ]
    (to_webhook,) = [
        rule
        for rule in policies["NetworkPolicy/steer-controller"]["spec"]["egress"]
        if "to" in rule
    ]
    assert to_webhook == {
        "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "steer-webhook"}}}],
        "ports": [{"protocol": "TCP", "port": 8443}],
    }
    prometheus, proxy = by_port[9102]["from"]
    assert prometheus == {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    assert proxy == apiserver


def pod_cidr_setting() -> str:
    kustomization = yaml.safe_load((NETWORK_POLICY_DIR / "kustomization.yaml").read_text())
    (settings,) = kustomization["configMapGenerator"]
    assert settings["options"]["annotations"] == {"config.kubernetes.io/local-config": "true"}
    literals = dict(item.split("=", 1) for item in settings["literals"])
    return literals["podCIDR"]


def test_the_pod_cidr_setting_reaches_every_except_entry() -> None:
    kustomization = yaml.safe_load((NETWORK_POLICY_DIR / "kustomization.yaml").read_text())
    (replacement,) = kustomization["replacements"]
    assert replacement["source"]["fieldPath"] == "data.podCIDR"
    target, scorer = replacement["targets"]
    assert target["select"] == {"kind": "NetworkPolicy", "name": "steer-webhook"}
    # The same pod network keeps pods off the scorer's port (the base's steer-scorer-ingress).
    assert scorer == {
        "select": {"kind": "NetworkPolicy", "name": "steer-scorer-ingress"},
        "fieldPaths": ["spec.ingress.0.from.0.ipBlock.except.0"],
    }
    policy = network_policies()["NetworkPolicy/steer-webhook"]
    for path in target["fieldPaths"]:
        node: Any = policy
        for step in path.split("."):
            node = node[int(step)] if isinstance(node, list) else node[step]
        assert node == pod_cidr_setting(), path
    excepts = [
        peer["ipBlock"]["except"]
        for rule in policy["spec"]["ingress"]
        for peer in rule["from"]
        if "ipBlock" in peer
    ]
    assert len(excepts) == len(target["fieldPaths"])


def test_both_webhooks_skip_infrastructure_exactly_as_the_core_defines_it() -> None:
    """The manifest's matchConditions are `exempt_cel` of the default policy: one definition
    (steer/core/infrastructure.py) for the webhooks, their code and the admission policies."""
    policy = parse_policy(EXAMPLE_POLICY.read_text())
    docs = [d for d in yaml.safe_load_all(ADMISSION.read_text()) if d]
    for doc in docs:
        for hook in doc["webhooks"]:
            assert hook["matchConditions"] == [
                {"name": "not-infrastructure", "expression": f"!({exempt_cel(policy)})"}
            ], hook["name"]
