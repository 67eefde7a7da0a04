"""The DeschedulerPolicy generated from the steering policy (steer/core/descheduling.py), the
`spec.descheduling` section, `steer descheduler`, and the committed descheduler component."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.commands import main
from steer.core.descheduling import descheduler_policy, evicting_taint_keys
from steer.core.policy import Policy, PolicyError, parse_policy

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "policy.yaml"
COMPONENT = ROOT / "manifests" / "components" / "descheduler"
CHART_COPY = ROOT / "charts" / "kube-steer" / "files" / "descheduler" / "policy-configmap.yaml"


def example(**descheduling: Any) -> Policy:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["spec"]["descheduling"].update(descheduling)
    return parse_policy(yaml.safe_dump(document))


def profile(document: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in document["profiles"] if p["name"] == name)
    return found


def plugin_args(
    document: dict[str, Any], name: str, in_profile: str = "kube-steer-correction"
) -> dict[str, Any]:
    config = profile(document, in_profile)["pluginConfig"]
    args: dict[str, Any] = next(c["args"] for c in config if c["name"] == name)
    return args


CONSOLIDATION = "kube-steer-consolidation"


def issues_of(policy_text: str) -> dict[str, str]:
    with pytest.raises(PolicyError) as caught:
        parse_policy(policy_text)
    return {i.path: i.message for i in caught.value.issues}


def test_correction_evicts_on_required_affinity_and_the_policys_no_schedule_taints_only() -> None:
    document = descheduler_policy(example())
    assert document["apiVersion"] == "descheduler/v1alpha2"
    assert document["kind"] == "DeschedulerPolicy"
    assert "nodeSelector" not in document  # every node
    (correction,) = document["profiles"]  # consolidation is off in the example
    assert correction["plugins"] == {
        "deschedule": {
            "enabled": ["RemovePodsViolatingNodeAffinity", "RemovePodsViolatingNodeTaints"]
        }
    }
    # Preferred terms move with the scores: they never evict.
    assert plugin_args(document, "RemovePodsViolatingNodeAffinity")["nodeAffinityType"] == [
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    taints = plugin_args(document, "RemovePodsViolatingNodeTaints")
    # `unhealthy` is NoSchedule; `gpu-hot` is PreferNoSchedule and not named by the policy.
    assert taints["includedTaints"] == ["kube-steer.github.io/unhealthy"]
    assert "includePreferNoSchedule" not in taints
    for name in ("RemovePodsViolatingNodeAffinity", "RemovePodsViolatingNodeTaints"):
        assert plugin_args(document, name)["namespaces"] == {
            "exclude": ["kube-steer", "kube-system"]
        }


def test_every_policy_keeps_the_safe_limits() -> None:
    policy = example(maxPodsPerNode=1, maxPodsPerNamespace=3, maxPodsTotal=7, minPodAgeSeconds=120)
    enabled = descheduler_policy(example(consolidation={"enabled": True, "minPodAgeSeconds": 900}))
    for document, name in (
        (descheduler_policy(policy), "kube-steer-correction"),
        (enabled, CONSOLIDATION),
    ):
        evictor = plugin_args(document, "DefaultEvictor", name)
        assert evictor["nodeFit"] is True
        assert evictor["namespaceLabelSelector"] == {
            "matchLabels": {"kube-steer.github.io/enabled": "true"}
        }
        # No protection is switched off: DaemonSet, static, mirror, system-critical pods stay.
        assert not {"podProtections", "evictDaemonSetPods", "evictSystemCriticalPods"} & set(
            evictor
        )
    assert plugin_args(descheduler_policy(policy), "DefaultEvictor")["minPodAge"] == "120s"
    assert plugin_args(enabled, "DefaultEvictor", CONSOLIDATION)["minPodAge"] == "900s"
    limits = descheduler_policy(policy)
    assert (
        limits["maxNoOfPodsToEvictPerNode"],
        limits["maxNoOfPodsToEvictPerNamespace"],
        limits["maxNoOfPodsToEvictTotal"],
    ) == (1, 3, 7)


def test_a_prefer_no_schedule_taint_evicts_only_when_the_policy_names_it() -> None:
    policy = example(preferNoScheduleTaints=["gpu-hot"])
    assert evicting_taint_keys(policy) == [
        "kube-steer.github.io/gpu-hot",
        "kube-steer.github.io/unhealthy",
    ]
    taints = plugin_args(descheduler_policy(policy), "RemovePodsViolatingNodeTaints")
    assert taints["includePreferNoSchedule"] is True
    assert taints["includedTaints"] == evicting_taint_keys(policy)


def test_the_taints_follow_the_label_prefix() -> None:
    text = EXAMPLE.read_text().replace(
        "labelPrefix: kube-steer.github.io/", "labelPrefix: steer.example.com/"
    )
    text = text.replace("consolidation: {enabled: false", "consolidation: {enabled: true")
    document = descheduler_policy(parse_policy(text))
    taints = plugin_args(document, "RemovePodsViolatingNodeTaints")
    assert taints["includedTaints"] == ["steer.example.com/unhealthy"]
    drain = plugin_args(document, "RemovePodsViolatingNodeTaints", CONSOLIDATION)
    assert drain["includedTaints"] == ["steer.example.com/drain-candidate"]


def test_nothing_enabled_is_a_policy_with_no_profile() -> None:
    assert descheduler_policy(example(nodeAffinity=False, taints=False))["profiles"] == []
    # A policy with no NoSchedule taint rule and no named PreferNoSchedule one: affinity only.
    only = descheduler_policy(example(taints=False))
    assert profile(only, "kube-steer-correction")["plugins"]["deschedule"]["enabled"] == [
        "RemovePodsViolatingNodeAffinity"
    ]


def test_consolidation_empties_the_drain_candidates_by_their_taint_only() -> None:
    document = descheduler_policy(example(consolidation={"enabled": True, "minPodAgeSeconds": 900}))
    # Every node is seen: a nodeSelector on the candidates would skip a cycle with one of them.
    assert "nodeSelector" not in document
    consolidation = profile(document, CONSOLIDATION)
    assert consolidation["plugins"] == {
        "deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}
    }
    assert plugin_args(document, "RemovePodsViolatingNodeTaints", CONSOLIDATION) == {
        "includedTaints": ["kube-steer.github.io/drain-candidate"],
        "namespaces": {"exclude": ["kube-steer", "kube-system"]},
        "includePreferNoSchedule": True,
    }


def test_the_section_names_what_is_wrong_by_its_field_path() -> None:
    text = EXAMPLE.read_text().replace(
        "    preferNoScheduleTaints: []\n    maxPodsPerNode: 2\n",
        "    preferNoScheduleTaints: [unhealthy, cold]\n    maxPodsPerNode: 50\n",
    )
    issues = issues_of(text)
    assert "effect NoSchedule" in issues["spec.descheduling.preferNoScheduleTaints[0]"]
    assert "names no taint rule" in issues["spec.descheduling.preferNoScheduleTaints[1]"]
    assert "maxPodsTotal (20)" in issues["spec.descheduling.maxPodsPerNode"]
    bad_cap = issues_of(EXAMPLE.read_text().replace("maxPodsTotal: 20", "maxPodsTotal: 0"))
    assert "must be between 1 and 10000" in bad_cap["spec.descheduling.maxPodsTotal"]


def test_an_opt_in_selector_without_match_labels_gets_no_descheduler_policy() -> None:
    text = EXAMPLE.read_text().replace(
        '  optIn:\n    namespaceSelector: {matchLabels: {kube-steer.github.io/enabled: "true"}}',
        "  optIn:\n    namespaceSelector:\n      matchExpressions:\n"
        "        - {key: kube-steer.github.io/enabled, operator: Exists}",
    )
    policy = parse_policy(text)  # a valid steering policy
    with pytest.raises(PolicyError) as caught:
        descheduler_policy(policy)
    (issue,) = caught.value.issues
    assert issue.path == "spec.optIn.namespaceSelector.matchLabels"
    assert "every namespace" in issue.message


def test_the_cli_prints_each_policy_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["descheduler", "policy", "--policy", str(EXAMPLE)]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == descheduler_policy(example())
    assert main(["descheduler", "policy"]) == 0  # the packaged policy: the example
    assert yaml.safe_load(capsys.readouterr().out) == descheduler_policy(example())
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("maxPodsTotal: 20", "maxPodsTotal: 0"))
    assert main(["descheduler", "policy", "--policy", str(bad)]) == 1
    assert "spec.descheduling.maxPodsTotal" in capsys.readouterr().err


def test_the_committed_configmap_is_the_one_generated_from_the_example_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = "steer descheduler configmap --policy examples/policy.yaml"
    assert main(command.split()[1:]) == 0
    generated = capsys.readouterr().out
    # The component's ConfigMap, and the chart's copy of it (charts/kube-steer/files/).
    for copy in (COMPONENT / "policy-configmap.yaml", CHART_COPY):
        where = copy.relative_to(ROOT)
        assert copy.read_text() == generated, f"{where} is stale: run `{command} > {where}`"
    committed = CHART_COPY.read_text()
    data = yaml.safe_load(committed)["data"]
    assert yaml.safe_load(data["policy.yaml"]) == descheduler_policy(example())


def test_the_component_runs_each_policy_as_the_descheduler_service_account() -> None:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    docs = [
        d
        for resource in kustomization["resources"]
        for d in yaml.safe_load_all((COMPONENT / resource).read_text())
        if d
    ]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    (configmap,) = by_kind["ConfigMap"]
    (account,) = by_kind["ServiceAccount"]
    (binding,) = by_kind["ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "kube-system"}
    ]
    (job,) = by_kind["CronJob"]
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    (volume,) = pod["volumes"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    (container,) = pod["containers"]
    assert "--descheduling-interval=0" in container["args"]
    (policy_arg,) = [a for a in container["args"] if a.startswith("--policy-config-file=")]
    mount = container["volumeMounts"][0]["mountPath"]
    assert policy_arg == f"--policy-config-file={mount}/policy.yaml"
    assert list(configmap["data"]) == ["policy.yaml"]
    rules = {
        (group, resource): set(rule["verbs"])
        for rule in by_kind["ClusterRole"][0]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules[("", "pods/eviction")] == {"create"}
    assert {"list", "watch"} <= rules[("policy", "poddisruptionbudgets")]
