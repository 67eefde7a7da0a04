"""Validation matrix: every denial rule, the allowed and the denied side, and the messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from steer.core.admission import (
    ValidationPlan,
    denial_message,
    introduced_denials,
    uninterpretable_denial,
    validate_pod,
)
from steer.core.pod_shape import UninterpretablePod
from steer.core.policy import parse_policy
from tests.conftest import EXAMPLE_POLICY
from tests.webhook_harness import admission_fixture

POLICY = parse_policy(EXAMPLE_POLICY.read_text())
PLAN = ValidationPlan.from_policy(POLICY)
DEPT_A = POLICY.tenant("dept-a")  # overcommit 5 %, may tolerate gpu-hot
DEPT_B = POLICY.tenant("dept-b")  # overcommit 0 %, steer-spread/steer-binpack only


def pod(
    *,
    scheduler: str | None = "steer-spread",
    tolerations: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    pod_resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": containers
        if containers is not None
        else [
            {
                "name": "app",
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                },
            }
        ],
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if init is not None:
        spec["initContainers"] = init
    if pod_resources is not None:
        spec["resources"] = pod_resources
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def container(name: str, requests: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "resources": resources}


def messages(p: dict[str, Any], tenant: Any, scope: Any = "all") -> list[str]:
    return [d.message for d in validate_pod(PLAN, p, tenant, "ns", scope=scope)]


# --- scheduler-name ----------------------------------------------------------------------------


def test_scheduler_allowed_for_tenant() -> None:
    assert messages(pod(scheduler="steer-binpack"), DEPT_B) == []
    assert messages(pod(scheduler="default-scheduler"), DEPT_A) == []


def test_scheduler_denied_names_rule_value_tenant_and_allowed_list() -> None:
    (message,) = messages(pod(scheduler="default-scheduler"), DEPT_B)
    assert message == (
        'rule scheduler-name: spec.schedulerName "default-scheduler" is not allowed for tenant '
        '"dept-b" (namespace "ns"); allowed: steer-spread, steer-binpack'
    )


def test_missing_scheduler_name_is_the_default_scheduler() -> None:
    (message,) = messages(pod(scheduler=None), DEPT_B)
    assert '"default-scheduler"' in message


def test_scheduler_not_restricted_outside_tenants() -> None:
    assert messages(pod(scheduler="anything"), None) == []


# --- reserved-toleration -------------------------------------------------------------------------

GPU_HOT = {
    "key": "kube-steer.github.io/gpu-hot",
    "operator": "Equal",
    "value": "true",
    "effect": "PreferNoSchedule",
}
UNHEALTHY = {"key": "kube-steer.github.io/unhealthy", "operator": "Exists", "effect": "NoSchedule"}


def test_allowed_toleration_passes_for_its_tenant() -> None:
    assert messages(pod(tolerations=[GPU_HOT]), DEPT_A) == []


def test_toleration_denied_for_tenant_without_permission() -> None:
    (message,) = messages(pod(tolerations=[GPU_HOT]), DEPT_B)
    assert message == (
        "rule reserved-toleration: spec.tolerations[0] {key=kube-steer.github.io/gpu-hot, operator=Equal, "
        "value=true, effect=PreferNoSchedule} tolerates the taint kube-steer.github.io/gpu-hot=true:PreferNoSchedule "
        'reserved by taint rule "gpu-hot"; tenant "dept-b" (namespace "ns") may tolerate only: none'
    )


def test_toleration_denied_outside_tenants() -> None:
    (message,) = messages(pod(tolerations=[UNHEALTHY]), None)
    assert 'namespace "ns" (in no tenant) may tolerate only: none' in message
    assert 'taint rule "unhealthy"' in message


def test_wildcard_toleration_tolerates_every_reserved_taint() -> None:
    found = messages(pod(tolerations=[{"operator": "Exists"}]), DEPT_A)
    # dept-a may tolerate gpu-hot, not unhealthy: one denial, which explains the empty key.
    assert len(found) == 1
    assert "(an empty key tolerates every taint)" in found[0] and '"unhealthy"' in found[0]


def test_security_scope_checks_only_security_rules() -> None:
    assert PLAN.has_security_rules
    p = pod(scheduler="default-scheduler", tolerations=[GPU_HOT, UNHEALTHY])
    security = messages(p, DEPT_B, "security")
    assert len(security) == 1 and '"unhealthy"' in security[0]
    everything = messages(p, DEPT_B)
    assert {m.split(":")[0] for m in everything} == {
        "rule reserved-toleration",
        "rule scheduler-name",
    }
    assert len(everything) == 3


# --- overcommit ------------------------------------------------------------------------------------


def test_guaranteed_pod_passes_zero_budget() -> None:
    assert messages(pod(), DEPT_B) == []


def test_zero_budget_denies_any_burst_with_values_in_message() -> None:
    p = pod(
        containers=[
            container("app", {"cpu": "250m", "memory": "128Mi"}, {"cpu": "500m", "memory": "128Mi"})
        ]
    )
    (message,) = messages(p, DEPT_B)
    assert message == (
        'rule overcommit: container "app" (spec.containers[0]) cpu limit 500m / request 250m = 2.00 '
        'exceeds the limit/request ratio tenant "dept-b" (namespace "ns") allows at most 1.00 '
        "(overcommitPercent 0)"
    )


@pytest.mark.parametrize(
    ("request_", "limit", "denied"),
    [
        ("1", "1.05", False),  # exactly 1 + 5 %
        ("1", "1050m", False),
        ("1", "1051m", True),
        ("20", "21", False),
        ("20", "21001m", True),
        ("1Gi", "1127428915", False),  # 1.05 x 1073741824 = 1127428915.2
        ("1Gi", "1127428916", True),
        ("100m", "1e-1", False),
    ],
)
def test_five_percent_budget_is_exact(request_: str, limit: str, denied: bool) -> None:
    resource = "memory" if request_.endswith("Gi") else "cpu"
    other = "cpu" if resource == "memory" else "memory"
    requests = {resource: request_, other: "1"}
    limits = {resource: limit, other: "1"}
    found = messages(pod(containers=[container("app", requests, limits)]), DEPT_A)
    assert bool(found) is denied, found


def test_missing_limit_is_unbounded_and_denied_with_a_fix() -> None:
    p = pod(containers=[container("app", {"cpu": "1", "memory": "1Gi"}, {"memory": "1Gi"})])
    (message,) = messages(p, DEPT_A)
    assert message.startswith(
        'rule overcommit: container "app" (spec.containers[0]) sets a request of 1 but no limit for cpu'
    )
    assert message.endswith("so set resources.limits.cpu")


def test_best_effort_container_denied_for_budgeted_tenant() -> None:
    found = messages(pod(containers=[{"name": "app"}]), DEPT_B)
    assert len(found) == 2
    assert all("sets no request or limit" in m for m in found)


def test_init_containers_count() -> None:
    init = [
        container("setup", {"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "64Mi"})
    ]
    (message,) = messages(pod(init=init), DEPT_B)
    assert (
        'container "setup" (spec.initContainers[0]) cpu limit 200m / request 100m = 2.00' in message
    )


def test_limit_without_request_defaults_request_to_limit() -> None:
    p = pod(containers=[container("app", {}, {"cpu": "1", "memory": "1Gi"})])
    assert messages(p, DEPT_B) == []


def test_pod_level_limits_bound_containers_without_their_own() -> None:
    level = {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    p = pod(containers=[container("app", {"cpu": "1", "memory": "1Gi"}, {})], pod_resources=level)
    assert messages(p, DEPT_B) == []
    level["limits"]["cpu"] = "3"
    (message,) = messages(p, DEPT_B)
    assert message.startswith("rule overcommit: pod-level resources cpu limit 3 / request 2 = 1.50")


def test_no_budget_no_overcommit_rule() -> None:
    p = pod(containers=[container("app", {"cpu": "1"}, {})])
    assert messages(p, None) == []


def test_bad_quantity_is_uninterpretable_with_field() -> None:
    p = pod(containers=[container("app", {"cpu": "lots"}, {"cpu": "1"})])
    with pytest.raises(UninterpretablePod) as info:
        validate_pod(PLAN, p, DEPT_B, "ns")
    assert info.value.field == "spec.containers[0].resources.requests.cpu"


def test_uninterpretable_denial_names_the_field_the_tenant_and_the_reason() -> None:
    p = pod(containers=[container("app", {"cpu": "lots"}, {"cpu": "1"})])
    with pytest.raises(UninterpretablePod) as info:
        validate_pod(PLAN, p, DEPT_B, "team-b")
    denial = uninterpretable_denial(info.value, DEPT_B, "team-b")
    assert denial.rule == "uninterpretable"
    assert denial_message([denial]) == (
        "spec.containers[0].resources.requests.cpu cannot be read, so no rule of tenant "
        '"dept-b" (namespace "team-b") can be judged and the pod is not admitted; fix '
        "spec.containers[0].resources.requests.cpu: 'lots' is not a quantity: expected a number "
        "with an optional suffix (m, k, M, G, T, Ki, Mi, Gi, Ti or an exponent such as 1e3), "
        "e.g. '250m', '8Gi'"
    )


def test_uninterpretable_denial_is_bounded_whatever_the_value() -> None:
    """The reason quotes the value; the field and the fix come first and survive the cut."""
    p = pod(containers=[container("app", {"cpu": "9" * 100_000 + "x"}, {"cpu": "1"})])
    with pytest.raises(UninterpretablePod) as info:
        validate_pod(PLAN, p, DEPT_B, "team-b")
    message = denial_message([uninterpretable_denial(info.value, DEPT_B, "team-b")])
    assert len(message) == 512 and message.endswith("...")
    assert message.startswith("spec.containers[0].resources.requests.cpu cannot be read")
    assert "; fix spec.containers[0].resources.requests.cpu: " in message


# --- updates and messages --------------------------------------------------------------------------


def test_update_denies_only_what_it_introduces() -> None:
    old = pod(scheduler="default-scheduler")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"extra": "1"}
    before = validate_pod(PLAN, old, DEPT_B, "ns")
    assert introduced_denials(validate_pod(PLAN, new, DEPT_B, "ns"), before) == []
    new["spec"]["tolerations"] = [UNHEALTHY]
    (added,) = introduced_denials(validate_pod(PLAN, new, DEPT_B, "ns"), before)
    assert added.rule == "reserved-toleration"


def test_denial_message_joins_several() -> None:
    denials = validate_pod(PLAN, pod(scheduler="x", tolerations=[UNHEALTHY]), DEPT_B, "ns")
    text = denial_message(denials)
    assert text.startswith("2 policy violations: rule reserved-toleration:")
    assert "; rule scheduler-name:" in text


def test_golden_burstable_pod() -> None:
    """The captured user pod asks 250m/128Mi and may burst to 500m/256Mi: ratio 2."""
    user = admission_fixture("pod-create-user-validating.json")["body"]["request"]["object"]
    assert messages(user, None) == []
    found = messages(user, DEPT_A)
    assert [m.split(" = ")[1][:4] for m in found] == ["2.00", "2.00"]
    assert "cpu limit 500m / request 250m" in found[0]
    assert "memory limit 256Mi / request 128Mi" in found[1]
    assert "allows at most 1.05 (overcommitPercent 5)" in found[0]


def test_a_denial_stays_small_whatever_the_pod() -> None:
    """Issue "hostile input": the message once grew with the pod (2 MB pod, 30 MB denial)."""
    from steer.core.admission import Denial, denial_message

    many = [Denial("overcommit", "x" * 10_000, (str(i),)) for i in range(1000)]
    message = denial_message(many)
    assert message.startswith("1000 policy violations: ") and message.endswith("; and 995 more")
    assert len(message) < 5 * 512 + 100
    assert len(denial_message(many[:1])) == 512
