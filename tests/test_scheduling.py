"""Kubernetes' scheduling rules in steer/core/scheduling.py, and that the webhook and `/explain`
apply the same ones: the pod `/explain` evaluates is the pod the webhook's patch produces."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scorer.explain import explain_pod
from scorer.explain.view import PodExplanation
from scorer.model import NodeState
from steer.core.mutation import MutationPlan, mutate_pod
from steer.core.pod_shape import UninterpretablePod, required_terms
from steer.core.policy import parse_policy
from steer.core.scheduling import (
    UNSCHEDULABLE_TAINT,
    Taint,
    blocking_taints,
    expression_matches,
    field_matches,
    merge_required,
    pod_requests,
    selector_problems,
    term_matches,
    terms_match,
    tolerates,
    toleration_problems,
)
from steer.core.steering import composite_key, trace_annotation_key
from tests.conftest import EXAMPLE_POLICY
from tests.scorer_support import SMALL_POLICY

OPTED_IN = {"kube-steer.github.io/enabled": "true"}  # the default opt-in selector
HOT = Taint("kube-steer.github.io/gpu-hot", "true", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"operator": "Exists"}, True),  # empty key + Exists: every taint
        ({"key": "kube-steer.github.io/gpu-hot", "operator": "Exists"}, True),
        ({"key": "kube-steer.github.io/gpu-hot", "operator": "Equal", "value": "true"}, True),
        (
            {"key": "kube-steer.github.io/gpu-hot", "value": "true"},
            True,
        ),  # operator defaults to Equal
        ({"key": "kube-steer.github.io/gpu-hot", "value": "false"}, False),
        (
            {"key": "kube-steer.github.io/gpu-hot", "operator": "Exists", "effect": "NoExecute"},
            False,
        ),
        ({"key": "kube-steer.github.io/gpu-hot", "value": "true", "effect": "NoSchedule"}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "other", "operator": "Exists"}, False),
        # Lt/Gt need an alpha feature gate: without it they tolerate nothing, whatever the value.
        ({"key": "kube-steer.github.io/gpu-hot", "operator": "Gt", "value": "true"}, False),
        ({"key": "kube-steer.github.io/gpu-hot", "operator": "Lt", "value": "1"}, False),
        (
            {"key": "kube-steer.github.io/gpu-hot", "operator": "exists"},
            False,
        ),  # operators are case-sensitive
    ],
)
def test_tolerates_follows_toleration_tolerates_taint(
    toleration: dict[str, Any], expected: bool
) -> None:
    assert tolerates(toleration, HOT) is expected


def test_comparison_tolerations_compare_int64_when_the_gate_is_on() -> None:
    taint = Taint("gpu-mem", "40", "NoSchedule")
    gt = {"key": "gpu-mem", "operator": "Gt", "value": "32"}
    lt = {"key": "gpu-mem", "operator": "Lt", "value": "32"}
    assert tolerates(gt, taint, comparison_operators=True)  # taint 40 > 32
    assert not tolerates(lt, taint, comparison_operators=True)
    assert not tolerates({**gt, "value": "032"}, taint, comparison_operators=True)
    assert not tolerates(gt, Taint("gpu-mem", "+41", "NoSchedule"), comparison_operators=True)


def test_only_noschedule_and_noexecute_block_and_a_cordon_is_a_taint() -> None:
    soft = Taint("a", "", "PreferNoSchedule")
    hard = Taint("b", "x", "NoExecute")
    assert blocking_taints([], [soft, hard], unschedulable=False) == (hard,)
    assert blocking_taints([], [], unschedulable=True) == (UNSCHEDULABLE_TAINT,)
    assert blocking_taints([{"operator": "Exists"}], [soft, hard], unschedulable=True) == ()
    tol = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    assert blocking_taints([tol], [hard], unschedulable=True) == (hard,)


def test_toleration_problems_are_the_apiservers() -> None:
    assert toleration_problems([{"operator": "Exists"}, {"key": "k", "value": "v"}]) == ()
    found = toleration_problems(
        [
            {"key": "k", "operator": "Gt", "value": "1"},
            {"value": "v"},
            {"key": "k", "operator": "Exists", "value": "v"},
            {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
        ]
    )
    assert [p.split(":")[0] for p in found] == [
        "spec.tolerations[0].operator",
        "spec.tolerations[1].operator",
        "spec.tolerations[2].value",
        "spec.tolerations[3].effect",
    ]


@pytest.mark.parametrize(
    ("expr", "labels", "expected"),
    [
        ({"key": "n", "operator": "Gt", "values": ["5"]}, {"n": "6"}, True),
        ({"key": "n", "operator": "Gt", "values": ["5"]}, {"n": "+6"}, True),  # ParseInt: sign
        ({"key": "n", "operator": "Gt", "values": ["5"]}, {"n": "007"}, True),  # leading zeros
        ({"key": "n", "operator": "Gt", "values": ["5"]}, {"n": "1_0"}, False),  # not for Go
        ({"key": "n", "operator": "Lt", "values": ["5"]}, {"n": "9" * 20}, False),  # > int64
        ({"key": "n", "operator": "Lt", "values": ["5", "6"]}, {"n": "1"}, False),
        ({"key": "n", "operator": "Lt", "values": ["5"]}, {}, False),
        ({"key": "n", "operator": "NotIn", "values": ["5"]}, {}, True),
        ({"key": "n", "operator": "DoesNotExist"}, {"n": ""}, False),
        ({"key": "n", "operator": "Exists"}, {"n": ""}, True),
        ({"key": "n", "operator": "Like", "values": ["5"]}, {"n": "5"}, False),
    ],
)
def test_expression_matches_like_the_scheduler(
    expr: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert expression_matches(expr, labels) is expected


def test_terms_fields_and_empty_terms() -> None:
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert term_matches(by_name, {}, "n1") and not term_matches(by_name, {}, "n2")
    assert not field_matches({"key": "metadata.uid", "operator": "In", "values": ["n1"]}, "n1")
    assert not term_matches({}, {"a": "1"}, "n1")  # a term without requirements matches nothing
    assert not terms_match([], {}, "n1") and terms_match(None, {}, "n1")
    mixed = {**by_name, "matchExpressions": [{"key": "a", "operator": "Exists"}]}
    assert term_matches(mixed, {"a": "1"}, "n1") and not term_matches(mixed, {}, "n1")


def test_malformed_pod_fields_name_the_field() -> None:
    with pytest.raises(UninterpretablePod) as info:
        required_terms(
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchFields": "x"}]
                        }
                    }
                }
            }
        )
    assert info.value.field.endswith("nodeSelectorTerms[0].matchFields")


# -- the webhook's patch and explain's evaluation are the same pod -------------------------------

POLICY = parse_policy(EXAMPLE_POLICY.read_text())
PLAN = MutationPlan.from_policy(POLICY)
KEYS = ("kube-steer.github.io/gpu-hot", "kube-steer.github.io/unhealthy", "dedicated", "")
expressions = st.fixed_dictionaries(
    {
        "key": st.sampled_from(
            ("kube-steer.github.io/overcommit-pct", "zone", "kube-steer.github.io/reserved-for-gpu")
        ),
        "operator": st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist", "Lt")),
    },
    optional={"values": st.lists(st.sampled_from(("1", "6", "a")), min_size=1, max_size=2)},
)
terms = st.fixed_dictionaries({}, optional={"matchExpressions": st.lists(expressions, max_size=3)})
tolerations = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(KEYS),
        "operator": st.sampled_from(("Equal", "Exists")),
        "value": st.sampled_from(("true", "")),
        "effect": st.sampled_from(("NoSchedule", "PreferNoSchedule", "")),
    },
)
pods = st.fixed_dictionaries(
    {"gpu": st.booleans()},
    optional={
        "terms": st.lists(terms, max_size=3),
        "tolerations": st.lists(tolerations, max_size=3),
    },
)


def _pod(drawn: dict[str, Any]) -> dict[str, Any]:
    resources = {"limits": {"cpu": "1", "memory": "1Gi"}}
    if drawn["gpu"]:
        resources["limits"]["nvidia.com/gpu"] = "1"
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": resources}]}
    if "terms" in drawn:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": drawn["terms"]
                }
            }
        }
    if "tolerations" in drawn:
        spec["tolerations"] = drawn["tolerations"]
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(drawn=pods, tenant=st.sampled_from((None, *POLICY.spec.tenants)))
def test_explain_reads_the_pod_the_webhook_patch_makes(drawn: dict[str, Any], tenant: Any) -> None:
    pod = _pod(drawn)
    before = copy.deepcopy(pod)
    mutation = mutate_pod(PLAN, pod, tenant)
    # The steered pod /explain evaluates is the webhook's patch as the apiserver applies it.
    assert mutation.apply(pod) == jsonpatch.apply_patch(before, list(mutation.ops))
    assert pod == before


def test_merge_keeps_empty_terms_empty() -> None:
    rule = [[{"key": "k", "operator": "Exists"}]]
    assert merge_required([{}], rule) == [{}]
    assert merge_required(None, rule) == [
        {"matchExpressions": [{"key": "k", "operator": "Exists"}]}
    ]


# -- the two disagreements between /explain and the webhook, fixed -------------------------------

TOLERANT = parse_policy(
    SMALL_POLICY.replace(
        "      overcommitPercent: 0\n",
        "      overcommitPercent: 0\n      allowedTolerations: [gpu-hot]\n",
    )
)


def _hot_node() -> NodeState:
    return NodeState("hot", taints=(Taint("kube-steer.github.io/gpu-hot", "true", "NoSchedule"),))


def _cpu_pod(**spec: Any) -> dict[str, Any]:
    # Limits on cpu and memory: the webhook denies an unbounded container of a budgeted tenant.
    container = {"name": "c", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    return {"metadata": {"name": "p"}, "spec": {"containers": [container], **spec}}


def test_explain_counts_the_toleration_the_webhook_injects() -> None:
    tenant = {"tenant": "dept-b", **OPTED_IN}
    result = explain_pod(TOLERANT, None, [_hot_node()], _cpu_pod(), tenant)
    assert [v.node for v in result.allowed] == ["hot"]
    assert result.to_dict()["injectedTolerations"] == [
        {
            "key": "kube-steer.github.io/gpu-hot",
            "operator": "Equal",
            "value": "true",
            "effect": "NoSchedule",
        }
    ]
    outside = explain_pod(TOLERANT, None, [_hot_node()], _cpu_pod(), OPTED_IN)
    assert [e.rule for e in outside.excluded[0].exclusions] == [
        "taint kube-steer.github.io/gpu-hot=true:NoSchedule"
    ]


def test_explain_refuses_a_gt_toleration_as_the_apiserver_does() -> None:
    gt = {"key": "kube-steer.github.io/gpu-hot", "operator": "Gt", "value": "true"}
    result = explain_pod(TOLERANT, None, [_hot_node()], _cpu_pod(tolerations=[gt]), OPTED_IN)
    assert not result.allowed
    rules = [e.rule for e in result.excluded[0].exclusions]
    assert rules == ["admission", "taint kube-steer.github.io/gpu-hot=true:NoSchedule"]
    assert "TaintTolerationComparisonOperators" in result.problems[0]


def test_explain_lets_a_wildcard_toleration_pass_a_cordon() -> None:
    cordoned = NodeState("c", unschedulable=True)
    dept_b = {"tenant": "dept-b", **OPTED_IN}  # may tolerate gpu-hot: a wildcard is admitted
    wild = explain_pod(
        TOLERANT, None, [cordoned], _cpu_pod(tolerations=[{"operator": "Exists"}]), dept_b
    )
    assert [v.node for v in wild.allowed] == ["c"]
    plain = explain_pod(TOLERANT, None, [cordoned], _cpu_pod(), OPTED_IN)
    assert [e.rule for e in plain.excluded[0].exclusions] == ["node.spec.unschedulable"]


def test_selector_problems_are_the_apiservers() -> None:
    field = "terms"
    assert selector_problems(None, field) == ()
    assert selector_problems([], field) == ("terms: must have at least one node selector term",)
    found = selector_problems(
        [
            {
                "matchExpressions": [
                    {"key": "a", "operator": "In"},
                    {"key": "a", "operator": "Exists", "values": ["x"]},
                    {"key": "a", "operator": "Gt", "values": ["1", "2"]},
                    {"key": "a", "operator": "Lt", "values": ["-1"]},
                    {"key": "a", "operator": "Like", "values": ["x"]},
                ],
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}],
            }
        ],
        field,
    )
    assert [p.split(":")[0] for p in found] == [
        "terms[0].matchExpressions[0].values",
        "terms[0].matchExpressions[1].values",
        "terms[0].matchExpressions[2].values",
        "terms[0].matchExpressions[3].values",  # "-1" is no label value
        "terms[0].matchExpressions[4].operator",
        "terms[0].matchFields[0].values",
    ]


def test_explain_excludes_nodes_without_the_requested_resource() -> None:
    gpu = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [gpu]}}
    nodes = [
        NodeState("cpu", allocatable={"cpu": "8", "memory": "32Gi"}),
        NodeState(
            "gpu",
            allocatable={
                "cpu": "8",
                "memory": "32Gi",
                "nvidia.com/gpu": "8",
                "kube-steer.github.io/avoid-gpu-hot": "110",  # the gate GPU pods request
            },
        ),
        NodeState("unread"),  # allocatable not read: not judged
    ]
    result = explain_pod(TOLERANT, None, nodes, pod, OPTED_IN)
    assert sorted(v.node for v in result.allowed) == ["gpu", "unread"]
    (cpu,) = result.excluded
    # No GPU there, and no gpu-hot gate published (the scorer has not written it yet).
    assert [e.rule for e in cpu.exclusions] == ["avoid:gpu-hot", "resources"]
    assert "nvidia.com/gpu: the pod requests 1" in cpu.exclusions[1].reason


def test_steered_requests_carry_the_pools_the_webhook_adds() -> None:
    tenant = POLICY.spec.tenants[1]  # dept-b, budget 0 %
    container = {
        "name": "c",
        "image": "x",
        "resources": {
            "requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"cpu": "500m", "memory": "1Gi"},
        },
    }
    spec = {"containers": [container]}
    pod = {"metadata": {"name": "p"}, "spec": spec}
    requests = pod_requests(mutate_pod(PLAN, pod, tenant).apply(pod)["spec"])
    owned = {k: v for k, v in requests.items() if "kube-steer.github.io/" in k}
    # Its limits from the node's pool, and one unit of the gate of budget 0 %.
    assert owned == {
        "kube-steer.github.io/pool-cpu": 500,
        "kube-steer.github.io/pool-memory": 1024,
        "kube-steer.github.io/budget-0pct": 1,
    }
    mutated = jsonpatch.apply_patch(
        {"metadata": {"name": "p"}, "spec": spec},
        list(mutate_pod(PLAN, {"metadata": {"name": "p"}, "spec": spec}, tenant).ops),
    )
    first = mutated["spec"]["containers"][0]["resources"]["requests"]
    assert {k: int(v) for k, v in first.items() if "kube-steer.github.io/" in k} == owned


def test_explain_leaves_a_pod_alone_where_the_webhook_does() -> None:
    tenant = {"tenant": "dept-b"}  # in the tenant, but not opted in
    result = explain_pod(TOLERANT, None, [_hot_node()], _cpu_pod(), tenant, "team-b")
    assert not result.steered and not result.gates and not result.injected_tolerations
    assert result.skipped == "not-opted-in" and result.rules == ()
    assert not result.allowed  # no injected toleration for the hot node
    system = explain_pod(
        TOLERANT, None, [_hot_node()], _cpu_pod(), {**tenant, **OPTED_IN}, "kube-system"
    )
    assert not system.steered and system.skipped == "excluded-namespace"
    steered = explain_pod(
        TOLERANT, None, [_hot_node()], _cpu_pod(), {**tenant, **OPTED_IN}, "team-b"
    )
    assert steered.steered and [v.node for v in steered.allowed] == ["hot"]


def test_explain_reports_what_the_webhooks_validation_denies() -> None:
    hot = {"key": "kube-steer.github.io/gpu-hot", "operator": "Exists"}
    outside = explain_pod(TOLERANT, None, [_hot_node()], _cpu_pod(tolerations=[hot]), OPTED_IN, "x")
    assert not outside.allowed
    assert "the webhook denies it: rule reserved-toleration" in outside.problems[0]
    unbounded = _cpu_pod()
    del unbounded["spec"]["containers"][0]["resources"]["limits"]["memory"]
    dept_b = {"tenant": "dept-b", **OPTED_IN}
    denied = explain_pod(TOLERANT, None, [_hot_node()], unbounded, dept_b, "team-b")
    assert not denied.allowed and "rule overcommit" in denied.problems[0]
    # The routed schedulerName is what validation sees, not the unset one.
    assert explain_pod(TOLERANT, None, [_hot_node()], _cpu_pod(), dept_b, "team-b").allowed


def test_explain_of_a_pod_read_back_after_admission_matches_the_pod_as_created() -> None:
    """Explain runs the webhook's own mutation, which adds nothing to a pod it has steered: the
    injected terms a pod carries from admission count once, as the scheduler counts them."""
    key = composite_key(TOLERANT, None)
    nodes = [NodeState(f"n{v}", labels={key: str(v)}) for v in (0, 50, 100)]
    labels = {"tenant": "dept-b", **OPTED_IN}
    created = _cpu_pod()
    admitted = mutate_pod(MutationPlan.from_policy(TOLERANT), created, TOLERANT.tenant("dept-b"))
    read_back = admitted.apply(created)
    assert admitted.ops and read_back != created
    first = explain_pod(TOLERANT, None, nodes, created, labels, "team-b")
    again = explain_pod(TOLERANT, None, nodes, read_back, labels, "team-b")
    weights = [(v.node, v.steering_weight, v.user_weight, v.rank) for v in first.verdicts]
    assert weights == [(v.node, v.steering_weight, v.user_weight, v.rank) for v in again.verdicts]
    assert [v.node for v in first.allowed] == ["n100", "n50", "n0"]
    assert all(v.user_weight == 0 for v in again.verdicts)
    assert first.injected_tolerations == again.injected_tolerations != ()
    # The rules in effect are the trace the pod carries from admission.
    trace = orjson.loads(read_back["metadata"]["annotations"][trace_annotation_key(TOLERANT)])
    assert first.rules == again.rules == tuple(trace["rules"])
    assert "tolerate:gpu-hot" in first.rules and first.skipped is None
    back = PodExplanation.from_json(first.to_json())
    assert (back.rules, back.skipped) == (first.rules, first.skipped)


def test_explain_leaves_a_pod_spec_without_metadata_as_the_webhook_would() -> None:
    spec = _cpu_pod()["spec"]
    labels = {"tenant": "dept-b", **OPTED_IN}
    bare = explain_pod(TOLERANT, None, [_hot_node()], spec, labels, "team-b")
    whole = explain_pod(TOLERANT, None, [_hot_node()], {"spec": spec, "kind": "Pod"}, labels)
    assert bare.steered and whole.steered
    assert [v.node for v in bare.allowed] == [v.node for v in whole.allowed] == ["hot"]
