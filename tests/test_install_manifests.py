"""The kustomize install (manifests/kustomization.yaml and components/) read as files: the
starter policy is safe, the scheduler-profiles copy of it differs in one line only, and the
settings reach what they claim to. Rendering and applying happen on the real apiserver
(tests/e2e/test_install.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from steer.core.admission_policy.security import security_taints
from steer.core.policy import parse_policy
from webhook.devices import WEBHOOK_KINDS

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
STARTER = MANIFESTS / "policy" / "starter-policy.yaml"
PROFILES_STARTER = MANIFESTS / "components" / "scheduler-profiles" / "starter-policy.yaml"
COMPONENTS = (
    "scheduler-profiles",
    "cert-manager",
    "prometheus-operator",
    "network-policy",
    "descheduler",
    "admission-policy",
    "admission-policy-and-webhook",
)


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def test_the_starter_policy_cannot_strand_or_refuse_a_pod() -> None:
    policy = parse_policy(STARTER.read_text())
    spec = policy.spec
    assert spec.scheduler_profiles.installed is False  # pods keep default-scheduler
    assert spec.taints == () and security_taints(policy) == ()  # no taint, nothing fails closed
    assert spec.tenants == ()  # no schedulerName, toleration or budget denials
    assert spec.pod_classes == ()  # no required terms from avoid/reserve rules
    assert spec.unscored_nodes == "allow"
    # Opt-in is decided by the webhook configuration's namespaceSelector (one setting).
    assert spec.opt_in.namespace_selector.matches({})


def test_the_scheduler_profiles_component_changes_only_installed() -> None:
    starter, profiles = STARTER.read_text(), PROFILES_STARTER.read_text()
    changed = [
        (a, b) for a, b in zip(starter.splitlines(), profiles.splitlines(), strict=True) if a != b
    ]
    assert changed == [("    installed: false", "    installed: true")]
    assert parse_policy(profiles).spec.scheduler_profiles.installed is True


def test_every_component_is_a_component_and_lists_files_that_exist() -> None:
    for name in COMPONENTS:
        folder = MANIFESTS / "components" / name
        kustomization = load(folder / "kustomization.yaml")
        assert kustomization["kind"] == "Component", name
        for resource in kustomization.get("resources", []):
            assert (folder / resource).exists(), f"{name}: {resource}"


def test_the_image_setting_names_the_image_both_services_use() -> None:
    kustomization = load(MANIFESTS / "kustomization.yaml")
    (image,) = kustomization["images"]
    used = set()
    for path in (
        MANIFESTS / "scorer" / "scorer.yaml",
        MANIFESTS / "controller" / "controller.yaml",
        MANIFESTS / "webhook" / "webhook.yaml",
    ):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "Deployment":
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    used.add(container["image"].partition(":")[0])
    assert used == {image["name"]}


def test_the_opt_in_setting_targets_the_mutating_webhooks_opt_in_expression() -> None:
    kustomization = load(MANIFESTS / "kustomization.yaml")
    (settings,) = [g for g in kustomization["configMapGenerator"] if g["name"] == "steer-settings"]
    literals = dict(item.split("=", 1) for item in settings["literals"])
    assert literals == {"optInLabel": "kube-steer.github.io/enabled", "optInValue": "true"}
    admission = {
        d["kind"]: d
        for d in yaml.safe_load_all((MANIFESTS / "webhook" / "admission.yaml").read_text())
    }
    hook = admission["MutatingWebhookConfiguration"]["webhooks"][0]
    # The replacement writes matchExpressions[0]: it must be the opt-in expression.
    first = hook["namespaceSelector"]["matchExpressions"][0]
    assert first == {"key": "kube-steer.github.io/enabled", "operator": "In", "values": ["true"]}
    paths = {
        path
        for replacement in kustomization["replacements"]
        if replacement["source"]["name"] == "steer-settings"
        for target in replacement["targets"]
        for path in target["fieldPaths"]
    }
    assert paths == {
        "webhooks.0.namespaceSelector.matchExpressions.0.key",
        "webhooks.0.namespaceSelector.matchExpressions.0.values.0",
    }


def exported_series() -> set[str]:
    """Every series name the three processes export (counters with _total, histograms with
    _bucket/_count/_sum), from their metric classes, plus the namespace cache age the webhook
    derives at scrape time."""
    from prometheus_client import CollectorRegistry

    from controller.metrics import ControllerMetrics
    from scorer.metrics import ScorerMetrics
    from webhook.metrics import CACHE_AGE, WebhookMetrics

    names = {CACHE_AGE}
    registries = [ScorerMetrics().registry, CollectorRegistry(), ControllerMetrics().registry]
    WebhookMetrics(registries[1])
    for registry in registries:
        for family in registry.collect():
            suffixes = {
                "counter": ("_total",),
                "histogram": ("_bucket", "_count", "_sum"),
            }.get(family.type, ("",))
            names |= {family.name + s for s in suffixes}
    return names


def _cluster_role(path: Path) -> dict[str, Any]:
    (role,) = (d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "ClusterRole")
    return role


def test_both_services_read_dra_objects_and_write_none() -> None:
    """The webhook classifies pods by DeviceClasses, claims and claim templates; the scorer
    also counts the devices of each node's ResourceSlices. Neither writes a DRA object."""
    read_only = {"get", "list", "watch"}
    wanted = {
        MANIFESTS / "webhook" / "webhook.yaml": set(WEBHOOK_KINDS),
        MANIFESTS / "scorer" / "scorer.yaml": {*WEBHOOK_KINDS, "resourceslices"},
    }
    for path, kinds in wanted.items():
        rules = [r for r in _cluster_role(path)["rules"] if "resource.k8s.io" in r["apiGroups"]]
        assert {k for r in rules for k in r["resources"]} == kinds, path.name
        assert all(
            set(r["verbs"]) <= read_only and r["apiGroups"] == ["resource.k8s.io"] for r in rules
        )
    assert "resourceslices" not in WEBHOOK_KINDS


def test_each_recording_rule_is_the_newest_form_of_a_preset_query() -> None:
    """The presets read a recorded series first and compute the same expression only for the
    nodes it leaves out: the rule records exactly what the query would compute."""
    rules = load(MANIFESTS / "components" / "prometheus-operator" / "recording-rules.yaml")
    preset = parse_policy((ROOT / "steer" / "presets" / "policy.yaml").read_text())
    queries = {d.name: " ".join(d.query.split()) for d in preset.spec.dimensions}
    recorded = [r for g in rules["spec"]["groups"] for r in g["rules"]]
    assert recorded
    for rule in recorded:
        readers = [name for name, q in queries.items() if rule["record"] in q]
        assert readers, f"{rule['record']}: no preset reads it"
        for name in readers:
            first, _, rest = queries[name].partition(" or on (node_name) ")
            assert rule["record"] in first, name
            assert " ".join(rule["expr"].split()) in rest, name


def test_the_alerts_use_only_series_the_services_export() -> None:
    rules = load(MANIFESTS / "components" / "prometheus-operator" / "rules.yaml")
    exported = exported_series()
    used: set[str] = set()
    for group in rules["spec"]["groups"]:
        for rule in group["rules"]:
            used |= set(re.findall(r"\bsteer_[a-z_]+\b", rule["expr"]))
    assert used, "no kube-steer series in the alerts"
    assert used <= exported, sorted(used - exported)
    jobs = {
        m["metadata"]["name"]
        for m in yaml.safe_load_all(
            (MANIFESTS / "components" / "prometheus-operator" / "servicemonitors.yaml").read_text()
        )
    }
    # `up{job=...}` alerts name the Services the ServiceMonitors scrape (job = Service name).
    for group in rules["spec"]["groups"]:
        for rule in group["rules"]:
            for job in re.findall(r'job="([^"]+)"', rule["expr"]):
                assert job in jobs, rule["alert"]


def test_the_certificate_renewal_may_touch_only_the_objects_the_controller_is_pointed_at() -> None:
    """The controller's renewal (--webhook-certs=renew, its defaults) and its RBAC name the same
    Secrets, Service and configurations as the webhook's manifests; nothing else of them is
    granted, and `create` (which RBAC cannot limit by name) reads nothing."""
    from controller.certs_renewal import WebhookCertSettings

    settings = WebhookCertSettings()
    docs = {
        d["kind"]: d
        for d in yaml.safe_load_all((MANIFESTS / "controller" / "webhook-certs.yaml").read_text())
    }
    role_rules = [(tuple(r["resources"]), tuple(r.get("resourceNames", ())), tuple(r["verbs"]))
                  for r in docs["Role"]["rules"]]  # fmt: skip
    assert role_rules == [
        (("secrets",), (), ("create",)),
        (("secrets",), (settings.secret, settings.ca_secret), ("get", "update")),
        (("services",), (settings.service,), ("get",)),
        (("endpointslices",), (), ("list",)),  # the Service's, in its namespace only
    ]
    (cluster_rule,) = docs["ClusterRole"]["rules"]
    assert cluster_rule["resourceNames"] == list(settings.configurations)
    assert cluster_rule["verbs"] == ["get", "patch"]
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        assert docs[binding]["subjects"] == [
            {"kind": "ServiceAccount", "name": "steer-controller", "namespace": "kube-steer"}
        ]

    webhook = list(yaml.safe_load_all((MANIFESTS / "webhook" / "webhook.yaml").read_text()))
    admission = yaml.safe_load_all((MANIFESTS / "webhook" / "admission.yaml").read_text())
    (service,) = [d for d in webhook if d["kind"] == "Service"]
    (deployment,) = [d for d in webhook if d["kind"] == "Deployment"]
    (tls,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
    assert service["metadata"]["name"] == settings.service
    assert tls["secret"]["secretName"] == settings.secret
    assert {d["metadata"]["name"] for d in admission} == set(settings.configurations)
    controller = list(
        yaml.safe_load_all((MANIFESTS / "controller" / "controller.yaml").read_text())
    )
    (controller_deployment,) = [d for d in controller if d["kind"] == "Deployment"]
    (container,) = controller_deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][6] == "--webhook-certs=renew"  # components/cert-manager flips it
    # No other role of the base grants anything on Secrets.
    scorer = list(yaml.safe_load_all((MANIFESTS / "scorer" / "scorer.yaml").read_text()))
    assert not [
        r
        for d in scorer + webhook + controller
        if d["kind"] in ("Role", "ClusterRole")
        for r in d["rules"]
        if "secrets" in r["resources"]
    ]


def _granted(path: Path) -> dict[tuple[str, str], set[str]]:
    """(plural, name) -> verbs of every admissionregistration rule of the file's roles."""
    granted: dict[tuple[str, str], set[str]] = {}
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in doc["rules"]:
            if rule["apiGroups"] != ["admissionregistration.k8s.io"]:
                continue
            assert rule.get("resourceNames"), rule  # nothing on these kinds without a name
            for plural in rule["resources"]:
                for name in rule["resourceNames"]:
                    granted.setdefault((plural, name), set()).update(rule["verbs"])
    return granted


def test_the_admission_policies_rbac_names_exactly_the_policies_the_controller_applies() -> None:
    """--admission-policies (the base's `validating`, the components' `all`) and the
    controller's roles name the same policies, get, patch and create (server-side apply) by
    name; the MutatingAdmissionPolicy only where an admission component adds it; no verb on a
    binding or a guard; the scorer and the webhook have nothing of admissionregistration."""
    from controller.admission_plan import PLURALS, wanted_objects

    policy = parse_policy(STARTER.read_text())
    base = _granted(MANIFESTS / "controller" / "controller.yaml")
    mutating = _granted(MANIFESTS / "mutating-policy" / "mutating-policy.yaml")
    wanted = {(PLURALS[o.ref.kind], o.ref.name) for o in wanted_objects(policy, "validating")}
    every = {(PLURALS[o.ref.kind], o.ref.name) for o in wanted_objects(policy, "all")}
    assert set(base) == wanted
    assert set(mutating) == every - wanted == {("mutatingadmissionpolicies", "steer-mutation")}
    for verbs in (*base.values(), *mutating.values()):
        assert verbs == {"get", "patch", "create"}
    assert not any(plural.endswith("bindings") for plural, _ in (*base, *mutating))
    for path in (MANIFESTS / "scorer" / "scorer.yaml", MANIFESTS / "webhook" / "webhook.yaml"):
        assert not _granted(path), path
    for component in ("admission-policy", "admission-policy-and-webhook"):
        resources = load(MANIFESTS / "components" / component / "kustomization.yaml")
        assert "../../mutating-policy" in resources["resources"], component
    docs = list(yaml.safe_load_all((MANIFESTS / "controller" / "controller.yaml").read_text()))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][7] == "--admission-policies=validating"


def _without_annotations(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k != "annotations"}
    return {**obj, "metadata": meta}


def test_the_installed_bindings_and_node_writes_guard_are_what_the_policy_compiles_to() -> None:
    """The bindings the install makes (the scope of each admission policy) and the node-writes
    guard are what `steer policy admission-policy --mutating` prints for the starter policy,
    but its policy-version annotation: the starter policy's scope is the install's."""
    from steer.core.admission_policy import admission_policies
    from steer.core.admission_policy.mutating import mutating_admission_policy

    policy = parse_policy(STARTER.read_text())
    compiled = {
        (o["kind"], o["metadata"]["name"]): _without_annotations(o)
        for o in [*admission_policies(policy), *mutating_admission_policy(policy).objects]
    }
    installed = [
        d
        for path in (
            MANIFESTS / "controller" / "admission-bindings.yaml",
            MANIFESTS / "guards" / "node-writes.yaml",
            MANIFESTS / "mutating-policy" / "mutating-policy.yaml",
        )
        for d in yaml.safe_load_all(path.read_text())
        if d and d["kind"].startswith(("Validating", "Mutating"))
    ]
    assert {(d["kind"], d["metadata"]["name"]) for d in installed} == {
        ("ValidatingAdmissionPolicyBinding", "steer-security"),
        ("ValidatingAdmissionPolicyBinding", "steer-budget"),
        ("ValidatingAdmissionPolicy", "steer-scorer-node-writes"),
        ("ValidatingAdmissionPolicyBinding", "steer-scorer-node-writes"),
        ("MutatingAdmissionPolicyBinding", "steer-mutation"),
    }
    for doc in installed:
        assert doc == compiled[(doc["kind"], doc["metadata"]["name"])], doc["metadata"]["name"]


def test_the_guards_name_the_fields_they_refuse_and_bind_to_every_kube_steer_identity() -> None:
    docs = list(yaml.safe_load_all((MANIFESTS / "guards" / "guards.yaml").read_text()))
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {d["metadata"]["name"]: d for d in docs if d["kind"].endswith("Binding")}
    assert (
        set(policies)
        == set(bindings)
        == {
            "steer-guard-webhook-configurations",
            "steer-guard-secrets",
        }
    )
    for name, guard in policies.items():
        assert guard["spec"]["failurePolicy"] == "Fail"
        (condition,) = guard["spec"]["matchConditions"]
        assert "system:serviceaccounts:kube-steer" in condition["expression"]
        assert bindings[name]["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    messages = " ".join(
        v["message"] for v in policies["steer-guard-webhook-configurations"]["spec"]["validations"]
    )
    for field in ("clientConfig.service", "clientConfig.url", "rules", "namespaceSelector",
                  "objectSelector", "matchConditions", "failurePolicy", "sideEffects"):  # fmt: skip
        assert f"webhooks[].{field}" in messages, field
