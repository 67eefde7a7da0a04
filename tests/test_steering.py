"""Policy → keys, pod classes, preferences and hard rules (the facts both services share)."""

from __future__ import annotations

import pytest
import yaml

from steer.core.encoding import preference_weight
from steer.core.policy import Policy, parse_policy
from steer.core.scheduling import expression_matches, term_matches
from steer.core.steering import (
    class_preferences,
    classify_pod,
    composite_key,
    composite_weights,
    composites,
    owned_label_keys,
    owned_resource_keys,
    owned_taint_keys,
    pod_gates,
    scheduler_for,
    tenant_for,
)
from tests.conftest import EXAMPLE_POLICY, load_fixture


@pytest.fixture
def policy() -> Policy:
    return parse_policy(EXAMPLE_POLICY.read_text())


def _gpu_pod_spec() -> dict:
    review = load_fixture("admission/pod-create-with-affinity-gpu.json")
    return review["body"]["request"]["object"]["spec"]


def test_owned_keys_cover_every_label_the_scorer_writes(policy: Policy) -> None:
    assert owned_label_keys(policy) == {
        "kube-steer.github.io/score-gpu-util",
        "kube-steer.github.io/score-gpu-free",
        "kube-steer.github.io/score-gpu-frag",
        "kube-steer.github.io/score-power",
        "kube-steer.github.io/score-core-power",
        "kube-steer.github.io/score-idle-power",
        "kube-steer.github.io/overcommit-pct",
        "kube-steer.github.io/score-health",
        "kube-steer.github.io/gpu-hot",
        "kube-steer.github.io/unhealthy",
        "kube-steer.github.io/score",
        "kube-steer.github.io/score-class-gpu",
        "kube-steer.github.io/reserved-for-gpu",
        "kube-steer.github.io/drain-candidate",
    }
    assert owned_taint_keys(policy) == {
        "kube-steer.github.io/gpu-hot",
        "kube-steer.github.io/unhealthy",
    }
    assert [key for _, key in composites(policy)] == [
        "kube-steer.github.io/score",
        "kube-steer.github.io/score-class-gpu",
    ]


def test_composite_weights_per_class(policy: Policy) -> None:
    gpu = policy.spec.pod_classes[0]
    assert composite_weights(policy, gpu) == {"gpu-util": 3, "health": 2}
    # The default composite leaves the GPU dimensions out (spec.scoring.compositeDimensions),
    # and absolute watts (power, weight 0): it counts what a core costs and what waking costs.
    assert composite_weights(policy, None) == {"core-power": 2, "idle-power": 1, "health": 2}
    # overcommit-pct is published raw and never enters a composite.
    assert "overcommit-pct" not in composite_weights(policy, None)


def test_gpu_pod_from_the_apiserver_fixture_is_classified(policy: Policy) -> None:
    gpu_class = classify_pod(policy, _gpu_pod_spec())
    assert gpu_class is not None and gpu_class.name == "gpu"
    assert (
        classify_pod(
            policy, {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
        )
        is None
    )
    assert classify_pod(policy, {"containers": [{"name": "c"}]}) is None
    assert (
        class_preferences(policy, gpu_class)[0].key
        == composite_key(policy, gpu_class)
        == "kube-steer.github.io/score-class-gpu"
    )


def test_tenant_lookup_uses_namespace_labels(policy: Policy) -> None:
    namespaces = load_fixture("api/namespace-list.json")["body"]["items"]
    team_a = next(n for n in namespaces if n["metadata"]["name"] == "team-a")
    tenant = tenant_for(policy, team_a["metadata"]["labels"])
    assert tenant is not None and tenant.name == "dept-a"
    assert tenant_for(policy, {"kubernetes.io/metadata.name": "team-b"}) is None


def test_hard_rules_are_gates_a_pod_requests(policy: Policy) -> None:
    """Budgets and avoided taints are gates (resources), never required terms on labels that
    move with load: a kubelet restart re-checks required terms against the node as it is."""
    dept_b, dept_a = policy.tenant("dept-b"), policy.tenant("dept-a")
    gpu = policy.spec.pod_classes[0]
    # dept-b (0 %) is below the highest budget (dept-a's 5 %): it carries the gate of 0 %.
    assert [(g.resource, g.rule) for g in pod_gates(policy, dept_b, None)] == [
        ("kube-steer.github.io/budget-0pct", "budget:0")
    ]
    assert pod_gates(policy, dept_a, None) == ()  # the highest budget: every floor admits it
    assert [g.rule for g in pod_gates(policy, dept_b, gpu)] == ["avoid:gpu-hot", "budget:0"]
    assert pod_gates(policy, None, None) == ()
    labels = parse_policy(
        EXAMPLE_POLICY.read_text().replace("enforcement: scheduler", "enforcement: labels")
    )
    # Budgets by label: a gate per level, open where overcommit-pct is within it.
    assert [g.resource for g in pod_gates(labels, labels.tenant("dept-a"), None)] == [
        "kube-steer.github.io/overcommit-5pct"
    ]
    assert owned_resource_keys(labels) == {
        "kube-steer.github.io/overcommit-0pct",
        "kube-steer.github.io/overcommit-5pct",
        "kube-steer.github.io/avoid-gpu-hot",
        "kube-steer.github.io/devices-gpu",
    }
    assert owned_resource_keys(policy) == {
        "kube-steer.github.io/pool-cpu",
        "kube-steer.github.io/pool-memory",
        "kube-steer.github.io/budget-0pct",
        "kube-steer.github.io/avoid-gpu-hot",
        "kube-steer.github.io/devices-gpu",  # the gpu class names DeviceClasses
    }


@pytest.mark.parametrize(
    ("expr", "labels", "expected"),
    [
        ({"key": "k", "operator": "In", "values": ["a"]}, {"k": "a"}, True),
        ({"key": "k", "operator": "In", "values": ["a"]}, {}, False),
        ({"key": "k", "operator": "NotIn", "values": ["a"]}, {}, True),
        ({"key": "k", "operator": "Exists"}, {"k": ""}, True),
        ({"key": "k", "operator": "DoesNotExist"}, {"k": ""}, False),
        ({"key": "k", "operator": "Gt", "values": ["5"]}, {"k": "6"}, True),
        ({"key": "k", "operator": "Lt", "values": ["6"]}, {"k": "6"}, False),
        ({"key": "k", "operator": "Lt", "values": ["6"]}, {}, False),
        ({"key": "k", "operator": "Lt", "values": ["6"]}, {"k": "abc"}, False),
    ],
)
def test_expression_semantics_follow_the_scheduler(
    expr: dict, labels: dict, expected: bool
) -> None:
    assert expression_matches(expr, labels) is expected


def test_term_matches_ands_expressions() -> None:
    term = {
        "matchExpressions": [
            {"key": "a", "operator": "Exists"},
            {"key": "b", "operator": "In", "values": ["1"]},
        ]
    }
    assert term_matches(term, {"a": "x", "b": "1"})
    assert not term_matches(term, {"a": "x", "b": "2"})


def test_scheduler_profiles_only_when_installed(policy: Policy) -> None:
    gpu = policy.spec.pod_classes[0]
    dept_a, dept_b = policy.tenant("dept-a"), policy.tenant("dept-b")
    assert scheduler_for(policy, dept_a, gpu) == "steer-binpack"
    assert scheduler_for(policy, dept_a, None) == "steer-spread"
    assert scheduler_for(policy, None, None) == "steer-spread"
    assert scheduler_for(policy, dept_b, gpu) == "steer-binpack"
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["schedulerProfiles"]["installed"] = False
    # Without profiles dept-b's pods keep default-scheduler, so it must allow it.
    doc["spec"]["tenants"][1]["allowedSchedulerNames"].insert(0, "default-scheduler")
    not_installed = parse_policy(yaml.safe_dump(doc))
    assert scheduler_for(not_installed, not_installed.tenant("dept-a"), gpu) is None


def test_class_preferences_reproduce_the_composite_order(policy: Policy) -> None:
    # On unreserved nodes the "not reserved for GPU pods" terms add the same 110 everywhere.
    terms = [t for t in class_preferences(policy, None) if t.operator == "In"]
    weights = [
        preference_weight({"kube-steer.github.io/score": str(v)}, terms) for v in range(0, 101, 10)
    ]
    assert weights == list(range(0, 101, 10))
