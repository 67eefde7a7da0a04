"""Gates and the budget pool on the scorer side (steer/core/gates.py, budget.py): planning the
resources each node carries, the pod ledger that feeds it, the writer's status patches, and the
service publishing and republishing them against the Kubernetes API stand-in."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.waiting import wait_until
from scorer.cycle.loop import ScorerLoop
from scorer.cycle.plan import ManagedRecord, NodePlan, ScorerMemory, managed_key, plan_cycle
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi, NodeWriter, RateLimiter
from scorer.explain import explain_pod, node_detail
from scorer.model import NodeState
from scorer.watch.bindings import BindingWindow, PodBindingWatcher
from scorer.watch.ledger import BoundPod, PodLedger
from steer.adapters.kubejson import MERGE_PATCH, KubeJson, pod_path
from steer.core.budget import FLOOR_SETTLE_S, PodUsage, pod_usage, tenant_budget
from steer.core.policy import Policy, parse_policy
from tests.scorer_support import SMALL_POLICY

T0 = 1_800_000_000.0
PREFIX = "kube-steer.github.io/"
CPU = f"{PREFIX}pool-cpu"
MEM = f"{PREFIX}pool-memory"
GATE0 = f"{PREFIX}budget-0pct"
HOT = f"{PREFIX}avoid-gpu-hot"
ALL = {CPU, MEM, GATE0, HOT}
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
    node: NodeState,
    usages: Mapping[str, Any] | None,
    policy: Policy = POLICY,
    memory: ScorerMemory | None = None,
    at: float = T0,
) -> NodePlan:
    cycle, _ = plan_cycle(policy, [node], {}, memory or ScorerMemory(), at, pod_usages=usages)
    plan = cycle.node(node.name)
    assert plan is not None
    return plan


def pod_spec(
    requests: Mapping[str, str], limits: Mapping[str, str], extra: Mapping[str, int] | None = None
) -> dict[str, Any]:
    reqs: dict[str, Any] = dict(requests)
    reqs.update({k: str(v) for k, v in (extra or {}).items()})
    return {"containers": [{"name": "c", "resources": {"requests": reqs, "limits": dict(limits)}}]}


# Limits of 2 cores and 1536 MiB, outside the pool: a pod of a namespace no tenant owns.
FOREIGN = pod_spec({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1536Mi"})


def tenant_spec(tenant: str = "dept-a", burst_cpu: str = "100m") -> dict[str, Any]:
    """A tenant pod as the webhook would leave it: pool requests (its limits) and its gate."""
    spec = pod_spec({"cpu": "1", "memory": "1Gi"}, {"cpu": f"{1000 + int(burst_cpu[:-1])}m"})
    spec["containers"][0]["resources"]["limits"]["memory"] = "1Gi"
    budget = tenant_budget(POLICY, POLICY.tenant(tenant))
    assert budget is not None
    requests = budget.container_requests(spec["containers"][0])
    if budget.gate is not None:
        requests[budget.gate.resource] = 1
    spec["containers"][0]["resources"]["requests"].update({k: str(v) for k, v in requests.items()})
    return spec


def usage(spec: Mapping[str, Any]) -> PodUsage:
    return pod_usage(spec)


# ------------------------------------------------------------------------------ planning


EMPTY = {CPU: "8000", MEM: "32768", GATE0: "110", HOT: "110"}


def test_an_empty_node_is_open_to_every_tenant_at_the_lowest_budget() -> None:
    empty = plan_one(node_state(), {})
    # Floor 0 %: 100 % of 8 cores and of 32 GiB; every gate open (one unit per pod it may run).
    assert empty.resource_changes == EMPTY
    assert empty.changed
    record = ManagedRecord.parse(empty.annotation_changes[MANAGED])
    assert record.resources == ALL
    assert empty.floor is not None and (empty.floor.gates, empty.floor.room) == (0.0, 0.0)


def test_the_pool_is_the_room_minus_outside_limits_and_a_burst_raises_the_floor() -> None:
    usages = {"n1": (usage(FOREIGN), usage(tenant_spec()))}
    first = plan_one(node_state(), usages)
    # A dept-a pod bursting at 5 % and nothing of dept-b: the gate of 0 % closes at once, the
    # room of 105 % waits FLOOR_SETTLE_S (a dept-b pod already placed lands under 100 %).
    assert first.floor is not None and (first.floor.gates, first.floor.room) == (5.0, 0.0)
    assert first.resource_changes == {
        CPU: str(8000 - 2000),  # the foreign pod's 2 cores are outside the pool
        MEM: str(32768 - 1536),
        GATE0: "0",
        HOT: "110",
    }
    cpu = next(p for p in first.pools if p.resource == CPU)
    assert (cpu.room, cpu.outside_limits, cpu.outside_pods, cpu.taken) == (8000, 2000, 1, 1100)
    assert cpu.free == 6000 - 1100
    memory = ScorerMemory(floors={"n1": first.floor})
    early = plan_one(node_state(), usages, memory=memory, at=T0 + 1)
    assert early.floor == first.floor
    settled = plan_one(node_state(), usages, memory=memory, at=T0 + FLOOR_SETTLE_S)
    assert settled.floor is not None and settled.floor.room == 5.0
    assert settled.resource_changes[CPU] == str(8400 - 2000)
    assert settled.resource_changes[MEM] == str(34406 - 1536)  # 105 % of 32768, floored


def test_a_steady_node_reuses_its_last_gates_and_pools_and_a_settling_one_does_not() -> None:
    """Planned again with the same Node and pods, a node's gates and pools are the last ones
    (the same objects); a floor still settling is planned again at each moment."""
    node = node_state()
    pods = (usage(FOREIGN), usage(tenant_spec()))
    first = plan_one(node, {"n1": pods})
    assert first.floor is not None and first.floor.room < first.floor.gates  # settling
    memory = ScorerMemory(floors={"n1": first.floor})
    early = plan_one(node, {"n1": pods}, memory=memory, at=T0 + 1)
    settled = plan_one(node, {"n1": pods}, memory=memory, at=T0 + FLOOR_SETTLE_S)
    assert early.floor == first.floor
    assert settled.floor is not None and settled.floor.room == 5.0
    after = plan_one(node, {"n1": pods}, memory=ScorerMemory(floors={"n1": settled.floor}))
    assert after.floor is not None
    steady_memory = ScorerMemory(floors={"n1": after.floor})
    again = plan_one(node, {"n1": pods}, memory=steady_memory, at=T0 + FLOOR_SETTLE_S + 30)
    later = plan_one(node, {"n1": pods}, memory=steady_memory, at=T0 + FLOOR_SETTLE_S + 60)
    assert later.pools is again.pools and later.gates is again.gates
    assert again.floor == after.floor and again.pools == settled.pools
    # Other pods (a new grouping), or a foreign pod gone: planned from them.
    fewer = plan_one(node, {"n1": pods[1:]}, memory=steady_memory, at=T0 + FLOOR_SETTLE_S + 90)
    cpu = next(p for p in fewer.pools if p.resource == CPU)
    assert cpu.outside_limits == 0 and fewer.pools is not again.pools


def test_a_dept_b_pod_keeps_the_floor_at_its_budget() -> None:
    usages = {"n1": (usage(tenant_spec()), usage(tenant_spec("dept-b", "0m")))}
    plan = plan_one(node_state(), usages)
    assert plan.floor is not None and (plan.floor.gates, plan.floor.room) == (0.0, 0.0)
    assert plan.resource_changes[GATE0] == "110" and plan.members == {0.0: 1, 5.0: 1}
    assert plan.bursting == {5.0: 1}


def test_nothing_published_is_below_what_bound_pods_hold() -> None:
    """A kubelet restart re-admits its pods against the node as it is: a pool or gate below
    what they hold would fail them (OutOf<resource>)."""
    big = pod_spec({"cpu": "4", "memory": "1Gi"}, {"cpu": "9", "memory": "1Gi"})
    hot = {"n1": (usage(tenant_spec("dept-b", "0m")), usage(big))}
    plan = plan_one(node_state(), hot)
    # The outside pod's 9 cores exceed the room: the pool is what its pods hold, 0 free.
    cpu = next(p for p in plan.pools if p.resource == CPU)
    assert cpu.capacity == "1000" and cpu.free == 0
    gate = next(g for g in plan.gates if g.resource == GATE0)
    assert gate.open and int(gate.capacity) >= gate.held == 1


def test_nothing_is_written_when_the_node_already_carries_them() -> None:
    # 20 cores: 100 % = 20000 m, which the apiserver stores as "20k" (canonical form).
    carried = {**EMPTY, CPU: "20k"}
    record = ManagedRecord(resources=frozenset(carried))
    node = node_state(allocatable={"cpu": "20", **carried}, record=record)
    plan = plan_one(node, {})
    assert plan.resource_changes == {}
    assert MANAGED not in plan.annotation_changes
    assert not plan.changed


def test_capacity_is_rewritten_when_only_it_differs() -> None:
    node = node_state(
        allocatable=EMPTY,
        capacity={CPU: "0"},  # e.g. a kubelet that re-registered its node
        record=ManagedRecord(resources=frozenset(EMPTY)),
    )
    assert plan_one(node, {}).resource_changes == {CPU: "8000"}


def test_without_a_synced_ledger_nothing_is_set() -> None:
    plan = plan_one(node_state(), None)
    assert plan.resource_changes == {}
    assert MANAGED not in plan.annotation_changes
    assert plan.pools == () and plan.gates == ()
    # Values published earlier stay as they are (neither grown nor withdrawn).
    record = ManagedRecord(resources=frozenset({CPU}))
    carried = plan_one(node_state(allocatable={CPU: "123"}, record=record), None)
    assert carried.resource_changes == {}
    assert MANAGED not in carried.annotation_changes


def test_a_resource_no_longer_owned_stays_at_what_pods_hold_then_goes() -> None:
    old = "kube-steer.github.io/limits-5pct-cpu"  # release 0.2.0's pool
    record = ManagedRecord(labels=frozenset(), resources=frozenset({old, CPU}))
    node = node_state(
        allocatable={
            old: "8400",
            "kube-steer.github.io/limits-7pct-cpu": "560",  # never recorded: not ours
            "example.com/dongle": "4",  # a foreign extended resource
            CPU: "8000",
        },
        record=record,
    )
    holder = pod_spec({"cpu": "1"}, {"cpu": "1"}, {old: 1000})
    plan = plan_one(node, {"n1": (usage(holder),)})
    assert plan.resource_changes[old] == "1000"  # held: kept at exactly that
    assert old in ManagedRecord.parse(plan.annotation_changes[MANAGED]).resources
    gone = plan_one(node, {})
    assert gone.resource_changes[old] is None
    assert ManagedRecord.parse(gone.annotation_changes[MANAGED]).resources == ALL
    assert "kube-steer.github.io/limits-7pct-cpu" not in gone.resource_changes
    # Without pod data nothing is removed: a pod might hold it.
    assert plan_one(node, None).resource_changes == {}


def test_turning_enforcement_off_withdraws_the_pool_and_gates_by_the_label() -> None:
    node = node_state(
        allocatable={**EMPTY, "example.com/dongle": "4"},
        record=ManagedRecord(
            labels=frozenset({"kube-steer.github.io/score-util"}), resources=frozenset(EMPTY)
        ),
    )
    plan = plan_one(node, {}, budget_policy("labels"))
    assert plan.pools == ()
    assert plan.resource_changes == {
        CPU: None,
        MEM: None,
        GATE0: None,
        f"{PREFIX}overcommit-0pct": "110",  # never measured: open (unscoredNodes: allow)
        f"{PREFIX}overcommit-5pct": "110",
    }


def test_foreign_resources_never_appear_in_a_plan() -> None:
    plan = plan_one(node_state(allocatable={"example.com/dongle": "4"}), {})
    assert set(plan.resource_changes) == ALL
    assert plan_one(node_state(), None).resource_changes == {}


def test_managed_record_stays_backward_compatible() -> None:
    old = '{"labels":["kube-steer.github.io/score-util"],"taints":["kube-steer.github.io/gpu-hot"]}'
    record = ManagedRecord.parse(old)
    assert record.resources == frozenset()
    assert record.text() == old  # a node without resources keeps the exact same annotation
    new = ManagedRecord(
        labels=frozenset({"kube-steer.github.io/score-util"}), resources=frozenset({CPU})
    )
    assert json.loads(new.text() or "") == {
        "labels": ["kube-steer.github.io/score-util"],
        "taints": [],
        "resources": [CPU],
    }
    assert ManagedRecord.parse(new.text()) == new


def test_explain_shows_the_pool_floor_and_gates_and_what_decided_them() -> None:
    usages = {"n1": (usage(FOREIGN),)}
    cycle, _ = plan_cycle(POLICY, [node_state()], {}, ScorerMemory(), T0, pod_usages=usages)
    detail = node_detail(POLICY, cycle, "n1")
    assert detail is not None
    pools = detail["budgetPools"]
    assert pools["enforcement"] == "scheduler" and pools["podLedgerSynced"] is True
    cpu = next(p for p in pools["pools"] if p["resource"] == CPU)
    assert cpu["capacity"] == "6000" and cpu["room"] == 8000
    assert cpu["outsideLimits"] == 2000 and cpu["outsidePods"] == 1
    assert cpu["why"] == (
        "6000 = max(0 held by its pods, 8000 (100% of allocatable, millicores) - 2000 "
        "(limits of 1 pod(s) outside the pool))"
    )
    gate = next(g for g in pools["gates"] if g["resource"] == GATE0)
    assert gate["open"] and gate["why"] == "open: floor 0 % <= budget 0 %"
    assert pools["floor"]["room"] == 0.0
    assert pools["pendingResourceChanges"][CPU] == "6000"
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
    assert not ledger.synced and ledger.usages() is None
    assert ledger.replace([pod("a"), pod("b", "n2"), pod("done", phase="Succeeded")]) == {
        "n1",
        "n2",
    }
    assert ledger.synced and len(ledger) == 2
    usages = ledger.usages()
    assert usages is not None and set(usages) == {"n1", "n2"}
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
    usages = ledger.usages()
    assert usages is not None and set(usages) == {"n1"}
    assert [set(u.held) for u in usages["n1"]] == [{CPU, MEM}]
    assert ledger.generation == generation + 3

    ledger.desync()
    assert not ledger.synced and ledger.usages() is None
    assert ledger.replace([pod("c", spec=tenant_spec())]) == set()
    assert ledger.synced


def test_ledger_groups_once_per_change() -> None:
    # A cycle, its cluster scores and the refreshes between two changes share one grouping of
    # the pods by node; every change to the pods makes a new one.
    ledger = PodLedger()
    ledger.replace([pod("a"), pod("b", "n2")])
    first = ledger.usages()
    assert first is not None and ledger.usages() is first
    assert ledger.usages(["n2", "n9"]) == {"n2": first["n2"]}
    with pytest.raises(TypeError):
        first["n3"] = ()  # type: ignore[index]  # shared: read-only
    assert ledger.requested(["cpu", "memory"]) == {
        "n1": {"cpu": Fraction(1), "memory": Fraction(2**30)},
        "n2": {"cpu": Fraction(1), "memory": Fraction(2**30)},
    }

    ledger.apply("MODIFIED", {**pod("a"), "status": {"phase": "Running", "podIP": "x"}})
    assert ledger.usages() is first  # nothing the pools count changed
    ledger.apply("ADDED", pod("c", "n2", spec=tenant_spec()))
    after_add = ledger.usages()
    assert after_add is not first and after_add is not None and len(after_add["n2"]) == 2
    requested = ledger.requested(["cpu"])
    assert requested is not None and requested["n2"]["cpu"] > Fraction(1)
    ledger.apply("DELETED", pod("a"))
    after_delete = ledger.usages()
    assert after_delete is not None and set(after_delete) == {"n2"}
    ledger.replace([pod("a")])
    relisted = ledger.usages()
    assert relisted is not None and set(relisted) == {"n1"}


def test_ledger_keeps_only_what_pods_hold() -> None:
    full = pod("a")
    full["spec"]["containers"][0].update({"env": [{"name": "X", "value": "y" * 1000}]})
    full["spec"]["initContainers"] = [
        {"name": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    ]
    entry = BoundPod.of(full)
    assert entry is not None and entry.node == "n1"
    # Reduced once, on arrival: the sidecar's request counts beside the containers'.
    assert entry.usage == pod_usage(full["spec"], replaced=False)  # bare: no controller
    assert entry.usage.request_cpu_m == 2000  # FOREIGN's 1 core + the sidecar's 1
    assert not hasattr(entry, "__dict__")  # slots: no per-pod dictionary
    assert BoundPod.of(pod("x", node=None)) is None


def test_ledger_counts_every_scalar_request_of_a_pod() -> None:
    ledger = PodLedger()
    ledger.replace([pod("c", spec=tenant_spec("dept-b", "0m"))])
    usages = ledger.usages()
    assert usages is not None
    (only,) = usages["n1"]
    assert only.held == {CPU: 1000, MEM: 1024, GATE0: 1} and not only.bursting
    assert only.limits == (1000, 1024)


# ------------------------------------------------------------------------ against the stub


def stub_pod(name: str, node: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{**spec["containers"][0], "image": "x"}],
        },
    }


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
    usages = ledger.usages() or {}
    return {node: len(u) for node, u in usages.items()}


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
    wait_until("synced", lambda: ledger.synced, timeout=10, interval=0.02)
    assert node_pods(ledger) == {"node-1": 3}

    changed.clear()
    apistub.create("pods", stub_pod("late", "node-2", FOREIGN))
    wait_until("late pod", lambda: node_pods(ledger).get("node-2") == 1, timeout=10, interval=0.02)
    assert changed.wait(5)
    apistub.delete("pods", "early-0", "default")
    wait_until("deletion", lambda: node_pods(ledger).get("node-1") == 2, timeout=10, interval=0.02)
    KubeJson(kube_client).request(
        "PATCH",
        pod_path("default", "early-1") + "/status",
        body={"status": {"phase": "Succeeded"}},
        content_type=MERGE_PATCH,
    )
    wait_until(
        "completion", lambda: node_pods(ledger).get("node-1") == 1, timeout=10, interval=0.02
    )
    assert watcher.lists == 1


def test_watcher_lists_again_after_410(
    apistub: ApiStub, watched: tuple[PodLedger, PodBindingWatcher, threading.Event]
) -> None:
    ledger, watcher, _ = watched
    apistub.create("pods", stub_pod("a", "node-1", FOREIGN))
    watcher.start()
    wait_until(
        "synced",
        lambda: ledger.synced and node_pods(ledger) == {"node-1": 1},
        timeout=10,
        interval=0.02,
    )
    watcher.stop()
    # Changes the watcher cannot see, and history that no longer reaches back to it.
    apistub.delete("pods", "a", "default")
    apistub.create("pods", stub_pod("b", "node-2", FOREIGN))
    apistub.expire_watch_history()
    watcher.start()
    wait_until("re-list", lambda: watcher.lists == 2 and ledger.synced, timeout=10, interval=0.02)
    assert node_pods(ledger) == {"node-2": 1}


# ----------------------------------------------------------------------------- writes


@pytest.fixture
def stub_nodes(apistub: ApiStub) -> None:
    for name in ("node-1", "node-2"):
        apistub.add_node(synthetic_node(name, gpus=2))


def status_of(apistub: ApiStub, name: str) -> dict[str, Any]:
    status: dict[str, Any] = apistub.get("nodes", name)["status"]
    return status


# synthetic_node: 4 cores, 8 GiB, 110 pods, 2 GPUs; floor 0 % with no pod bound.
POOLS = {CPU: "4000", MEM: "8192", GATE0: "110", HOT: "110"}


def test_writer_patches_only_changed_pools_into_status(
    apistub: ApiStub, kube_client: client.ApiClient, stub_nodes: None
) -> None:
    api = NodeApi(KubeJson(kube_client))
    writer = NodeWriter(api, RateLimiter(1000, 1000), sleep=lambda _s: None)
    nodes = api.list_nodes()
    cycle, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), T0, pod_usages={})
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
    usages = {"node-1": (usage(FOREIGN),)}
    cycle, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), T0, pod_usages=usages)
    assert [p.node for p in cycle.changes] == ["node-1"]
    apistub.clear_requests()
    report = writer.apply(POLICY, cycle, nodes)
    assert report.requests == 1 and apistub.count("PATCH", "/status") == 1
    assert status_of(apistub, "node-1")["allocatable"][CPU] == "2000"  # 4000 - 2000

    # A retried 503 on the status write, then success.
    nodes = api.list_nodes()
    cycle, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), T0, pod_usages={})
    apistub.fail_next_writes(1, 503, path_contains="/status")
    report = writer.apply(POLICY, cycle, nodes)
    assert report.requests == 2 and report.nodes_written == 1
    assert status_of(apistub, "node-1")["capacity"][CPU] == "4000"

    # Enforcement off: the pool and the budget gate leave, the GPUs stay.
    nodes = api.list_nodes()
    cycle, _ = plan_cycle(budget_policy("labels"), nodes, {}, ScorerMemory(), T0, pod_usages={})
    writer.apply(budget_policy("labels"), cycle, nodes)
    for name in ("node-1", "node-2"):
        status = status_of(apistub, name)
        assert not {CPU, MEM, GATE0} & (set(status["capacity"]) | set(status["allocatable"]))
        assert status["allocatable"][GPU] == "2"
        annotations = apistub.get("nodes", name)["metadata"].get("annotations") or {}
        record = json.loads(annotations.get(managed_key(POLICY)) or "{}")
        assert CPU not in record.get("resources", [])


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
        assert CPU not in status_of(apistub, "node-1")["allocatable"]

        loop = ScorerLoop(scorer, hot_refresh_seconds=600, wake_delay_seconds=0.05)
        watcher.on_binding = loop.wake
        loop.start()  # runs a first cycle at once
        watcher.start()
        try:
            wait_until(
                "pools published",
                lambda: all(
                    status_of(apistub, n)["allocatable"].get(CPU) == "4000"
                    for n in ("node-1", "node-2")
                ),
                timeout=30,  # generous: the suite runs on shared 2-core machines
                interval=0.02,
            )
            assert status_of(apistub, "node-1")["capacity"][MEM] == "8192"
            requests = scorer.metrics.write_requests._value.get
            wait_until(
                "status + metadata per node counted",
                lambda: requests() == 4,
                timeout=10,
                interval=0.02,
            )
            apistub.create("pods", stub_pod("foreign", "node-1", FOREIGN))
            started = time.monotonic()
            wait_until(
                "pool shrunk",
                lambda: status_of(apistub, "node-1")["allocatable"][CPU] == "2000",
                timeout=30,
                interval=0.02,
            )
            # The wake-up, not the 600 s refresh job (a liveness bound, not a benchmark).
            assert time.monotonic() - started < 30
            assert status_of(apistub, "node-2")["allocatable"][CPU] == "4000"
            wait_until(
                "one status patch counted", lambda: requests() == 5, timeout=10, interval=0.02
            )
            apistub.delete("pods", "foreign", "default")
            wait_until(
                "pool restored",
                lambda: status_of(apistub, "node-1")["allocatable"][CPU] == "4000",
                timeout=10,
                interval=0.02,
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


def test_explain_pod_names_the_pool_and_the_gate_that_exclude_a_node() -> None:
    """n1: a foreign pod (limits 2 cores) and a dept-a pod bursting at 5 % (1.1 cores), so the
    gate of 0 % is closed; n2: a dept-b pod; n3: empty."""
    usages = {
        "n1": (usage(FOREIGN), usage(tenant_spec())),
        "n2": (usage(tenant_spec("dept-b", "0m")),),
    }
    nodes = [node_state("n1"), node_state("n2"), node_state("n3")]
    cycle, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), T0, pod_usages=usages)
    assert cycle.node("n1").bursting == {5.0: 1} and cycle.node("n2").members == {0.0: 1}
    opted = "kube-steer.github.io/enabled"
    # dept-a, 6 cores bursting to 6.3: n1's pool has 6000 - 1100 = 4900 free.
    a = explain_pod(POLICY, cycle, nodes, _pod("6", "6300m"), {"tenant": "dept-a", opted: "true"})
    verdicts = {v.node: v for v in a.verdicts}
    (pool,) = verdicts["n1"].exclusions
    assert pool.rule == "budget:pool"
    assert pool.reason == (
        f"{CPU}: the pod needs 6300 millicores, 4900 free (6000 published - 1100 held by pods "
        "in the pool)"
    )
    assert verdicts["n2"].allowed and verdicts["n3"].allowed
    # dept-b (budget 0): n1's gate of 0 % is closed (a 5 % burst runs there).
    b = explain_pod(POLICY, cycle, nodes, _pod("100m", "100m"), {"tenant": "dept-b", opted: "true"})
    verdicts = {v.node: v for v in b.verdicts}
    (gate,) = verdicts["n1"].exclusions
    assert gate.rule == "budget:0"
    assert gate.reason == f"{GATE0} is closed (floor 5 % > budget 0 %): 0 free"
    assert verdicts["n2"].allowed and verdicts["n3"].allowed
    assert b.gates == (GATE0,)


def test_a_ledger_synced_with_no_pods_triggers_the_republish(
    apistub: ApiStub, kube_client: client.ApiClient, stub_nodes: None
) -> None:
    """The pod list can come back empty (a new cluster): the ledger is then synced but has no
    pods, and the next refresh must still publish the gates and pools rather than wait a whole cycle."""
    ledger = PodLedger()
    scorer = Scorer(
        lambda: POLICY,
        NodeApi(KubeJson(kube_client)),
        prometheus_url=NO_PROMETHEUS,
        ledger=ledger,
    )
    try:
        scorer.run_cycle()  # not synced yet: no pool
        assert CPU not in status_of(apistub, "node-1")["allocatable"]
        ledger.replace([])
        assert len(ledger) == 0 and ledger.synced
        result = scorer.refresh_hot()
        assert result is not None
        assert status_of(apistub, "node-1")["allocatable"][CPU] == "4000"
    finally:
        scorer.close()


def test_a_burst_of_pods_costs_one_status_write_per_node_and_no_node_list(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    """Issue "5,000 nodes": a pod event replans only the nodes whose pods changed, from the
    nodes as last listed and written (no LIST of every node), and a burst coalesces into one
    status write per node that moved."""
    for i in range(20):
        apistub.add_node(synthetic_node(f"node-{i}", gpus=2))
    policy = parse_policy(
        SMALL_POLICY.replace("hotPenaltyPerPod: 5", "hotPenaltyPerPod: 0")
        + """\
    - name: dept-a
      namespaceSelector: {matchLabels: {tenant: dept-a}}
      overcommitPercent: 5
  overcommit: {enforcement: scheduler}
"""
    )
    ledger = PodLedger()
    ledger.replace([])
    scorer = Scorer(
        lambda: policy, NodeApi(KubeJson(kube_client)), prometheus_url=NO_PROMETHEUS, ledger=ledger
    )
    try:
        scorer.run_cycle()
        apistub.clear_requests()
        for i in range(5):  # a burst onto node-3, seen by the watch as five events
            body = stub_pod(f"burst-{i}", "node-3", FOREIGN)
            made = apistub.create("pods", body)
            ledger.apply("ADDED", made)
        result = scorer.refresh_hot()
        assert result is not None and result.report is not None
        assert [r.node for r in result.report.results] == ["node-3"]
        assert apistub.count("PATCH", "/status") == 1 and apistub.count("PATCH") == 1
        assert apistub.count("GET", "/api/v1/nodes") == 0  # no node list for a pod event
        assert status_of(apistub, "node-3")["allocatable"][CPU] == "0"  # 5 x 2 cores > 4
        assert len(result.plan.nodes) == 20  # the rest of the plan is the last cycle's
        assert scorer.refresh_hot() is None  # nothing new: nothing planned, nothing written
    finally:
        scorer.close()


def test_gates_and_pools_are_never_held_back_behind_labels(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    """A new cluster's first cycle: pods wait Pending for the gates and pools, so they go out
    at resourceWriteQps on their own, while labels follow at writeQps (here 5/s), each node's
    after its own status. More nodes than writer threads: a status waiting behind a paced
    label write would show."""
    for i in range(20):
        apistub.add_node(synthetic_node(f"node-{i}", gpus=2))
    slow_labels = parse_policy(
        SMALL_POLICY.replace(
            "intervalSeconds: 30}", "intervalSeconds: 30, writeQps: 5, writeBurst: 1}"
        )
        + """\
    - name: dept-a
      namespaceSelector: {matchLabels: {tenant: dept-a}}
      overcommitPercent: 5
  overcommit: {enforcement: scheduler}
"""
    )
    ledger = PodLedger()
    ledger.replace([])
    scorer = Scorer(
        lambda: slow_labels,
        NodeApi(KubeJson(kube_client)),
        prometheus_url=NO_PROMETHEUS,
        ledger=ledger,
    )
    try:
        apistub.clear_requests()
        result = scorer.run_cycle()
        assert result.report is not None and result.report.nodes_written == 20
        patches = [
            (r.path.endswith("/status"), r.path) for r in apistub.requests if r.method == "PATCH"
        ]
        statuses = [i for i, (status, _) in enumerate(patches) if status]
        labels = [i for i, (status, _) in enumerate(patches) if not status]
        assert len(statuses) == len(labels) == 20
        assert statuses[-1] < labels[2]  # every status out before the third (paced) label write
        for name in (f"node-{i}" for i in range(20)):
            order = [
                status for status, path in patches if path.removesuffix("/status").endswith(name)
            ]
            assert order == [True, False], name
    finally:
        scorer.close()


def test_the_first_cycle_waits_for_the_pod_list_and_publishes_gates_and_pools(
    apistub: ApiStub,
    kube_client: client.ApiClient,
    stub_nodes: None,
    watched: tuple[PodLedger, PodBindingWatcher, threading.Event],
) -> None:
    """A first cycle without the pod list would publish labels only, and the refresh that
    publishes the pools would wait for those writes (a minute at 5,000 nodes)."""
    ledger, watcher, _ = watched
    scorer = Scorer(
        lambda: POLICY, NodeApi(KubeJson(kube_client)), prometheus_url=NO_PROMETHEUS, ledger=ledger
    )
    try:
        watcher.start()  # the scorer's own order: the watch, then the first cycle
        first = scorer.run_cycle()
        assert first.plan.pods_known and ledger.synced
        assert status_of(apistub, "node-1")["allocatable"][CPU] == "4000"
    finally:
        scorer.close()
