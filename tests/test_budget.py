"""Overcommit budgets enforced by the scheduler (steer/core/budget.py): the pod's burst, what
the webhook adds to a tenant pod, and the pool capacities the scorer publishes on a node.

The guarantee is checked as a property: for any set of tenant pods that the scheduler would
admit onto a node (sum of requests within allocatable, every pool request within the published
capacity, no anti-affinity violated), the node's limits stay within every present tenant's
budget."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from steer.core.budget import (
    MIB,
    Amount,
    PodShare,
    anti_affinity_term,
    budget_steering,
    levels,
    owned_resources,
    pod_burst,
    pod_limits,
    pod_share,
    pool_capacities,
    pool_resource,
)
from steer.core.policy import Policy, PolicyError, parse_policy
from steer.core.quantity import QuantityError, parse_quantity
from tests.conftest import EXAMPLE_POLICY
from webhook.mutate import MutationPlan, mutate_pod


def _policy(enforcement: str = "scheduler", budgets: tuple[float, ...] = (5, 0)) -> Policy:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["overcommit"] = {"enforcement": enforcement}
    tenants = []
    for i, budget in enumerate(budgets):
        tenants.append(
            {
                "name": f"t{i}",
                # Opted-in namespaces only: default-scheduler is not allowed.
                "namespaceSelector": {
                    "matchLabels": {"tenant": f"t{i}", "kube-steer.github.io/enabled": "true"}
                },
                "overcommitPercent": budget,
                "defaultSchedulerName": "steer-spread",
                "allowedSchedulerNames": ["steer-spread", "steer-binpack"],
            }
        )
    doc["spec"]["tenants"] = tenants
    return parse_policy(yaml.safe_dump(doc))


def _pod(cpu: tuple[str, str] | None, memory: tuple[str, str] | None = None) -> dict[str, Any]:
    requests, limits = {}, {}
    if cpu:
        requests["cpu"], limits["cpu"] = cpu
    if memory:
        requests["memory"], limits["memory"] = memory
    return {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]
        },
    }


def test_burst_is_limit_minus_request_as_the_scheduler_sums_containers() -> None:
    spec = {
        "containers": [
            {
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "limits": {"cpu": "1050m", "memory": "1100Mi"},
                }
            },
            {"resources": {"limits": {"cpu": "500m", "memory": "512Mi"}}},  # request = limit
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "4", "memory": "256Mi"}}}
        ],
    }
    burst = pod_burst(spec)
    # cpu: containers 1.55 limit vs 1.5 request, but the init container's 4 limit vs 0.1 request
    # dominates both effective values (max(sum, largest init)): 4 - 1.5.
    assert burst.cpu_m == 2500
    assert burst.memory == 76 * MIB
    assert burst.units() == {"cpu": 2500, "memory": 76}
    assert pod_limits(spec).units() == {"cpu": 4000, "memory": 1612}
    # A container without a limit is priced at its request (here: none, so 0).
    del spec["initContainers"][0]["resources"]["limits"]["memory"]
    assert pod_burst(spec).memory == 76 * MIB


def test_sidecars_run_beside_the_containers() -> None:
    sidecar = {"restartPolicy": "Always", "resources": {"limits": {"cpu": "1"}}}
    init = {"resources": {"limits": {"cpu": "3"}}}
    main = {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}
    # Containers plus the sidecar: 2 + 1 limit; the init container ran beside the sidecar
    # only when it starts after it: 1 + 3 = 4 dominates.
    assert pod_limits({"initContainers": [sidecar, init], "containers": [main]}).cpu_m == 4000
    assert pod_limits({"initContainers": [init, sidecar], "containers": [main]}).cpu_m == 3000
    assert pod_burst({"initContainers": [sidecar], "containers": [main]}).cpu_m == 1000


def test_no_limit_is_priced_at_the_request_and_bad_quantities_raise() -> None:
    assert pod_burst(_pod(None, ("1Gi", "2Gi"))["spec"]) == Amount(
        Fraction(0), Fraction(MIB * 1024)
    )
    unbounded = {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}
    assert not pod_burst(unbounded).any
    assert pod_limits(unbounded) == Amount(Fraction(1000), Fraction(0))
    with pytest.raises(QuantityError):
        pod_burst(_pod(("1", "lots"))["spec"])


def test_owned_resources_and_levels() -> None:
    policy = _policy(budgets=(5, 0, 10, 5))
    assert levels(policy) == (0.0, 5.0, 10.0)
    assert owned_resources(policy) == {
        f"kube-steer.github.io/limits-{level}pct-{resource}"
        for level in (0, 5, 10)
        for resource in ("cpu", "memory")
    }
    assert owned_resources(_policy("labels")) == frozenset()


def test_steering_by_level() -> None:
    policy = _policy(budgets=(5, 0, 10))
    t5, t0, t10 = policy.spec.tenants
    bursting = _pod(("1", "1050m"), ("1Gi", "1Gi"))["spec"]
    s5 = budget_steering(policy, t5, bursting)
    # Its own pool and every higher one, its limits in each.
    assert s5.requests == {
        "kube-steer.github.io/limits-5pct-cpu": 1050,
        "kube-steer.github.io/limits-5pct-memory": 1024,
        "kube-steer.github.io/limits-10pct-cpu": 1050,
        "kube-steer.github.io/limits-10pct-memory": 1024,
    }
    assert s5.label == ("kube-steer.github.io/burst", "5")
    assert s5.anti_affinity == anti_affinity_term(policy, t5)
    assert s5.anti_affinity["labelSelector"]["matchExpressions"][0]["values"] == ["10"]
    # Not bursting: every pool, lower ones too, and no burst label.
    guaranteed = _pod(("2", "2"), ("1Gi", "1Gi"))["spec"]
    s5g = budget_steering(policy, t5, guaranteed)
    assert set(s5g.requests) == owned_resources(policy) and s5g.label is None
    assert s5g.requests["kube-steer.github.io/limits-0pct-cpu"] == 2000
    s0 = budget_steering(policy, t0, guaranteed)
    assert set(s0.requests) == owned_resources(policy) and s0.label is None
    assert s0.anti_affinity["labelSelector"]["matchExpressions"][0]["values"] == ["5", "10"]
    s10 = budget_steering(policy, t10, bursting)
    assert s10.anti_affinity is None and set(s10.requests) == {
        "kube-steer.github.io/limits-10pct-cpu",
        "kube-steer.github.io/limits-10pct-memory",
    }
    assert budget_steering(_policy("labels"), t5, bursting).empty
    assert budget_steering(policy, None, bursting).empty


def test_pool_capacity_subtracts_only_limits_outside_the_pool() -> None:
    policy = _policy()
    cpu5, mem5 = pool_resource(policy, 5, "cpu"), pool_resource(policy, 5, "memory")
    cpu0 = pool_resource(policy, 0, "cpu")
    inside = PodShare(Amount(Fraction(300), Fraction(0)), frozenset({cpu5}))
    outside = PodShare(Amount(Fraction(200), Fraction(10 * MIB)), frozenset())
    alloc = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    caps = pool_capacities(policy, alloc, [inside, outside])
    assert caps[cpu5] == str(16800 - 200)  # 105 % of 16 cores, less the foreign 200m
    assert caps[mem5] == str(68812 - 10)  # 105 % of 65536 MiB = 68812.8, floored
    assert caps[cpu0] == str(16000 - 200 - 300)  # the 5 % pod is outside the 0 % pool
    overrun = PodShare(Amount(Fraction(20000), Fraction(0)), frozenset())
    assert pool_capacities(policy, alloc, [overrun])[cpu5] == "0"
    assert pool_capacities(policy, {"cpu": "many"}, [inside]) == {}


def test_pod_share_reads_pool_requests_of_the_mutated_pod() -> None:
    policy = _policy()
    plan = MutationPlan.from_policy(policy)
    pod = _pod(("1", "1050m"), ("1Gi", "1Gi"))
    mutated = jsonpatch.apply_patch(pod, list(mutate_pod(plan, pod, policy.spec.tenants[0]).ops))
    share = pod_share(policy, mutated["spec"])
    assert share.pools == {
        "kube-steer.github.io/limits-5pct-cpu",
        "kube-steer.github.io/limits-5pct-memory",
    }
    assert share.limits.units() == {"cpu": 1050, "memory": 1024}


def test_mutation_adds_pools_label_and_anti_affinity_once() -> None:
    policy = _policy()
    plan = MutationPlan.from_policy(policy)
    t5, t0 = policy.spec.tenants
    pod = _pod(("1", "1050m"), ("1Gi", "1Gi"))
    mutation = mutate_pod(plan, pod, t5)
    out = jsonpatch.apply_patch(pod, list(mutation.ops))
    resources = out["spec"]["containers"][0]["resources"]
    assert resources["requests"]["kube-steer.github.io/limits-5pct-cpu"] == "1050"
    assert (
        resources["limits"]["kube-steer.github.io/limits-5pct-cpu"] == "1050"
    )  # extended: limit == request
    assert resources["requests"]["cpu"] == "1"  # the pod's own resources are untouched
    assert out["metadata"]["labels"] == {"kube-steer.github.io/burst": "5"}
    assert {"budget:pool", "budget:burst-label"} <= set(mutation.added)
    assert mutate_pod(plan, out, t5).ops == ()  # reinvocation adds nothing

    guaranteed = _pod(("2", "2"), ("1Gi", "1Gi"))
    guaranteed["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
            ]
        }
    }
    out0 = jsonpatch.apply_patch(guaranteed, list(mutate_pod(plan, guaranteed, t0).ops))
    terms = out0["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms[0]["labelSelector"] == {"matchLabels": {"app": "db"}}  # the user's stays
    assert terms[1] == anti_affinity_term(policy, t0)
    assert "labels" not in out0["metadata"]  # nothing bursts: no burst label
    assert mutate_pod(plan, out0, t0).ops == ()


def test_labels_enforcement_leaves_pods_alone() -> None:
    policy = _policy("labels")
    plan = MutationPlan.from_policy(policy)
    pod = _pod(("1", "1050m"), ("1Gi", "1Gi"))
    out = jsonpatch.apply_patch(pod, list(mutate_pod(plan, pod, policy.spec.tenants[0]).ops))
    assert (
        "kube-steer.github.io/limits-5pct-cpu"
        not in out["spec"]["containers"][0]["resources"]["requests"]
    )
    assert "labels" not in out["metadata"]


def test_scheduler_enforcement_needs_a_prefix_outside_kubernetes_io() -> None:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["overcommit"] = {"enforcement": "scheduler"}
    doc["spec"]["labelPrefix"] = "node-restriction.kubernetes.io/steer-"
    with pytest.raises(PolicyError) as caught:
        parse_policy(yaml.safe_dump(doc))
    assert any(
        i.path == "spec.overcommit.enforcement" and "reserved" in i.message
        for i in caught.value.issues
    )


# -- the guarantee, as the scheduler would enforce it ------------------------------------------

ALLOCATABLE = {"cpu": "8", "memory": "16Gi", "pods": "110"}
_CPU_M = 8000
_MEM = 16 * 1024 * MIB

pods_st = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 2]),  # tenant index: budgets 5, 0, 10
        st.integers(100, 3000),  # cpu request, millicores
        # cpu burst, % of the request (tenants cap it at their budget); 0 often, so pods
        # that do not burst (and may share nodes with lower budgets) are common.
        st.sampled_from([0, 0, 0, 2, 5, 12]),
        st.integers(64, 4096),  # memory request, MiB
        st.sampled_from([0, 0, 0, 2, 5, 12]),
    ),
    max_size=25,
)
foreign_st = st.lists(
    st.tuples(
        st.integers(100, 2000), st.integers(0, 1500), st.integers(64, 2048), st.integers(0, 1024)
    ),
    max_size=3,
)


def _admit(
    policy: Policy, foreign: list[tuple[int, int, int, int]], arrivals: list[Any]
) -> list[Any]:
    """Bind pods in order the way the scheduler's filters would, given the published pools;
    returns the pods on the node (tenant, request, limit) per resource."""
    tenants = policy.spec.tenants
    shares = []
    bound: list[tuple[int | None, int, int, int, int, dict[str, int], dict[str, str]]] = []
    for cpu, cburst, mem, mburst in foreign:
        spec = _pod((f"{cpu}m", f"{cpu + cburst}m"), (f"{mem}Mi", f"{mem + mburst}Mi"))["spec"]
        shares.append(pod_share(policy, spec))
        bound.append((None, cpu, cpu + cburst, mem, mem + mburst, {}, {}))
    capacity = {k: int(v) for k, v in pool_capacities(policy, ALLOCATABLE, shares).items()}
    for t, cpu, cpct, mem, mpct in arrivals:
        tenant = tenants[t]
        cap = tenant.overcommit_percent or 0
        climit = cpu + cpu * min(cpct, cap) // 100
        mlimit = mem + mem * min(mpct, cap) // 100
        spec = _pod((f"{cpu}m", f"{climit}m"), (f"{mem}Mi", f"{mlimit}Mi"))["spec"]
        steering = budget_steering(policy, tenant, spec)
        used_cpu = sum(p[1] for p in bound) + cpu
        used_mem = sum(p[3] for p in bound) + mem
        if used_cpu > _CPU_M or used_mem * MIB > _MEM:
            continue  # NodeResourcesFit: requests
        pools = {k: sum(p[5].get(k, 0) for p in bound) + v for k, v in steering.requests.items()}
        if any(pools[k] > capacity.get(k, 0) for k in pools):
            continue  # NodeResourcesFit: extended resources
        labels = dict([steering.label]) if steering.label else {}

        def repels(term: Any, other_labels: dict[str, str]) -> bool:
            expr = term["labelSelector"]["matchExpressions"][0]
            return other_labels.get(expr["key"]) in expr["values"]

        mine = steering.anti_affinity
        if mine is not None and any(repels(mine, p[6]) for p in bound):
            continue  # InterPodAffinity: the incoming pod's anti-affinity
        if any(
            p[0] is not None
            and (term := anti_affinity_term(policy, tenants[p[0]])) is not None
            and repels(term, labels)
            for p in bound
        ):
            continue  # InterPodAffinity: an existing pod's anti-affinity
        bound.append((t, cpu, climit, mem, mlimit, dict(steering.requests), labels))
    return bound


@settings(max_examples=300, deadline=None)
@given(foreign=foreign_st, arrivals=pods_st)
def test_property_every_present_tenant_budget_holds_after_any_arrival_order(
    foreign: list[tuple[int, int, int, int]], arrivals: list[Any]
) -> None:
    policy = _policy(budgets=(5, 0, 10))
    bound = _admit(policy, foreign, arrivals)
    limits_cpu = sum(p[2] for p in bound)
    limits_mem = sum(p[4] for p in bound)
    for t in {p[0] for p in bound if p[0] is not None}:
        budget = policy.spec.tenants[t].overcommit_percent or 0
        assert limits_cpu * 100 <= _CPU_M * (100 + budget), (t, bound)
        assert limits_mem * MIB * 100 <= _MEM * (100 + budget), (t, bound)


def test_quantities_parse_as_the_pool_arithmetic_expects() -> None:
    assert parse_quantity("16Gi") / MIB == 16384
