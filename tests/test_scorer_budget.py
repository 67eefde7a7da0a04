"""Budget pools on the scorer side (steer/core/budget.py): planning the extended resources each
node carries, the pod ledger that feeds it, the writer's status patches, and the service
publishing and republishing them against the Kubernetes API stand-in."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from scorer.explain import explain_pod, node_detail
from scorer.hot import BindingWindow, PodBindingWatcher
from scorer.kubeapi import MERGE_PATCH, KubeJson, pod_path
from scorer.ledger import BoundPod, PodLedger
from scorer.loop import ScorerLoop
from scorer.model import NodeState
from scorer.plan import ManagedRecord, NodePlan, ScorerMemory, managed_key, plan_cycle
from scorer.service import Scorer
from scorer.writer import NodeApi, NodeWriter, RateLimiter
from steer.apistub import ApiStub
from steer.apistub.synthetic import synthetic_node
from steer.core.budget import PodShare, budget_steering, pod_share
from steer.core.policy import Policy, parse_policy
from tests.scorer_support import SMALL_POLICY

T0 = 1_800_000_000.0
CPU5 = "kube-steer.github.io/limits-5pct-cpu"
MEM5 = "kube-steer.github.io/limits-5pct-memory"
CPU0 = "kube-steer.github.io/limits-0pct-cpu"
MEM0 = "kube-steer.github.io/limits-0pct-memory"
ALL_POOLS = {CPU0, MEM0, CPU5, MEM5}
MANAGED = "kube-steer.github.io/managed"
GPU = "nvidia.com/gpu"


def budget_policy(enforcement: str = "scheduler", level: int = 5) -> Policy:
    """SMALL_POLICY (dept-b, budget 0) plus dept-a with `level` %, enforced by `enforcement`."""
    return parse_policy(
        SMALL_POLICY
        + f"""\
    - name: dept-a
      namespaceSelector: {{matchLabels: {{tenant: dept-a}}}}
      overcommitPercent: {level}
  overcommit: {{enforcement: {enforcement}}}
"""
    )


POLICY = budget_policy()


def node_state(
    name: str = "n1",
    *,
    allocatable: Mapping[str, str] | None = None,
    capacity: Mapping[str, str] | None = None,
    record: ManagedRecord | None = None,
) -> NodeState:
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110", GPU: "2", **(allocatable or {})}
    cap = dict(alloc) if capacity is None else {**alloc, **capacity}
    text = record.text() if record is not None else None
    return NodeState(
        name=name,
        allocatable=alloc,
        capacity=cap,
        annotations={MANAGED: text} if text else {},
    )


def plan_one(
    node: NodeState, shares: Mapping[str, Any] | None, policy: Policy = POLICY
) -> NodePlan:
    cycle, _ = plan_cycle(policy, [node], {}, ScorerMemory(), T0, pod_shares=shares)
    plan = cycle.node(node.name)
    assert plan is not None
    return plan


def pod_spec(
    requests: Mapping[str, str], limits: Mapping[str, str], extra: Mapping[str, int] | None = None
) -> dict[str, Any]:
    reqs: dict[str, Any] = dict(requests)
    reqs.update({k: str(v) for k, v in (extra or {}).items()})
    return {"containers": [{"name": "c", "resources": {"requests": reqs, "limits": dict(limits)}}]}


# Limits of 2 cores and 1536 MiB, in no pool: a pod of a namespace no tenant owns.
FOREIGN = pod_spec({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1536Mi"})


def tenant_spec(burst_cpu: str = "100m") -> dict[str, Any]:
    """A dept-a pod as the webhook would leave it: its pool requests come from budget_steering."""
    spec = pod_spec({"cpu": "1", "memory": "1Gi"}, {"cpu": f"{1000 + int(burst_cpu[:-1])}m"})
    spec["containers"][0]["resources"]["limits"]["memory"] = "1Gi"
    tenant = next(t for t in POLICY.spec.tenants if t.name == "dept-a")
    steering = budget_steering(POLICY, tenant, spec)
    spec["containers"][0]["resources"]["requests"].update(
        {k: str(v) for k, v in steering.requests.items()}
    )
    return spec


# ------------------------------------------------------------------------------ planning


EMPTY = {CPU0: "8000", MEM0: "32768", CPU5: "8400", MEM5: "34406"}


def test_pools_are_the_room_minus_the_limits_outside_them() -> None:
    empty = plan_one(node_state(), {})
    # 105 % of 8 cores = 8400 m; 105 % of 32 GiB = 34406.4 MiB, floored; 100 % for budget 0.
    assert empty.resource_changes == EMPTY
    assert empty.changed
    record = ManagedRecord.parse(empty.annotation_changes[MANAGED])
    assert record.resources == ALL_POOLS

    shares = {"n1": (pod_share(POLICY, FOREIGN), pod_share(POLICY, tenant_spec()))}
    busy = plan_one(node_state(), shares)
    # The foreign pod's limits (2000 m, 1536 MiB) are outside every pool; the bursting dept-a
    # pod (1100 m, 1024 MiB) is inside the 5 % pool and outside the 0 % one.
    assert busy.resource_changes == {
        CPU5: str(8400 - 2000),
        MEM5: str(34406 - 1536),
        CPU0: str(8000 - 2000 - 1100),
        MEM0: str(32768 - 1536 - 1024),
    }
    cpu = next(p for p in busy.pools if p.resource == CPU5)
    assert (cpu.room, cpu.outside_limits, cpu.outside_pods, cpu.capacity) == (8400, 2000, 1, "6400")
    cpu0 = next(p for p in busy.pools if p.resource == CPU0)
    assert (cpu0.outside_limits, cpu0.outside_pods) == (3100, 2)


def test_nothing_is_written_when_the_node_already_carries_the_pools() -> None:
    # 20 cores: 100 % = 20000 m, which the apiserver stores as "20k" (canonical form).
    carried = {**EMPTY, CPU0: "20k", CPU5: "21k"}
    record = ManagedRecord(resources=frozenset(carried))
    node = node_state(allocatable={"cpu": "20", **carried}, record=record)
    plan = plan_one(node, {})
    assert plan.resource_changes == {}
    assert MANAGED not in plan.annotation_changes
    assert not plan.changed


def test_capacity_is_rewritten_when_only_it_differs() -> None:
    node = node_state(
        allocatable=EMPTY,
        capacity={CPU5: "0"},  # e.g. a kubelet that re-registered its node
        record=ManagedRecord(resources=frozenset(EMPTY)),
    )
    assert plan_one(node, {}).resource_changes == {CPU5: "8400"}


def test_without_a_synced_ledger_no_pool_is_set() -> None:
    plan = plan_one(node_state(), None)
    assert plan.resource_changes == {}
    assert MANAGED not in plan.annotation_changes
    assert [p.capacity for p in plan.pools] == [None, None, None, None]
    assert [p.room for p in plan.pools] == [8000, 32768, 8400, 34406]
    # Values published earlier stay as they are (neither grown nor withdrawn).
    record = ManagedRecord(resources=frozenset({CPU5}))
    carried = plan_one(node_state(allocatable={CPU5: "123"}, record=record), None)
    assert carried.resource_changes == {}
    assert MANAGED not in carried.annotation_changes


def test_only_pools_we_published_are_removed() -> None:
    old10 = "kube-steer.github.io/limits-10pct-cpu"
    record = ManagedRecord(labels=frozenset(), resources=frozenset({old10, CPU5}))
    node = node_state(
        allocatable={
            old10: "800",  # ours (recorded), its level left the policy: removed
            "kube-steer.github.io/limits-7pct-cpu": "560",  # our prefix, never recorded: not ours to touch
            "example.com/dongle": "4",  # a foreign extended resource
            CPU5: "8400",
        },
        record=record,
    )
    plan = plan_one(node, {})
    assert plan.resource_changes == {old10: None, MEM5: "34406", CPU0: "8000", MEM0: "32768"}
    assert ManagedRecord.parse(plan.annotation_changes[MANAGED]).resources == ALL_POOLS
    # Removal needs no pod data: it also happens while the ledger is not synced.
    unsynced = plan_one(node, None)
    assert unsynced.resource_changes == {old10: None}
    assert ManagedRecord.parse(unsynced.annotation_changes[MANAGED]).resources == {CPU5}


def test_turning_enforcement_off_withdraws_our_pools_only() -> None:
    node = node_state(
        allocatable={**EMPTY, "example.com/dongle": "4"},
        record=ManagedRecord(
            labels=frozenset({"kube-steer.github.io/score-util"}), resources=frozenset(EMPTY)
        ),
    )
    plan = plan_one(node, {}, budget_policy("labels"))
    assert plan.resource_changes == dict.fromkeys(EMPTY)
    assert plan.pools == ()
    assert MANAGED not in node.annotations or plan.annotation_changes[MANAGED] is None


def test_foreign_resources_never_appear_in_a_plan() -> None:
    plan = plan_one(node_state(allocatable={"example.com/dongle": "4"}), {})
    assert set(plan.resource_changes) == ALL_POOLS
    for p in (plan_one(node_state(), {}, budget_policy("labels")), plan_one(node_state(), None)):
        assert p.resource_changes == {}


def test_managed_record_stays_backward_compatible() -> None:
    old = '{"labels":["kube-steer.github.io/score-util"],"taints":["kube-steer.github.io/gpu-hot"]}'
    record = ManagedRecord.parse(old)
    assert record.resources == frozenset()
    assert record.text() == old  # a node without pools keeps the exact same annotation
    new = ManagedRecord(
        labels=frozenset({"kube-steer.github.io/score-util"}), resources=frozenset({CPU5})
    )
    assert json.loads(new.text() or "") == {
        "labels": ["kube-steer.github.io/score-util"],
        "taints": [],
        "resources": [CPU5],
    }
    assert ManagedRecord.parse(new.text()) == new
    assert ManagedRecord(resources=frozenset({CPU5})).text() is not None


def test_explain_shows_pools_and_what_decided_them() -> None:
    shares = {"n1": (pod_share(POLICY, FOREIGN),)}
    cycle, _ = plan_cycle(POLICY, [node_state()], {}, ScorerMemory(), T0, pod_shares=shares)
    detail = node_detail(POLICY, cycle, "n1")
    assert detail is not None
    pools = detail["budgetPools"]
    assert pools["enforcement"] == "scheduler" and pools["podLedgerSynced"] is True
    cpu = next(p for p in pools["pools"] if p["resource"] == CPU5)
    assert cpu["capacity"] == "6400" and cpu["room"] == 8400
    assert cpu["outsideLimits"] == 2000 and cpu["outsidePods"] == 1
    assert cpu["why"] == (
        "6400 = max(0, 8400 (105% of allocatable, millicores) - 2000 (limits of 1 pod(s) "
        "taking nothing from this pool))"
    )
    assert pools["pendingResourceChanges"][CPU5] == "6400"
    unsynced, _ = plan_cycle(POLICY, [node_state()], {}, ScorerMemory(), T0)
    later = node_detail(POLICY, unsynced, "n1")
    assert later is not None and later["budgetPools"]["podLedgerSynced"] is False


# ------------------------------------------------------------------------------ ledger


def pod(
    uid: str,
    node: str | None = "n1",
    spec: Mapping[str, Any] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}], **(spec or FOREIGN)}
    if node:
        body["nodeName"] = node
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "default"},
        "spec": body,
        "status": {"phase": phase},
    }


def test_ledger_follows_events() -> None:
    ledger = PodLedger()
    assert not ledger.synced and ledger.shares(POLICY) is None
    assert ledger.replace([pod("a"), pod("b", "n2"), pod("done", phase="Succeeded")]) == {
        "n1",
        "n2",
    }
    assert ledger.synced and len(ledger) == 2
    shares = ledger.shares(POLICY)
    assert shares is not None and set(shares) == {"n1", "n2"}
    generation = ledger.generation

    # A status update that changes nothing the pools count: no change, no republish.
    assert (
        ledger.apply("MODIFIED", {**pod("a"), "status": {"phase": "Running", "podIP": "x"}})
        == set()
    )
    assert ledger.generation == generation
    assert ledger.apply("ADDED", pod("c", spec=tenant_spec())) == {"n1"}
    assert ledger.apply("MODIFIED", pod("a", phase="Failed")) == {"n1"}  # terminal: released
    assert ledger.apply("DELETED", pod("b", "n2")) == {"n2"}
    assert ledger.apply("DELETED", pod("b", "n2")) == set()
    assert ledger.apply("BOOKMARK", {"metadata": {"resourceVersion": "9"}}) == set()
    shares = ledger.shares(POLICY)
    assert shares is not None and set(shares) == {"n1"}
    assert [s.pools for s in shares["n1"]] == [frozenset({CPU5, MEM5})]
    assert ledger.generation == generation + 3

    ledger.desync()
    assert not ledger.synced and ledger.shares(POLICY) is None
    assert ledger.replace([pod("c", spec=tenant_spec())]) == set()
    assert ledger.synced


def test_ledger_keeps_only_resources() -> None:
    full = pod("a")
    full["spec"]["containers"][0].update({"env": [{"name": "X", "value": "y" * 1000}]})
    full["spec"]["initContainers"] = [
        {"name": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    ]
    entry = BoundPod.of(full)
    assert entry is not None and entry.node == "n1"
    assert "env" not in entry.spec["containers"][0]
    assert entry.spec["initContainers"][0]["restartPolicy"] == "Always"
    assert pod_share(POLICY, entry.spec) == pod_share(POLICY, full["spec"])
    assert BoundPod.of(pod("x", node=None)) is None


def test_ledger_shares_follow_the_policy() -> None:
    ledger = PodLedger()
    ledger.replace([pod("c", spec=tenant_spec())])
    first = ledger.shares(POLICY)
    assert first is not None and first["n1"][0].pools == {CPU5, MEM5}
    # Another level: the tenant pod's requests name no pool of that policy any more.
    other = ledger.shares(budget_policy(level=10))
    assert other is not None and other["n1"][0].pools == frozenset()


# ------------------------------------------------------------------------ against the stub


def stub_pod(name: str, node: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{**spec["containers"][0], "image": "x"}],
        },
    }


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s}s (last {value!r})")
        time.sleep(0.02)


@pytest.fixture
def watched(
    apistub: ApiStub, kube_client: client.ApiClient
) -> Iterator[tuple[PodLedger, PodBindingWatcher, threading.Event]]:
    ledger = PodLedger()
    changed = threading.Event()
    watcher = PodBindingWatcher(
        kube_client,
        BindingWindow(),
        window_s=lambda: 60.0,
        ledger=ledger,
        on_binding=changed.set,
        timeout_s=5,
        backoff_s=0.05,
        page_size=2,
    )
    yield ledger, watcher, changed
    watcher.stop()


def node_pods(ledger: PodLedger) -> dict[str, int]:
    shares = ledger.shares(POLICY) or {}
    return {node: len(s) for node, s in shares.items()}


def test_watcher_lists_then_follows_pods(
    apistub: ApiStub,
    kube_client: client.ApiClient,
    watched: tuple[PodLedger, PodBindingWatcher, threading.Event],
) -> None:
    ledger, watcher, changed = watched
    for i in range(3):  # more than a page: the list follows `continue` tokens
        apistub.create("pods", stub_pod(f"early-{i}", "node-1", FOREIGN))
    apistub.create(
        "pods",
        {
            "metadata": {"name": "pending", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
    )
    watcher.start()
    wait_for("synced", lambda: ledger.synced)
    assert node_pods(ledger) == {"node-1": 3}

    changed.clear()
    apistub.create("pods", stub_pod("late", "node-2", FOREIGN))
    wait_for("late pod", lambda: node_pods(ledger).get("node-2") == 1)
    assert changed.wait(5)
    apistub.delete("pods", "early-0", "default")
    wait_for("deletion", lambda: node_pods(ledger).get("node-1") == 2)
    KubeJson(kube_client).request(
        "PATCH",
        pod_path("default", "early-1") + "/status",
        body={"status": {"phase": "Succeeded"}},
        content_type=MERGE_PATCH,
    )
    wait_for("completion", lambda: node_pods(ledger).get("node-1") == 1)
    assert watcher.lists == 1


def test_watcher_lists_again_after_410(
    apistub: ApiStub, watched: tuple[PodLedger, PodBindingWatcher, threading.Event]
) -> None:
    ledger, watcher, _ = watched
    apistub.create("pods", stub_pod("a", "node-1", FOREIGN))
    watcher.start()
    wait_for("synced", lambda: ledger.synced and node_pods(ledger) == {"node-1": 1})
    watcher.stop()
    # Changes the watcher cannot see, and history that no longer reaches back to it.
    apistub.delete("pods", "a", "default")
    apistub.create("pods", stub_pod("b", "node-2", FOREIGN))
    apistub.expire_watch_history()
    watcher.start()
    wait_for("re-list", lambda: watcher.lists == 2 and ledger.synced)
    assert node_pods(ledger) == {"node-2": 1}


# ----------------------------------------------------------------------------- writes


@pytest.fixture
def stub_nodes(apistub: ApiStub) -> None:
    for name in ("node-1", "node-2"):
        apistub.add_node(synthetic_node(name, gpus=2))


def status_of(apistub: ApiStub, name: str) -> dict[str, Any]:
    status: dict[str, Any] = apistub.get("nodes", name)["status"]
    return status


# synthetic_node: 4 cores, 8 GiB, 110 pods, 2 GPUs.
POOLS = {CPU0: "4000", MEM0: "8192", CPU5: "4200", MEM5: "8601"}


def test_writer_patches_only_changed_pools_into_status(
    apistub: ApiStub, kube_client: client.ApiClient, stub_nodes: None
) -> None:
    api = NodeApi(KubeJson(kube_client))
    writer = NodeWriter(api, RateLimiter(1000, 1000), sleep=lambda _s: None)
    nodes = api.list_nodes()
    cycle, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), T0, pod_shares={})
    apistub.clear_requests()
    report = writer.apply(POLICY, cycle, nodes)
    assert report.nodes_written == 2 and report.requests == 4  # status + metadata per node
    assert apistub.count("PATCH", "/status") == 2
    for name in ("node-1", "node-2"):
        status = status_of(apistub, name)
        for part in ("capacity", "allocatable"):
            assert {k: status[part][k] for k in POOLS} == POOLS
            assert status[part][GPU] == "2" and status[part]["cpu"] == "4"
    result = next(r for r in report.results if r.node == "node-1")
    assert result.resources_written == 4

    # A pool that shrinks: one status patch, nothing else.
    nodes = api.list_nodes()
    shares = {"node-1": (pod_share(POLICY, FOREIGN),)}
    cycle, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), T0, pod_shares=shares)
    assert [p.node for p in cycle.changes] == ["node-1"]
    apistub.clear_requests()
    report = writer.apply(POLICY, cycle, nodes)
    assert report.requests == 1 and apistub.count("PATCH", "/status") == 1
    assert status_of(apistub, "node-1")["allocatable"][CPU5] == "2200"  # 4200 - 2000

    # A retried 503 on the status write, then success.
    nodes = api.list_nodes()
    cycle, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), T0, pod_shares={})
    apistub.fail_next_writes(1, 503, path_contains="/status")
    report = writer.apply(POLICY, cycle, nodes)
    assert report.requests == 2 and report.nodes_written == 1
    assert status_of(apistub, "node-1")["capacity"][CPU5] == "4200"

    # Enforcement off: our pools leave, the GPUs stay.
    nodes = api.list_nodes()
    cycle, _ = plan_cycle(budget_policy("labels"), nodes, {}, ScorerMemory(), T0)
    writer.apply(budget_policy("labels"), cycle, nodes)
    for name in ("node-1", "node-2"):
        status = status_of(apistub, name)
        assert not set(POOLS) & (set(status["capacity"]) | set(status["allocatable"]))
        assert status["allocatable"][GPU] == "2"
        annotations = apistub.get("nodes", name)["metadata"].get("annotations") or {}
        assert "resources" not in json.loads(annotations.get(managed_key(POLICY)) or "{}")


NO_PROMETHEUS = "http://127.0.0.1:9"  # nothing listens: every query fails, pools need none


def test_scorer_publishes_pools_and_republishes_on_a_binding(
    apistub: ApiStub,
    kube_client: client.ApiClient,
    stub_nodes: None,
    watched: tuple[PodLedger, PodBindingWatcher, threading.Event],
) -> None:
    ledger, watcher, _ = watched
    api = NodeApi(KubeJson(kube_client))
    scorer = Scorer(
        lambda: POLICY, api, prometheus_url=NO_PROMETHEUS, bindings=watcher.window, ledger=ledger
    )
    try:
        first = scorer.run_cycle()  # the watch has not listed yet: nothing to publish
        assert first.report is not None and first.report.requests == 0
        assert CPU5 not in status_of(apistub, "node-1")["allocatable"]

        loop = ScorerLoop(scorer, hot_refresh_seconds=600, wake_delay_seconds=0.05)
        watcher.on_binding = loop.wake
        loop.start()  # runs a first cycle at once
        watcher.start()
        try:
            wait_for(
                "pools published",
                lambda: all(
                    status_of(apistub, n)["allocatable"].get(CPU5) == "4200"
                    for n in ("node-1", "node-2")
                ),
                timeout_s=30,  # generous: the suite runs on shared 2-core machines
            )
            assert status_of(apistub, "node-1")["capacity"][MEM5] == "8601"
            requests = scorer.metrics.write_requests._value.get
            wait_for("status + metadata per node counted", lambda: requests() == 4)
            apistub.create("pods", stub_pod("foreign", "node-1", FOREIGN))
            started = time.monotonic()
            wait_for(
                "pool shrunk",
                lambda: status_of(apistub, "node-1")["allocatable"][CPU5] == "2200",
                timeout_s=30,
            )
            # The wake-up, not the 600 s refresh job (a liveness bound, not a benchmark).
            assert time.monotonic() - started < 30
            assert status_of(apistub, "node-1")["allocatable"][CPU0] == "2000"
            assert status_of(apistub, "node-2")["allocatable"][CPU5] == "4200"
            wait_for("one status patch counted", lambda: requests() == 5)
            apistub.delete("pods", "foreign", "default")
            wait_for(
                "pool restored",
                lambda: status_of(apistub, "node-1")["allocatable"][CPU5] == "4200",
            )
        finally:
            loop.stop()
        last = scorer.last
        assert last is not None
        detail = node_detail(POLICY, last.plan, "node-1")
        assert detail is not None and detail["budgetPools"]["podLedgerSynced"]
    finally:
        scorer.close()


def test_dry_run_writes_no_pool(
    apistub: ApiStub, kube_client: client.ApiClient, stub_nodes: None
) -> None:
    ledger = PodLedger()
    ledger.replace([])
    scorer = Scorer(
        lambda: POLICY,
        NodeApi(KubeJson(kube_client)),
        prometheus_url=NO_PROMETHEUS,
        ledger=ledger,
        dry_run=True,
    )
    try:
        apistub.clear_requests()
        result = scorer.run_cycle()
        assert result.report is None
        assert {p.node for p in result.plan.changes} == {"node-1", "node-2"}
        assert apistub.count("PATCH") == 0
    finally:
        scorer.close()


def test_share_of_a_pool_pod_names_its_pools() -> None:
    share = pod_share(POLICY, tenant_spec())
    assert share == PodShare(share.limits, frozenset({CPU5, MEM5}))
    assert share.limits.units() == {"cpu": 1100, "memory": 1024}


# ------------------------------------------------------------------------------ explain a pod


def _pod(cpu: str, limit: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": pod_spec(
                        {"cpu": cpu, "memory": "1Gi"}, {"cpu": limit, "memory": "1Gi"}
                    )["containers"][0]["resources"],
                }
            ]
        },
    }


def test_explain_pod_names_the_pool_and_the_bursting_neighbours_that_exclude_a_node() -> None:
    """n1: a foreign pod (limits 2 cores) and a dept-a pod bursting at 5 % (1.1 cores); n2: a
    dept-b pod, whose anti-affinity keeps 5 % bursts off; n3: empty."""
    dept_b = budget_steering(POLICY, next(t for t in POLICY.spec.tenants if t.name == "dept-b"), {})
    b_spec = pod_spec({"cpu": "100m", "memory": "64Mi"}, {"cpu": "100m", "memory": "64Mi"})
    b_spec["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [dept_b.anti_affinity]
        }
    }
    shares = {
        "n1": (
            pod_share(POLICY, FOREIGN),
            pod_share(POLICY, tenant_spec(), {"kube-steer.github.io/burst": "5"}),
        ),
        "n2": (pod_share(POLICY, b_spec),),
    }
    nodes = [node_state("n1"), node_state("n2"), node_state("n3")]
    cycle, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), T0, pod_shares=shares)
    assert cycle.node("n1").bursting == {"5": 1} and cycle.node("n2").repelled == {"5"}

    # dept-a, 6 cores bursting to 6.3: n1's 5 % cpu pool has 6400 - 1100 = 5300 free.
    a = explain_pod(
        POLICY,
        cycle,
        nodes,
        _pod("6", "6300m"),
        {"tenant": "dept-a", "kube-steer.github.io/enabled": "true"},
    )
    verdicts = {v.node: v for v in a.verdicts}
    (pool,) = verdicts["n1"].exclusions
    assert pool.rule == "budget:dept-a"
    assert pool.reason == (
        "kube-steer.github.io/limits-5pct-cpu: the pod needs 6300 millicores, 5300 free "
        "(6400 published - 1100 taken by pods in the pool)"
    )
    (repelled,) = verdicts["n2"].exclusions
    assert "keep such pods off" in repelled.reason
    assert verdicts["n3"].allowed
    # A smaller dept-a pod fits n1's pool.
    small = explain_pod(
        POLICY,
        cycle,
        nodes,
        _pod("1", "1050m"),
        {"tenant": "dept-a", "kube-steer.github.io/enabled": "true"},
    )
    assert {v.node for v in small.verdicts if v.allowed} == {"n1", "n3"}

    # dept-b (budget 0, not bursting): n1 holds a 5 % burst, which its anti-affinity refuses.
    b = explain_pod(
        POLICY,
        cycle,
        nodes,
        _pod("100m", "100m"),
        {"tenant": "dept-b", "kube-steer.github.io/enabled": "true"},
    )
    verdicts = {v.node: v for v in b.verdicts}
    assert [e.reason for e in verdicts["n1"].exclusions] == [
        "pods bursting at a higher budget run here (1 at 5 %): the pod's anti-affinity keeps it off"
    ]
    assert verdicts["n2"].allowed and verdicts["n3"].allowed
    body = b.to_dict()
    assert "budget:dept-b" in str(body)


def test_a_ledger_synced_with_no_pods_triggers_the_republish(
    apistub: ApiStub, kube_client: client.ApiClient, stub_nodes: None
) -> None:
    """The pod list can come back empty (a new cluster): the ledger is then synced but has no
    pods, and the next refresh must still publish the pools rather than wait a whole cycle."""
    ledger = PodLedger()
    scorer = Scorer(
        lambda: POLICY,
        NodeApi(KubeJson(kube_client)),
        prometheus_url=NO_PROMETHEUS,
        ledger=ledger,
    )
    try:
        scorer.run_cycle()  # not synced yet: no pool
        assert CPU5 not in status_of(apistub, "node-1")["allocatable"]
        ledger.replace([])
        assert len(ledger) == 0 and ledger.synced
        result = scorer.refresh_hot()
        assert result is not None
        assert status_of(apistub, "node-1")["allocatable"][CPU5] == "4200"
    finally:
        scorer.close()
