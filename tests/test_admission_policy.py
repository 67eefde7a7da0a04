"""The ValidatingAdmissionPolicies (steer/core/admission_policy/): their shape.

What the CEL decides is checked where CEL runs, on the real apiserver, against the webhook's
own verdicts (tests/e2e/test_install.py); here: which objects, which pods and namespaces they
match, one validation per security rule, and the CEL text of the building blocks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.commands import main
from steer.core import mutation as mutate
from steer.core.admission_policy import admission_policies
from steer.core.admission_policy.budget import budget_admission_policy
from steer.core.admission_policy.cel import cel_string, selector_cel
from steer.core.admission_policy.node_writes import node_writes_admission_policy
from steer.core.admission_policy.security import (
    DEFAULT_NAME,
    security_admission_policy,
    security_taints,
)
from steer.core.infrastructure import exempt_cel
from steer.core.policy import LabelSelector, Policy, parse_policy
from steer.core.steering import excluded_namespace_list as excluded_namespaces
from tests.conftest import EXAMPLE_POLICY

ROOT = Path(__file__).resolve().parent.parent
STARTER_POLICY = ROOT / "manifests" / "policy" / "starter-policy.yaml"


@pytest.fixture
def policy() -> Policy:
    return parse_policy(EXAMPLE_POLICY.read_text())


def with_spec(policy_text: str, **changes: object) -> Policy:
    doc = yaml.safe_load(policy_text)
    doc["spec"].update(changes)
    return parse_policy(yaml.safe_dump(doc))


def test_a_policy_and_its_binding_deny_on_every_pod_create_and_update(policy: Policy) -> None:
    vap, binding = security_admission_policy(policy)
    assert (vap["apiVersion"], vap["kind"]) == (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
    )
    assert binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert vap["metadata"]["name"] == binding["metadata"]["name"] == DEFAULT_NAME
    # The binding holds the policy's scope again (the install's binding is what keeps it).
    assert binding["spec"] == {
        "policyName": DEFAULT_NAME,
        "validationActions": ["Deny"],
        "matchResources": vap["spec"]["matchConstraints"],
    }
    spec = vap["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule == {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["pods"],
        "scope": "Namespaced",
    }
    # The policy version travels with the objects, so `kubectl get` shows which one is live.
    key = "kube-steer.github.io/policy-version"
    assert vap["metadata"]["annotations"][key] == binding["metadata"]["annotations"][key]
    assert vap["metadata"]["annotations"][key] == policy.version


def test_it_skips_exactly_the_namespaces_the_webhook_skips(policy: Policy) -> None:
    custom = with_spec(
        EXAMPLE_POLICY.read_text(),
        projectNamespace="steer-system",
        optIn={"namespaceSelector": {}, "excludedNamespaces": ["batch", "kube-system"]},
    )
    for p in (policy, custom):
        (vap, _) = security_admission_policy(p)
        (expr,) = vap["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"]
        assert (expr["key"], expr["operator"]) == ("kubernetes.io/metadata.name", "NotIn")
        assert expr["values"] == list(excluded_namespaces(p))
        assert set(expr["values"]) == mutate.excluded_namespaces(p)
    assert excluded_namespaces(custom) == ("kube-system", "steer-system", "batch")


def test_one_validation_per_security_rule_naming_its_taint_and_allowed_tenants(
    policy: Policy,
) -> None:
    (unhealthy,) = security_taints(policy)  # gpu-hot is not a security rule
    assert (unhealthy.rule, unhealthy.key, unhealthy.value, unhealthy.effect) == (
        "unhealthy",
        "kube-steer.github.io/unhealthy",
        "true",
        "NoSchedule",
    )
    assert unhealthy.allowed_tenants == ()
    vap, _ = security_admission_policy(policy)
    (validation,) = vap["spec"]["validations"]
    assert validation["reason"] == "Forbidden"
    assert validation["expression"].startswith("!variables.tolerations.exists(t, ")
    assert "'kube-steer.github.io/unhealthy'" in validation["expression"]
    assert "'NoSchedule'" in validation["expression"]
    assert "rule reserved-toleration:" in validation["message"]
    assert "'rule reserved-toleration: spec.tolerations '" in validation["messageExpression"]

    # A tenant allowed to tolerate it short-circuits the check.
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["tenants"][1]["allowedTolerations"] = ["unhealthy"]
    allowing = parse_policy(yaml.safe_dump(doc))
    (validation,) = security_admission_policy(allowing)[0]["spec"]["validations"]
    assert validation["expression"].startswith("variables.tenant in ['dept-b'] || !")


def test_the_tenant_is_the_first_whose_selector_matches(policy: Policy) -> None:
    vap, _ = security_admission_policy(policy)
    variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
    assert list(variables) == [
        "labels",
        "tenant",
        "mayTolerate",
        "who",
        "oldTolerations",
        "tolerations",
    ]
    tenant = variables["tenant"]
    assert tenant.index("'dept-a'") < tenant.index("'dept-b'")
    assert tenant.endswith(": (''))")  # no tenant: ''
    assert "namespaceObject.metadata.labels" in variables["labels"]
    # UPDATE judges only tolerations the old pod did not have.
    assert "request.operation == 'UPDATE'" in variables["oldTolerations"]
    assert "in variables.oldTolerations" in variables["tolerations"]


def test_a_policy_without_security_rules_gets_a_policy_that_allows_everything() -> None:
    starter = parse_policy(STARTER_POLICY.read_text())
    assert security_taints(starter) == ()
    vap, binding = security_admission_policy(starter, "other")
    assert vap["spec"]["validations"] == [
        {"expression": "true", "message": "policy starter has no security taint rules"}
    ]
    assert vap["spec"]["variables"] == []
    assert binding["spec"]["policyName"] == "other"


@pytest.mark.parametrize(
    ("selector", "cel"),
    [
        ({}, "true"),
        ({"matchLabels": {"tenant": "a"}}, "('tenant' in L && L['tenant'] == 'a')"),
        (
            {"matchExpressions": [{"key": "k", "operator": "In", "values": ["x", "y"]}]},
            "('k' in L && L['k'] in ['x', 'y'])",
        ),
        (
            {"matchExpressions": [{"key": "k", "operator": "NotIn", "values": ["x"]}]},
            "(!('k' in L) || !(L['k'] in ['x']))",
        ),
        ({"matchExpressions": [{"key": "k", "operator": "Exists"}]}, "'k' in L"),
        ({"matchExpressions": [{"key": "k", "operator": "DoesNotExist"}]}, "!('k' in L)"),
        (
            {
                "matchLabels": {"a": "1"},
                "matchExpressions": [{"key": "b", "operator": "Exists"}],
            },
            "('a' in L && L['a'] == '1') && 'b' in L",
        ),
    ],
)
def test_label_selectors_in_cel(selector: dict[str, object], cel: str) -> None:
    assert selector_cel(LabelSelector.model_validate(selector), "L") == cel


def test_cel_strings_are_escaped() -> None:
    assert cel_string("it's") == "'it\\'s'"
    assert cel_string("a\\b") == "'a\\\\b'"


def test_the_cli_prints_every_policy_and_binding_as_yaml(
    capsys: pytest.CaptureFixture[str], policy: Policy
) -> None:
    assert main(["policy", "admission-policy", "-f", str(EXAMPLE_POLICY)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# ValidatingAdmissionPolicies for ")
    docs = list(yaml.safe_load_all(out))
    # The validating policies; the mutating one only on request (tests/test_mutating_policy.py).
    assert docs == admission_policies(policy)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ValidatingAdmissionPolicy", "steer-security"),
        ("ValidatingAdmissionPolicyBinding", "steer-security"),
        ("ValidatingAdmissionPolicy", "steer-budget"),
        ("ValidatingAdmissionPolicyBinding", "steer-budget"),
        ("ValidatingAdmissionPolicy", "steer-scorer-node-writes"),
        ("ValidatingAdmissionPolicyBinding", "steer-scorer-node-writes"),
    ]
    assert (
        main(["policy", "admission-policy", "-f", str(EXAMPLE_POLICY), "--scorer-user", "me"]) == 0
    )
    writes = list(yaml.safe_load_all(capsys.readouterr().out))[4]
    assert writes["spec"]["matchConditions"][0]["expression"] == "request.userInfo.username == 'me'"


def test_every_policy_skips_infrastructure_and_fails_closed(policy: Policy) -> None:
    for doc in admission_policies(policy):
        if doc["kind"] != "ValidatingAdmissionPolicy":
            continue
        assert doc["spec"]["failurePolicy"] == "Fail"
        if doc["metadata"]["name"] != "steer-scorer-node-writes":
            assert doc["spec"]["matchConditions"] == [
                {"name": "not-infrastructure", "expression": f"!({exempt_cel(policy)})"}
            ]


def test_the_budget_policy_judges_creation_and_resize_only(policy: Policy) -> None:
    """Judging every pod update would block label and finalizer changes of pods admitted under
    an older policy; only a resize can move a pod's limits after admission."""
    vap, binding = budget_admission_policy(policy)
    rules = vap["spec"]["matchConstraints"]["resourceRules"]
    assert [(r["resources"], r["operations"]) for r in rules] == [
        (["pods"], ["CREATE"]),
        (["pods/resize"], ["UPDATE"]),
    ]
    text = str(vap["spec"]["validations"])
    for name in ("kube-steer.github.io/pool-cpu", "kube-steer.github.io/budget-0pct"):
        assert name in text
    assert binding["spec"] == {
        "policyName": "steer-budget",
        "validationActions": ["Deny"],
        "matchResources": vap["spec"]["matchConstraints"],
    }
    labels = parse_policy(
        EXAMPLE_POLICY.read_text().replace("enforcement: scheduler", "enforcement: labels")
    )
    (always,) = budget_admission_policy(labels)[0]["spec"]["validations"]
    assert always["expression"] == "true"


def test_the_node_writes_policy_owns_the_prefixes_and_nothing_else(policy: Policy) -> None:
    vap, _ = node_writes_admission_policy(policy, also_prefixes=["old.example/steer-"])
    text = str(vap["spec"]["validations"])
    for prefix in (
        "kube-steer.github.io/",
        "kube-steer.github.io/",
        "steer.io/",
        "old.example/steer-",
    ):
        assert repr(prefix) in text
    assert vap["spec"]["matchConditions"][0]["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:kube-steer:steer-scorer'"
    )
    parts = [v["message"].rsplit("Node's ", 1)[1] for v in vap["spec"]["validations"]]
    assert parts == [
        "labels",
        "annotations",
        "taints",
        "spec",
        "status.capacity and status.allocatable",
        "status",
        "metadata",
    ]


def test_the_cli_refuses_an_invalid_policy(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kube-steer.github.io/v1alpha1\nkind: SteeringPolicy\nspec: {}\n")
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "policy", "admission-policy", "-f", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "spec.dimensions: required field is missing" in done.stderr
