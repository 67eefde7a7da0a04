"""The kustomize install on a real control plane: render, apply, RBAC, fail-open, and
docs/install.md run verbatim.

The module has a control plane of its own (started here, ~10 s), because installing means
cluster-wide objects named as in production (webhook configurations, ClusterRoles, the
kube-steer namespace) that the session's shared control plane must not see. Its Service
ClusterIP range is a /16 inside 127.0.0.0/8: every ClusterIP is then a loopback address of this
machine, and a local process listening on a Service's ClusterIP and port is reached by the
apiserver exactly as a pod behind that Service would be. So the installed admission
configurations are used unmodified (clientConfig.service, caBundle from `steer certs rotate`,
TLS verified against the Service's DNS name), and "images replaced by local processes" means:
`steer webhook serve` and `steer scorer run` from this checkout, on their Services' ClusterIPs,
with their ServiceAccounts' tokens and the policy from the installed ConfigMap.

No kubelet runs here: pods are bound but never run. A ResourceQuota of zero pods in kube-steer
stands in for "the image does not run", so Deployments there never make pods that nothing could
stop, and the steps of docs/install.md that wait for or talk to running pods
(`rollout status`, `port-forward`) are replaced by the equivalent here, each named in
`INSTEAD` below; every other command of the page runs as written.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cryptography import x509
from kubernetes import client

from kits.control_plane import ControlPlane
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.service_processes import (
    RunningScorer,
    RunningWebhook,
    ServingCertificate,
    running_scorer,
    running_webhook,
    security_policy_documents,
)
from kits.synthetic_exporter import SyntheticCluster
from kits.waiting import wait_until
from steer.cli import build_parser
from steer.core.admission import ValidationPlan, validate_pod
from steer.core.policy import Policy, parse_policy
from steer.core.steering import condition_key, tenant_for, trace_annotation_key

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
COMPONENTS = ("scheduler-profiles", "cert-manager", "prometheus-operator", "network-policy")
INSTALL_DOC = ROOT / "docs" / "install.md"
OPERATOR_CRDS = Path(__file__).parent / "fixtures" / "operator-crds.yaml"
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
NS = "kube-steer"
NODES = ("install-e2e-1", "install-e2e-2", "install-e2e-3")
PAUSE = "registry.k8s.io/pause:3.10"


# --- the module's control plane ------------------------------------------------------------------


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    second_octet = random.randint(64, 250)  # two runs side by side rarely share a range
    with ControlPlane.start(
        tmp_path_factory.mktemp("install-plane"),
        controller_manager=True,
        apiserver_args=[f"--service-cluster-ip-range=127.{second_octet}.0.0/16"],
    ) as started:
        yield started


@pytest.fixture(scope="module")
def api(plane: ControlPlane) -> client.ApiClient:
    return plane.api_client()


def kubectl(plane: ControlPlane, *args: str, input: str | None = None) -> str:
    return plane.kubectl(*args, input=input)


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


def no_pods_here(plane: ControlPlane) -> None:
    """Nothing runs pods here, so none may be made in kube-steer (they could never stop)."""
    kubectl(
        plane,
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "e2e-no-kubelet", "namespace": NS},
                "spec": {"hard": {"pods": "0"}},
            }
        ),
    )
    # Pods made before the quota are not bound yet (nodes come later): they go at once.
    plane.delete_pods(NS)


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
        ("ServiceAccount", "steer-webhook"),
        ("Deployment", "steer-scorer"),
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
    (rules,) = [
        d
        for d in render(plane, tmp_path, ("prometheus-operator",))
        if d["kind"] == "PrometheusRule"
    ]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rules["spec"]["groups"]}))
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
# What each service's code does with the API (scorer/writer.py, bindings.py, leader.py;
# webhook/namespaces.py), and what neither may do.
SCORER_MAY = [
    Access("get", "nodes"),
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
    Access("create", "leases", namespace=NS, group=COORD),
    Access("get", "leases", namespace=NS, group=COORD, name="steer-scorer"),
    Access("update", "leases", namespace=NS, group=COORD, name="steer-scorer"),
    Access("patch", "steeringpolicies", subresource="status", group=STEER),
]
# Both read the SteeringPolicy (`--policy-resource`); only the scorer writes its status.
POLICY_READ = [Access(verb, "steeringpolicies", group=STEER) for verb in ("get", "list", "watch")]
SCORER_MAY += POLICY_READ
WEBHOOK_MAY = [Access("list", "namespaces"), Access("watch", "namespaces"), *POLICY_READ]
NOBODY_MAY = [
    Access("get", "secrets", namespace=NS),
    Access("list", "secrets"),
    Access("create", "pods", namespace="team-a", subresource="exec"),
    Access("delete", "nodes"),
    Access("update", "nodes"),
    Access("create", "pods", namespace="team-a"),
    Access("delete", "pods", namespace="team-a"),
    Access("create", "pods", namespace="team-a", subresource="eviction"),
    Access("update", "configmaps", namespace=NS),
    Access("patch", "namespaces"),
    Access("update", "leases", namespace=NS, group=COORD, name="kube-scheduler"),
    Access("patch", "mutatingwebhookconfigurations", group="admissionregistration.k8s.io"),
    Access("patch", "steeringpolicies", group=STEER),
    Access("update", "steeringpolicies", group=STEER),
    Access("create", "steeringpolicies", group=STEER),
    Access("delete", "steeringpolicies", group=STEER),
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
    for account, may in (("steer-scorer", SCORER_MAY), ("steer-webhook", WEBHOOK_MAY)):
        others = [a for a in SCORER_MAY + WEBHOOK_MAY if a not in may]
        for access in may:
            assert allowed(api, account, access), f"{account} must be allowed to {access}"
        for access in NOBODY_MAY + others:
            assert not allowed(api, account, access), f"{account} must not {access}"
    # The same answer through kubectl, as the docs would check it.
    who = f"--as=system:serviceaccount:{NS}:steer-scorer"
    assert plane.kubectl("auth", "can-i", "patch", "nodes", who).strip() == "yes"
    denied = plane.kubectl("auth", "can-i", "get", "secrets", "-n", NS, who, check=False)
    assert denied.strip() == "no"


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
    """The manifests carry no caBundle; `steer certs rotate` (or cert-manager) patches it in.
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


def doc_commands(markdown: str) -> list[str]:
    """Each shell command of the page's `sh` blocks, in order: continuation lines joined,
    heredocs kept whole, comment lines dropped."""
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", markdown, flags=re.S | re.M):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            command = line
            while command.endswith("\\") and i < len(lines):
                command = command[:-1] + lines[i].strip()
                i += 1
            heredoc = re.search(r"<<'?(\w+)'?", command)
            if heredoc:
                end = heredoc.group(1)
                while i < len(lines):
                    command += "\n" + lines[i]
                    i += 1
                    if lines[i - 1] == end:
                        break
            commands.append(command)
    return commands


@dataclass
class Installation:
    """The state the replaced steps build up while the page runs."""

    plane: ControlPlane
    workdir: Path
    prom: PrometheusServer
    shell_env: dict[str, str]
    stack: contextlib.ExitStack
    webhook: RunningWebhook | None = None
    scorer: RunningScorer | None = None
    outputs: dict[str, str] = field(default_factory=dict)

    def scratch(self, name: str) -> Path:
        """A folder for what the test makes (outside the checkout the commands run in)."""
        folder = self.workdir.parent / name
        folder.mkdir(exist_ok=True)
        return folder

    def cluster_ip(self, service: str) -> str:
        return kubectl(
            self.plane, "-n", NS, "get", "service", service, "-o=jsonpath={.spec.clusterIP}"
        )

    def account_kubeconfig(self, account: str) -> Path:
        """A kubeconfig holding a token of the ServiceAccount, as the pod would mount it."""
        token = kubectl(self.plane, "-n", NS, "create", "token", account, "--duration=1h").strip()
        ca = base64.b64encode(self.plane.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.plane.url, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": account}}],
            "current-context": "e2e",
        }
        path = self.scratch("accounts") / f"{account}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def installed_policy(self) -> Path:
        data = kubectl(self.plane, "-n", NS, "get", "configmap", "steer-policy", "-o=json")
        path = self.scratch("policy") / "installed-policy.yaml"
        path.write_text(json.loads(data)["data"]["policy.yaml"])
        return path


def _bindable(port: int, host: str) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def start_webhook(run: Installation) -> None:
    """`rollout status deployment/steer-webhook`: the webhook, from this checkout, on its
    Service's ClusterIP:443 with the certificate `steer certs rotate` put in its Secret."""
    ip = run.cluster_ip("steer-webhook")
    # CI runs as root; elsewhere run `make e2e` as root or with CAP_NET_BIND_SERVICE.
    assert _bindable(443, ip), (
        "binding port 443 (the Service's port) needs root or CAP_NET_BIND_SERVICE"
    )
    secret = json.loads(
        kubectl(run.plane, "-n", NS, "get", "secret", "steer-webhook-tls", "-o=json")
    )
    folder = run.scratch("mounted-tls")
    folder.chmod(0o700)
    for key in ("tls.crt", "tls.key"):
        (folder / key).write_bytes(base64.b64decode(secret["data"][key]))
    # The CA the apiserver was given: every webhook of both configurations carries it.
    bundles = set()
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = json.loads(kubectl(run.plane, "get", kind, "steer-webhook", "-o=json"))
        bundles |= {h["clientConfig"].get("caBundle") for h in config["webhooks"]}
    (bundle,) = bundles
    assert bundle, "steer certs rotate left a webhook without caBundle"
    (folder / "ca.crt").write_bytes(base64.b64decode(bundle))
    ca = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    served = x509.load_pem_x509_certificate((folder / "tls.crt").read_bytes())
    served.verify_directly_issued_by(ca)
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "steer-webhook.kube-steer.svc" in names.get_values_for_type(x509.DNSName)
    run.webhook = run.stack.enter_context(
        running_webhook(
            run.plane,
            run.installed_policy(),
            run.scratch("webhook"),
            listen=f"{ip}:443",
            certificate=ServingCertificate(
                folder / "tls.crt", folder / "tls.key", folder / "ca.crt"
            ),
            kubeconfig=run.account_kubeconfig("steer-webhook"),
            workers=1,
        )
    )


def start_scorer(run: Installation) -> None:
    """`rollout status deployment/steer-scorer`: the nodes appear (no kubelet registers them),
    then the scorer, from this checkout, on its Service's ClusterIP:8080, as its
    ServiceAccount, scoring from a Prometheus on loopback (the policy's URL is in-cluster)."""
    for name in NODES:
        run.plane.add_node(name, cpu="8", memory="32Gi", zone="zone-a")
    run.scorer = run.stack.enter_context(
        running_scorer(
            run.plane,
            run.installed_policy(),
            run.prom.url,
            run.scratch("scorer"),
            listen=f"{run.cluster_ip('steer-scorer')}:8080",
            kubeconfig=run.account_kubeconfig("steer-scorer"),
        )
    )
    run.scorer.wait_ready()
    wait_until(
        "the scorer labelled every node",
        lambda: all(
            "kube-steer.github.io/score" in (n.metadata.labels or {})
            for n in client.CoreV1Api(run.plane.api_client()).list_node().items
        ),
        timeout=30,
        interval=0.2,
    )


def port_forward(run: Installation) -> None:
    """`kubectl port-forward service/steer-scorer 8080:8080`: needs a running pod. The scorer
    listens on the Service's ClusterIP here, which the `curl` lines are pointed at instead of
    localhost:8080."""
    assert run.scorer is not None


def scorer_stopped(run: Installation) -> None:
    """After `scale deployment steer-scorer --replicas=0`: its pods would stop."""
    assert run.scorer is not None
    run.scorer.stop()


# Steps of the page that need kubelets or the image, and what is done instead (the page's
# other commands run as written). A step listed here but missing from the page fails the test.
INSTEAD: dict[str, Callable[[Installation], None]] = {
    "kubectl -n kube-steer rollout status deployment/steer-webhook --timeout=5m": start_webhook,
    "kubectl -n kube-steer rollout status deployment/steer-scorer --timeout=5m": start_scorer,
    "kubectl -n kube-steer port-forward service/steer-scorer 8080:8080 &": port_forward,
}
# Run as written, then what the cluster would do next.
AFTER: dict[str, Callable[[Installation], None]] = {
    "kubectl apply -k manifests/": lambda run: no_pods_here(run.plane),
    "kubectl -n kube-steer scale deployment steer-scorer --replicas=0": scorer_stopped,
}
# Commands that can briefly fail until a watch catches up (the webhook's namespace cache,
# the default ServiceAccount): retried, as a person would.
EVENTUALLY = ("kubectl -n team-a run steer-probe",)


def shell(run: Installation, command: str) -> str:
    if run.scorer is not None and "localhost:8080" in command:
        command = command.replace("localhost:8080", run.scorer.url.removeprefix("http://"))
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=run.workdir,
        env=run.shell_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def prometheus() -> Iterator[PrometheusServer]:
    cluster = SyntheticCluster(nodes=len(NODES), gpus_per_node=0, node_prefix="install-e2e-")
    for i, name in enumerate(NODES):
        cluster.set_power(name, platform_watts=300 + 100 * i)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        yield prom


def shell_env(plane: ControlPlane, bin_dir: Path, config_home: Path) -> dict[str, str]:
    """PATH with `kubectl` (v1.36, beside the binaries) and `steer` (this checkout's code)."""
    bin_dir.mkdir()
    kubectl_bin = plane.bin_dir / "kubectl"
    (bin_dir / "kubectl").write_text(f'#!/bin/sh\nexec "{kubectl_bin}" "$@"\n')
    (bin_dir / "steer").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m steer.cli "$@"\n')
    for tool in ("kubectl", "steer"):
        (bin_dir / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR",)}
    env.update(
        PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
        KUBECONFIG=str(plane.kubeconfig),
        PYTHONPATH=str(ROOT),  # `steer` runs this checkout, wherever the shell is
        XDG_CONFIG_HOME=str(config_home),  # where `steer certs` keeps its CA
    )
    return env


def missing_commands(commands: Sequence[str]) -> list[str]:
    """The page's `steer` subcommands this checkout does not have (their --help fails)."""
    subcommands = {
        tuple(w for w in command.split()[1:3] if not w.startswith("-"))
        for command in commands
        if command.startswith("steer ")
    }
    return ["steer " + " ".join(sub) for sub in sorted(subcommands) if not has_subcommand(sub)]


def has_subcommand(words: Sequence[str]) -> bool:
    parser: argparse.ArgumentParser = build_parser()
    for word in words:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if word not in action.choices:
            return False
        parser = action.choices[word]
    return True


@pytest.fixture
def install_commands() -> list[str]:
    commands = doc_commands(INSTALL_DOC.read_text())
    missing = missing_commands(commands)
    # Every `steer` command the page runs must exist, or the page cannot run as written.
    assert not missing, f"docs/install.md runs {', '.join(missing)}, which `steer` lacks"
    return commands


def test_install_md_runs_verbatim_and_ends_with_a_steered_pod_bound(
    install_commands: list[str], plane: ControlPlane, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    commands = install_commands
    assert set(INSTEAD) | set(AFTER) <= set(commands), "docs/install.md changed: update the test"
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    (workdir / "manifests").symlink_to(MANIFESTS)  # the commands run from the repository's top
    core = client.CoreV1Api(plane.api_client())
    with contextlib.ExitStack() as stack:
        run = Installation(
            plane,
            workdir,
            prometheus,
            shell_env(plane, tmp_path / "bin", tmp_path / "config"),
            stack,
        )
        stack.callback(lambda: [core.delete_node(n) for n in NODES if _exists_node(core, n)])
        stack.callback(lambda: plane.delete_pods("team-a"))
        for command in commands:
            if command in INSTEAD:
                INSTEAD[command](run)
                continue
            if command.startswith(EVENTUALLY):
                run.outputs[command] = wait_until(
                    command, lambda command=command: _try(run, command), timeout=30, interval=0.2
                )
            else:
                run.outputs[command] = shell(run, command)
            if command in AFTER:
                AFTER[command](run)
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


def _exists_node(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_node(name)
    except client.ApiException:
        return False
    return True


def _try(run: Installation, command: str) -> str | None:
    with contextlib.suppress(AssertionError):
        out = shell(run, command)
        return out or None
    return None


def check_after(run: Installation, command: str) -> None:
    """What each step must have achieved, read back from the apiserver."""
    plane, core = run.plane, client.CoreV1Api(run.plane.api_client())
    out = run.outputs.get(command, "")
    if command.startswith("kubectl -n team-a run steer-probe"):
        trace = json.loads(out)
        assert trace["policy"].startswith("starter@"), out
    elif command == "kubectl -n team-a rollout restart deployment/web":
        # Every pod of the workload is steered by the webhook and bound by the scheduler.
        def steered_and_bound() -> list[Any] | None:
            pods = core.list_namespaced_pod("team-a", label_selector="app=web").items
            ok = len(pods) >= 2 and all(
                p.spec.node_name and "kube-steer.github.io/trace" in (p.metadata.annotations or {})
                for p in pods
            )
            return pods if ok else None

        pods = wait_until("web pods steered and bound", steered_and_bound, timeout=60, interval=0.2)
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
    elif command.startswith("curl -s http://localhost:8080/explain/nodes"):
        explained = json.loads(out)
        assert set(NODES) <= {n["node"] for n in explained["nodes"]}, out
    elif command.startswith("curl -s http://localhost:8080/explain/pod/"):
        explained = json.loads(out)
        assert set(NODES) == {v["node"] for v in explained["allowed"]}, out
    elif command == "kubectl apply -k my-kube-steer/":
        # Re-applying kept the caBundle `steer certs rotate` set: the webhook still steers.
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


def test_the_rendered_network_policy_opens_the_webhook_to_no_pod(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """Once every source reached both webhook ports; now the admission port admits only
    addresses outside the pod network (the apiserver, the kubelet), the metrics port those and
    Prometheus's pods, with the podCIDR setting as it is edited."""
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
    assert sources == {8443: [outside_pods], 9102: [prometheus, outside_pods]}
