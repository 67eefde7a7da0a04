"""Overcommit budgets enforced by the scheduler (steer/core/budget.py): what the webhook adds to
a tenant pod, the node's pool and floor, and the gates the scorer publishes.

The guarantee is checked as a property over any sequence of arrivals, departures and scorer
writes: every tenant pod bound the way the scheduler's filters would (requests within
allocatable, every pool and gate request within what is published and free) leaves the node's
limits within every present tenant's budget, and nothing published is ever below what the
node's bound pods hold (so a kubelet restart re-admits every one of them)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from steer.core import budget as budget_module
from steer.core.budget import (
    FLOOR_SETTLE_S,
    MIB,
    Amount,
    Floor,
    PodUsage,
    budget_gate,
    container_pool_units,
    levels,
    next_floor,
    node_pools,
    node_usage,
    owned_resources,
    pod_bursts,
    pod_limits,
    pod_usage,
    pool_resource,
    tenant_budget,
    wanted_floor,
)
from steer.core.gates import gate_capacity
from steer.core.mutation import MutationPlan, mutate_pod
from steer.core.policy import Policy, parse_policy
from steer.core.quantity import QuantityError, parse_amounts, parse_quantity
from tests.conftest import EXAMPLE_POLICY

PREFIX = "kube-steer.github.io/"


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


def test_limits_are_summed_as_the_scheduler_sums_containers() -> None:
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
    # cpu: the init container's 4 dominates the containers' 1.55 (max(sum, largest init)).
    assert pod_limits(spec).units() == {"cpu": 4000, "memory": 1612}
    assert pod_bursts(spec)
    assert container_pool_units(spec["containers"][0]) == {"cpu": 1050, "memory": 1100}
    # A container without a limit is priced at its request.
    assert container_pool_units({"resources": {"requests": {"cpu": "250m"}}}) == {
        "cpu": 250,
        "memory": 0,
    }


def test_sidecars_run_beside_the_containers() -> None:
    sidecar = {"restartPolicy": "Always", "resources": {"limits": {"cpu": "1"}}}
    init = {"resources": {"limits": {"cpu": "3"}}}
    main = {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}
    assert pod_limits({"initContainers": [sidecar, init], "containers": [main]}).cpu_m == 4000
    assert pod_limits({"initContainers": [init, sidecar], "containers": [main]}).cpu_m == 3000


def test_bad_quantities_raise() -> None:
    unbounded = {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}
    assert not pod_bursts(unbounded)
    assert pod_limits(unbounded) == Amount(Fraction(1000), Fraction(0))
    with pytest.raises(QuantityError):
        pod_bursts(_pod(("1", "lots"))["spec"])


def test_owned_resources_and_levels() -> None:
    policy = _policy(budgets=(5, 0, 10, 5))
    assert levels(policy) == (0.0, 5.0, 10.0)
    # One pool per node, and a gate for every budget below the highest.
    assert owned_resources(policy) == {
        f"{PREFIX}pool-cpu",
        f"{PREFIX}pool-memory",
        f"{PREFIX}budget-0pct",
        f"{PREFIX}budget-5pct",
    }
    assert owned_resources(_policy("labels")) == {
        f"{PREFIX}overcommit-0pct",
        f"{PREFIX}overcommit-5pct",
    }


def test_a_tenant_pod_takes_its_limits_from_the_pool_and_its_gate() -> None:
    policy = _policy(budgets=(5, 0, 10))
    t5, t0, t10 = policy.spec.tenants
    container = _pod(("1", "1050m"), ("1Gi", "1Gi"))["spec"]["containers"][0]
    b5 = tenant_budget(policy, t5)
    assert b5 is not None and b5.gate == budget_gate(policy, 5)
    assert b5.container_requests(container) == {
        f"{PREFIX}pool-cpu": 1050,
        f"{PREFIX}pool-memory": 1024,
    }
    b10 = tenant_budget(policy, t10)
    assert b10 is not None and b10.gate is None  # the highest budget: every floor admits it
    labels = tenant_budget(_policy("labels"), t0)
    assert labels is not None and labels.pools == () and labels.gate is not None


def test_a_steered_pod_of_no_tenant_takes_its_limits_from_the_pool_at_the_highest_level() -> None:
    """A pod of no tenant shares the room a budget keeps: it requests its limits from the pool
    like a pod of the highest budget (no gate), so it cannot land between two publications and
    break a 0 % tenant's budget (issue: an order-chain replica of no tenant filling a node's
    remaining cpu requests beside a bursting 5 % tenant)."""
    policy = _policy(budgets=(5, 0, 10))
    container = _pod(("500m", "500m"), ("1Gi", "1Gi"))["spec"]["containers"][0]
    nobody = tenant_budget(policy, None)
    assert nobody is not None and not nobody.budgeted
    assert nobody.level == 10 and nobody.gate is None
    assert nobody.container_requests(container) == {
        f"{PREFIX}pool-cpu": 500,
        f"{PREFIX}pool-memory": 1024,
    }
    # Nothing to keep: pools only under scheduler enforcement, and only with a budget to keep.
    assert tenant_budget(_policy("labels"), None) is None
    assert tenant_budget(_policy(budgets=()), None) is None


def test_the_pool_counts_limits_outside_it_and_never_drops_below_what_it_holds() -> None:
    policy = _policy()
    alloc = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    inside = pod_usage(
        {
            "containers": [
                {
                    "resources": {
                        "requests": {"cpu": "300m", f"{PREFIX}pool-cpu": "300"},
                        "limits": {"cpu": "300m"},
                    }
                }
            ]
        }
    )
    outside = pod_usage(_pod(("200m", "200m"), ("10Mi", "10Mi"))["spec"])
    usage = node_usage(policy, [inside, outside])
    cpu, memory = node_pools(policy, parse_amounts(alloc), usage, 5.0)
    assert cpu.capacity == 16800 - 200 and cpu.taken == 300 and cpu.free == 16800 - 200 - 300
    assert memory.capacity == 68812 - 10  # 105 % of 65536 MiB = 68812.8, floored
    # An outside pod takes more than the room: the pool is published at what its pods hold
    # (no new pod fits, none bound is refused by a kubelet restart).
    huge = pod_usage(_pod(("20", "20"))["spec"])
    (cpu, _memory) = node_pools(
        policy, parse_amounts(alloc), node_usage(policy, [inside, huge]), 5.0
    )
    assert cpu.capacity == 300 and cpu.free == 0
    # An allocatable that does not parse is not offered (the apiserver validates Node status):
    # no room, so each pool holds exactly what is taken there, and no new pod fits.
    unreadable = node_pools(policy, parse_amounts({"cpu": "many"}), usage, 0.0)
    assert [(p.room, p.capacity, p.free) for p in unreadable] == [(0, 300, 0), (0, 0, 0)]


def test_a_node_over_the_lowest_budget_of_a_pod_there_reports_by_how_much() -> None:
    """Pods kube-steer does not steer can land between two publications: the pool then says by
    how much the node's limits exceed the room of the lowest budget of a pool pod there."""
    policy = _policy()  # budgets 5 and 0
    alloc = {"cpu": "16", "memory": "64Gi", "pods": "110"}

    def member(cpu_m: int, gate: bool) -> PodUsage:
        requests = {"cpu": f"{cpu_m}m", f"{PREFIX}pool-cpu": str(cpu_m)}
        if gate:
            requests[f"{PREFIX}budget-0pct"] = "1"
        container = {"resources": {"requests": requests, "limits": {"cpu": f"{cpu_m}m"}}}
        return pod_usage({"containers": [container]})

    zero, five = member(4000, gate=True), member(10_500, gate=False)
    outsider = pod_usage(_pod(("1", "2"))["spec"])
    usage = node_usage(policy, [zero, five, outsider])
    cpu, _memory = node_pools(policy, parse_amounts(alloc), usage, 0.0)
    # 4 + 10.5 + 2 cores of limits against the 0 % pod's 16: 500 millicores over.
    assert cpu.promise == 0 and cpu.promise_room == 16_000 and cpu.overrun == 500
    assert cpu.capacity == 14_500  # never below what is held
    # Without the 0 % pod the lowest budget here is 5 %: 16.8 cores of room, nothing over.
    (cpu, _memory) = node_pools(
        policy, parse_amounts(alloc), node_usage(policy, [five, outsider]), 5.0
    )
    assert cpu.promise == 5 and cpu.overrun == 0
    # No pool pod, no promise: outsiders alone are never over a budget.
    (cpu, _memory) = node_pools(
        policy, parse_amounts(alloc), node_usage(policy, [outsider] * 20), 0.0
    )
    assert cpu.promise is None and cpu.overrun == 0


def test_the_floor_rises_in_two_writes_and_falls_at_once() -> None:
    policy = _policy()  # budgets 5 and 0
    burst = pod_usage(
        {
            "containers": [
                {
                    "resources": {
                        "requests": {"cpu": "1", f"{PREFIX}pool-cpu": "1050"},
                        "limits": {"cpu": "1050m"},
                    }
                }
            ]
        }
    )
    guaranteed0 = pod_usage(
        {
            "containers": [
                {
                    "resources": {
                        "requests": {
                            "cpu": "1",
                            f"{PREFIX}pool-cpu": "1000",
                            f"{PREFIX}budget-0pct": "1",
                        },
                        "limits": {"cpu": "1"},
                    }
                }
            ]
        }
    )
    empty = node_usage(policy, [])
    assert wanted_floor(policy, empty) == 0.0  # open to every tenant
    bursting = node_usage(policy, [burst])
    assert wanted_floor(policy, bursting) == 5.0
    assert wanted_floor(policy, node_usage(policy, [burst, guaranteed0])) == 0.0
    first = next_floor(policy, bursting, Floor(0.0, 0.0), 100.0)
    assert (first.gates, first.room) == (5.0, 0.0)  # gates close, the room waits
    early = next_floor(policy, bursting, first, 100.0 + FLOOR_SETTLE_S / 2)
    assert (early.gates, early.room) == (5.0, 0.0)
    settled = next_floor(policy, bursting, early, 100.0 + FLOOR_SETTLE_S)
    assert (settled.gates, settled.room) == (5.0, 5.0)
    fallen = next_floor(policy, empty, settled, 200.0)
    assert (fallen.gates, fallen.room) == (0.0, 0.0)


def test_mutation_adds_pool_requests_and_the_gate_once() -> None:
    policy = _policy()
    plan = MutationPlan.from_policy(policy)
    t5, t0 = policy.spec.tenants
    pod = _pod(("1", "1050m"), ("1Gi", "1Gi"))
    mutation = mutate_pod(plan, pod, t5)
    out = jsonpatch.apply_patch(pod, list(mutation.ops))
    resources = out["spec"]["containers"][0]["resources"]
    assert resources["requests"][f"{PREFIX}pool-cpu"] == "1050"
    # Extended resources: the limit equals the request (the API requires it); the pod's own
    # limits stay as they are.
    assert resources["limits"] == {
        "cpu": "1050m",
        "memory": "1Gi",
        f"{PREFIX}pool-cpu": "1050",
        f"{PREFIX}pool-memory": "1024",
    }
    assert resources["requests"]["cpu"] == "1"
    # No burst label and no pod anti-affinity (every pod's PreFilter would scan every pod).
    assert "labels" not in out["metadata"] and "podAntiAffinity" not in out["spec"]["affinity"]
    assert "budget:pool" in mutation.added
    assert mutate_pod(plan, out, t5).ops == ()  # reinvocation adds nothing
    out0 = jsonpatch.apply_patch(pod, list(mutate_pod(plan, pod, t0).ops))
    assert out0["spec"]["containers"][0]["resources"]["requests"][f"{PREFIX}budget-0pct"] == "1"


def test_labels_enforcement_gates_by_the_overcommit_label() -> None:
    policy = _policy("labels")
    plan = MutationPlan.from_policy(policy)
    pod = _pod(("1", "1050m"), ("1Gi", "1Gi"))
    out = jsonpatch.apply_patch(pod, list(mutate_pod(plan, pod, policy.spec.tenants[0]).ops))
    requests = out["spec"]["containers"][0]["resources"]["requests"]
    assert requests[f"{PREFIX}overcommit-5pct"] == "1"
    assert f"{PREFIX}pool-cpu" not in requests


# -- the guarantee, as the scheduler and the kubelet would enforce it ------------------------

ALLOCATABLE = {"cpu": "8", "memory": "16Gi", "pods": "110"}
_CPU_M = 8000
_MEM = 16 * 1024 * MIB

events_st = st.lists(
    st.one_of(
        st.tuples(
            st.just("arrive"),
            st.sampled_from([0, 1, 2]),  # tenant index: budgets 5, 0, 10
            st.integers(100, 3000),  # cpu request, millicores
            # cpu burst, % of the request (tenants cap it at their budget); 0 often.
            st.sampled_from([0, 0, 0, 2, 5, 12]),
            st.integers(64, 4096),  # memory request, MiB
            st.sampled_from([0, 0, 0, 2, 5, 12]),
        ),
        st.tuples(st.just("leave"), st.integers(0, 30)),
        st.tuples(st.just("publish"), st.floats(0, 2 * FLOOR_SETTLE_S)),
    ),
    max_size=40,
)
foreign_st = st.lists(
    st.tuples(
        st.integers(100, 2000), st.integers(0, 1500), st.integers(64, 2048), st.integers(0, 1024)
    ),
    max_size=3,
)


def _spec(cpu: int, climit: int, mem: int, mlimit: int) -> dict[str, Any]:
    spec: dict[str, Any] = _pod((f"{cpu}m", f"{climit}m"), (f"{mem}Mi", f"{mlimit}Mi"))["spec"]
    return spec


@settings(max_examples=300, deadline=None)
@given(foreign=foreign_st, events=events_st)
def test_property_budgets_hold_and_nothing_published_is_below_what_pods_hold(
    foreign: list[tuple[int, int, int, int]], events: list[Any]
) -> None:
    policy = _policy(budgets=(5, 0, 10))
    plan = MutationPlan.from_policy(policy)
    tenants = policy.spec.tenants
    # (tenant index or None, cpu request, cpu limit, mem request, mem limit, steered spec)
    bound: list[tuple[int | None, int, int, int, int, dict[str, Any]]] = []
    for cpu, cburst, mem, mburst in foreign:
        bound.append(
            (
                None,
                cpu,
                cpu + cburst,
                mem,
                mem + mburst,
                _spec(cpu, cpu + cburst, mem, mem + mburst),
            )
        )
    published: dict[str, int] = {}
    floor: Floor | None = None
    now = 0.0

    def held() -> dict[str, int]:
        out: dict[str, int] = {}
        for p in bound:
            for name, amount in pod_usage(p[5]).held.items():
                out[name] = out.get(name, 0) + amount
        return out

    def publish() -> None:
        nonlocal floor
        usage = node_usage(policy, [pod_usage(p[5]) for p in bound])
        floor = next_floor(policy, usage, floor, now)
        for lv in levels(policy)[:-1]:
            gate = budget_gate(policy, lv)
            is_open = lv >= floor.gates
            published[gate.resource] = gate_capacity(
                is_open, usage.held.get(gate.resource, 0), parse_amounts(ALLOCATABLE)
            )
        for pool in node_pools(policy, parse_amounts(ALLOCATABLE), usage, floor.room):
            published[pool.resource] = pool.capacity
        # A kubelet restart now re-admits every bound pod: nothing is below what they hold.
        for name, amount in held().items():
            assert published.get(name, 0) >= amount, (name, published, bound)

    publish()
    for event in events:
        if event[0] == "publish":
            now += event[1]
            publish()
            continue
        if event[0] == "leave":
            tenant_pods = [i for i, p in enumerate(bound) if p[0] is not None]
            if tenant_pods:
                del bound[tenant_pods[event[1] % len(tenant_pods)]]
            continue
        _, t, cpu, cpct, mem, mpct = event
        cap = tenants[t].overcommit_percent or 0
        climit = cpu + cpu * min(cpct, cap) // 100
        mlimit = mem + mem * min(mpct, cap) // 100
        pod = {"metadata": {"name": "p"}, "spec": _spec(cpu, climit, mem, mlimit)}
        steered = jsonpatch.apply_patch(pod, list(mutate_pod(plan, pod, tenants[t]).ops))["spec"]
        if sum(p[1] for p in bound) + cpu > _CPU_M or (sum(p[3] for p in bound) + mem) * MIB > _MEM:
            continue  # NodeResourcesFit: cpu and memory requests
        taken = held()
        wants = pod_usage(steered).held
        if any(taken.get(k, 0) + v > published.get(k, 0) for k, v in wants.items()):
            continue  # NodeResourcesFit: pool and gates, the bound pods counted
        bound.append((t, cpu, climit, mem, mlimit, steered))

    limits_cpu = sum(p[2] for p in bound)
    limits_mem = sum(p[4] for p in bound)
    for t in {p[0] for p in bound if p[0] is not None}:
        budget = tenants[t].overcommit_percent or 0
        assert limits_cpu * 100 <= _CPU_M * (100 + budget), (t, bound)
        assert limits_mem * MIB * 100 <= _MEM * (100 + budget), (t, bound)


def test_quantities_parse_as_the_pool_arithmetic_expects() -> None:
    assert parse_quantity("16Gi") / MIB == 16384
    assert pool_resource(_policy(), "cpu") == f"{PREFIX}pool-cpu"


def _container(requests: dict[str, str], limits: dict[str, str], **extra: str) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests, "limits": limits}, **extra}


def test_pods_with_the_same_resources_share_one_reduction() -> None:
    a = {"containers": [_container({"cpu": "1", "memory": "1Gi"}, {"cpu": "2"})]}
    # Another replica: the same resources, keys in another order, other fields differ.
    b = {
        "containers": [
            {
                "name": "other",
                "image": "x",
                "resources": {"limits": {"cpu": "2"}, "requests": {"memory": "1Gi", "cpu": "1"}},
            }
        ],
        "nodeName": "n2",
    }
    assert pod_usage(a) is pod_usage(b)
    assert pod_usage(a) == budget_module._reduce(a, True, True)
    # Each thing the reduction reads makes another key: the flags, a quantity, an init
    # container's restartPolicy (a sidecar runs beside the containers, an init container
    # before them).
    assert pod_usage(a, replaced=False) == budget_module._reduce(a, True, False)
    assert pod_usage(a, replaced=False) is not pod_usage(a)
    more = {"containers": [_container({"cpu": "1", "memory": "2Gi"}, {"cpu": "2"})]}
    assert pod_usage(more).request_memory == 2 * 2**30
    init = _container({"cpu": "3"}, {})
    sidecar = {**init, "restartPolicy": "Always"}
    with_init = pod_usage({**a, "initContainers": [init]})
    with_sidecar = pod_usage({**a, "initContainers": [sidecar]})
    assert (with_init.request_cpu_m, with_sidecar.request_cpu_m) == (3000, 4000)


def test_the_reduction_cache_is_bounded_and_skips_what_the_api_never_serves() -> None:
    for i in range(budget_module._USAGES_MAX + 10):
        pod_usage({"containers": [_container({"cpu": f"{i + 1}m"}, {})]})
    assert len(budget_module._USAGES) <= budget_module._USAGES_MAX
    odd = {"containers": ({"resources": {"requests": {"cpu": "1"}}},)}  # a tuple, not JSON
    assert pod_usage(odd).request_cpu_m == 1000
