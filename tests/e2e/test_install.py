"""The kustomize install on a real control plane: render, apply, RBAC, fail-open, and
docs/install.md run verbatim.

The module has a control plane of its own whose Service ClusterIPs are loopback addresses, so
`steer webhook serve` and `steer scorer run` from this checkout play the pods on their
Services' ClusterIPs with their ServiceAccounts' tokens (tests/e2e/install_support.py says
how). The steps of docs/install.md that wait for or talk to running pods (`rollout status`,
`kubectl steer`) are replaced by the equivalent there, each named in `INSTEAD` below; every
other command of the page runs as written.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from kubernetes import client

from kits.control_plane import ControlPlane
from kits.prometheus_server import PrometheusServer
from kits.service_processes import security_policy_documents
from kits.waiting import wait_until
from steer.core.admission import ValidationPlan, validate_pod
from steer.core.policy import Policy, parse_policy
from steer.core.steering import condition_key, tenant_for, trace_annotation_key
from tests.e2e import rbac_use
from tests.e2e.install_support import (
    HELM_SECTION,
    MANIFESTS,
    NODES,
    NS,
    PAUSE,
    ROOT,
    Installation,
    controller_stopped,
    doc_commands,
    exists_node,
    explain_through_plugin,
    kubectl,
    loopback_plane,
    missing_commands,
    no_pods_here,
    rolled_out,
    scorer_stopped,
    scraped_nodes,
    shell,
    shell_env,
    split_section,
    start_controller,
    start_scorer,
    start_webhook,
    steered_and_bound,
    try_shell,
    webhook_stopped,
)
from tests.e2e.privilege_support import check_no_identity_widens_its_reach

COMPONENTS = ("scheduler-profiles", "cert-manager", "prometheus-operator", "network-policy")
INSTALL_DOC = ROOT / "docs" / "install.md"
OPERATOR_CRDS = Path(__file__).parent / "fixtures" / "operator-crds.yaml"
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"


# --- the module's control plane ------------------------------------------------------------------


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with loopback_plane(tmp_path_factory.mktemp("install-plane")) as started:
        yield started


@pytest.fixture(scope="module")
def api(plane: ControlPlane) -> client.ApiClient:
    return plane.api_client()


def render(plane: ControlPlane, workdir: Path, components: Sequence[str]) -> list[dict[str, Any]]:
    """`kubectl kustomize` of an overlay of manifests/ listing `components`."""
    overlay = workdir / ("overlay-" + ("-".join(components) or "base"))
    overlay.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [base],
                "components": [f"{base}/components/{c}" for c in components],
            }
        )
    )
    return [d for d in yaml.safe_load_all(kubectl(plane, "kustomize", str(overlay))) if d]


def install_base(plane: ControlPlane) -> None:
    kubectl(plane, "apply", "-k", str(MANIFESTS))
    no_pods_here(plane)


def namespace(plane: ControlPlane, labels: Mapping[str, str] | None = None) -> str:
    name = f"inst-{uuid.uuid4().hex[:6]}"
    plane.ensure_namespace(name, labels)
    return name


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": PAUSE}],
            **spec,
        },
    }


def create(api: client.ApiClient, ns: str, body: Mapping[str, Any], dry_run: bool = False) -> Any:
    kwargs = {"dry_run": "All"} if dry_run else {}
    made = client.CoreV1Api(api).create_namespaced_pod(ns, body, **kwargs)
    return api.sanitize_for_serialization(made)


def refusal(api: client.ApiClient, ns: str, body: Mapping[str, Any]) -> str | None:
    """None when a dry-run create is admitted, else the apiserver's message."""
    try:
        create(api, ns, body, dry_run=True)
    except client.ApiException as exc:
        return str(json.loads(exc.body)["message"])
    return None


# --- 1. render and server-side dry run -----------------------------------------------------------


@pytest.mark.parametrize(
    "components",
    [(), *((c,) for c in COMPONENTS), COMPONENTS],
    ids=["base", *COMPONENTS, "all"],
)
def test_the_base_and_each_component_render_and_pass_a_server_side_dry_run(
    plane: ControlPlane, tmp_path: Path, components: tuple[str, ...]
) -> None:
    docs = render(plane, tmp_path, components)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    base = {
        ("Namespace", NS),
        ("ServiceAccount", "steer-scorer"),
        ("ServiceAccount", "steer-controller"),
        ("ServiceAccount", "steer-webhook"),
        ("Deployment", "steer-scorer"),
        ("Deployment", "steer-controller"),
        ("ValidatingAdmissionPolicy", "steer-guard-webhook-configurations"),
        ("ValidatingAdmissionPolicy", "steer-guard-secrets"),
        ("ValidatingAdmissionPolicy", "steer-scorer-node-writes"),
        ("ValidatingAdmissionPolicyBinding", "steer-security"),
        ("ValidatingAdmissionPolicyBinding", "steer-budget"),
        ("Deployment", "steer-webhook"),
        ("Service", "steer-scorer"),
        ("Service", "steer-webhook"),
        ("ConfigMap", "steer-policy"),
        ("MutatingWebhookConfiguration", "steer-webhook"),
        ("ValidatingWebhookConfiguration", "steer-webhook"),
    }
    assert base <= kinds
    # The settings ConfigMap is read by kustomize only; nothing fails closed.
    assert ("ConfigMap", "steer-settings") not in kinds
    assert not any(k == "ValidatingWebhookConfiguration" and n != "steer-webhook" for k, n in kinds)
    images = {
        c["image"]
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["namespace"] == NS
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"kube-steer:0.3.0"}
    policy_map = next(d for d in docs if d["metadata"]["name"] == "steer-policy")
    policy = parse_policy(policy_map["data"]["policy.yaml"])
    assert policy.spec.scheduler_profiles.installed is ("scheduler-profiles" in components)
    if "cert-manager" in components:
        for d in docs:
            if d["kind"].endswith("WebhookConfiguration"):
                assert d["metadata"]["annotations"] == {
                    "cert-manager.io/inject-ca-from": "kube-steer/steer-webhook"
                }

    # CRDs of the operators first (minimal schemas), and the namespace for real: a dry run
    # does not create it, and namespaced objects need it.
    kubectl(plane, "apply", "-f", str(OPERATOR_CRDS))
    kubectl(plane, "wait", "--for=condition=Established", "-f", str(OPERATOR_CRDS))
    plane.ensure_namespace(NS)
    text = yaml.safe_dump_all(docs)
    out = kubectl(
        plane, "apply", "--server-side", "--dry-run=server", "--field-manager=e2e", "-f", "-",
        input=text,
    )  # fmt: skip
    assert out.count("(server dry run)") == len(docs), out


def test_promql_of_the_alerting_rules_is_accepted_by_prometheus(
    plane: ControlPlane, tmp_path: Path
) -> None:
    promtool = shutil.which("promtool")
    # .ci/run installs it (Debian package prometheus): a missing promtool is a broken setup.
    assert promtool is not None, "promtool (Debian package prometheus) is not installed"
    # The alerts and the recording rules (the core-power slope), each a PrometheusRule.
    rules = [
        d
        for d in render(plane, tmp_path, ("prometheus-operator",))
        if d["kind"] == "PrometheusRule"
    ]
    assert {r["metadata"]["name"] for r in rules} >= {"kube-steer-recording"}, rules
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [g for r in rules for g in r["spec"]["groups"]]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# --- 2. applied for real: RBAC and the admission configurations ------------------------------------


@dataclass(frozen=True)
class Access:
    verb: str
    resource: str
    namespace: str | None = None
    subresource: str | None = None
    group: str = ""
    name: str | None = None

    def __str__(self) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {what}{named}{where}"


COORD = "coordination.k8s.io"
STEER = "kube-steer.github.io"
ADMISSION = "admissionregistration.k8s.io"
# What each process's code does with the API (scorer/cycle/writer.py, bindings.py, leader.py;
# controller/; webhook/namespaces.py), and what none may do.
SCORER_MAY = [
    Access("list", "nodes"),
    Access("watch", "nodes"),
    Access("patch", "nodes"),
    Access("patch", "nodes", subresource="status"),
    Access("get", "pods", namespace="team-a"),
    Access("list", "pods"),
    Access("watch", "pods"),
    Access("get", "namespaces"),
    Access("list", "namespaces"),
    Access("list", "events", namespace="team-a"),
    Access("create", "events", namespace="team-a"),
    Access("list", "endpointslices", namespace=NS, group="discovery.k8s.io"),
    Access("create", "leases", namespace=NS, group=COORD),
    Access("get", "leases", namespace=NS, group=COORD, name="steer-scorer"),
    Access("update", "leases", namespace=NS, group=COORD, name="steer-scorer"),
    Access("patch", "steeringpolicies", subresource="status", group=STEER),
]
CONTROLLER_MAY = [
    Access("create", "leases", namespace=NS, group=COORD),
    Access("get", "leases", namespace=NS, group=COORD, name="steer-controller"),
    Access("update", "leases", namespace=NS, group=COORD, name="steer-controller"),
    Access("patch", "steeringpolicies", subresource="status", group=STEER),
    *(
        Access(verb, "validatingadmissionpolicies", group=ADMISSION, name=name)
        for name in ("steer-security", "steer-budget")
        for verb in ("get", "patch", "create")
    ),
    # The webhook's certificate, renewed by the leader (manifests/controller/webhook-certs.yaml).
    Access("create", "secrets", namespace=NS),
    Access("list", "endpointslices", namespace=NS, group="discovery.k8s.io"),
    *(
        Access(verb, "secrets", namespace=NS, name=secret)
        for secret in ("steer-webhook-tls", "steer-webhook-ca")
        for verb in ("get", "update")
    ),
    Access("get", "services", namespace=NS, name="steer-webhook"),
    *(
        Access(verb, kind, group=ADMISSION, name="steer-webhook")
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        for verb in ("get", "patch")
    ),
]
# All read the SteeringPolicy (`--policy-resource`); the scorer and the controller write its
# status (each its own fields).
POLICY_READ = [Access(verb, "steeringpolicies", group=STEER) for verb in ("get", "list", "watch")]
SCORER_MAY += POLICY_READ
CONTROLLER_MAY += POLICY_READ
WEBHOOK_MAY = [Access("list", "namespaces"), Access("watch", "namespaces"), *POLICY_READ]
NOBODY_MAY = [
    Access("get", "secrets", namespace=NS),
    Access("get", "secrets", namespace=NS, name="another-secret"),
    Access("update", "secrets", namespace=NS, name="another-secret"),
    Access("list", "secrets"),
    Access("watch", "secrets", namespace=NS),
    Access("delete", "secrets", namespace=NS, name="steer-webhook-ca"),
    Access("create", "secrets", namespace="team-a"),
    Access("create", "pods", namespace="team-a", subresource="exec"),
    Access("get", "nodes"),  # the scorer reads nodes from its watch, even after a conflict
    Access("delete", "nodes"),
    Access("update", "nodes"),
    Access("create", "pods", namespace="team-a"),
    Access("delete", "pods", namespace="team-a"),
    Access("create", "pods", namespace="team-a", subresource="eviction"),
    Access("update", "configmaps", namespace=NS),
    Access("patch", "namespaces"),
    Access("update", "leases", namespace=NS, group=COORD, name="kube-scheduler"),
    Access("patch", "mutatingwebhookconfigurations", group=ADMISSION),
    Access("patch", "validatingwebhookconfigurations", group=ADMISSION, name="another"),
    Access("get", "services", namespace=NS, name="steer-scorer"),
    Access("patch", "steeringpolicies", group=STEER),
    Access("update", "steeringpolicies", group=STEER),
    Access("create", "steeringpolicies", group=STEER),
    Access("delete", "steeringpolicies", group=STEER),
    # The scope of the admission policies and the guards: the install's alone.
    *(
        Access(verb, kind, group=ADMISSION, name=name)
        for kind, name in (
            ("validatingadmissionpolicybindings", "steer-security"),
            ("validatingadmissionpolicybindings", "steer-budget"),
            ("mutatingadmissionpolicybindings", "steer-mutation"),
            ("validatingadmissionpolicies", "steer-scorer-node-writes"),
            ("validatingadmissionpolicybindings", "steer-scorer-node-writes"),
            ("validatingadmissionpolicies", "steer-guard-webhook-configurations"),
            ("validatingadmissionpolicies", "steer-guard-secrets"),
            ("validatingadmissionpolicybindings", "steer-guard-secrets"),
        )
        for verb in ("create", "patch", "update", "delete")
    ),
    # A webhook-only install: nothing about MutatingAdmissionPolicies.
    Access("get", "mutatingadmissionpolicies", group=ADMISSION, name="steer-mutation"),
    Access("patch", "mutatingadmissionpolicies", group=ADMISSION, name="steer-mutation"),
    Access("create", "validatingadmissionpolicies", group=ADMISSION, name="another"),
    Access("list", "validatingadmissionpolicies", group=ADMISSION),
]


def allowed(api: client.ApiClient, account: str, access: Access) -> bool:
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{NS}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}"],
                "resourceAttributes": {
                    k: v
                    for k, v in {
                        "verb": access.verb,
                        "resource": access.resource,
                        "subresource": access.subresource,
                        "group": access.group,
                        "namespace": access.namespace,
                        "name": access.name,
                    }.items()
                    if v is not None
                },
            },
        }
    )
    return bool(review.status.allowed)


def test_each_service_account_can_do_its_job_and_nothing_more(
    plane: ControlPlane, api: client.ApiClient
) -> None:
    install_base(plane)
    accounts = (
        ("steer-scorer", SCORER_MAY),
        ("steer-controller", CONTROLLER_MAY),
        ("steer-webhook", WEBHOOK_MAY),
    )
    for account, may in accounts:
        others = [a for a in SCORER_MAY + CONTROLLER_MAY + WEBHOOK_MAY if a not in may]
        for access in may:
            assert allowed(api, account, access), f"{account} must be allowed to {access}"
        for access in NOBODY_MAY + others:
            assert not allowed(api, account, access), f"{account} must not {access}"
    # The same answer through kubectl, as the docs would check it.
    who = f"--as=system:serviceaccount:{NS}:steer-scorer"
    assert plane.kubectl("auth", "can-i", "patch", "nodes", who).strip() == "yes"
    denied = plane.kubectl("auth", "can-i", "get", "secrets", "-n", NS, who, check=False)
    assert denied.strip() == "no"


def test_no_kube_steer_identity_can_widen_its_reach(plane: ControlPlane) -> None:
    """Each ServiceAccount of kube-steer, with its own token, tries what none may do (admission
    objects matching kube-system or kube-steer, a webhook's clientConfig, rules,
    namespaceSelector or failurePolicy, a guard, a node key outside the prefixes, another
    Secret): every attempt is refused, by RBAC or by a guard naming what it refuses. The
    controller may still set caBundle."""
    install_base(plane)
    check_no_identity_widens_its_reach(plane)


def fail_open_count(plane: ControlPlane, webhook: str) -> float:
    """`apiserver_admission_webhook_fail_open_count` of one webhook: calls that failed and
    were ignored (failurePolicy Ignore), counted by the apiserver itself."""
    pki = plane.pki_dir
    with requests.Session() as session:
        session.trust_env = False
        text = session.get(
            f"{plane.url}/metrics",
            verify=str(plane.ca_file),
            cert=(str(pki / "admin.crt"), str(pki / "admin.key")),
            timeout=10,
        ).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("apiserver_admission_webhook_fail_open_count{")
        and f'name="{webhook}"' in line
    )


def test_with_the_webhook_down_pods_are_created_and_the_admission_policy_still_denies(
    plane: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    """The installed configurations point at the steer-webhook Service, which nothing serves
    here: the webhook is down. Measured through the apiserver: pods are created in namespaces
    that are not opted in (and, unsteered, in opted-in ones); the apiserver counts the calls
    it ignored. The example policy's security rule, applied as its ValidatingAdmissionPolicy,
    still refuses a pod tolerating the reserved taint."""
    install_base(plane)
    plain = namespace(plane)
    opted_in = namespace(plane, {"kube-steer.github.io/enabled": "true"})
    wait_until(
        "pods are admitted",
        lambda: refusal(api, plain, pod("probe")) is None,
        timeout=30,
        interval=0.2,
    )

    before = fail_open_count(plane, "validate.pods.kube-steer.github.io")
    made = create(api, plain, pod("plain"))
    assert made["spec"]["schedulerName"] == "default-scheduler"
    after = fail_open_count(plane, "validate.pods.kube-steer.github.io")
    assert after > before  # the webhook was called, failed, and was ignored
    made = create(api, opted_in, pod("unsteered"))
    assert trace_annotation_key(parse_policy(EXAMPLE_POLICY.read_text())) not in (
        made["metadata"].get("annotations") or {}
    )
    assert fail_open_count(plane, "mutate.pods.kube-steer.github.io")

    policy = parse_policy(EXAMPLE_POLICY.read_text())
    unhealthy = policy.taint_rule("unhealthy")
    reserved = [{"key": condition_key(policy, unhealthy), "operator": "Exists"}]
    kubectl(plane, "apply", "-f", "-", input=security_policy_documents(EXAMPLE_POLICY))
    try:
        for ns in (plain, opted_in):
            message = wait_until(
                "the admission policy is in force",
                lambda ns=ns: refusal(api, ns, pod("reserved", tolerations=reserved)),
                timeout=30,
                interval=0.2,
            )
            assert "ValidatingAdmissionPolicy 'steer-security'" in message, message
            assert 'reserved by taint rule "unhealthy"' in message, message
        assert refusal(api, plain, pod("ok")) is None
    finally:
        kubectl(plane, "delete", "-f", "-", input=security_policy_documents(EXAMPLE_POLICY))
        for ns in (plain, opted_in):
            plane.delete_pods(ns)


def test_reapplying_the_manifests_keeps_the_ca_bundle(plane: ControlPlane) -> None:
    """The manifests carry no caBundle; the scorer's leader (or cert-manager) patches it in.
    An upgrade (`kubectl apply -k` again) must not wipe it."""
    install_base(plane)
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot checked here\n").decode()
    kinds = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
    for kind in kinds:
        patch = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]
        kubectl(plane, "patch", kind, "steer-webhook", "--type=json", f"-p={json.dumps(patch)}")
    install_base(plane)
    for kind in kinds:
        config = json.loads(kubectl(plane, "get", kind, "steer-webhook", "-o=json"))
        assert [h["clientConfig"].get("caBundle") for h in config["webhooks"]] == [bundle], kind


# --- 3. the admission policy decides as the webhook does ---------------------------------------------


def variant_policy() -> Policy:
    """The example policy with more to get wrong: two security rules, one tolerated by dept-b
    (selected by an `In` expression), and a catch-all tenant after dept-a that may tolerate
    `unhealthy` -- a namespace of dept-a matches both, and the first match (dept-a) decides."""
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    spec = doc["spec"]
    for rule in spec["taints"]:
        rule["security"] = True
    dept_a, dept_b = spec["tenants"]
    # dept-b may not use default-scheduler, so it covers opted-in namespaces only.
    dept_b["namespaceSelector"] = {
        "matchLabels": {"kube-steer.github.io/enabled": "true"},
        "matchExpressions": [{"key": "tenant", "operator": "In", "values": ["dept-b", "dept-b2"]}],
    }
    dept_b["allowedTolerations"] = ["unhealthy"]
    spec["tenants"] = [
        dept_a,
        {
            "name": "catch-all",
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "tenant", "operator": "Exists"},
                    {"key": "team", "operator": "NotIn", "values": ["blocked"]},
                ]
            },
            "allowedTolerations": ["unhealthy", "gpu-hot"],
        },
        dept_b,
    ]
    return parse_policy(yaml.safe_dump(doc))


OPT_IN = {"kube-steer.github.io/enabled": "true"}
NAMESPACE_LABELS = [
    {},
    OPT_IN,
    {"tenant": "dept-a"},
    {"tenant": "dept-a", **OPT_IN},
    {"tenant": "dept-b"},
    {"tenant": "dept-b", **OPT_IN},
    {"tenant": "dept-b2", **OPT_IN},
    {"tenant": "other"},
    {"tenant": "other", "team": "blocked"},
]


def tolerations_for(policy: Policy) -> list[list[dict[str, Any]]]:
    hot = condition_key(policy, policy.taint_rule("gpu-hot"))
    sick = condition_key(policy, policy.taint_rule("unhealthy"))
    return [
        [],
        [{"operator": "Exists"}],
        [{"operator": "Exists", "effect": "NoSchedule"}],
        [{"operator": "Exists", "effect": "NoExecute"}],
        [{"key": sick, "operator": "Exists"}],
        [{"key": sick, "value": "true"}],
        [{"key": sick, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        [{"key": sick, "operator": "Equal", "value": "false"}],
        [{"key": sick, "operator": "Exists", "effect": "PreferNoSchedule"}],
        [{"key": hot, "operator": "Exists", "effect": "PreferNoSchedule"}],
        [{"key": "example.com/other", "operator": "Exists"}, {"key": hot, "operator": "Exists"}],
        [{"key": "example.com/other", "operator": "Exists"}],
    ]


@dataclass
class Judged:
    namespace: Mapping[str, str]
    tolerations: list[dict[str, Any]]
    webhook: bool
    admission_policy: bool
    message: str | None = field(default=None)


def type_check(plane: ControlPlane, name: str) -> tuple[dict[str, Any]] | None:
    """The status controller's type check of the current generation (None until it ran)."""
    vap = json.loads(kubectl(plane, "get", "validatingadmissionpolicy", name, "-o=json"))
    status = vap.get("status") or {}
    if status.get("observedGeneration") != vap["metadata"]["generation"]:
        return None
    return (status["typeChecking"],) if "typeChecking" in status else None


@pytest.mark.parametrize("variant", ["example", "variant"])
def test_the_admission_policy_denies_exactly_what_the_webhook_security_rules_deny(
    plane: ControlPlane, api: client.ApiClient, tmp_path: Path, variant: str
) -> None:
    policy = parse_policy(EXAMPLE_POLICY.read_text()) if variant == "example" else variant_policy()
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(policy.doc.model_dump(by_alias=True, mode="json")))
    name = f"steer-security-{variant}"
    plan = ValidationPlan.from_policy(parse_policy(policy_file.read_text()))
    namespaces = {namespace(plane, labels): labels for labels in NAMESPACE_LABELS}
    plain = next(ns for ns, labels in namespaces.items() if not labels)
    wildcard = pod("probe", tolerations=[{"operator": "Exists"}])
    wait_until(
        "no admission policy in force",
        lambda: refusal(api, plain, wildcard) is None,
        timeout=30,
        interval=0.2,
    )
    kubectl(plane, "apply", "-f", "-", input=security_policy_documents(policy_file, name))
    try:
        wait_until(
            f"{name} in force",
            lambda: f"'{name}'" in (refusal(api, plain, wildcard) or ""),
            timeout=30,
            interval=0.2,
        )
        # The controller manager type-checks every expression against the Pod schema.
        (checked,) = wait_until(
            f"{name} type-checked", lambda: type_check(plane, name), timeout=30, interval=0.2
        )
        assert not checked.get("expressionWarnings"), checked
        judged = []
        for ns, labels in namespaces.items():
            tenant = tenant_for(plan.policy, labels)
            for tolerations in tolerations_for(policy):
                body = pod("judged", tolerations=tolerations)
                webhook = bool(validate_pod(plan, body, tenant, ns, scope="security"))
                message = refusal(api, ns, body)
                judged.append(Judged(labels, tolerations, webhook, message is not None, message))
        disagree = [j for j in judged if j.webhook != j.admission_policy]
        assert not disagree, "\n".join(map(str, disagree))
        # Not vacuous: both verdicts occur.
        assert {j.webhook for j in judged} == {True, False}
        for j in judged:
            if j.message is not None:
                assert "rule reserved-toleration: spec.tolerations {" in j.message, j.message
    finally:
        kubectl(plane, "delete", "-f", "-", input=security_policy_documents(policy_file, name))
        wait_until(
            f"{name} removed",
            lambda: refusal(api, plain, wildcard) is None,
            timeout=30,
            interval=0.2,
        )


def test_an_update_is_judged_only_on_the_tolerations_it_adds(
    plane: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    """As the webhook (introduced_denials): a pod admitted before the admission policy can
    still be updated; adding a reserved toleration is refused, an allowed one is not."""
    policy = parse_policy(EXAMPLE_POLICY.read_text())
    sick = condition_key(policy, policy.taint_rule("unhealthy"))
    hot = condition_key(policy, policy.taint_rule("gpu-hot"))
    core = client.CoreV1Api(api)
    ns = namespace(plane, {"tenant": "dept-a"})
    wait_until(
        "pods are admitted",
        lambda: refusal(api, ns, pod("probe")) is None,
        timeout=30,
        interval=0.2,
    )
    create(api, ns, pod("old", tolerations=[{"key": sick, "operator": "Exists"}]))
    kubectl(plane, "apply", "-f", "-", input=security_policy_documents(EXAMPLE_POLICY))
    try:
        wildcard = pod("probe", tolerations=[{"operator": "Exists"}])
        wait_until(
            "the admission policy is in force",
            lambda: refusal(api, ns, wildcard),
            timeout=30,
            interval=0.2,
        )
        core.patch_namespaced_pod("old", ns, {"metadata": {"labels": {"touched": "yes"}}})

        def add(toleration: dict[str, Any]) -> None:
            current = core.read_namespaced_pod("old", ns)
            tolerations = api.sanitize_for_serialization(current.spec.tolerations)
            core.patch_namespaced_pod(
                "old", ns, {"spec": {"tolerations": [*tolerations, toleration]}}
            )

        add({"key": hot, "operator": "Exists"})  # dept-a may tolerate gpu-hot
        with pytest.raises(client.ApiException) as refused:
            add({"key": sick, "operator": "Equal", "value": "true"})
        assert refused.value.status == 403
        assert "ValidatingAdmissionPolicy 'steer-security'" in refused.value.body
        assert (
            "{key=kube-steer.github.io/unhealthy, operator=Equal, value=true}" in refused.value.body
        )
    finally:
        kubectl(plane, "delete", "-f", "-", input=security_policy_documents(EXAMPLE_POLICY))
        plane.delete_pods(ns)


# --- 4. docs/install.md, verbatim ---------------------------------------------------------------------


POD_EXPLAIN = (
    "kubectl steer explain pod team-a/$(kubectl -n team-a get pods -l app=web "
    "-o jsonpath='{.items[0].metadata.name}')"
)


def check_explained_nodes(out: str) -> None:
    explained = json.loads(out)
    assert set(NODES) <= {n["node"] for n in explained["nodes"]}, out


def check_explained_pod(out: str) -> None:
    explained = json.loads(out)
    assert set(NODES) == {v["node"] for v in explained["allowed"]}, out


def check_audit_report(out: str) -> None:
    assert isinstance(json.loads(out), dict), out


STATUS_SCORER = "kubectl get sp starter -o jsonpath='{.status.scorer}'"
POOL_KEY = "kube-steer.github.io/pool-"


def day_two(run: Installation) -> None:
    """A week of operation the page does not walk through, once its policy runs from the
    SteeringPolicy (after step 6, before the emergency stop), so that every rule the install
    grants is used (`check_rbac_equals_use`):

    - the policy edited (`kubectl apply` of the object, as the page says) to budget team-a
      with `enforcement: scheduler` and to read the webhook's endpoint readiness: the scorer
      publishes the budget's pools in each node's status and lists the Service's
      EndpointSlices every cycle; once a namespace not opted in has burst to every node's
      size in limits, a team-a pod that fits every node but no pool stays Pending, and the
      scorer's leader writes the Event that says which rule keeps it there;
    - the CA Secret deleted (a CA thought compromised): the controller's leader rolls a new CA
      in: both CAs in every caBundle, the serving certificate updated under the new one, then
      a handshake with each endpoint of the webhook's Service before the old CA may leave.
      No pod runs behind that Service here, so the old CA stays (a TLS probe finding no
      endpoint keeps it), as it would while the webhook's pods were still rolling."""
    plane, core = run.plane, client.CoreV1Api(run.plane.api_client())
    found = json.loads(kubectl(plane, "get", "sp", "starter", "-o=json"))
    spec = found["spec"]
    spec["scoring"]["intervalSeconds"] = 5
    spec["dimensions"].append(
        {
            "name": "webhook-ready",
            "source": "kubernetes",
            "kubernetes": {
                "kind": "endpointReadiness",
                "namespace": NS,
                "service": "steer-webhook",
            },
            "unit": "percent",
            "direction": "higherIsBetter",
            "normalization": {"method": "fixed", "min": 0, "max": 100},
            "weight": 1,
        }
    )
    spec["tenants"] = [
        {
            "name": "team-a",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
            "overcommitPercent": 0,
        }
    ]
    spec["overcommit"] = {"enforcement": "scheduler"}
    edited = {
        "apiVersion": found["apiVersion"],
        "kind": found["kind"],
        "metadata": {"name": "starter"},
        "spec": spec,
    }
    kubectl(plane, "apply", "-f", "-", input=yaml.safe_dump(edited))
    kubectl(plane, "-n", NS, "delete", "secret", "steer-webhook-ca")
    generation = json.loads(kubectl(plane, "get", "sp", "starter", "-o=json"))["metadata"][
        "generation"
    ]

    def pooled() -> list[str] | None:
        nodes = [n for n in core.list_node().items if n.metadata.name in NODES]
        keys = [k for n in nodes for k in (n.status.capacity or {}) if k.startswith(POOL_KEY)]
        return keys if len({n.metadata.name for n in nodes}) == len(NODES) and keys else None

    accepted = wait_until(
        "the edited policy accepted by the scorer's leader",
        lambda: (
            sp
            if (sp := json.loads(kubectl(plane, "get", "sp", "starter", "-o=json")))
            .get("status", {})
            .get("observedGeneration")
            == generation
            else None
        ),
        timeout=60,
        interval=0.5,
    )
    assert accepted["status"]["conditions"][0]["status"] == "True", accepted["status"]
    wait_until("every node carries team-a's pools", pooled, timeout=60, interval=0.5)
    # A namespace not opted in bursts to 8 cores of limits on every node (100m requested):
    # the 0 % budget's pools have no room left, while 7.7 cores of each node stay free. So
    # a Guaranteed 1-core pod of team-a fits every node, and kube-steer's budget, not the
    # node, keeps it Pending.
    plain = namespace(plane)
    for node in NODES:
        bursting = pod(
            f"burst-{node}",
            nodeName=node,
            containers=[
                {
                    "name": "c",
                    "image": PAUSE,
                    "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "8"}},
                }
            ],
        )
        create(plane.api_client(), plain, bursting)
    wait_until(
        "the pools emptied by the burst",
        lambda: (
            all(
                (n.status.capacity or {}).get(f"{POOL_KEY}cpu") == "0"
                for n in core.list_node().items
                if n.metadata.name in NODES
            )
            or None
        ),
        timeout=60,
        interval=0.5,
    )
    one_core = {"cpu": "1", "memory": "1Gi"}
    greedy = pod(
        "over-budget",
        containers=[
            {"name": "c", "image": PAUSE, "resources": {"requests": one_core, "limits": one_core}}
        ],
    )
    made = create(plane.api_client(), "team-a", greedy)
    assert "kube-steer.github.io/trace" in made["metadata"]["annotations"]

    def blocked_event() -> Any:
        return next(
            (
                e
                for e in core.list_namespaced_event(
                    "team-a", field_selector="involvedObject.name=over-budget"
                ).items
                if e.reason == "BlockedBySteering"
            ),
            None,
        )

    try:
        event = wait_until(
            "the scorer's Event on the pod the budget keeps Pending",
            blocked_event,
            timeout=90,
            interval=1,
        )
    except Exception:  # say why before failing: the pod, the scorer, the pools
        held = core.read_namespaced_pod("over-budget", "team-a")
        assert run.scorer is not None
        print(f"over-budget: {held.status.conditions}\n{run.scorer.log(6000)}")
        print([(n.metadata.name, n.status.capacity) for n in core.list_node().items])
        raise
    print(f"day two: {event.message}")
    assert "pool" in event.message, event.message
    assert core.read_namespaced_pod("over-budget", "team-a").spec.node_name is None
    core.delete_namespaced_pod("over-budget", "team-a", grace_period_seconds=0)
    core.delete_namespace(plain)
    # The rollover: check 1 adds the new CA to the bundles, check 2 (a check interval later)
    # issues the certificate under it and probes the endpoints.
    assert run.controller is not None
    controller = run.controller
    wait_until(
        "the controller's leader probed the webhook's endpoints for the new CA",
        lambda: "the old CA stays in caBundle" in controller.log(200_000) or None,
        timeout=200,
        interval=1,
    )
    bundles = set()
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = json.loads(kubectl(plane, "get", kind, "steer-webhook", "-o=json"))
        bundles |= {h["clientConfig"]["caBundle"] for h in config["webhooks"]}
    (bundle,) = bundles
    assert base64.b64decode(bundle).count(b"BEGIN CERTIFICATE") == 2, "both CAs trusted"


# Steps of the page that need kubelets or the image, and what is done instead (the page's
# other commands run as written). A step listed here but missing from the page fails the test.
INSTEAD: dict[str, Callable[[Installation], None]] = {
    "kubectl -n kube-steer rollout status deployment/steer-controller --timeout=5m": (
        start_controller
    ),
    "kubectl -n kube-steer rollout status deployment/steer-webhook --timeout=5m": start_webhook,
    "kubectl -n kube-steer rollout status deployment/steer-scorer --timeout=5m": start_scorer,
    "kubectl steer explain nodes": lambda run: check_explained_nodes(
        explain_through_plugin(run, "kubectl steer explain nodes")
    ),
    POD_EXPLAIN: lambda run: check_explained_pod(explain_through_plugin(run, POD_EXPLAIN)),
    "kubectl steer audit report": lambda run: check_audit_report(
        explain_through_plugin(run, "kubectl steer audit report")
    ),
}
# Run as written, then what the cluster would do next.
AFTER: dict[str, Callable[[Installation], None]] = {
    "kubectl apply -k manifests/": lambda run: no_pods_here(run.plane),
    "kubectl -n kube-steer scale deployment steer-scorer --replicas=0": scorer_stopped,
    "kubectl -n kube-steer scale deployment steer-controller --replicas=0": controller_stopped,
    STATUS_SCORER: day_two,
}
# `kubectl -n kube-steer patch deployment NAME ...` (step 6): its pod would be replaced.
PATCHED = "kubectl -n kube-steer patch deployment "
# Run before the command: what goes with it. The uninstall's last command deletes the webhook's
# Deployment, so its pods, with its RBAC (the scorer and the controller were scaled to 0 before).
BEFORE: dict[str, Callable[[Installation], None]] = {
    "kubectl delete -k my-kube-steer/ --ignore-not-found": webhook_stopped,
}
# Commands that can briefly fail until a watch catches up (the webhook's namespace cache,
# the default ServiceAccount): retried, as a person would.
EVENTUALLY = ("kubectl -n team-a run steer-probe",)


@pytest.fixture
def prometheus() -> Iterator[PrometheusServer]:
    with scraped_nodes() as prom:
        yield prom


@pytest.fixture
def install_commands() -> list[str]:
    # The kustomize path: every section but the Helm one (tests/e2e/test_chart.py runs that).
    _helm, kustomize_path = split_section(INSTALL_DOC.read_text(), HELM_SECTION)
    commands = doc_commands(kustomize_path)
    missing = missing_commands(commands)
    # Every `steer` command the page runs must exist, or the page cannot run as written.
    assert not missing, f"docs/install.md runs {', '.join(missing)}, which `steer` lacks"
    return commands


def test_install_md_runs_verbatim_and_ends_with_a_steered_pod_bound(
    install_commands: list[str], plane: ControlPlane, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    commands = install_commands
    assert set(INSTEAD) | set(AFTER) | set(BEFORE) <= set(commands), (
        "docs/install.md changed: update the test"
    )
    # Step 6 moves the three processes to the SteeringPolicy.
    patched = {c.removeprefix(PATCHED).split()[0] for c in commands if c.startswith(PATCHED)}
    assert patched == {"steer-scorer", "steer-webhook", "steer-controller"}, patched
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    (workdir / "manifests").symlink_to(MANIFESTS)  # the commands run from the repository's top
    core = client.CoreV1Api(plane.api_client())
    audited_from = plane.audit_offset()
    with contextlib.ExitStack() as stack:
        run = Installation(
            plane,
            workdir,
            prometheus,
            shell_env(plane, tmp_path / "bin", tmp_path / "config"),
            stack,
        )
        stack.callback(lambda: [core.delete_node(n) for n in NODES if exists_node(core, n)])
        stack.callback(lambda: plane.delete_pods("team-a"))
        for command in commands:
            if command in INSTEAD:
                INSTEAD[command](run)
                continue
            if command in BEFORE:
                BEFORE[command](run)
            if command.startswith(EVENTUALLY):
                run.outputs[command] = wait_until(
                    command,
                    lambda command=command: try_shell(run, command),
                    timeout=30,
                    interval=0.2,
                )
            else:
                run.outputs[command] = shell(run, command)
            if command in AFTER:
                AFTER[command](run)
            if command.startswith(PATCHED):
                rolled_out(run, command.removeprefix(PATCHED).split()[0])
            check_after(run, command)

        # Uninstalled: nothing of kube-steer is left, and nodes carry none of its keys.
        with pytest.raises(client.ApiException) as gone:
            core.read_namespace(NS)
        assert gone.value.status == 404
        rbac = client.RbacAuthorizationV1Api(plane.api_client())
        assert not [
            r for r in rbac.list_cluster_role().items if r.metadata.name.startswith("steer-")
        ]
        for node in core.list_node().items:
            if node.metadata.name in NODES:
                keys = [*(node.metadata.labels or {}), *(node.metadata.annotations or {})]
                assert not [k for k in keys if k.startswith("kube-steer.github.io/")], (
                    node.metadata.name
                )
    check_rbac_equals_use(plane, plane.audit_events(since=audited_from))


def check_rbac_equals_use(plane: ControlPlane, events: list[dict[str, Any]]) -> None:
    """RBAC equals use (tests/e2e/rbac_use.py): every grant of every role the install binds to
    a kube-steer ServiceAccount was used by that account during the walk-through and its day
    two (`day_two`), and none of its requests was refused. The table (grant, first request it
    authorised) is printed."""
    rbac = client.RbacAuthorizationV1Api(plane.api_client())

    def cluster_role(name: str) -> dict[str, Any]:
        found: dict[str, Any] = plane.api_client().sanitize_for_serialization(
            rbac.read_cluster_role(name)
        )
        return found

    documents = [d for d in yaml.safe_load_all(kubectl(plane, "kustomize", str(MANIFESTS))) if d]
    used = rbac_use.uses(rbac_use.grants(documents, NS, cluster_role), events, NS)
    # A `list` whose collection the apiserver served as a streaming list instead: kept for
    # apiservers that refuse streaming lists (steer/adapters/listwatch.py falls back), named.
    streamed = {
        g: found
        for g, e in used.items()
        if e is None and (found := rbac_use.streamed_instead(g, events, NS)) is not None
    }
    print(
        f"RBAC equals use: {len(events)} audited requests of kube-steer ServiceAccounts, "
        f"{len(used)} grants, {len(streamed)} of them a list served as a streaming watch\n"
        f"{rbac_use.table(used, streamed)}"
    )
    assert {g.account for g in used} == {"steer-scorer", "steer-controller", "steer-webhook"}
    unused = sorted(f"{g.account}: {g}" for g, e in used.items() if e is None and g not in streamed)
    assert not unused, "granted but never used: " + "; ".join(unused)
    refused = [rbac_use.describe(e) for e in rbac_use.refused(events, NS)]
    assert not refused, "refused in normal operation:\n" + "\n".join(refused)


def check_after(run: Installation, command: str) -> None:
    """What each step must have achieved, read back from the apiserver."""
    plane, core = run.plane, client.CoreV1Api(run.plane.api_client())
    out = run.outputs.get(command, "")
    if command.startswith("kubectl -n team-a run steer-probe"):
        trace = json.loads(out)
        assert trace["policy"].startswith("starter@"), out
    elif command == "kubectl -n team-a rollout restart deployment/web":
        # Every pod of the workload is steered by the webhook and bound by the scheduler.
        pods = wait_until(
            "web pods steered and bound",
            lambda: steered_and_bound(core, "team-a", "app=web"),
            timeout=60,
            interval=0.2,
        )
        for p in pods:
            assert p.spec.node_name in NODES
            assert p.spec.scheduler_name == "default-scheduler"
            terms = (
                p.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
            )
            assert {e.key for t in terms for e in t.preference.match_expressions} == {
                "kube-steer.github.io/score"
            }
    elif command.startswith("kubectl -n team-a get pods"):
        assert "install-e2e-" in out and "starter@" in out, out
    elif command == "kubectl apply -k my-kube-steer/":
        # Re-applying kept the caBundle the scorer's leader set: the webhook still steers.
        probe = {
            "metadata": {"name": "again"},
            "spec": {"containers": [{"name": "c", "image": PAUSE}]},
        }
        made = create(plane.api_client(), "team-a", probe, dry_run=True)
        assert "kube-steer.github.io/trace" in made["metadata"]["annotations"]
    elif command == "kubectl delete mutatingwebhookconfiguration steer-webhook --ignore-not-found":
        probe = {
            "metadata": {"name": "after-stop"},
            "spec": {"containers": [{"name": "c", "image": PAUSE}]},
        }
        made = wait_until(
            "pods admitted as written after the emergency stop",
            lambda: (
                m
                if "kube-steer.github.io/trace"
                not in (
                    (m := create(plane.api_client(), "team-a", probe, dry_run=True))[
                        "metadata"
                    ].get("annotations")
                    or {}
                )
                else None
            ),
            timeout=30,
            interval=0.2,
        )
        assert "affinity" not in made["spec"]


def test_the_rendered_network_policy_opens_the_webhook_to_no_pod_but_the_controllers(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """Once every source reached both webhook ports; now the admission port admits only
    addresses outside the pod network (the apiserver, the kubelet) and the controller's pods (its
    leader's TLS handshakes), the metrics port those addresses and Prometheus's pods, with the
    podCIDR setting as it is edited."""
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    component = tmp_path / "manifests" / "components" / "network-policy" / "kustomization.yaml"
    component.write_text(
        component.read_text().replace("podCIDR=10.244.0.0/16", "podCIDR=172.31.0.0/16")
    )
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../manifests]\ncomponents: [../manifests/components/network-policy]\n"
    )
    documents = yaml.safe_load_all(kubectl(plane, "kustomize", str(overlay)))
    rendered = {f"{d['kind']}/{d['metadata']['name']}": d for d in documents if d}
    assert "ConfigMap/steer-network-settings" not in rendered  # local config, never applied
    policy = rendered["NetworkPolicy/steer-webhook"]
    webhook = rendered["Deployment/steer-webhook"]["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= webhook.items()
    assert "Ingress" in policy["spec"]["policyTypes"]
    outside_pods = {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["172.31.0.0/16"]}}
    prometheus = {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    sources: dict[int, list[Any]] = {}
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from"), f"a rule open to any source: {rule}"
        for port in rule["ports"]:
            sources.setdefault(port["port"], []).extend(rule["from"])
    controller = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "steer-controller"}}}
    assert sources == {8443: [outside_pods, controller], 9102: [prometheus, outside_pods]}
