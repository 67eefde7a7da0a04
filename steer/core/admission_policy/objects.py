"""The two objects every admission policy kube-steer writes is: a ValidatingAdmissionPolicy
(admissionregistration.k8s.io/v1, GA since Kubernetes 1.30) and the binding that denies what
it does not validate. What differs between the policies (what they match, their variables and
validations) is passed in; the rest is the same for all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from steer.core.infrastructure import exempt_cel
from steer.core.policy import Policy
from steer.core.steering import excluded_namespace_list as excluded_namespaces

API_VERSION = "admissionregistration.k8s.io/v1"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

Json = dict[str, Any]


def object_metadata(policy: Policy, name: str) -> Json:
    """The metadata of every admission object made from `policy`: its name, the project's
    part-of label, and the policy version it was made from."""
    return {
        "name": name,
        "labels": {"app.kubernetes.io/part-of": "kube-steer"},
        "annotations": {policy.label_key("policy-version"): policy.version},
    }


def resource_rule(
    operations: Sequence[str], resources: Sequence[str], scope: str = "Namespaced"
) -> Json:
    """One `matchConstraints.resourceRules` entry of the core API group (v1)."""
    return {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": list(operations),
        "resources": list(resources),
        "scope": scope,
    }


def pods_constraints(policy: Policy, rules: Sequence[Json]) -> Json:
    """`matchConstraints` for pod requests in every namespace the webhook validates."""
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": NAMESPACE_NAME_LABEL,
                    "operator": "NotIn",
                    "values": list(excluded_namespaces(policy)),
                }
            ]
        },
        "resourceRules": list(rules),
        "matchPolicy": "Equivalent",
    }


def not_infrastructure(policy: Policy) -> list[Json]:
    """DaemonSet pods (node-exporter, CNI, CSI, GPU operator: `operator: Exists` tolerations)
    and mirror pods are infrastructure: never refused."""
    return [{"name": "not-infrastructure", "expression": f"!({exempt_cel(policy)})"}]


def policy_and_binding(
    policy: Policy,
    name: str,
    *,
    match_constraints: Json,
    match_conditions: list[Json],
    variables: list[Json],
    validations: list[Json],
) -> tuple[Json, Json]:
    """A ValidatingAdmissionPolicy and the binding that denies what it does not validate, both
    named `name` and annotated with the policy version they were made from."""
    metadata = object_metadata(policy, name)
    vap: Json = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": dict(metadata),
        "spec": {
            # Fail: an expression error (never expected) refuses the request rather than let
            # through what the rules guard (a reserved toleration, a forged pod, a node write).
            "failurePolicy": "Fail",
            "matchConstraints": match_constraints,
            "matchConditions": match_conditions,
            "variables": variables,
            "validations": validations,
        },
    }
    binding: Json = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": dict(metadata),
        # The scope again: the apiserver applies a policy only where its constraints and its
        # binding's both match, and the binding is the install's, which no kube-steer
        # identity may edit (docs/security.md).
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": match_constraints,
        },
    }
    return vap, binding
