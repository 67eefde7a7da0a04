"""No name kube-steer writes or injects is under `kubernetes.io` or `k8s.io` (the API conventions
reserve them to Kubernetes), except the well-known keys Kubernetes defines for everyone
(`steer.core.k8s_names.WELL_KNOWN_KEYS`), unless the operator opted in (`nativeResourceNames`).

Checked over what goes to a cluster: the kustomize base and every component, the Helm chart with
every option on, the admission and descheduler policies the CLI generates, every pod the
webhook steers for the example policy (each tenant and class), and the Node writes a scorer
cycle plans from the example policy (labels, annotations, taints, status resources). The
real-cluster run is `tests/e2e/test_resource_migration.py` (it checks the same on hollow nodes).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.model import NodeState
from steer.core.admission_policy import admission_policies
from steer.core.budget import pod_usage
from steer.core.descheduling import descheduler_policy
from steer.core.k8s_names import WELL_KNOWN_KEYS, kubernetes_domain
from steer.core.mutation import MutationPlan, mutate_pod
from steer.core.policy import Policy, parse_policy
from tests.chart_support import helm_template, kustomize
from tests.conftest import EXAMPLE_POLICY, ROOT
from tests.scorer_support import readings_for

POLICY = parse_policy(EXAMPLE_POLICY.read_text())
COMPONENTS = sorted(p.name for p in (ROOT / "manifests" / "components").iterdir() if p.is_dir())
# Fields whose value is a key (taints, tolerations, selector expressions, spread constraints).
KEY_FIELDS = ("key", "topologyKey", "labelKey")


def names_in(obj: Any) -> Iterator[str]:
    """Every map key of `obj`, and every value of a field that names a key."""
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            yield str(k)
            if k in KEY_FIELDS and isinstance(v, str):
                yield v
            if k == "matchLabelKeys" and isinstance(v, list):
                yield from (str(x) for x in v)
            yield from names_in(v)
    elif isinstance(obj, list):
        for item in obj:
            yield from names_in(item)


def kubernetes_names(objects: Any) -> set[str]:
    """The names under a Kubernetes domain that are not well-known keys."""
    return {n for n in names_in(objects) if kubernetes_domain(n) and n not in WELL_KNOWN_KEYS}


def test_the_rule_itself() -> None:
    assert kubernetes_domain("kubernetes.io/hostname")
    assert kubernetes_domain("kube-steer.kubernetes.io/pool-cpu")
    assert kubernetes_domain("x.k8s.io/y")
    assert not kubernetes_domain("kube-steer.github.io/pool-cpu")
    assert not kubernetes_domain("notkubernetes.io/x")
    assert not kubernetes_domain("cpu")
    assert kubernetes_names({"labels": {"kube-steer.kubernetes.io/x": "1"}}) == {
        "kube-steer.kubernetes.io/x"
    }
    assert kubernetes_names([{"key": "node.k8s.io/mine"}]) == {"node.k8s.io/mine"}
    assert kubernetes_names({"topologyKey": "topology.kubernetes.io/zone"}) == set()


def test_the_kustomize_base_and_every_component(tmp_path: Path) -> None:
    objects = kustomize(tmp_path, COMPONENTS[:0])
    for component in COMPONENTS:
        objects += kustomize(tmp_path, [component])
    assert objects
    assert kubernetes_names(objects) == set()


def test_the_chart_with_every_option_on() -> None:
    values = {
        "schedulerProfiles.enabled": "true",
        "certManager.enabled": "true",
        "prometheusOperator.enabled": "true",
        "descheduler.enabled": "true",
        "networkPolicy.enabled": "true",
    }
    objects = helm_template() + helm_template(values=values)
    assert kubernetes_names(objects) == set()


def test_generated_admission_and_descheduler_policies() -> None:
    objects: list[Any] = list(admission_policies(POLICY))
    objects.append(descheduler_policy(POLICY))
    assert objects
    assert kubernetes_names(objects) == set()


def steered_pods(policy: Policy) -> list[tuple[str, dict[str, Any]]]:
    """A pod of every tenant (and none) and class (and none), as the webhook steers it."""
    plan = MutationPlan.from_policy(policy)
    classes: list[Mapping[str, str]] = [{}] + [
        {name: "1" for name in c.requests_any[:1]} for c in policy.spec.pod_classes
    ]
    out = []
    for tenant in (None, *policy.spec.tenants):
        for extra in classes:
            resources = {"cpu": "500m", "memory": "256Mi", **extra}
            pod = {
                "metadata": {"name": "p", "namespace": "n", "labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "resources": {"requests": dict(resources), "limits": dict(resources)},
                        }
                    ]
                },
            }
            mutation = mutate_pod(plan, pod, tenant)
            who = f"{tenant.name if tenant else '-'}/{','.join(extra) or '-'}"
            out.append((who, jsonpatch.apply_patch(pod, list(mutation.ops))))
    return out


def test_every_pod_the_webhook_steers() -> None:
    pods = steered_pods(POLICY)
    assert any("kube-steer.github.io/pool-cpu" in str(p) for _, p in pods)  # pools injected
    for who, pod in pods:
        assert kubernetes_names(pod) == set(), who


def node_writes(policy: Policy) -> set[str]:
    """Every key a scorer cycle on the example policy writes to its nodes: labels, annotations,
    taints and status resources, with tenant pods bound (so pools and gates are planned)."""
    gpu = {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
    cpu = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    nodes = [
        NodeState(f"n{i}", allocatable=gpu if i % 2 else cpu, capacity=gpu if i % 2 else cpu)
        for i in range(4)
    ]
    values = {
        d.name: {n.name: float(10 * (i + 1)) for i, n in enumerate(nodes)}
        for d in policy.spec.dimensions
    }
    usages = {n.name: [pod_usage(p["spec"]) for _, p in steered_pods(policy)] for n in nodes[:2]}
    memory = ScorerMemory()
    keys: set[str] = set()
    for t in range(3):  # past the taint rules' setAfterCycles
        readings = readings_for(policy, nodes, values, 1000.0 + t)
        plan, memory = plan_cycle(policy, nodes, readings, memory, 1000.0 + t, pod_usages=usages)
        for node in plan.nodes:
            keys |= set(node.label_changes) | set(node.annotation_changes)
            keys |= {taint.key for taint in node.taints} | set(node.resource_changes)
    return keys


def test_every_node_write_of_a_scorer_cycle() -> None:
    keys = node_writes(POLICY)
    assert "kube-steer.github.io/pool-cpu" in keys and "kube-steer.github.io/score" in keys
    assert {k for k in keys if kubernetes_domain(k) and k not in WELL_KNOWN_KEYS} == set()


@pytest.mark.parametrize("native", [False, True])
def test_native_names_appear_only_when_the_operator_opted_in(native: bool) -> None:
    text = EXAMPLE_POLICY.read_text()
    if native:
        text += (
            "  resourcePrefix: kube-steer.kubernetes.io/\n"
            "  nativeResourceNames: true\n"
            "  formerResourcePrefixes: []\n"
        )
    policy = parse_policy(text)
    injected = set().union(*(kubernetes_names(p) for _, p in steered_pods(policy)))
    written = {k for k in node_writes(policy) if kubernetes_domain(k) and k not in WELL_KNOWN_KEYS}
    if native:
        assert injected and written
        assert all(n.startswith("kube-steer.kubernetes.io/") for n in injected | written)
    else:
        assert injected == written == set()


def test_the_well_known_keys_are_kubernetes_own() -> None:
    """The allowlist holds only keys under Kubernetes' domains (it excuses nothing else)."""
    assert all(kubernetes_domain(k) for k in WELL_KNOWN_KEYS)
    assert not any(k.startswith("kube-steer") for k in WELL_KNOWN_KEYS)
    assert yaml.safe_dump(sorted(WELL_KNOWN_KEYS))  # printable, for the docs
